"""Measure FLOPs and FLOP/s of the tiny GPT for real, to set beside the 6ND theory.

``count_flops`` runs a forward (and optionally backward) pass under PyTorch's own
``torch.utils.flop_counter.FlopCounterMode`` and splits the count into the dense matmuls
(``mm``/``addmm``: the 2N per token of the parameters) and the attention scores (``bmm``: QKᵀ
and A·V). On CPU, ``scaled_dot_product_attention`` dispatches to a fused kernel for which
PyTorch 2.13 registers no formula, so it would count 0 attention FLOPs; ``cpu_sdpa=True``
registers one (PyTorch's own SDPA formula) for that kernel and its backward.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils import flop_counter as fc

from ..hardware import get_accelerator

__all__ = ["FlopBreakdown", "count_flops", "theory_flops", "matmul_peak", "time_train_step",
           "device_peak"]

_DENSE = {"mm", "addmm"}
_ATTN = {"bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_flash_attention_for_cpu_backward",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
         "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward"}


@dataclass(frozen=True)
class FlopBreakdown:
    """FLOPs of one pass, split into dense matmuls, attention scores and anything else."""

    dense: int
    attention: int
    other: int

    @property
    def total(self) -> int:
        return self.dense + self.attention + self.other


def _cpu_sdpa_mapping() -> dict:
    """FLOP formulas for the CPU flash-attention kernels, built from PyTorch's SDPA formulas."""
    aten = torch.ops.aten

    def fwd(q, k, v, *args, **kwargs) -> int:
        return fc.sdpa_flop_count(q, k, v)

    def bwd(grad_out, q, k, v, *args, **kwargs) -> int:
        return fc.sdpa_backward_flop_count(grad_out, q, k, v)

    return {aten._scaled_dot_product_flash_attention_for_cpu: fwd,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: bwd}


def count_flops(model: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None,
                *, backward: bool = False, cpu_sdpa: bool = True) -> FlopBreakdown:
    """FLOPs PyTorch actually executes for one forward (and backward if asked) pass."""
    counter = fc.FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_mapping() if cpu_sdpa else {})
    with counter:
        if backward:
            _, loss = model(idx, targets if targets is not None else idx)
            loss.backward()
        else:
            with torch.no_grad():
                model(idx)
    dense = attn = other = 0
    for op, n in counter.get_flop_counts()["Global"].items():
        name = str(op).split(".")[-1]
        if name in _DENSE:
            dense += n
        elif name in _ATTN:
            attn += n
        else:
            other += n
    model.zero_grad(set_to_none=True)
    return FlopBreakdown(dense, attn, other)


def theory_flops(matmul_params: int, n_layers: int, d_model: int, seq_len: int, n_tokens: int,
                 *, backward: bool = False, causal: bool = False) -> FlopBreakdown:
    """The textbook count for the same pass: 2N per token dense, 4·L·s·d (full matrix) or
    2·L·s·d (causal) per token attention; backward doubles both (×3 in total)."""
    mult = 3 if backward else 1
    attn_per_token = (2 if causal else 4) * n_layers * seq_len * d_model
    return FlopBreakdown(mult * 2 * matmul_params * n_tokens, mult * attn_per_token * n_tokens, 0)


def matmul_peak(n: int = 1024, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                repeats: int = 10) -> float:
    """Best FLOP/s of an n×n matmul on this device: an empirical 'peak' for machines that have
    no datasheet entry (a laptop CPU). Takes the best of ``repeats`` timed runs after a warm-up."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    best = float("inf")
    for i in range(repeats + 2):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        if i >= 2:
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_train_step(model: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor,
                    steps: int = 5, lr: float = 1e-3) -> float:
    """Median seconds of a full training step (forward, backward, AdamW update)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    times = []
    for _ in range(steps + 1):
        _sync(idx.device)
        t0 = time.perf_counter()
        _, loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(idx.device)
        times.append(time.perf_counter() - t0)
    times = sorted(times[1:])
    return times[len(times) // 2]


def device_peak(device: torch.device | str, dtype: str = "bf16") -> tuple[float, str]:
    """Peak FLOP/s for a CUDA device from the accelerator table, with how it was obtained.
    Returns (nan, reason) when the device is not in the table (e.g. a CPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return float("nan"), "no datasheet peak for a CPU: measure one with matmul_peak()"
    name = torch.cuda.get_device_name(device).upper()
    for key in ("H200", "B300", "B200", "A100", "H100-PCIE", "H100"):
        if key.replace("-PCIE", "") in name and ("PCIE" in name) == key.endswith("PCIE"):
            acc = get_accelerator(key)
            return acc.peak(dtype), f"{acc.name} datasheet ({acc.source.split(':')[0]})"
    return float("nan"), f"{name} is not in course_lib.hardware"
