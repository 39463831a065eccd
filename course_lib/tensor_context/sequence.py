"""Sequence parallelism: the collectives that shard LayerNorm regions along the sequence.

Tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053) leaves the LayerNorms, residual adds
and dropouts replicated: every rank stores the same ``s·b·h`` activations there. Korthikanti et
al. 2022 (arXiv 2205.05198) split those regions along the sequence instead and replace each
all-reduce by its two halves: a **reduce-scatter** (sum, keep this rank's 1/t of the sequence)
where a row-parallel linear ends, and an **all-gather** (the whole sequence again) where a
column-parallel linear begins. A ring all-reduce *is* a reduce-scatter followed by an all-gather,
so the bytes sent are the same; the stored activations of those regions are divided by t.

Activations are ``(batch, seq, ...)`` tensors here, as in the course's GPT; the collectives work on
a sequence-major copy so that rank r's slice is positions ``[r·s/t, (r+1)·s/t)``. Every collective
goes through a :class:`~course_lib.parallel.counting.CountingComm`, so the bytes are counted.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..parallel.counting import CountingComm

__all__ = ["seq_all_gather", "seq_reduce_scatter", "gather_sequence", "scatter_sequence",
           "GatheredLinear"]


def _seq_major(x: torch.Tensor) -> torch.Tensor:
    """A fresh flat buffer holding ``x`` (batch, seq, ...) in (seq, batch, ...) order."""
    return torch.empty((x.shape[1], x.shape[0], *x.shape[2:]), dtype=x.dtype).copy_(x.transpose(0, 1)).view(-1)


def seq_all_gather(comm: CountingComm, x: torch.Tensor) -> torch.Tensor:
    """(b, s/t, ...) on every rank → (b, s, ...): the ranks' sequence slices in rank order."""
    out = torch.empty(x.numel() * comm.world_size, dtype=x.dtype)
    comm.all_gather(out, _seq_major(x))
    return out.view(x.shape[1] * comm.world_size, x.shape[0], *x.shape[2:]).transpose(0, 1)


def seq_reduce_scatter(comm: CountingComm, x: torch.Tensor) -> torch.Tensor:
    """(b, s, ...) partial sums on every rank → this rank's (b, s/t, ...) slice of their sum."""
    t = comm.world_size
    if x.shape[1] % t:
        raise ValueError(f"sequence length {x.shape[1]} is not divisible by the tensor-parallel "
                         f"degree {t}: sequence parallelism splits the sequence evenly")
    out = torch.empty(x.numel() // t, dtype=x.dtype)
    comm.reduce_scatter(out, _seq_major(x))
    return out.view(x.shape[1] // t, x.shape[0], *x.shape[2:]).transpose(0, 1)


class _SeqCollective(torch.autograd.Function):
    """All-gather along the sequence forward and reduce-scatter of the gradient backward
    (``gather=True``), or the conjugate: reduce-scatter forward, all-gather backward."""

    @staticmethod
    def forward(ctx, x, comm, gather):
        ctx.comm, ctx.gather = comm, gather
        return (seq_all_gather if gather else seq_reduce_scatter)(comm, x)

    @staticmethod
    def backward(ctx, grad):
        return (seq_reduce_scatter if ctx.gather else seq_all_gather)(ctx.comm, grad), None, None


def gather_sequence(x: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """Differentiable all-gather along dim 1 (the conjugate of :func:`scatter_sequence`)."""
    return _SeqCollective.apply(x, comm, True)


def scatter_sequence(x: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """Differentiable reduce-scatter along dim 1: where a row-parallel linear ends under SP."""
    return _SeqCollective.apply(x, comm, False)


class GatheredLinear(torch.autograd.Function):
    """``F.linear(all_gather_seq(x), weight, bias)``, the start of a column-parallel linear under SP.

    With ``regather=True`` (Megatron-LM's choice) only the *sharded* input is saved and the
    all-gather is redone in the backward pass to form the weight gradient: the stored activation
    is s·b·h/t, as Korthikanti et al.'s 34/t assumes, at the price of one more all-gather per
    linear. With ``regather=False`` the gathered input is saved and the bytes sent equal plain
    tensor parallelism's exactly. Call as ``GatheredLinear.apply(x, weight, bias, comm, regather)``.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, comm, regather):
        full = seq_all_gather(comm, x)
        ctx.comm, ctx.regather, ctx.has_bias = comm, regather, bias is not None
        ctx.save_for_backward(x if regather else full, weight)
        return F.linear(full, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        saved, weight = ctx.saved_tensors
        full = seq_all_gather(ctx.comm, saved) if ctx.regather else saved
        g2 = grad.reshape(-1, grad.shape[-1])
        grad_w = g2.t() @ full.reshape(-1, full.shape[-1])
        grad_b = g2.sum(0) if ctx.has_bias else None
        return seq_reduce_scatter(ctx.comm, grad @ weight), grad_w, grad_b, None, None
