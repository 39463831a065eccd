"""The order in which each pipeline rank runs its forward and backward passes.

A pipeline schedule is nothing more than one list of operations per rank. ``Op("F", 3)`` is the
forward pass of microbatch 3, ``Op("B", 3)`` its backward pass; with interleaving, ``chunk`` says
which of the rank's ``v`` model chunks runs (chunk ``c`` on rank ``r`` is global stage ``c·p + r``,
the layout of Megatron-LM's interleaved schedule, Narayanan et al. 2021, arXiv 2104.04473).

The same lists drive the real multi-process executor (``pipeline_run``) and the exact simulator
(``course_lib.pipeline.simulate``), so what the Gantt chart of a simulation shows is exactly the
order the real ranks follow.

* GPipe (Huang et al. 2019, arXiv 1811.06965): all ``m`` forwards, then all ``m`` backwards.
  Every microbatch's activations are alive at the turn, so memory grows with ``m``.
* 1F1B / PipeDream-Flush (Narayanan et al. 2021, arXiv 2006.09503): stage ``s`` runs
  ``p − s − 1`` warm-up forwards, then alternates one forward and one backward, then drains.
  At most ``p − s`` microbatches are in flight; the bubble is the same as GPipe's.
* Interleaved 1F1B: the same idea over ``v`` chunks per rank, which divides the bubble by ``v``.
* ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241): a backward splits
  into ``B``, the gradient with respect to the stage's input, which the previous stage waits for,
  and ``W`` (``Op("W", i)``), the gradient of the weights, which nobody waits for. Stage ``s``
  keeps 1F1B's order of F and B but runs each W ``s`` backwards late, filling the drain with them;
  with T_W no longer than T_F and T_B, and m ≥ p, the bubble falls from (p−1)(T_F+T_B+T_W) to
  (p−1)(T_F+T_B−T_W) at
  1F1B's peak of p microbatches in flight.
* ZB-V (Qi et al. 2023, arXiv 2401.10241 §6): two chunks per rank placed in a V — chunk 0 of
  rank r is stage r, chunk 1 is stage 2p − 1 − r — so the last rank turns a microbatch round
  without a message and the first rank both feeds and finishes it. F, B and W of both chunks
  fill the warm-up and drain. With T_F = T_B = T_W a synchronous step idles only the (p−1)·T_F/2
  before the first forward reaches the last rank, which no order avoids, and steps run back to
  back idle nothing (the paper's zero, its §4), at 1F1B's memory (p microbatches of one stage).
  It is PyTorch's ``ScheduleZBVZeroBubble`` order, op for op (tests/test_zb_torch_order.py).
* DualPipeV (DeepSeek-AI 2024, arXiv 2412.19437 §3.2.1, DualPipe "cut in half" to one copy of
  the weights, as the public DualPipe reference's ``dualpipev.py`` orders it): the same V
  placement; in the steady phase each forward of one chunk is paired with the whole backward of
  the other, so their communication can hide under each other's compute; the B halves of some
  backwards run early and their W late, in first-in-first-out order. Needs m ≥ 2p. Also
  PyTorch's ``ScheduleDualPipeV`` order, op for op.

The V schedules place chunks differently from Megatron's loop (``placement``, ``stage_of``):
``schedule`` returns their orders as an ``Orders`` list that carries ``placement = "v"``, which
``simulate`` and the executor read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .._validate import choice, positive_int

__all__ = ["Op", "Orders", "SCHEDULES", "EXECUTABLE", "V_SCHEDULES", "gpipe", "one_f_one_b",
           "interleaved_1f1b", "zero_bubble_h1", "zero_bubble_v", "dualpipe_v", "placement", "stage_of",
           "schedule", "parse_ops", "format_ops"]

V_SCHEDULES = ("zb-v", "dualpipev")              # two chunks per rank, placed in a V
# what the simulator replays = what the multi-process executor runs (W: split backwards)
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1") + V_SCHEDULES
EXECUTABLE = SCHEDULES


@dataclass(frozen=True, order=True)
class Op:
    """One unit of pipeline work on a rank: ``kind`` "F", "B" or (split backward) "W", microbatch
    ``mb``, model ``chunk``."""

    kind: str
    mb: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")


def _check(p: int, m: int, stage: int | None = None) -> tuple[int, int]:
    p = positive_int("p", p)
    m = positive_int("m", m)
    if stage is not None:
        positive_int("stage", stage, minimum=0)
        if stage >= p:
            raise ValueError(f"stage must be in [0, p-1] = [0, {p - 1}], got {stage!r}")
    return p, m


def gpipe(p: int, m: int, stage: int) -> list[Op]:
    """GPipe order for ``stage`` of ``p``: F0 … F(m−1), then B0 … B(m−1)."""
    p, m = _check(p, m, stage)
    return [Op("F", i) for i in range(m)] + [Op("B", i) for i in range(m)]


def one_f_one_b(p: int, m: int, stage: int) -> list[Op]:
    """1F1B order for ``stage`` of ``p``: ``min(p−stage−1, m)`` warm-up forwards, then one
    forward and one backward in turn, then the remaining backwards."""
    p, m = _check(p, m, stage)
    warmup = min(p - stage - 1, m)
    ops = [Op("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [Op("F", warmup + i), Op("B", i)]
    ops += [Op("B", i) for i in range(m - warmup, m)]
    return ops


def interleaved_1f1b(p: int, m: int, stage: int, v: int = 2) -> list[Op]:
    """Megatron-LM's interleaved 1F1B order for rank ``stage`` holding ``v`` chunks.

    Microbatches travel in groups of ``p``: the rank runs chunk 0 for microbatches 0…p−1, then
    chunk 1 for the same group, …, then the next group. Warm-up is ``2(p − stage − 1) + (v − 1)p``
    forwards (all of them when ``m == p``), then 1F1B pairs, then the drain. Requires ``m`` to be
    a multiple of ``p``, as Megatron's original schedule does.
    """
    p, m = _check(p, m, stage)
    v = positive_int("v", v)
    if m % p:
        raise ValueError(f"m must be a multiple of p={p} for the interleaved schedule, got {m!r}")
    total = m * v

    def op(kind: str, k: int) -> Op:
        chunk = (k // p) % v
        if kind == "B":
            chunk = v - 1 - chunk
        return Op(kind, (k // (p * v)) * p + k % p, chunk)

    warmup = total if m == p else min(2 * (p - stage - 1) + (v - 1) * p, total)
    ops = [op("F", k) for k in range(warmup)]
    for i in range(total - warmup):
        ops += [op("F", warmup + i), op("B", i)]
    ops += [op("B", k) for k in range(total - warmup, total)]
    return ops


def zero_bubble_h1(p: int, m: int, stage: int) -> list[Op]:
    """ZB-H1's order for ``stage`` of ``p`` (Qi et al. 2023, arXiv 2401.10241): 1F1B's warm-up
    and its alternation of F and B, where B is the input-gradient half of the backward, and each
    weight-gradient half ``W`` run ``stage`` backwards later (the last stage, which waits most in
    1F1B's drain, defers most); the W still owed run at the end."""
    p, m = _check(p, m, stage)
    warmup = min(p - stage - 1, m)
    ops = [Op("F", i) for i in range(warmup)]
    backs = weights = 0

    def backward() -> None:
        nonlocal backs, weights
        ops.append(Op("B", backs))
        backs += 1
        if backs - weights > stage:          # more than ``stage`` W owed: run the oldest
            ops.append(Op("W", weights))
            weights += 1

    for i in range(m - warmup):
        ops.append(Op("F", warmup + i))
        backward()
    while backs < m:
        backward()
    return ops + [Op("W", i) for i in range(weights, m)]


def zero_bubble_v(p: int, m: int, stage: int) -> list[Op]:
    """ZB-V's order for rank ``stage`` of ``p`` (arXiv 2401.10241 §6; chunk 1 is stage 2p−1−stage).

    Warm-up: 2(p−stage)−1 forwards of chunk 0, then ``stage`` pairs (F of chunk 1, F of chunk 0),
    then p−stage rounds of chunk 1's F, B, W. Steady: F, B, W of chunk 0 then of chunk 1. Drain:
    ``stage`` pairs of B (chunk 0, chunk 1), then chunk 0's B each followed by a W, then the W
    still owed. The order is built for max(m, 2p−1) microbatches and the ones past m dropped,
    so it holds for any m ≥ 1."""
    p, m = _check(p, m, stage)
    n = max(m, 2 * p - 1)
    f, b = [0, 0], [0, 0]
    ops: list[Op] = []

    def add(kind: str, c: int, count: list[int]) -> None:
        ops.append(Op(kind, count[c], c))
        count[c] += 1

    for _ in range(2 * (p - stage) - 1):
        add("F", 0, f)
    for _ in range(stage):
        add("F", 1, f)
        add("F", 0, f)
    for _ in range(p - stage):
        add("F", 1, f)
        ops += [Op("B", b[1], 1), Op("W", b[1], 1)]
        b[1] += 1
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            add("F", 0, f)
        for c in (0, 1):
            if c:
                add("F", 1, f)
            ops += [Op("B", b[c], c), Op("W", b[c], c)]
            b[c] += 1
    w = list(b)
    for _ in range(stage):
        add("B", 0, b)
        add("B", 1, b)
    for _ in range(p - stage):
        add("B", 0, b)
        add("W", 0, w)
    ops += [Op("W", i, c) for c in (1, 0) for i in range(w[c], n)]
    return [op for op in ops if op.mb < m]


def dualpipe_v(p: int, m: int, stage: int) -> list[Op]:
    """DualPipeV's order for rank ``stage`` of ``p`` (arXiv 2412.19437; the eight phases of the
    DualPipe reference's ``DualPipeV.step``): chunk 0 is stage ``stage``, chunk 1 stage
    2p−1−stage. A whole backward is written B then W; "zero-bubble" backwards queue their W,
    which later run oldest first. In the steady phase "F(c) B(1−c) W(1−c)" is one overlapped
    forward-backward pair. Requires m ≥ 2p."""
    p, m = _check(p, m, stage)
    if m < 2 * p:
        raise ValueError(f"m must be at least 2p = {2 * p} for the DualPipeV schedule, got {m!r}")
    r, f, b, owed = stage, [0, 0], [0, 0], []
    ops: list[Op] = []

    def fwd(c: int) -> None:
        ops.append(Op("F", f[c], c))
        f[c] += 1

    def bwd(c: int, split: bool = False) -> None:
        ops.append(Op("B", b[c], c))
        (owed.append if split else ops.append)(Op("W", b[c], c))
        b[c] += 1

    def weight() -> None:
        ops.append(owed.pop(0))

    for _ in range(2 * (p - r - 1)):            # 1: nF0
        fwd(0)
    for _ in range(r + 1):                      # 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(p - r - 1):                  # 3: nB1W1F1, zero bubble
        bwd(1, split=True)
        weight()
        fwd(1)
    for _ in range(m - 2 * p + r + 1):          # 4: nF0B1F1B0, overlapped pairs
        fwd(0)
        bwd(1)
        fwd(1)
        bwd(0)
    for _ in range(p - r - 1):                  # 5: nB1F1B0
        bwd(1)
        fwd(1)
        bwd(0)
    split = False                               # 6: nB1B0, second half zero bubble
    for i in range(r + 1):
        split = split or (i == (r + 1) // 2 and r % 2 == 1)
        bwd(1, split)
        split = split or (i == (r + 1) // 2 and r % 2 == 0)
        bwd(0, split)
    for _ in range(p - r - 1):                  # 7: nWB0
        weight()
        bwd(0, split=True)
    while owed:                                 # 8: nW
        weight()
    return ops


# The schedules whose order a stage builds alone from (p, m, stage); "interleaved" also needs v.
ONE_STAGE = {"gpipe": gpipe, "1f1b": one_f_one_b, "zb-h1": zero_bubble_h1, "zb-v": zero_bubble_v,
             "dualpipev": dualpipe_v}


class Orders(list):
    """Every rank's op list (a list of lists) that also says how chunks sit on ranks:
    ``placement`` "loop" (chunk c of rank r is stage c·p + r) or "v" (chunk 1 is stage 2p−1−r)."""

    placement = "loop"


def placement(name: str) -> str:
    """"v" for the V schedules (``V_SCHEDULES``), "loop" for the others."""
    return "v" if choice("name", name, SCHEDULES) in V_SCHEDULES else "loop"


def stage_of(rank: int, chunk: int, p: int, place: str = "loop") -> int:
    """Global stage of ``chunk`` on ``rank`` of ``p``: c·p + r (loop) or, in a V, r / 2p−1−r."""
    if place == "v":
        return rank if chunk == 0 else 2 * p - 1 - rank
    return chunk * p + rank


def schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Op]]:
    """Op lists of every rank for schedule ``name`` in ``SCHEDULES``, as an ``Orders`` list.

    "interleaved" takes ``v`` chunks per rank; "zb-v" and "dualpipev" always hold two (``v`` 1 or
    2 both mean that); the others one."""
    name = choice("name", name, SCHEDULES)
    p = positive_int("p", p)
    v = positive_int("v", v)
    out = Orders()
    if name == "interleaved":
        out += [interleaved_1f1b(p, m, r, v) for r in range(p)]
        return out
    if name in V_SCHEDULES:
        if v > 2:
            raise ValueError(f"v must be 2 (or 1, meaning the same) for the {name!r} schedule, got {v!r}")
        out.placement = "v"
    elif v != 1:
        raise ValueError(f"v must be 1 for the {name!r} schedule (use 'interleaved'), got {v!r}")
    out += [ONE_STAGE[name](p, m, r) for r in range(p)]
    return out


_OP_RE = re.compile(r"^\s*([FBWfbw])\s*(\d+)\s*(?:[.:c]\s*(\d+))?\s*$")


def parse_ops(ops: object) -> list[Op]:
    """Turn ``["F0", "F1", "B0", ...]`` (or "F0 F1 B0 …", or Op objects) into a list of ``Op``.

    A chunk may be given as ``"F3.1"``. Raises ValueError naming ``ops`` on anything else.
    """
    if isinstance(ops, str):
        ops = ops.replace(",", " ").split()
    try:
        items = list(ops)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"ops must be a list like ['F0', 'F1', 'B0', ...], got {ops!r}") from None
    out = []
    for item in items:
        if isinstance(item, Op):
            out.append(item)
            continue
        match = _OP_RE.match(str(item))
        if not match:
            raise ValueError(f"ops: cannot read {item!r}; write operations like 'F0', 'B3' (or 'W3', a split "
                             f"backward's weight gradient)")
        kind, mb, chunk = match.groups()
        out.append(Op(kind.upper(), int(mb), int(chunk or 0)))
    return out


def format_ops(ops: list[Op]) -> str:
    """``[Op('F', 0), Op('B', 0)]`` → ``"F0 B0"`` (the inverse of ``parse_ops``)."""
    return " ".join(str(o) for o in ops)
