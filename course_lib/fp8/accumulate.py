"""Accumulation inside an FP8 GEMM: a limited-precision accumulator, and promotion to FP32.

DeepSeek-V3 (arXiv 2412.19437 §3.3.2) reports that the FP8 tensor cores of the H800 keep only
about 14 bits of the running sum ("limited accumulation precision"), so a K-long dot product
loses more the longer K is: at K = 4096 they measured a maximum relative error near 2 %. Their
fix: every N_C = 128 elements (four WGMMA instructions) the partial sum is added to an FP32
register on the CUDA cores and the tensor-core accumulator starts again from zero.

:func:`dot` emulates both on the CPU, vectorised over many dot products. Products of two FP8
values are exact in float32 (at most 4 + 4 significant bits), so only the accumulator rounds.
After every addition the running sum keeps ``acc_bits`` fraction bits (float32 keeps 23); the
rounding rule is an argument, because how the hardware drops bits is not published:
``"truncate"`` (toward zero; bias grows linearly with K) or ``"nearest"`` (unbiased; grows like
√K). The exact reference is the float64 sum of the same products (a float64 sum of ≤ 2**16
float32 products of this size has error far below 2**-30 relative).
"""
from __future__ import annotations

import torch

from .._validate import choice, positive_int

__all__ = ["round_mantissa", "dot", "error_vs_k", "ACC_BITS", "PROMOTE_EVERY"]

ACC_BITS = 14          # DeepSeek-V3 §3.3.2: "around 14 bits" kept by the H800's FP8 accumulator
PROMOTE_EVERY = 128    # DeepSeek-V3 §3.3.2: N_C = 128 elements between promotions to FP32


def round_mantissa(x: torch.Tensor, bits: int, rounding: str = "truncate") -> torch.Tensor:
    """``x`` (float64) with its significand cut to 1 + ``bits`` bits (the leading one plus
    ``bits`` fraction bits), toward zero or to nearest (ties away from zero; they are rare)."""
    bits = positive_int("bits", bits, maximum=52)
    rounding = choice("rounding", rounding, ("truncate", "nearest"))
    m, e = torch.frexp(x.to(torch.float64))          # x = m · 2**e, 0.5 ≤ |m| < 1
    scaled = torch.ldexp(m, torch.full_like(e, bits + 1))
    kept = torch.trunc(scaled) if rounding == "truncate" else torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)
    return torch.ldexp(kept, e - (bits + 1))


def dot(a: torch.Tensor, b: torch.Tensor, *, acc_bits: int = ACC_BITS, promote_every: int | None = None,
        rounding: str = "truncate") -> dict:
    """Row-wise dot products ``(a * b).sum(-1)`` of FP8 (or any float) tensors of shape (n, K).

    The products are summed left to right in an accumulator of ``acc_bits`` fraction bits; with
    ``promote_every`` = N_C, every N_C products the partial sum is added into a float32
    accumulator and reset (DeepSeek-V3's promotion). Returns float64 tensors ``limited`` (the
    emulated result), ``exact`` (float64 sum of the same products) and ``rel_error``.
    """
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dim() != 2:
        raise ValueError("a and b must be 2-D tensors of one shape (n, K), got "
                         f"{getattr(a, 'shape', type(a).__name__)} and {getattr(b, 'shape', type(b).__name__)}")
    acc_bits = positive_int("acc_bits", acc_bits, maximum=52)
    rounding = choice("rounding", rounding, ("truncate", "nearest"))
    k = a.shape[1]
    nc = k if promote_every is None else positive_int("promote_every", promote_every, maximum=k)
    prod = a.to(torch.float32) * b.to(torch.float32)          # exact for FP8 inputs
    if not bool(torch.isfinite(prod).all()):
        raise ValueError("a * b has non-finite products: the dot product is not defined")
    p64 = prod.to(torch.float64)
    exact = p64.sum(-1)
    total = torch.zeros(a.shape[0], dtype=torch.float32)
    acc = torch.zeros(a.shape[0], dtype=torch.float64)
    for i in range(k):
        acc = round_mantissa(acc + p64[:, i], acc_bits, rounding)
        if (i + 1) % nc == 0 or i == k - 1:
            if promote_every is not None:
                total = (total.to(torch.float64) + acc).to(torch.float32)
                acc = torch.zeros_like(acc)
    limited = total.to(torch.float64) if promote_every is not None else acc
    rel = (limited - exact).abs() / exact.abs().clamp(min=torch.finfo(torch.float64).tiny)
    return {"limited": limited, "exact": exact, "rel_error": rel}


def error_vs_k(ks: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096), *, n: int = 64, seed: int = 0,
               acc_bits: int = ACC_BITS, promote_every: int = PROMOTE_EVERY,
               rounding: str = "truncate") -> list[dict]:
    """For each K, ``n`` dot products of E4M3 vectors (|values| drawn uniform in [0, 1], as
    after a ReLU/softmax: same-signed sums, the case where accumulation error adds up), summed
    with the limited accumulator alone and with promotion every ``promote_every``.

    Returns rows ``{"k", "limited_max", "limited_mean", "promoted_max", "promoted_mean"}`` of
    relative errors against the exact float64 sum.
    """
    n = positive_int("n", n, maximum=1 << 16)
    if not ks or any(positive_int("ks", k, maximum=1 << 16) < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty sequence of positive ints, got {ks!r}")
    gen = torch.Generator().manual_seed(int(seed))
    rows = []
    for k in ks:
        a = torch.rand(n, k, generator=gen).to(torch.float8_e4m3fn)
        b = torch.rand(n, k, generator=gen).to(torch.float8_e4m3fn)
        lim = dot(a, b, acc_bits=acc_bits, rounding=rounding)["rel_error"]
        pro = dot(a, b, acc_bits=acc_bits, rounding=rounding, promote_every=min(promote_every, k))["rel_error"]
        rows.append({"k": k, "limited_max": float(lim.max()), "limited_mean": float(lim.mean()),
                     "promoted_max": float(pro.max()), "promoted_mean": float(pro.mean())})
    return rows
