"""Pipeline-parallel bubble calculators and an exact schedule simulator.

With ``p`` stages, ``m`` microbatches and per-microbatch stage times t_f (forward) and t_b
(backward), a synchronous pipeline step lasts ``(m + p − 1)(t_f + t_b)`` while each rank computes
for only ``m(t_f + t_b)``: every rank idles ``(p − 1)(t_f + t_b)``, the *bubble*. Two ways to
normalise it appear in the literature and both are here:

* ``bubble_fraction`` — share of wall time idle, ``(p − 1)/(v·m + p − 1)`` (GPipe's form,
  Huang et al. 2019, arXiv 1811.06965);
* ``bubble_overhead`` — idle time relative to the ideal (bubble-free) time, ``(p − 1)/(v·m)``
  (Megatron-LM's form, Narayanan et al. 2021, arXiv 2104.04473), where ``v`` is the number of
  interleaved model chunks per rank.

``simulate`` replays any per-rank operation order (``pipeline.schedules``) with given
stage times and point-to-point latency, exactly: each rank runs its ops in order, an op starts as
soon as its rank is free and its inputs have arrived. It detects deadlocks, counts the
microbatches in flight on each rank (activation memory) and returns a ``gantt.Timeline``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .._validate import MAX_INT, calculator, choice, fraction, positive, positive_int
from .gantt import Event, Timeline
from .schedules import ONE_STAGE, SCHEDULES, V_SCHEDULES, Op, interleaved_1f1b, parse_ops, schedule, stage_of

__all__ = ["bubble_fraction", "bubble_overhead", "min_microbatches", "step_time",
           "peak_in_flight", "ScheduleError", "simulate", "MAX_OPS"]

# Functions that build operation lists refuse more than this many operations, so no argument
# can make them run for hours (a real pipeline has at most a few thousand microbatches).
MAX_OPS = 10 ** 5


def _sizes(p: object, m: object, v: object) -> tuple[int, int, int]:
    return positive_int("p", p), positive_int("m", m), positive_int("v", v)


def _bubble(p: int, m: int, v: int) -> float:
    return (p - 1) / (v * m + p - 1)


@calculator
def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """Share of a pipeline step's wall time that a rank sits idle: (p−1)/(v·m + p−1).

    ``p`` stages (ranks), ``m`` microbatches, ``v`` model chunks per rank (1 = GPipe/1F1B).
    The same for GPipe and 1F1B; they differ in memory, not in bubble.
    """
    return _bubble(*_sizes(p, m, v))


@calculator
def bubble_overhead(p: int, m: int, v: int = 1) -> float:
    """Idle time relative to the ideal, bubble-free step time: (p−1)/(v·m)."""
    p, m, v = _sizes(p, m, v)
    return (p - 1) / (v * m)


@calculator
def min_microbatches(p: int, target_fraction: float, v: int = 1) -> int:
    """Smallest number of microbatches ``m`` whose ``bubble_fraction(p, m, v)`` (share of wall
    time) is at most ``target_fraction``: m ≥ (p−1)(1−f)/(f·v), rounded up."""
    p, v = positive_int("p", p), positive_int("v", v)
    f = fraction("target_fraction", target_fraction)
    estimate = (p - 1) * (1 - f) / (f * v)
    if not estimate <= MAX_INT:   # also catches inf: the rounding guards below must stay short
        raise ValueError(f"target_fraction={target_fraction!r} is too small for p={p}, v={v}: it "
                         f"needs more than 2**53 microbatches")
    m = max(1, math.ceil(estimate - 1e-9))
    while _bubble(p, m, v) > f:   # guard against floating-point rounding either way
        m += 1
    while m > 1 and _bubble(p, m - 1, v) <= f:
        m -= 1
    return m


@calculator
def step_time(p: int, m: int, t_forward: float, t_backward: float, v: int = 1) -> float:
    """Wall time of one balanced pipeline step with free communication, in the units of
    ``t_forward``/``t_backward`` (per microbatch, per rank): (v·m + p − 1)(t_f + t_b)/v."""
    p, m, v = _sizes(p, m, v)
    tf = positive("t_forward", t_forward)
    tb = positive("t_backward", t_backward)
    return (v * m + p - 1) * (tf + tb) / v


@calculator
def peak_in_flight(name: str, p: int, m: int, stage: int, v: int = 1) -> float:
    """Most microbatches whose activations ``stage`` holds at once under schedule ``name``,
    in units of one full stage's activations (a chunk counts 1/v).

    GPipe: ``m``. 1F1B: ``min(p − stage, m)``. Interleaved: read off Megatron's order. ZB-H1:
    a microbatch counts until its weight gradient (W) has run, ``min(p, m)`` on every stage.
    ZB-V and DualPipeV (two chunks, each half a stage): read off their orders. Only
    ``stage``'s own order is built; ``m·v`` may be at most ``MAX_OPS``.
    """
    name = choice("name", name, SCHEDULES)
    p, m, v = _sizes(p, m, v)
    stage = positive_int("stage", stage, minimum=0)
    if stage >= p:
        raise ValueError(f"stage must be in [0, p-1] = [0, {p - 1}], got {stage!r}")
    _check_ops(m=m, v=v)
    if name == "interleaved":
        return _peak(interleaved_1f1b(p, m, stage, v), v)
    if name in V_SCHEDULES and v <= 2:
        return _peak(ONE_STAGE[name](p, m, stage), 2)
    if v != 1:
        raise ValueError(f"v must be 1 for the {name!r} schedule (use 'interleaved'), got {v!r}")
    return _peak(ONE_STAGE[name](p, m, stage), 1)


def _check_ops(**sizes: int) -> None:
    """Refuse sizes whose product (operations to build) exceeds ``MAX_OPS``, naming them all."""
    if math.prod(sizes.values()) > MAX_OPS:
        names = "·".join(sizes)
        given = ", ".join(f"{k}={x}" for k, x in sizes.items())
        raise ValueError(f"{names} must be at most {MAX_OPS:,} operations, got {given}")


def _peak(ops: Sequence[Op], v: int) -> float:
    """Stashed microbatches at most: one more at each F, one fewer when its last backward op ends
    (B, or W when the backward is split: the weight gradient still reads the stage's inputs)."""
    frees = "W" if any(op.kind == "W" for op in ops) else "B"
    live, peak = 0, 0
    for op in ops:
        live += 1 if op.kind == "F" else (-1 if op.kind == frees else 0)
        peak = max(peak, live)
    return peak / v


class ScheduleError(ValueError):
    """An operation order that is incomplete, duplicated or deadlocks."""


def _validate_orders(orders: Sequence[Sequence[Op]]) -> tuple[int, int]:
    p = len(orders)
    if p == 0:
        raise ScheduleError("orders must hold one op list per rank, got none")
    m = 1 + max((op.mb for ops in orders for op in ops), default=-1)
    v = 1 + max((op.chunk for ops in orders for op in ops), default=0)
    if m == 0:
        raise ScheduleError("orders contain no operations")
    kinds = "FBW" if any(op.kind == "W" for ops in orders for op in ops) else "FB"
    want = sorted(Op(k, i, c) for k in kinds for i in range(m) for c in range(v))
    for r, ops in enumerate(orders):
        for op in ops:
            if op.kind not in "FBW" or op.mb < 0 or op.chunk < 0:
                raise ScheduleError(f"rank {r}: invalid operation {op!r}")
        have = sorted(ops)
        if have != want:
            missing = sorted(set(want) - set(have))
            dup = sorted({o for o in have if have.count(o) > 1})
            parts = [f"missing {', '.join(map(str, missing))}" if missing else "",
                     f"repeated {', '.join(map(str, dup))}" if dup else ""]
            names = "F, B and W" if kinds == "FBW" else "F and B"
            raise ScheduleError(f"rank {r}: every {names} of microbatches 0..{m - 1} must appear "
                                f"exactly once; {'; '.join(x for x in parts if x)}")
    return m, v


def _times(name: str, t: float | Sequence[float], n_stages: int, v: int) -> list[float]:
    if isinstance(t, (int, float)):
        return [positive(name, t) / v] * n_stages
    t = list(t)
    if len(t) != n_stages:
        raise ValueError(f"{name} must be a number or have one entry per stage ({n_stages}), got {len(t)}")
    return [positive(name, x) for x in t]


def simulate(orders: str | Sequence[Sequence[Op | str]], p: int | None = None, m: int | None = None,
             *, v: int = 1, t_forward: float | Sequence[float] = 1.0,
             t_backward: float | Sequence[float] = 2.0, t_comm: float = 0.0,
             op_times: Mapping[tuple[str, int, int], float] | None = None,
             w_share: float = 0.5, placement: str | None = None) -> Timeline:
    """Replay a pipeline schedule exactly and return its ``Timeline``.

    ``orders`` is a schedule name ("gpipe", "1f1b", "interleaved", then ``p``, ``m`` and ``v`` are
    needed) or one list of ops per rank (``Op`` objects or strings like "F3", "B0.1").
    ``t_forward``/``t_backward``: per-microbatch time of a whole rank's share of the model (a
    chunk takes 1/v of it), or a list with one time per global stage (``v·p`` entries, stage
    ``c·p + r`` is chunk c of rank r). ``t_comm``: latency of each activation/gradient hop.
    ``op_times`` gives single operations their own durations, keyed ``(kind, mb, stage)`` (e.g.
    the durations a real run measured, to replay it without its communication); operations it
    does not list take ``t_forward``/``t_backward``. Where the orders split the backward (``W``
    ops, the ZB-H1 schedule), B takes ``1 − w_share`` of ``t_backward`` and W the rest (a linear
    layer's two backward GEMMs cost the same, so 0.5 by default). ``placement`` "loop" (chunk c
    of rank r is stage c·p + r) or "v" (ZB-V, DualPipeV: chunk 1 of rank r is stage 2p−1−r;
    a hop between two stages of the same rank then costs no ``t_comm``); by default the one the
    orders carry (``schedules.Orders``), else "loop".

    Dependencies: F(mb, stage g) needs F(mb, g−1); B(mb, g) needs F(mb, g) and B(mb, g+1);
    W(mb, g) needs B(mb, g).
    The timeline's ``peak_in_flight`` attribute lists each rank's maximum number of microbatches
    with stashed activations (in whole-stage units). Raises ``ScheduleError`` (a ValueError) if
    an order is incomplete or can never finish.
    """
    place = placement if placement is not None else getattr(orders, "placement", None)
    if isinstance(orders, str):
        name = choice("orders", orders, SCHEDULES)
        place = place or ("v" if name in V_SCHEDULES else "loop")
        if p is None or m is None:
            raise ValueError("p and m are needed when orders is a schedule name")
        p, m, v = _sizes(p, m, v)
        _check_ops(p=p, m=m, v=v)
        orders = schedule(name, p, m, v)
    place = choice("placement", place or "loop", ("loop", "v"))
    ops = [parse_ops(o) for o in orders]
    n_mb, v = _validate_orders(ops)
    p = len(ops)
    if place == "v" and v != 2:
        raise ScheduleError(f"placement='v' needs two chunks (0 and 1) on every rank, got {v}")
    rank_of = {stage_of(r, c, p, place): r for r in range(p) for c in range(v)}
    if m is not None and positive_int("m", m) != n_mb:
        raise ScheduleError(f"orders hold microbatches 0..{n_mb - 1} but m={m}")
    tc = positive("t_comm", t_comm, allow_zero=True)
    tf = _times("t_forward", t_forward, p * v, v)
    tb = _times("t_backward", t_backward, p * v, v)
    share = fraction("w_share", w_share, allow_one=False)
    if any(op.kind == "W" for o in ops for op in o):
        tw = [t * share for t in tb]
        tb = [t - w for t, w in zip(tb, tw)]
    last = p * v - 1
    done: dict[tuple[str, int, int], float] = {}
    ptr, free = [0] * p, [0.0] * p
    events: list[Event] = []
    while any(ptr[r] < len(ops[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while ptr[r] < len(ops[r]):
                op = ops[r][ptr[r]]
                g = stage_of(r, op.chunk, p, place)
                if op.kind == "F":
                    deps = [("F", op.mb, g - 1)] if g > 0 else []
                elif op.kind == "W":
                    deps = [("B", op.mb, g)]
                else:
                    deps = [("F", op.mb, g)] + ([("B", op.mb, g + 1)] if g < last else [])
                if any(d not in done for d in deps):
                    break
                far = [rank_of[d[2]] != r if place == "v" else d[2] != g for d in deps]
                ready = max([free[r]] + [done[d] + (tc if f else 0.0) for d, f in zip(deps, far)])
                dur = tf[g] if op.kind == "F" else (tb[g] if op.kind == "B" else tw[g])
                if op_times is not None:
                    dur = positive("op_times", op_times.get((op.kind, op.mb, g), dur), allow_zero=True)
                done[(op.kind, op.mb, g)] = free[r] = ready + dur
                events.append(Event(r, op.kind, op.mb, ready, ready + dur, op.chunk))
                ptr[r] += 1
                progressed = True
        if not progressed:
            stuck = "; ".join(f"rank {r} waits at {ops[r][ptr[r]]}" for r in range(p) if ptr[r] < len(ops[r]))
            raise ScheduleError(f"deadlock: no rank can proceed ({stuck})")
    return Timeline(p, events, peak_in_flight=[_peak(o, v) for o in ops])
