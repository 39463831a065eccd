"""The planner checked against published pretraining runs (the table itself: ``plan.published``).

``check_published`` runs ``plan`` on each run's own size, tokens, GPUs and MFU and sets the
planner's GPU-hours (or days, FLOP) beside the published figure, and the layout the planner chooses
beside the layout the run published. The model is not tuned to the table's totals (the step model's
one fitted constant, ``stepmodel.SUSTAINED``, comes from Llama 3 405B's published MFU): where the
ratio leaves ±15 %, ``miss`` says which physical effect or convention explains it. The test of the
step model is the prediction from its own MFU, on the run's published layout where every degree is
known (``Run.as_run``), with chapter 12's goodput where the total is elapsed time (``Run.elapsed``).
``HELD_OUT`` runs were used for nothing. ``Run``, ``RUNS`` and ``HELD_OUT`` are re-exported here.
``check_fp8_held_out`` sets the planner beside NVIDIA's published FP8 benchmark rows
(``plan.published_fp8``), held out too, and reported apart: step times and FP8 speed-ups.
"""
from __future__ import annotations

import math

from .. import flops
from .._validate import fraction, positive, positive_int, utilisation
from ..hardware import lookup
from ..layout import Layout, estimate
from ..network import Network
from .planner import plan
from .published import HELD_OUT, LLAMA3_405B_MFU, RUNS, Run
from .published_fp8 import FP8_HELD_OUT, SPEEDUP_PAIRS
from .published_fp8 import SOURCE as FP8_SOURCE

__all__ = ["Run", "RUNS", "HELD_OUT", "LLAMA3_405B_MFU", "TOLERANCE", "HELD_OUT_TOLERANCE", "check_published", "summary",
           "check_fp8_held_out", "FP8_HELD_OUT"]

TOLERANCE = 0.15
HELD_OUT_TOLERANCE = 0.20   # the bar for runs no constant was read from (issue 32)


_UNITS = ("gpu_hours", "days", "flops")


def _check_run(i: int, r: object) -> None:
    """Refuse a run that cannot be compared, naming ``runs[i]`` and the field: a published figure
    of 0 (a ratio over nothing), a unit the planner has no figure for, a cluster left out."""
    if not isinstance(r, Run):
        raise ValueError(f"runs[{i}] must be a plan.runs.Run, got {type(r).__name__}")
    where = f"runs[{i}] ({r.name!r})"
    if r.unit not in _UNITS + (None,):
        raise ValueError(f"{where}: unit must be one of {', '.join(map(repr, _UNITS))} or None, got {r.unit!r}")
    if (r.published is None) != (r.unit is None):
        raise ValueError(f"{where}: published and unit go together (both None, or a figure and its unit)")
    try:
        if r.published is not None:
            positive("published", r.published)
        positive("n_params", r.n_params)
        positive("n_tokens", r.n_tokens)
        if r.unit != "flops":
            positive_int("n_gpus", r.n_gpus)
            if r.mfu is not None:     # a held-out run publishes none: the planner estimates it
                utilisation("mfu", r.mfu)
            if not isinstance(r.gpu, str):
                raise ValueError(f"gpu must be an accelerator name, got {r.gpu!r}")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None



