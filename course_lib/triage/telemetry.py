"""Per-rank step telemetry (compute vs waiting), the straggler found by name, and the step model.

In a synchronous step every rank computes, then meets the others in a collective. The collective
cannot finish before the slowest rank arrives, so a rank's *waiting* time is the slowest rank's
compute minus its own, and the step takes

    step = max over ranks of compute_r + the collective's own time.

A straggler is therefore the rank that computes longest and waits least; the others' telemetry shows
it as waiting. :func:`find_straggler` names it from every rank's records, :func:`step_model` predicts
the step from them.
"""
from __future__ import annotations

import contextlib
import statistics
import time

__all__ = ["StepTelemetry", "find_straggler", "step_model"]


class StepTelemetry:
    """One rank's records: per step, seconds of compute and seconds waiting in collectives."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._cur = {"compute_s": 0.0, "wait_s": 0.0}

    @contextlib.contextmanager
    def compute(self):
        t0 = time.perf_counter()
        yield
        self._cur["compute_s"] += time.perf_counter() - t0

    @contextlib.contextmanager
    def waiting(self):
        t0 = time.perf_counter()
        yield
        self._cur["wait_s"] += time.perf_counter() - t0

    def end_step(self) -> None:
        self.steps.append(self._cur)
        self._cur = {"compute_s": 0.0, "wait_s": 0.0}


def _median(rows: list[dict], key: str, skip: int) -> float:
    return statistics.median(r[key] for r in rows[skip:] or rows)


def find_straggler(telemetry: list[list[dict]], *, threshold: float = 1.5, skip: int = 1) -> dict:
    """Name the straggler from all ranks' telemetry (``telemetry[r]`` = rank r's per-step records).

    A rank is the straggler when its median compute is more than ``threshold`` times the median of
    the other ranks' medians; the first ``skip`` steps (warm-up) are left out. Returns the rank
    (None if no rank qualifies), each rank's median compute and wait, and the ratio that decided."""
    from .._validate import positive
    threshold = positive("threshold", threshold)
    if len(telemetry) < 2 or any(not rows for rows in telemetry):
        raise ValueError(f"telemetry must hold at least one step from each of at least two ranks, got "
                         f"{[len(rows) for rows in telemetry]} steps per rank")
    comp = [_median(rows, "compute_s", skip) for rows in telemetry]
    wait = [_median(rows, "wait_s", skip) for rows in telemetry]
    slow = max(range(len(comp)), key=comp.__getitem__)
    others = statistics.median(c for r, c in enumerate(comp) if r != slow)
    ratio = comp[slow] / others if others > 0 else float("inf")
    return {"rank": slow if ratio > threshold else None, "ratio": ratio, "compute_s": comp, "wait_s": wait}


def step_model(compute_s: list[float], collective_s: float) -> float:
    """The step a synchronous job takes: the slowest rank's compute plus the collective's own time."""
    from .._validate import positive
    if not compute_s:
        raise ValueError("compute_s must list at least one rank's compute time")
    for r, c in enumerate(compute_s):
        positive(f"compute_s[{r}]", c, allow_zero=True)
    return max(compute_s) + positive("collective_s", collective_s, allow_zero=True)
