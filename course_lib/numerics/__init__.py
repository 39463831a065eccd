"""Floating-point formats and summation, measured on the real torch dtypes.

Why this module exists: a low-precision format stores a value with a fixed number of significant
bits, so the spacing between neighbours (the *ulp*) doubles at every power of two. A running sum
that grows past the point where ``increment < ulp / 2`` stops growing: ``1 + 1 + … + 1`` in FP16
stalls at 2048. Everything here runs the arithmetic in the dtype itself (``torch.float16``,
``torch.bfloat16``, ``torch.float32``; the two FP8 formats are added in FP32 and rounded once to
FP8, which is the correctly rounded FP8 sum), so what you read is what the hardware does.

``numerics_train`` shows the same rounding on a real training run (weights kept in BF16).

Formats are named ``"fp32"``, ``"bf16"``, ``"fp16"``, ``"fp8_e4m3"``, ``"fp8_e5m2"`` (a
``torch.dtype`` works too). Results are returned as Python floats (exact: every value of these
formats is a float64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from .._validate import choice, number, positive_int

__all__ = ["FORMATS", "FormatInfo", "resolve_dtype", "format_info", "ulp", "ulp_theory",
           "ulp_table", "sequential_sum", "stall_point", "running_sum", "pairwise_sum",
           "kahan_sum", "stochastic_round", "stochastic_sum", "compare_summation"]

FORMATS: dict[str, torch.dtype] = {
    "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
}
_NAMES = {v: k for k, v in FORMATS.items()}
_NATIVE_ADD = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BITS_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def resolve_dtype(dtype: str | torch.dtype, name: str = "dtype") -> torch.dtype:
    """The torch dtype for a format name (or a torch dtype); ValueError naming ``name`` otherwise."""
    if isinstance(dtype, torch.dtype) and dtype in _NAMES:
        return dtype
    return FORMATS[choice(name, dtype, tuple(FORMATS))]


def _finite(name: str, value: object) -> float:
    return number(name, value)   # a finite float; bools, strings, NaN, inf and 10**400 refused


@dataclass(frozen=True)
class FormatInfo:
    """What ``torch.finfo`` says about a format, plus the bit counts derived from it."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int          # stored fraction bits; precision is mantissa_bits + 1
    eps: float                  # ulp of 1.0 = 2**-mantissa_bits
    max: float
    smallest_normal: float
    smallest_subnormal: float


