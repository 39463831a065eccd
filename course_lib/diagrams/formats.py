"""Chapter 7's mechanism: what a floating-point format's bits buy — the sign, exponent and
mantissa fields of FP32, BF16, FP16 and the two FP8 formats beside the range (smallest normal to
max) and the spacing at 1 (eps) each gives, all read from ``numerics.format_info``."""
from __future__ import annotations

import math

from .. import numerics, plots

__all__ = ["FORMATS", "format_layouts", "float_formats"]

FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
_FIELDS = (("sign", plots.MEASURED, "xx"), ("exponent", plots.THEORY, None), ("mantissa", plots.ACCENT, ".."))
_LABEL = {"fp32": "FP32", "bf16": "BF16", "fp16": "FP16", "fp8_e4m3": "FP8 E4M3", "fp8_e5m2": "FP8 E5M2"}


def format_layouts(formats: tuple[str, ...] = FORMATS) -> list[dict]:
    """One dict per format, straight from ``numerics.format_info`` (that is, ``torch.finfo``):
    ``name``, ``bits`` and the field widths ``sign`` (1), ``exponent``, ``mantissa``; the range
    ``smallest_subnormal``, ``smallest_normal``, ``max``; ``eps`` (the spacing just above 1,
    2**-mantissa) and ``binades``, the powers of two from the smallest normal number to max."""
    out = []
    for f in formats:
        i = numerics.format_info(f)
        out.append({"name": i.name, "bits": i.bits, "sign": 1, "exponent": i.exponent_bits,
                    "mantissa": i.mantissa_bits, "eps": i.eps, "max": i.max,
                    "smallest_normal": i.smallest_normal, "smallest_subnormal": i.smallest_subnormal,
                    "binades": math.floor(math.log2(i.max)) - round(math.log2(i.smallest_normal)) + 1})
    return out


def _pow2(x: float) -> str:
    return f"$2^{{{round(math.log2(x))}}}$"


def _num(x: float) -> str:
    return f"{x:g}" if x < 1e6 else f"{x:.3g}".replace("e+", "e")


def float_formats(formats: tuple[str, ...] = FORMATS):
    """Left: each format's bits, one box per bit, the sign, exponent and mantissa fields hatched
    and coloured apart, with their widths. Right: on a log axis, the range each exponent buys, from
    the smallest normal number to max (the subnormals below it hatched), labelled with max and the
    spacing eps that the mantissa gives at 1."""
    import matplotlib.patches as mpatches
    rows = format_layouts(formats)
    fig, (bits, rng) = plots.figure(ncols=2, figsize=(6.4, 4.6), width_ratios=[1.25, 1])
    n = len(rows)
    texts = []
    for k, r in enumerate(rows):
        y = n - 1 - k
        x = 0
        for field, colour, hatch in _FIELDS:
            w = r[field]
            for b in range(w):
                bits.add_patch(mpatches.Rectangle((x + b, y), 1, 0.38, facecolor=colour, hatch=hatch,
                                                  edgecolor="white", linewidth=0.6, alpha=0.85))
            bits.text(x + w / 2, y - 0.04, str(w), ha="center", va="top", fontsize=8)
            x += w
        bits.text(0, y + 0.46, f"{_LABEL[r['name']]}: {r['bits']} bits, eps {_pow2(r['eps'])}", ha="left", va="bottom", fontsize=8,
                  fontweight="bold")
        lo, sub, hi = r["smallest_normal"], r["smallest_subnormal"], r["max"]
        rng.barh(y + 0.19, math.log10(lo) - math.log10(sub), left=math.log10(sub), height=0.38, color="white",
                 hatch="///", edgecolor=plots.THEORY, linewidth=0.6)
        rng.barh(y + 0.19, math.log10(hi) - math.log10(lo), left=math.log10(lo), height=0.38, color=plots.THEORY)
        texts.append((y, f"min normal {_pow2(lo)}, max {_num(hi)}"))
    bits.set_xlim(0, max(r["bits"] for r in rows))
    bits.set_ylim(-0.6, n - 0.1)
    bits.axis("off")
    bits.set_title("bits: sign, exponent, mantissa", fontsize=9)
    lows = [math.log10(r["smallest_subnormal"]) for r in rows]
    highs = [math.log10(r["max"]) for r in rows]
    rng.set_xlim(math.floor(min(lows) / 10) * 10, math.ceil(max(highs) / 10) * 10)
    rng.set_ylim(-0.6, n - 0.1)
    for y, text in texts:
        rng.text(rng.get_xlim()[0] + 1, y + 0.46, text, ha="left", va="bottom", fontsize=8)
    rng.set_yticks([])
    rng.spines[["left"]].set_visible(False)
    ticks = range(int(rng.get_xlim()[0]), int(rng.get_xlim()[1]) + 1, 20)
    rng.set_xticks(list(ticks), [f"$10^{{{t}}}$" for t in ticks], fontsize=8)
    rng.set_xlabel("magnitude (log scale)", fontsize=8)
    rng.set_title("range: smallest normal to max", fontsize=9)
    rng.grid(True, axis="x", alpha=0.3)
    rng.grid(False, axis="y")
    handles = [mpatches.Patch(facecolor=c, hatch=h, edgecolor="white", label=f) for f, c, h in _FIELDS]
    handles += [mpatches.Patch(facecolor=plots.THEORY, label="normal range"),
                mpatches.Patch(facecolor="white", hatch="///", edgecolor=plots.THEORY, label="subnormals")]
    fig.legend(handles=handles, loc="outside lower center", ncols=5, fontsize=8)
    return fig
