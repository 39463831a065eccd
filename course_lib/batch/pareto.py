"""The critical batch from measured runs: steps to a target loss at each batch size, and the
Pareto front of McCandlish et al. 2018 (arXiv 1812.06162, eq. 2.11):

    (S/S_min − 1)(E/E_min − 1) = 1,   E = B·S,

which is S = S_min(1 + B_crit/B), i.e. S is linear in 1/B: S = S_min + E_min/B. B_crit = E_min/S_min
is the batch that costs 2× the fewest steps and 2× the fewest examples. The fit minimises the
relative residuals (a run at B = 4 and one at B = 256 count alike), a linear least-squares problem.
"""
from __future__ import annotations

import math

from .._validate import calculator, positive

__all__ = ["pareto_fit", "pareto_steps", "steps_to_target"]


def _series(name: str, values) -> list[float]:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list of numbers, got {values!r}")
    return [positive(f"{name}[{i}]", v) for i, v in enumerate(values)]


def pareto_fit(batch_sizes: list[float], steps: list[float]) -> tuple[float, float, float]:
    """Fit S = S_min(1 + B_crit/B) to ``steps`` (to one target loss) measured at ``batch_sizes``;
    returns ``(S_min, E_min, B_crit)`` with E_min in the batch's unit (examples or tokens)."""
    bs = _series("batch_sizes", batch_sizes)
    ss = _series("steps", steps)
    if len(bs) != len(ss):
        raise ValueError(f"batch_sizes and steps differ in length ({len(bs)} vs {len(ss)})")
    if len(set(bs)) < 2:
        raise ValueError(f"batch_sizes needs at least two different batch sizes, got {batch_sizes!r}")
    # minimise sum ((a + b/B)/S − 1)^2 over (a, b): normal equations of rows (1/S, 1/(B S)) -> 1
    rows = [(1 / s, 1 / (b * s)) for b, s in zip(bs, ss)]
    p = sum(r[0] * r[0] for r in rows)
    q = sum(r[0] * r[1] for r in rows)
    r_ = sum(r[1] * r[1] for r in rows)
    u = sum(r[0] for r in rows)
    v = sum(r[1] for r in rows)
    det = p * r_ - q * q
    if det <= 0 or not math.isfinite(det):
        raise ValueError(f"batch_sizes {batch_sizes!r} do not determine a fit")
    a = (u * r_ - q * v) / det
    b = (p * v - q * u) / det
    if a <= 0:
        raise ValueError(f"steps {steps!r} do not level off as the batch grows (fitted S_min = {a:.3g} "
                         "<= 0): no finite minimum number of steps; add larger batch sizes")
    if b <= 0:
        raise ValueError(f"steps {steps!r} do not fall as the batch grows (fitted E_min = {b:.3g} <= 0): "
                         "the runs are all past the critical batch, or their learning rates were not tuned")
    return a, b, b / a


@calculator
def pareto_steps(batch_size: float, s_min: float, b_crit: float) -> float:
    """Steps the fitted front predicts at ``batch_size``: S_min(1 + B_crit/B)."""
    return positive("s_min", s_min) * (1 + positive("b_crit", b_crit) / positive("batch_size", batch_size))


def steps_to_target(steps: list[int], losses: list[float], target: float) -> float | None:
    """First step at which a (monotone-smoothed) loss curve reaches ``target``, interpolated
    linearly between the two evaluations around the crossing; None if it never does."""
    best = math.inf
    prev = None
    for s, loss in zip(steps, losses):
        loss = min(loss, best)
        if loss <= target:
            if prev is None or prev[1] == loss:
                return float(s)
            s0, l0 = prev
            return s0 + (s - s0) * (l0 - target) / (l0 - loss)
        best, prev = loss, (s, loss)
    return None
