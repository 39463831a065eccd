"""A pipeline schedule in the layout planner: its bubble, the activations it keeps in flight and
the parameter copies it holds, each replayed by chapter 5's simulator (``course_lib.pipeline.simulate``)
at the layout's p and m, not read off a constant share.

The planner's step is ``busy`` seconds of work on each rank (m microbatches) plus the bubble. For
a schedule the simulator replays one step with per-microbatch stage times T_F (forward), T_B (the
backward's input gradient) and T_W (its weight gradient; 1F1B runs B and W as one backward); its
idle time per rank over its busy time, ``share``, scales the layout's busy time into its bubble:

* ``"1f1b"`` (and interleaved 1F1B, v > 1): (p−1)/(v·m), the closed form the simulator equals for
  balanced stages (``tests/test_layout_schedules.py`` replays it);
* ``"zb-h1"`` (Qi et al. 2023, arXiv 2401.10241): W run late to fill the drain, 1F1B's memory;
* ``"zb-v"`` (same paper §6): two chunks per rank in a V, 1F1B's memory;
* ``"dualpipev"`` (DeepSeek-V3's DualPipe folded to one copy of the weights, arXiv 2412.19437
  §3.2.1 and the reference implementation's DualPipeV): two chunks in a V, forward and backward of
  two microbatches paired; needs m ≥ 2p;
* ``"dualpipe"`` (DeepSeek-V3 as it ran): **two copies** of the stage's parameters (and their
  gradients: the reference implementation's table, "Parameter per device 2×"), its bubble taken as
  DualPipeV's on the same ranks — an assumption: the paper gives both the same formula,
  (PP/2−1)(F&B + B − 3W), and the fold at equal rank count idles (p−1)/2 chunk-pairs where DualPipe
  idles p/2−1 stages, so the V's simulated bubble is the slightly larger of the two (an upper bound).

``FBW``, the T_F : T_B : T_W ratio, defaults to 1 : 1 : 1: a linear layer's forward, input-gradient
and weight-gradient GEMMs have the same FLOPs, so 6N splits into three equal parts. Attention's
backward has no weight gradient (its B is ~2.5× its forward, arXiv 2307.08691), so a measured
stage has T_W < T_B; pass the measured ratio (chapter 5's executor measures it) as ``fbw``.

The replay is of one synchronous step: every rank starts it together and waits for the last
at the end (the optimizer step), so a rank far down the pipeline idles at least while the first
forward reaches it — (p−1) chunk forwards, (p−1)·T_F/2 for the V schedules, which ZB-V and
DualPipeV reach at T_F = T_B = T_W (tests/test_zb_torch_order.py). ZB-V's "zero bubble" (Qi et al.
2023 §6, arXiv 2401.10241) is the idle of steps run back to back, each rank beginning the next
step once it has finished its own part of this one: the paper's §4 replaces the synchronisation
before the optimizer step with a check after it, so that start-up triangle is paid once per run.
``idle_back_to_back`` replays that. ``page_calculator`` is chapter 5's page calculator (calculators.js).

Where p·m is too large to replay (more than ``MAX_REPLAY`` operations), the step is replayed at 4p
and 8p microbatches and the idle time extrapolated linearly in m: past the warm-up every schedule
here repeats one steady pattern, so idle time is affine in m (the tests check it on replayable sizes).
"""
from __future__ import annotations

import functools
import math

from .. import pipeline
from .._validate import calculator, choice, positive_int
from ..pipeline import schedules as _schedules

__all__ = ["SCHEDULES", "FBW", "PARAMETER_COPIES", "MAX_REPLAY", "replay", "bubble_share", "in_flight",
           "idle_back_to_back", "PAGE_SCHEDULES", "PAGE_MAX_P", "page_calculator"]

FBW = (1.0, 1.0, 1.0)   # T_F : T_B : T_W, 6N's equal thirds (see the module docstring)
# the planner's schedules: 1F1B (closed form) and those chapter 5's simulator replays
SCHEDULES = ("1f1b",) + tuple(s for s in ("zb-h1", "zb-v", "dualpipev") if s in _schedules.SCHEDULES) + (
    ("dualpipe",) if "dualpipev" in _schedules.SCHEDULES else ())
V_SHAPED = ("zb-v", "dualpipev", "dualpipe")    # two chunks per rank, placed in a V
PARAMETER_COPIES = {"dualpipe": 2}               # every other schedule holds one copy
MAX_REPLAY = 30_000                              # operations replayed at most per schedule
_SIMULATED = {"dualpipe": "dualpipev"}           # DualPipe's bubble: DualPipeV's (the assumption above)


def _check_fbw(fbw) -> tuple[float, float, float]:
    """``fbw`` as three positive floats; a string "1:1.5:0.5" or "(1, 1.5, 0.5)" (the command line's) too."""
    if isinstance(fbw, str):
        fbw = [x for x in fbw.strip("()[] ").replace(":", ",").replace(" ", ",").split(",") if x]
    try:
        f, b, w = (float(x) for x in fbw)
    except (TypeError, ValueError):
        raise ValueError(f"fbw must be three positive numbers T_F, T_B, T_W, got {fbw!r}") from None
    if not all(0 < x < math.inf for x in (f, b, w)):
        raise ValueError(f"fbw must be three positive numbers T_F, T_B, T_W, got {fbw!r}")
    return f, b, w


