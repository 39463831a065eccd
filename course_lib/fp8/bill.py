"""The bill: what an FP8 run's MFU means, stated against both peaks.

Model FLOPs utilisation is achieved model FLOP/s over a peak (chapter 1: 6·N FLOPs per token for
training). An FP8 run has two candidate denominators: the BF16 dense peak (what most published
MFUs quote, and what a BF16 run of the same model would be held to) and the FP8 dense peak,
twice as large on Hopper and Blackwell (NVIDIA datasheets, cited in ``course_lib.hardware``).
The same hours are one MFU against the BF16 peak and half of it against the FP8 peak, so a
reported MFU of an FP8 run means nothing until it names its peak.

Not every GEMM of an FP8 run is in FP8: DeepSeek-V3 (arXiv 2412.19437 §3.3) keeps the embedding,
output head, MoE gating, normalisation and attention in BF16/FP32. With a share ``f`` of the
model FLOPs in FP8, the peak the run could at best reach is the time-weighted one,
1 / (f / P_fp8 + (1 − f) / P_bf16): :func:`fp8_mfu` reports it as ``"mixed"``.
The peaks come from ``course_lib.hardware`` (its ``peak_flops["fp8"]``, absent for chips without
FP8 tensor cores, which are refused by name).
"""
from __future__ import annotations

from .. import hardware
from .._validate import fraction, positive

__all__ = ["fp8_mfu", "mixed_peak", "fp8_accelerators"]


def fp8_accelerators() -> list[str]:
    """The accelerators in ``course_lib.hardware`` with a dense FP8 peak."""
    return [n for n, a in hardware.ACCELERATORS.items() if a.peak_flops.get("fp8")]


def _peaks(gpu: str) -> tuple[float, float]:
    acc = hardware.get_accelerator(gpu)
    p8, p16 = acc.peak_flops.get("fp8"), acc.peak_flops.get("bf16")
    if not p8 or not p16:
        raise ValueError(f"gpu={gpu!r} has no {'FP8' if not p8 else 'BF16'} dense peak in course_lib.hardware "
                         f"(no such tensor cores): FP8 MFU is undefined there. Chips with one: "
                         f"{', '.join(fp8_accelerators())}")
    return p16, p8


def mixed_peak(gpu: str = "H100-SXM", fp8_fraction: float = 1.0) -> float:
    """The best FLOP/s a run with ``fp8_fraction`` of its FLOPs in FP8 (the rest BF16) can reach:
    each FLOP takes 1/peak of its own precision, so the peaks combine harmonically."""
    f = fraction("fp8_fraction", fp8_fraction)
    p16, p8 = _peaks(gpu)
    return 1.0 / (f / p8 + (1.0 - f) / p16)


def fp8_mfu(n_params: float, tokens_per_second_per_gpu: float, gpu: str = "H100-SXM",
            fp8_fraction: float = 1.0) -> dict:
    """MFU of an FP8 training run, three ways: ``{"vs_bf16", "vs_fp8", "vs_mixed", "achieved_flops",
    "bf16_peak", "fp8_peak", "mixed_peak"}``. Achieved FLOP/s is 6 · ``n_params`` (active
    parameters for a mixture of experts) · ``tokens_per_second_per_gpu``."""
    n = positive("n_params", n_params)
    tps = positive("tokens_per_second_per_gpu", tokens_per_second_per_gpu)
    f = fraction("fp8_fraction", fp8_fraction)
    p16, p8 = _peaks(gpu)
    achieved = 6.0 * n * tps
    pm = mixed_peak(gpu, f)
    return {"achieved_flops": achieved, "bf16_peak": p16, "fp8_peak": p8, "mixed_peak": pm,
            "vs_bf16": achieved / p16, "vs_fp8": achieved / p8, "vs_mixed": achieved / pm}
