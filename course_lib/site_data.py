"""The constants the website's client-side calculators need, taken from course_lib itself.

``book/_ext/course_calculators.py`` writes :func:`calculator_data` into the built site as
``_static/calculators_data.js``, so ``book/_static/calculators.js`` never types a peak FLOP/s,
a loss-fit constant or a limit a second time: Python and the browser share one source.
"""
from __future__ import annotations

import inspect
import json

from . import distill, flops, hardware, scaling
from ._validate import MAX_INT

__all__ = ["calculator_data", "calculator_data_js"]


def calculator_data() -> dict:
    """Plain-JSON constants for the six chapter calculators (peaks, aliases, fits, limits)."""
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
    }


def calculator_data_js() -> str:
    """``calculator_data()`` as a script that sets ``window.COURSE_CALC_DATA`` (a script, not a
    JSON file the page fetches, because browsers refuse fetch() from file:// pages)."""
    # Key order is kept: it is the order of the names in the error messages.
    return "window.COURSE_CALC_DATA = " + json.dumps(calculator_data()) + ";\n"