def format_info(dtype: str | torch.dtype) -> FormatInfo:
    """Bit layout and range of a format, read from ``torch.finfo`` (not typed in by hand)."""
    dt = resolve_dtype(dtype)
    fi = torch.finfo(dt)
    m = int(round(-math.log2(fi.eps)))
    return FormatInfo(_NAMES[dt], fi.bits, fi.bits - 1 - m, m, float(fi.eps), float(fi.max),
                      float(fi.smallest_normal), float(fi.smallest_normal) * float(fi.eps))


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` rounded to a's dtype. FP8 has no CPU kernels: add in FP32, round once (exact FP32
    sum of two FP8 values, so this is the correctly rounded FP8 sum)."""
    if a.dtype in _NATIVE_ADD:
        return a + b
    return (a.float() + b.float()).to(a.dtype)


def _sub(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a − b`` rounded to a's dtype (FP8 via FP32, as in :func:`_add`)."""
    return a - b if a.dtype in _NATIVE_ADD else (a.float() - b.float()).to(a.dtype)


def _neighbours(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(next below, next above) of the non-negative values in ``x``, by the dtype's own rules:
    ``torch.nextafter`` where PyTorch has it, otherwise ±1 on the bit pattern (IEEE-like formats
    order non-negative values like their bit patterns)."""
    if x.dtype in _NATIVE_ADD:
        inf = torch.full_like(x, math.inf)
        return torch.nextafter(x, -inf), torch.nextafter(x, inf)
    bits = x.view(_BITS_VIEW[x.element_size()])
    return (bits - 1).view(x.dtype), (bits + 1).view(x.dtype)


def ulp(x: float, dtype: str | torch.dtype) -> float:
    """Spacing between ``|x|`` (rounded to the format) and the next representable value above it;
    at the largest finite value, the spacing below it."""
    dt = resolve_dtype(dtype)
    t = torch.tensor([abs(_finite("x", x))], dtype=torch.float64).to(dt)
    lo, hi = _neighbours(t)
    v, up, down = float(t), float(hi), float(lo)
    if not math.isfinite(v):
        raise ValueError(f"x={x!r} overflows {_NAMES[dt]} (max {format_info(dt).max:g})")
    return up - v if math.isfinite(up) else v - down


def ulp_theory(x: float, dtype: str | torch.dtype) -> float:
    """The textbook spacing at ``|x|`` rounded to the format: 2**(e − mantissa_bits) in the binade
    [2**e, 2**(e+1)), constant (= smallest subnormal) below the smallest normal number."""
    info = format_info(dtype)
    ax = float(torch.tensor(abs(_finite("x", x)), dtype=torch.float64).to(resolve_dtype(dtype)))
    if not math.isfinite(ax):
        raise ValueError(f"x={x!r} overflows {info.name} (max {info.max:g})")
    if ax < info.smallest_normal:
        return info.smallest_subnormal
    return 2.0 ** (math.floor(math.log2(ax)) - info.mantissa_bits)


def ulp_table(formats: tuple[str, ...] = ("fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "fp32"),
              exponents: range = range(-4, 17)) -> list[dict]:
    """One row per binade [2**e, 2**(e+1)): the spacing each format has there, measured with
    :func:`ulp` (``None`` where 2**e is beyond the format's largest finite value)."""
    dts = [resolve_dtype(f, "formats") for f in formats]
    rows = []
    for e in exponents:
        row: dict = {"binade_start": 2.0 ** e}
        for f, dt in zip(formats, dts):
            row[f] = ulp(2.0 ** e, dt) if 2.0 ** e <= format_info(dt).max else None
        rows.append(row)
    return rows


def _top(x: float, smallest_normal: float) -> float:
    """Upper end of the uniform-spacing interval containing ``x ≥ 0``."""
    return smallest_normal if x < smallest_normal else 2.0 ** (math.floor(math.log2(x)) + 1)


def sequential_sum(value: float, count: int, dtype: str | torch.dtype, *,
                   method: str = "auto") -> float:
    """``value`` added ``count`` times to a running total held in ``dtype`` (the seed's
    ``1 + 1 + … + 1``). Every addition is rounded to the dtype.

    ``method="loop"`` is the literal Python loop of tensor additions (stops early once the total
    stalls: from then on ``acc + value == acc`` forever). ``"jump"`` is the same computation made
    fast: inside one binade the rounded step is constant once two consecutive real steps agree,
    so those steps are taken in one exact jump and the next binade is probed with real additions
    again (``tests/test_numerics.py`` proves both give identical results). ``"auto"`` loops for
    ``count ≤ 20000`` and jumps beyond.
    """
    dt = resolve_dtype(dtype)
    v = _finite("value", value)
    count = positive_int("count", count)
    method = choice("method", method, ("auto", "loop", "jump"))
    if not math.isfinite(float(torch.tensor(v, dtype=torch.float64).to(dt))):
        raise ValueError(f"value={value!r} overflows {_NAMES[dt]} (max {format_info(dt).max:g})")
    if v < 0:  # round-to-nearest-even is symmetric: fl(-a - b) = -fl(a + b)
        return -sequential_sum(-v, count, dt, method=method)
    inc = torch.tensor(v, dtype=torch.float64).to(dt)
    acc = torch.zeros((), dtype=dt)
    if method == "loop" or (method == "auto" and count <= 20000):
        for _ in range(count):
            nxt = _add(acc, inc)
            b = float(nxt)
            if b == float(acc) or not math.isfinite(b):
                return b
            acc = nxt
        return float(acc)
    return _jump_sum(inc, count)


def _jump_sum(inc: torch.Tensor, count: int) -> float:
    normal = format_info(inc.dtype).smallest_normal
    done, steps = 0, []          # steps: (from, to) of the real additions in the current binade
    acc = torch.zeros((), dtype=inc.dtype)
    while done < count:
        nxt = _add(acc, inc)
        done += 1
        a, b = float(acc), float(nxt)
        if a == b or not math.isfinite(b):
            return b
        acc = nxt
        steps = [s for s in steps if _top(s[0], normal) == _top(b, normal)] + [(a, b)]
        if len(steps) >= 2 and steps[-1][1] - steps[-1][0] == steps[-2][1] - steps[-2][0] \
                and _top(steps[-2][0], normal) == _top(b, normal):
            # Two equal steps inside one binade: the step is now constant (ties to even settle
            # after one step) for every x with x + inc below the binade's top. Jump exactly.
            d, top = Fraction(b - a), Fraction(_top(b, normal))
            k = max(0, math.ceil((top - Fraction(float(inc)) - Fraction(b)) / d))
            k = min(k, count - done)
            acc = torch.tensor(float(Fraction(b) + k * d), dtype=torch.float64).to(inc.dtype)
            done += k
            steps = []
    return float(acc)


def stall_point(increment: float, dtype: str | torch.dtype) -> float:
    """Where a running sum of ``increment`` stops growing in ``dtype`` (``inf`` if it overflows
    first; the saturating FP8-E4M3 cast stalls at its max, 448).

    The total rises monotonically and ``x ↦ fl(x + increment)`` is monotone, so it stops at the
    smallest ``x`` with ``fl(x + increment) == x``; that is the first power of two whose half-ulp
    reaches the increment. We test every power of two with a real addition in the dtype.
    An increment that rounds to 0 in ``dtype`` (below half its smallest subnormal) never moves
    the sum off 0 and is refused like 0 itself; one that rounds to inf is refused too.
    """
    dt = resolve_dtype(dtype)
    inc_v = abs(_finite("increment", increment))
    if inc_v == 0:
        raise ValueError("increment must be non-zero (a sum of zeros never moves)")
    info = format_info(dt)
    rounded = float(torch.tensor(inc_v, dtype=torch.float64).to(dt))
    if rounded == 0:
        raise ValueError(f"increment={increment!r} rounds to 0 in {info.name} (smallest subnormal "
                         f"{info.smallest_subnormal:g}): the sum never leaves 0")
    if not math.isfinite(rounded):
        raise ValueError(f"increment={increment!r} overflows {info.name} (max {info.max:g})")
    cands = [2.0 ** e for e in range(math.ceil(math.log2(info.smallest_normal)),
                                     math.floor(math.log2(info.max)) + 1)] + [info.max, math.inf]
    x = torch.tensor(cands, dtype=torch.float64).to(dt)
    inc = torch.tensor(inc_v, dtype=torch.float64).to(dt)
    x64, y64 = x.double(), _add(x, inc.expand_as(x)).double()   # inf == inf; NaN never matches
    hits = [v for v, y in zip(x64.tolist(), y64.tolist()) if v == y]
    stall = min(hits) if hits else math.nan
    return -stall if increment < 0 else stall


def _as_values(values: object, name: str = "values") -> torch.Tensor:
    t = values if isinstance(values, torch.Tensor) else torch.as_tensor(values, dtype=torch.float64)
    if t.dim() == 0 or t.shape[0] == 0:
        raise ValueError(f"{name} must have at least one element along dim 0, got shape {tuple(t.shape)}")
    return t


def running_sum(values: object, dtype: str | torch.dtype, *, trajectory: bool = False) -> torch.Tensor:
    """Left-to-right (recursive) summation along dim 0 with the accumulator in ``dtype``: the
    real loop ``acc = acc + v`` (vectorised over any trailing dims). Returns the total (in
    ``dtype``), or every partial total when ``trajectory``."""
    dt = resolve_dtype(dtype)
    x = _as_values(values).to(dt)
    acc, partials = x[0].clone(), [x[0].clone()] if trajectory else []
    for v in x[1:]:
        acc = _add(acc, v)
        if trajectory:
            partials.append(acc)
    return torch.stack(partials) if trajectory else acc


def pairwise_sum(values: object, dtype: str | torch.dtype) -> torch.Tensor:
    """Tree summation along dim 0 in ``dtype``: add neighbours, halve, repeat. Each value takes
    part in only ⌈log2 n⌉ roundings instead of up to n − 1 (numpy's ``sum`` does this)."""
    dt = resolve_dtype(dtype)
    x = _as_values(values).to(dt)
    while x.shape[0] > 1:
        if x.shape[0] % 2:
            x = torch.cat([x, torch.zeros_like(x[:1])])   # adding an exact zero changes nothing
        x = _add(x[0::2], x[1::2])
    return x[0]


def kahan_sum(values: object, dtype: str | torch.dtype) -> torch.Tensor:
    """Kahan's compensated summation along dim 0, every operation in ``dtype``. The compensation
    ``c`` catches what each addition rounded away and feeds it back into the next addend."""
    dt = resolve_dtype(dtype)
    x = _as_values(values).to(dt)
    s, c = torch.zeros_like(x[0]), torch.zeros_like(x[0])
    for v in x:
        y = _sub(v, c)            # the addend, corrected by what the last addition lost
        t = _add(s, y)            # low-order bits of y may be lost here ...
        c = _sub(_sub(t, s), y)   # ... and are recovered exactly (negated) here
        s = t
    return s


def stochastic_round(x: torch.Tensor, dtype: str | torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """Round ``x`` (any float tensor) to ``dtype`` up or down at random, with the probability of
    rounding up equal to the distance from the lower neighbour in ulps: E[result] = x exactly.
    Supported for fp16, bf16 and fp32 (the formats with ``torch.nextafter``)."""
    dt = resolve_dtype(dtype)
    if dt not in _NATIVE_ADD:
        raise ValueError(f"dtype must be fp16, bf16 or fp32 for stochastic rounding, got {dtype!r}")
    x64 = x.double()
    near = x64.to(dt)
    inf = torch.full_like(near, math.inf)
    below, above = torch.nextafter(near, -inf).double(), torch.nextafter(near, inf).double()
    n64 = near.double()
    lo = torch.where(n64 > x64, below, n64)
    hi = torch.where(n64 > x64, n64, torch.where(n64 < x64, above, n64))
    p_up = torch.where(hi > lo, (x64 - lo) / (hi - lo), torch.zeros_like(x64))
    u = torch.rand(x.shape, generator=generator, dtype=torch.float64)
    return torch.where(u < p_up, hi, lo).to(dt)


def stochastic_sum(values: object, dtype: str | torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """Running sum along dim 0 where each addition is exact (in float64) and then stochastically
    rounded to ``dtype``: unbiased, so errors average out instead of compounding."""
    dt = resolve_dtype(dtype)
    x = _as_values(values).to(dt)
    acc = x[0].clone()
    for v in x[1:]:
        acc = stochastic_round(acc.double() + v.double(), dt, generator)
    return acc


def compare_summation(values: object, dtype: str | torch.dtype, *, seed: int = 0) -> dict:
    """Sum ``values`` along dim 0 every way the chapter discusses, all in ``dtype``.

    ``values`` is 1-D (one sum per method, as a float) or 2-D ``(n, k)`` (k independent sums per
    method, as a list, computed in one vectorised pass). ``exact`` is the exact sum of the values
    *as stored in the dtype* (``math.fsum``), so the others differ from it only by accumulation.
    """
    dt = resolve_dtype(dtype)
    x = _as_values(values).to(dt)
    if x.dim() not in (1, 2):
        raise ValueError(f"values must be 1-D or 2-D (n, k), got shape {tuple(x.shape)}")
    cols = x.double().T.tolist() if x.dim() == 2 else [x.double().tolist()]
    gen = torch.Generator().manual_seed(seed)
    out: dict = {"exact": torch.tensor([math.fsum(c) for c in cols], dtype=torch.float64),
                 "sequential": running_sum(x, dt), "pairwise": pairwise_sum(x, dt),
                 "kahan": kahan_sum(x, dt), "fp32 accumulator": running_sum(x.float(), "fp32").to(dt)}
    if dt in _NATIVE_ADD:
        out["stochastic rounding"] = stochastic_sum(x, dt, gen)
        out["torch.sum"] = x.sum(0)
        out["torch.cumsum[-1]"] = x.cumsum(0)[-1]
    return {k: (v.double().tolist() if x.dim() == 2 else float(v.double().reshape(-1)[0]))
            for k, v in out.items()}
