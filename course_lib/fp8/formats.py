"""The 8-bit (and 4-bit) float formats of FP8 training, as numbers read from PyTorch's own dtypes.

Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv 2209.05433) define two encodings:
E4M3 (4 exponent bits, 3 mantissa bits; no infinities, one NaN pattern per sign, so the top
binade holds finite numbers up to 448) for weights and activations, and E5M2 (IEEE-like, with
inf and NaN, max 57344) for gradients, which need range more than precision (§2 and §3 of the
paper). The OCP Microscaling spec (Rouhani et al., arXiv 2310.10537) adds E8M0 block scales
(an exponent only: powers of two from 2**-127 to 2**127, 0xFF is NaN) and FP4 E2M1 elements.

Nothing here is typed in: E4M3, E5M2 and E8M0 come from ``torch.finfo`` on
``torch.float8_e4m3fn``, ``torch.float8_e5m2`` and ``torch.float8_e8m0fnu``; whether a format has
inf is measured by casting ``inf`` to it. PyTorch has no unpacked FP4 dtype (only the packed
``float4_e2m1fn_x2``, without ``finfo``), so E2M1 — a preview — is derived from its bit layout
(2 exponent bits, bias 1, 1 mantissa bit, no inf/NaN: arXiv 2310.10537 §5.3.3) by
:func:`from_layout`, the same formula that reproduces ``finfo`` for the other three (tested).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .._validate import choice

__all__ = ["FormatSpec", "FORMATS", "DTYPES", "spec", "from_layout", "format_table"]

# fmt name -> torch dtype (the element formats quantize() accepts, and the E8M0 scale format)
DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e8m0": torch.float8_e8m0fnu}
ELEMENT_FORMATS = ("e4m3", "e5m2")


@dataclass(frozen=True)
class FormatSpec:
    """One float format as numbers: its range, its spacing near 1, and what it does past max."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float                   # largest finite value
    min_normal: float            # smallest positive normal value
    min_subnormal: float         # smallest positive value (= min_normal when there are no subnormals)
    spacing_at_1: float          # gap between 1 and the next value above it (2**-mantissa_bits)
    has_inf: bool
    has_nan: bool
    source: str                  # where the numbers were read from

    @property
    def dynamic_range_binades(self) -> float:
        """log2(max / min_subnormal): how many powers of two one tensor's values may span."""
        return math.log2(self.max / self.min_subnormal)


def _has_inf(dt: torch.dtype) -> bool:
    """Cast +inf to the dtype and see whether an inf comes back (E4M3fn saturates or NaNs)."""
    return math.isinf(float(torch.tensor(math.inf).to(dt).float()))


def _has_nan(dt: torch.dtype) -> bool:
    return math.isnan(float(torch.tensor(math.nan).to(dt).float()))


def _from_dtype(name: str, dt: torch.dtype) -> FormatSpec:
    fi = torch.finfo(dt)
    m = int(round(-math.log2(fi.eps)))
    # E8M0 has no mantissa and no subnormals: its smallest value is its smallest normal.
    sub = float(fi.smallest_normal) * float(fi.eps) if m > 0 else float(fi.smallest_normal)
    return FormatSpec(name, fi.bits, fi.bits - m - (1 if m > 0 else 0), m, float(fi.max),
                      float(fi.smallest_normal), sub, float(fi.eps), _has_inf(dt), _has_nan(dt),
                      f"torch.finfo({dt}) and a cast of inf/NaN")


def from_layout(name: str, exponent_bits: int, mantissa_bits: int, *, ieee_special: bool,
                fn_top_code: bool = False) -> FormatSpec:
    """A sign + exponent + mantissa format's numbers from its bit layout (bias 2**(e−1) − 1).

    ``ieee_special``: the top exponent code holds inf and NaN (E5M2, FP16). ``fn_top_code``: the
    top code is finite except the all-ones mantissa (NaN), as in E4M3fn (arXiv 2209.05433 §2).
    Neither: every code is finite (E2M1).
    """
    bias = 2 ** (exponent_bits - 1) - 1
    top = 2 ** exponent_bits - 1                      # largest exponent code
    if ieee_special:
        emax, top_mant = top - 1 - bias, 2 ** mantissa_bits - 1
    elif fn_top_code:
        emax, top_mant = top - bias, 2 ** mantissa_bits - 2
    else:
        emax, top_mant = top - bias, 2 ** mantissa_bits - 1
    mx = 2.0 ** emax * (1 + top_mant / 2 ** mantissa_bits)
    min_normal = 2.0 ** (1 - bias)
    return FormatSpec(name, 1 + exponent_bits + mantissa_bits, exponent_bits, mantissa_bits, mx,
                      min_normal, min_normal * 2.0 ** -mantissa_bits, 2.0 ** -mantissa_bits,
                      ieee_special, ieee_special or fn_top_code,
                      f"bit layout E{exponent_bits}M{mantissa_bits}, bias {bias}")


FORMATS: dict[str, FormatSpec] = {
    "e4m3": _from_dtype("e4m3", torch.float8_e4m3fn),
    "e5m2": _from_dtype("e5m2", torch.float8_e5m2),
    "e8m0": _from_dtype("e8m0", torch.float8_e8m0fnu),
    "e2m1": from_layout("e2m1", 2, 1, ieee_special=False),
}


def spec(fmt: str, name: str = "fmt") -> FormatSpec:
    """The :class:`FormatSpec` of ``fmt`` ("e4m3", "e5m2", "e8m0", "e2m1"); ValueError naming ``name``."""
    return FORMATS[choice(name, fmt, tuple(FORMATS))]


def element_dtype(fmt: str, name: str = "fmt") -> torch.dtype:
    """The torch dtype of an FP8 element format ("e4m3" | "e5m2"); ValueError naming ``name``."""
    return DTYPES[choice(name, fmt, ELEMENT_FORMATS)]


def format_table() -> list[dict]:
    """One row per format (the chapter's first table): every field of :class:`FormatSpec`."""
    rows = []
    for f in FORMATS.values():
        row = {k: getattr(f, k) for k in FormatSpec.__dataclass_fields__}
        row["dynamic_range_binades"] = f.dynamic_range_binades
        rows.append(row)
    return rows


def grid(fmt: str) -> torch.Tensor:
    """Every finite non-negative value of an FP8 element format, ascending (float64): all bit
    patterns 0x00..0x7F cast through the real dtype, NaN/inf dropped. For the page's number line."""
    dt = element_dtype(fmt)
    vals = torch.arange(0, 128, dtype=torch.uint8).view(dt).double()
    return vals[torch.isfinite(vals)].unique()