def check_published(runs: tuple[Run, ...] = RUNS, tolerance: float = TOLERANCE) -> list[dict]:
    """Per run: the planner's figure on the run's own size, tokens, GPUs and MFU, the published
    figure, their ratio, whether it is within ±``tolerance``, the explanation of a miss, the layout
    planner's own MFU estimate next to the MFU used, and the planner's own layout (``own_layout``,
    with its ZeRO stage) next to the ``layout`` the run published. The layout the planner chooses
    does not depend on the MFU given, so one ``plan`` call per run gives both.

    ``own_planned`` / ``own_ratio`` / ``own_within`` are the same figure predicted from the step
    model's *own* MFU (``model_mfu``): on the run's published layout (``as_run_mfu``, with
    ``as_run_fits``) where every degree was published (``Run.as_run``), else on the planner's own
    layout (``own_mfu``); ``basis`` says which. Where the published total is elapsed time
    (``Run.elapsed``), the prediction is divided by chapter 12's goodput of the plan (``goodput``),
    since failures and restarts are inside such a total. The row is a ``test`` of the step model
    when the run published a total (GPU-hours or days) for the planner to predict and the model times
    the run as it ran; a run it does not (``Run.not_a_test``, e.g. an FP8 run timed at BF16) keeps its
    ``own_ratio`` for reading but carries that ``status`` and no ``own_within``; ``own_reason``
    explains a test outside ±``tolerance``. ``identity`` says why, given the run's own MFU, the
    ratio restates the run's arithmetic (then only the own-MFU column tests anything; 6ND rows
    test nothing)."""
    if not isinstance(runs, (tuple, list)):
        raise ValueError(f"runs must be a tuple of plan.runs.Run, got {type(runs).__name__}")
    tolerance = fraction("tolerance", tolerance)
    for i, r in enumerate(runs):
        _check_run(i, r)
    rows = []
    for i, r in enumerate(runs):
        try:
            rows.append(_row(r, tolerance))
        except ValueError as exc:     # a run the planner refuses (does not fit, too few tokens, ...)
            raise ValueError(f"runs[{i}] ({r.name!r}): {exc}") from None
    return rows


def _as_run(r: Run) -> Layout:
    """The step model on the run's published layout (``r.as_run``), on the cluster ``plan`` would
    use for it (``gpus_per_node`` GPUs and as many NICs per node, the generation's NIC or the run's)."""
    shape = dict(r.shape)
    g = shape.pop("gpus_per_node", 8)
    nic = shape.pop("nic_bits_per_s", None)
    acc = lookup("gpu", r.gpu)
    net = Network(f"{g}x {acc.name}", g, g, acc.nic_bits_per_s if nic is None else nic)
    degrees = {k: r.as_run.get(k, 1) for k in ("tp", "cp", "pp", "dp")}
    if math.prod(degrees.values()) != r.n_gpus:
        raise ValueError(f"as_run {degrees} uses {math.prod(degrees.values())} GPUs, not the run's n_gpus={r.n_gpus}")
    return estimate(n_params=r.n_params, gpu=r.gpu, network=net, **r.as_run, **shape)


def _row(r: Run, tolerance: float) -> dict:
    """One row of ``check_published``."""
    row = {"name": r.name, "unit": r.unit, "published": r.published, "mfu": r.mfu,
           "mfu_source": r.mfu_source, "own_mfu": None, "source": r.source,
           "layout": r.layout, "own_layout": None, "identity": r.identity, "own_planned": None,
           "as_run_mfu": None, "as_run_fits": None, "model_mfu": None, "basis": None, "goodput": None}
    if r.unit == "flops":
        row["planned"] = flops.training_flops(r.n_params, r.n_tokens)
    else:
        p = plan(n_params=r.n_params, n_tokens=r.n_tokens, gpu=r.gpu, n_gpus=r.n_gpus, mfu=r.mfu, **r.shape)
        row["own_mfu"] = p.mfu_estimate
        row["own_layout"] = f"{p.layout_shape}, ZeRO-{p.zero_stage}"
        row["planned"] = {"gpu_hours": p.gpu_hours, "days": p.days, "mfu": p.mfu_estimate, None: p.days}[r.unit]
        row["planned_days"] = p.days
        if r.as_run:
            x = _as_run(r)
            row["as_run_mfu"], row["as_run_fits"] = x.mfu, x.fits
        row["model_mfu"] = p.mfu_estimate if row["as_run_mfu"] is None else row["as_run_mfu"]
        row["basis"] = "planner's layout" if row["as_run_mfu"] is None else "published layout"
        row["goodput"] = p.goodput if r.elapsed else 1.0
        if r.unit in ("gpu_hours", "days"):     # both scale as 1 / MFU at fixed N, D and GPUs
            row["own_planned"] = row["planned"] * p.mfu / row["model_mfu"] / row["goodput"]
    given = r.mfu is not None or r.unit == "flops"
    row["ratio"] = None if r.published is None or not given else row["planned"] / r.published
    if row["ratio"] == float("inf"):
        raise ValueError(f"published ({r.published!r}) is too small: the planner's figure over it overflows a float")
    row["within"] = None if row["ratio"] is None else abs(row["ratio"] - 1) <= tolerance
    row["reason"] = "" if row["within"] in (True, None) else r.miss
    row["status"] = r.not_a_test
    row["test"] = r.published is not None and row["own_planned"] is not None and not r.not_a_test
    shown = row["test"] or (r.not_a_test and r.published is not None and row["own_planned"] is not None)
    row["own_ratio"] = row["own_planned"] / r.published if shown else None
    row["own_within"] = None if not row["test"] else abs(row["own_ratio"] - 1) <= tolerance
    row["own_reason"] = r.miss if row["own_within"] is False else ""
    return row


