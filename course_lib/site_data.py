"""The constants the website's client-side calculators need, taken from course_lib itself.

``book/_ext/course_calculators.py`` writes :func:`calculator_data` into the built site as
``_static/calculators_data.js``, so ``book/_static/calculators.js`` never types a peak FLOP/s,
a loss-fit constant or a limit a second time: Python and the browser share one source.
"""
from __future__ import annotations

import dataclasses
import inspect
import json

from . import comm, distill, faults, flops, hardware, layout, memory, network, scaling
from ._validate import MAX_INT
from .data.tokenize import token_dtype
from .layout import bubble
from .layout import job as layout_grid
from .layout import stepmodel
from .plan import planner

__all__ = ["calculator_data", "calculator_data_js"]


def _defaults(fn) -> dict:
    """A function's numeric defaults, each as Python's ``repr`` so the page tells an int from a
    float (an error message that names a default shows ``400000000000.0``, not ``400000000000``)."""
    return {k: repr(p.default) for k, p in inspect.signature(fn).parameters.items()
            if isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}


def _plan_data() -> dict:
    """What calculators_plan.js needs of the planner, the layout search and the network model."""
    net = {f.name: f.default for f in dataclasses.fields(network.Network) if f.name.endswith("_latency")}
    plan_defaults = _defaults(planner.plan)
    return {
        "hardware": {name: {"hbm_bytes": acc.hbm_bytes, "link_bandwidth": acc.link_bandwidth,
                            "nic_bits_per_s": acc.nic_bits_per_s, "dtype": acc.training_dtype,
                            "hbm_bandwidth": acc.hbm_bandwidth,
                            "storage_bytes_per_s": acc.storage_bytes_per_s, "restart_seconds": acc.restart_seconds,
                            "matmul_ceiling": stepmodel.MATMUL_CEILING[name][0],
                            "attention_ceiling": stepmodel._attention_ceiling(name),
                            "processors": list(stepmodel.PROCESSORS[name][:3])}
                     for name, acc in hardware.ACCELERATORS.items()},
        "stepmodel": {"sustained": stepmodel.SUSTAINED, "fa_l0": stepmodel._FA_L0, "fa_bwd": stepmodel._FA_BWD,
                      "adam_bytes": stepmodel.ADAM_BYTES_PER_PARAM, "quantize_bytes": stepmodel.QUANTIZE_BYTES_PER_ELEMENT},
        "plan_defaults": plan_defaults,
        "layout_defaults": _defaults(layout.layout),
        "flash_attention": inspect.signature(layout.layout).parameters["flash_attention"].default,
        "network_latency": net,
        "pow2": list(layout_grid._POW2),
        "interleave": list(layout_grid._INTERLEAVES),
        "max_layers": layout_grid._MAX_LAYERS,
        "min_cp_tokens": layout_grid.MIN_CP_TOKENS,
        "zero_passes": {str(k): list(v) for k, v in comm._PASSES.items()},
        "head_dim": planner._HEAD_DIM,
        "writer_bandwidth": planner._WRITER_BW,
        "checkpoint_bytes_per_param": planner._CKPT_BYTES_PER_PARAM,
        "bytes_per_token": token_dtype(int(plan_defaults["vocab_size"])).itemsize,
    }


def _faults_data() -> dict:
    """Chapter 12's form starts at Llama 3's scale: the per-GPU MTBF its 419 unexpected
    interruptions imply (four digits, as a float literal the field shows), its GPU count, and the
    restart time the planner assumes."""
    l3 = faults.LLAMA3
    return {"gpu_mtbf_seconds": f"{faults.LLAMA3_GPU_MTBF_S:.4g}", "n_gpus": str(l3["n_gpus"]),
            "restart_seconds": repr(planner._RESTART_S)}


def calculator_data() -> dict:
    """Plain-JSON constants for the chapter calculators (peaks, aliases, fits, limits, planner)."""
    return {
        "accelerators": {name: dict(acc.peak_flops) for name, acc in hardware.ACCELERATORS.items()},
        "aliases": dict(hardware.ALIASES),
        "seconds_per_day": flops.SECONDS_PER_DAY,
        "tokens_per_param": scaling.TOKENS_PER_PARAM,
        "fit_names": list(scaling.FIT_NAMES),
        "fits": {name: {"E": f.E, "A": f.A, "B": f.B, "alpha": f.alpha, "beta": f.beta}
                 for name, f in scaling.FITS.items()},
        "mtok": distill.MTOK,
        "assumed_gpu_hour_price": distill.ASSUMED_GPU_HOUR_PRICE,
        "cache_read_multiplier": inspect.signature(distill.distillation_cost).parameters["cache_read_multiplier"].default,
        "max_int": MAX_INT,
        "plan": _plan_data(),
        "recompute": list(memory.RECOMPUTE),
        "faults": _faults_data(),
        # chapter 5's bubble calculator: the schedules it replays and its limits (layout.bubble)
        "pipeline": {"schedules": list(bubble.PAGE_SCHEDULES), "max_p": bubble.PAGE_MAX_P,
                     "max_replay": bubble.MAX_REPLAY},
    }


def calculator_data_js() -> str:
    """``calculator_data()`` as a script that sets ``window.COURSE_CALC_DATA`` (a script, not a
    JSON file the page fetches, because browsers refuse fetch() from file:// pages)."""
    # Key order is kept: it is the order of the names in the error messages.
    return "window.COURSE_CALC_DATA = " + json.dumps(calculator_data()) + ";\n"