@functools.lru_cache(maxsize=1024)
def replay(schedule: str, p: int, m: int, fbw: tuple[float, float, float] = FBW) -> tuple[float, float]:
    """(idle time per rank, most stage-activations in flight on any rank) of one replayed step of
    ``m`` microbatches on ``p`` ranks, per-microbatch rank times ``fbw`` (T_F, T_B, T_W; busy time
    per rank is m·(T_F + T_B + T_W))."""
    name = _SIMULATED.get(schedule, schedule)
    f, b, w = _check_fbw(fbw)
    if name == "dualpipev" and m < 2 * p:
        raise ValueError(f"schedule={schedule!r} needs at least 2·PP = {2 * p} microbatches per step, got m={m} "
                         f"(DualPipe feeds both ends of the pipeline at once)")
    ops = 3 * p * m * (2 if schedule in V_SHAPED else 1)
    if ops > MAX_REPLAY and m > 8 * p:
        (i1, peak), (i2, _) = replay(schedule, p, 4 * p, fbw), replay(schedule, p, 8 * p, fbw)
        return i1 + (m - 4 * p) * (i2 - i1) / (4 * p), peak
    t = pipeline.simulate(name, p, m, t_forward=f, t_backward=b + w, w_share=w / (b + w))
    return t.makespan() - m * (f + b + w), max(t.peak_in_flight)


def bubble_share(schedule: str, p: int, m: int, v: int = 1, fbw: tuple[float, float, float] = FBW) -> float:
    """The bubble over the busy time of a rank: (p−1)/(v·m) for "1f1b" (interleaved when v > 1),
    the replayed idle over m·(T_F + T_B + T_W) for the others; 0 without a pipeline."""
    if p == 1:
        return 0.0
    if schedule == "1f1b":
        return (p - 1) / (v * m)
    f, b, w = _check_fbw(fbw)
    return replay(schedule, p, m, (f, b, w))[0] / (m * (f + b + w))


def in_flight(schedule: str, p: int, m: int, v: int = 1, fbw: tuple[float, float, float] = FBW) -> float:
    """Stage-activations (one microbatch through a whole rank's layers) the busiest rank keeps at
    its peak: 1F1B's min(p, m), interleaved min(p(1 + (p−1)/(pv)), m) (Megatron's warm-up), the
    replayed peak for the others (``pipeline.simulate``'s ``peak_in_flight``)."""
    if schedule == "1f1b":
        return min(p * (1 + (p - 1) / (p * v)), m) if v > 1 else min(p, m)
    return replay(schedule, p, m, _check_fbw(fbw))[1]


def idle_back_to_back(schedule: str, p: int, m: int, steps: int = 4, fbw: tuple[float, float, float] = FBW) -> float:
    """Idle time per rank in one step of ``steps`` run back to back with no barrier between them
    (the ZB paper's optimizer post-validation, arXiv 2401.10241 §4): each rank's op list repeated
    ``steps`` times, microbatches renumbered, replayed whole; the last step's share of the makespan
    (``steps`` steps' minus ``steps − 1`` steps') less its busy time m·(T_F + T_B + T_W)."""
    name, steps = _SIMULATED.get(schedule, schedule), positive_int("steps", steps, minimum=2)
    f, b, w = _check_fbw(fbw)
    base = _schedules.schedule(name, positive_int("p", p), positive_int("m", m))

    def makespan(k: int) -> float:
        orders = _schedules.Orders([_schedules.Op(o.kind, o.mb + i * m, o.chunk) for i in range(k) for o in ops] for ops in base)
        orders.placement = base.placement
        return pipeline.simulate(orders, t_forward=f, t_backward=b + w, w_share=w / (b + w)).makespan()

    return makespan(steps) - makespan(steps - 1) - m * (f + b + w)


PAGE_SCHEDULES = ("1f1b", "zb-h1", "zb-v", "dualpipev")    # chapter 5's calculator offers these
PAGE_MAX_P = math.isqrt(pipeline.MAX_OPS // 8)               # replays at m ≤ 8p stay within MAX_OPS


@calculator
def page_calculator(p: int, m: int, v: int = 1, schedule: str = "1f1b") -> dict[str, float]:
    """Chapter 5's pipeline calculator (book/_static/calculators.js mirrors it): ``fraction``, the
    idle share of a step; ``overhead``, idle over busy time (``bubble_share``); ``in_flight``,
    stage-activations held at the peak (``in_flight``), at T_F = T_B = T_W. "1f1b" with ``v`` > 1
    is interleaved 1F1B; "zb-h1" takes v = 1, the V schedules v = 1 or 2 (their two chunks)."""
    p, m, v = positive_int("p", p), positive_int("m", m), positive_int("v", v)
    schedule = choice("schedule", schedule, PAGE_SCHEDULES)
    if schedule == "1f1b":
        return {"fraction": (p - 1) / (v * m + p - 1), "overhead": (p - 1) / (v * m),
                "in_flight": in_flight("1f1b", p, m, v)}
    if v > (2 if schedule in V_SHAPED else 1):
        raise ValueError(f"v must be {'1 or 2' if schedule in V_SHAPED else '1'} for the {schedule!r} schedule "
                         f"({'two chunks per rank, in a V' if schedule in V_SHAPED else 'one chunk per rank'}), "
                         f"got {v}")
    if schedule == "dualpipev" and m < 2 * p:
        raise ValueError(f"m must be at least 2p = {2 * p} for the 'dualpipev' schedule (it feeds both ends "
                         f"of the pipeline), got {m}")
    if p > PAGE_MAX_P:
        raise ValueError(f"p must be at most {PAGE_MAX_P} for the {schedule!r} schedule (replayed op by op), got {p}")
    share = bubble_share(schedule, p, m)
    return {"fraction": share / (1 + share), "overhead": share, "in_flight": in_flight(schedule, p, m)}