def summary(rows: list[dict]) -> dict:
    """What the table tests: the rows whose published total the planner predicts from its own MFU
    (``tests``), how many of them land within the tolerance (``within``, named in ``names_within``),
    the rows that only restate an identity given the published MFU (``identities``), and the rows
    with a published total that are not a test until the model times them as they ran
    (``not_tests``: name and status, e.g. an FP8 run timed at BF16). Neither of the last two counts."""
    tests = [r for r in rows if r["test"]]
    return {"tests": len(tests), "within": sum(bool(r["own_within"]) for r in tests),
            "names_within": [r["name"] for r in tests if r["own_within"]],
            "identities": [r["name"] for r in rows if r["identity"]],
            "not_tests": {r["name"]: r["status"] for r in rows if r.get("status")}}


def check_fp8_held_out(benches: tuple = FP8_HELD_OUT, pairs: tuple = SPEEDUP_PAIRS) -> dict:
    """The planner on NVIDIA's published FP8 benchmark rows (``plan.published_fp8``), which nothing
    in it was fitted to, reported apart from ``check_published``: per row (``rows``) the step model's
    step on the row's own layout, system and precision against the published step (GBS · s over the
    cluster's tokens per second), and per same-layout BF16/FP8 pair (``speedups``) the planner's
    FP8 speed-up against the published one."""
    rows = []
    for b in benches:
        x = _bench(b)
        rows.append({"name": b.name, "system": b.system, "precision": b.precision, "published_step_s": b.step_s,
                     "planned_step_s": x.step_s, "ratio": x.step_s / b.step_s, "fits": x.fits,
                     "mfu": x.mfu, "mfu_vs_fp8": x.fp8.get("mfu_vs_fp8"), "notes": b.notes})
    speedups = []
    for bf, f8 in pairs:
        planned = _bench(bf).step_s / _bench(f8).step_s
        published = f8.tokens_per_s_per_gpu / bf.tokens_per_s_per_gpu
        speedups.append({"name": f8.name, "system": f8.system, "published": published, "planned": planned,
                         "ratio": planned / published})
    return {"rows": rows, "speedups": speedups, "source": FP8_SOURCE}


def _bench(b) -> Layout:
    """The step model on a benchmark row's own layout: ``gpus_per_node`` GPUs and NICs a node."""
    acc = lookup("gpu", b.gpu)
    net = Network(f"{b.gpus_per_node}x {acc.name}", b.gpus_per_node, min(b.gpus_per_node, 8), acc.nic_bits_per_s)
    return estimate(n_params=b.n_params, gpu=b.gpu, network=net, global_batch_tokens=b.global_batch * b.shape["seq_len"],
                    precision=b.planner_precision, **b.layout, **b.shape, **b.extra)
