"""Tensor parallelism (Megatron-LM) for the course's tiny GPT, built from an ordinary ``GPT``.

Shoeybi et al. 2019 (arXiv 1909.08053) split each transformer layer over t ranks with two
conjugate operators: **f** is the identity forward and an all-reduce of the gradient backward (it
enters a tensor-parallel region whose input is replicated), **g** is an all-reduce forward and the
identity backward (it leaves the region). A column-parallel linear (output features split) then a
row-parallel linear (input features split) needs only one f and one g: the MLP's ``up``/``down``
and attention's ``qkv`` (whole heads per rank) / ``proj``. Per layer that is 2 all-reduces of
s·b·h values forward and 2 backward. The vocabulary is split too: each rank holds V/t rows of the
(tied) embedding, and the cross-entropy is computed without ever gathering the logits.

``sequence_parallel=True`` (Korthikanti et al. 2022, arXiv 2205.05198) shards the LayerNorm
regions along the sequence; f/g become all-gather / reduce-scatter (see :mod:`.sequence`).

Every module here is made *from* the unsplit module and rank ``comm.rank`` of ``comm.world_size``
(a :class:`~course_lib.parallel.counting.CountingComm` over an explicit group), so the split model
can be compared with the original: each sharded parameter carries ``tp_dim`` and ``tp_index``
(where its rows/columns sit in the full tensor), which :func:`~.runs.unshard` uses to reassemble it.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .._validate import choice
from ..model import GPT, _mask
from ..parallel.counting import CountingComm, as_comm
from .sequence import GatheredLinear, scatter_sequence

__all__ = ["copy_to_tp", "reduce_from_tp", "ColumnParallelLinear", "RowParallelLinear",
           "VocabParallelEmbedding", "vocab_parallel_cross_entropy", "ParallelAttention",
           "ParallelMLP", "ParallelBlock", "TensorParallelGPT", "RECOMPUTE"]

RECOMPUTE = ("none", "selective", "full")


def _all_reduce(comm: CountingComm, x: torch.Tensor) -> torch.Tensor:
    """Sum of ``x`` over the group, out of place (padded to a multiple of t for the ring)."""
    n, t = x.numel(), comm.world_size
    buf = torch.zeros(n + (-n) % t, dtype=x.dtype)
    buf[:n].copy_(x.reshape(-1))
    comm.all_reduce(buf)
    return buf[:n].view(x.shape)


class _CopyToTP(torch.autograd.Function):
    """f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(ctx.comm, grad), None


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        return _all_reduce(comm, x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """The f operator: enter a tensor-parallel region (gradient summed over the group)."""
    return _CopyToTP.apply(x, comm)


def reduce_from_tp(x: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """The g operator: leave a tensor-parallel region (partial results summed over the group)."""
    return _ReduceFromTP.apply(x, comm)


def _block(n: int, comm: CountingComm, what: str) -> torch.Tensor:
    """Indices of this rank's contiguous 1/t of ``n`` (``what`` names the split dimension)."""
    t, r = comm.world_size, comm.rank
    if n % t:
        raise ValueError(f"{what} ({n}) is not divisible by the tensor-parallel degree {t}")
    return torch.arange(r * n // t, (r + 1) * n // t)


def _shard(p: torch.Tensor, dim: int, index: torch.Tensor) -> nn.Parameter:
    """A new parameter holding ``p``'s slices ``index`` along ``dim``, tagged for ``runs.unshard``."""
    q = nn.Parameter(p.detach().index_select(dim, index).clone(), requires_grad=p.requires_grad)
    q.tp_dim, q.tp_index = dim, index
    return q


def _replicate(p: torch.Tensor | None, sequence_parallel: bool) -> nn.Parameter | None:
    """A copy of a parameter every rank holds whole; under SP its gradient is partial (flagged)."""
    if p is None:
        return None
    q = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
    q.sequence_parallel = sequence_parallel
    return q


class ColumnParallelLinear(nn.Module):
    """Rows ``index`` of ``linear``'s weight (output features; default: this rank's contiguous 1/t).

    Input replicated (b, s, in) — or, with ``sequence_parallel``, this rank's (b, s/t, in), which is
    all-gathered first (:class:`~.sequence.GatheredLinear`, ``regather`` as there). Output: this
    rank's output features, (b, s, out/t). No communication in the forward without SP."""

    def __init__(self, linear: nn.Linear, comm, index: torch.Tensor | None = None, *,
                 sequence_parallel: bool = False, regather: bool = True) -> None:
        super().__init__()
        self.comm, self.sequence_parallel, self.regather = as_comm(comm), sequence_parallel, regather
        index = _block(linear.out_features, self.comm, "out_features") if index is None else index
        self.weight = _shard(linear.weight, 0, index)
        self.bias = None if linear.bias is None else _shard(linear.bias, 0, index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_parallel:
            return GatheredLinear.apply(x, self.weight, self.bias, self.comm, self.regather)
        return F.linear(copy_to_tp(x, self.comm), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Columns ``index`` of ``linear``'s weight (input features); the bias is kept whole.

    Input: this rank's input features (b, s, in/t). The partial products are summed over the group
    (all-reduce, or reduce-scatter along the sequence with ``sequence_parallel``), then the bias is
    added once. Output: (b, s, out) replicated, or (b, s/t, out) under SP."""

    def __init__(self, linear: nn.Linear, comm, index: torch.Tensor | None = None, *,
                 sequence_parallel: bool = False) -> None:
        super().__init__()
        self.comm, self.sequence_parallel = as_comm(comm), sequence_parallel
        index = _block(linear.in_features, self.comm, "in_features") if index is None else index
        self.weight = _shard(linear.weight, 1, index)
        self.bias = _replicate(linear.bias, sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        y = scatter_sequence(y, self.comm) if self.sequence_parallel else reduce_from_tp(y, self.comm)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """This rank's V/t rows of ``embedding``; a token outside them looks up zeros, and the ranks'
    outputs are summed (g), or reduce-scattered along the sequence under SP."""

    def __init__(self, embedding: nn.Embedding, comm, *, sequence_parallel: bool = False) -> None:
        super().__init__()
        self.comm, self.sequence_parallel = as_comm(comm), sequence_parallel
        index = _block(embedding.num_embeddings, self.comm, "vocab_size")
        self.start, self.rows = int(index[0]), len(index)
        self.weight = _shard(embedding.weight, 0, index)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        local = idx - self.start
        outside = (local < 0) | (local >= self.rows)
        x = F.embedding(local.clamp(0, self.rows - 1), self.weight).masked_fill(outside[..., None], 0.0)
        return scatter_sequence(x, self.comm) if self.sequence_parallel else reduce_from_tp(x, self.comm)


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, comm, vocab_start: int) -> torch.Tensor:
    """Mean cross-entropy from vocabulary-sharded logits (b, s, V/t), never gathering them.

    log Σ_v e^{z_v} and the target's logit are each a sum of per-rank parts: two g operators of
    b·s values (Megatron's trick). The shift by the global max (an uncounted MAX all-reduce on the
    group) is only for stability; the loss and its gradient do not depend on it."""
    comm = as_comm(comm)
    shift = logits.detach().amax(-1)
    dist.all_reduce(shift, op=dist.ReduceOp.MAX, group=comm.group)
    z = logits - shift[..., None]
    local = targets - vocab_start
    inside = (local >= 0) & (local < logits.shape[-1])
    picked = z.gather(-1, local.clamp(0, logits.shape[-1] - 1)[..., None]).squeeze(-1) * inside
    sum_exp = reduce_from_tp(z.exp().sum(-1), comm)
    return (sum_exp.log() - reduce_from_tp(picked, comm)).mean()


def _attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    """Causal softmax(QKᵀ/√d)·V for (b, heads, s, d) tensors, as the tiny GPT's "math" path."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~_mask(q.size(-2), window, q.device), float("-inf"))
    return scores.softmax(dim=-1) @ v


class ParallelAttention(nn.Module):
    """Head-parallel attention from a ``CausalSelfAttention``: rank r keeps heads
    [r·a/t, (r+1)·a/t) — their Q, K and V rows of ``qkv`` (column-parallel) and their columns of
    ``proj`` (row-parallel). ``recompute="selective"`` recomputes the score/softmax part in the
    backward (Korthikanti et al.'s selective recomputation), storing only Q, K, V for it."""

    def __init__(self, attn: nn.Module, comm, *, sequence_parallel: bool = False, regather: bool = True,
                 recompute: str = "none") -> None:
        super().__init__()
        comm = as_comm(comm)
        if attn.n_heads % comm.world_size:
            raise ValueError(f"n_heads ({attn.n_heads}) is not divisible by the tensor-parallel degree {comm.world_size}")
        self.head_dim, self.window, self.recompute = attn.d_model // attn.n_heads, attn.window, recompute
        rows = _block(attn.d_model, comm, "d_model")
        self.qkv = ColumnParallelLinear(attn.qkv, comm, torch.cat([rows, rows + attn.d_model, rows + 2 * attn.d_model]),
                                        sequence_parallel=sequence_parallel, regather=regather)
        self.proj = RowParallelLinear(attn.proj, comm, rows, sequence_parallel=sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)
        B, S = qkv.shape[:2]
        q, k, v = (t.reshape(B, S, -1, self.head_dim).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        if self.recompute == "selective":
            y = checkpoint(_attention_core, q, k, v, self.window, use_reentrant=True)
        else:
            y = _attention_core(q, k, v, self.window)
        return self.proj(y.transpose(1, 2).reshape(B, S, -1))


class ParallelMLP(nn.Module):
    """``up`` column-parallel, GELU on this rank's d_ff/t features, ``down`` row-parallel."""

    def __init__(self, mlp: nn.Module, comm, *, sequence_parallel: bool = False, regather: bool = True) -> None:
        super().__init__()
        self.up = ColumnParallelLinear(mlp.up, comm, sequence_parallel=sequence_parallel, regather=regather)
        self.down = RowParallelLinear(mlp.down, comm, sequence_parallel=sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class ParallelBlock(nn.Module):
    """A tensor-parallel copy of a ``model.Block``. ``recompute``: "none", "selective" (attention
    scores) or "full" (the whole block rerun in the backward, its collectives included; only the
    block's input is stored)."""

    def __init__(self, block: nn.Module, comm, *, sequence_parallel: bool = False, regather: bool = True,
                 recompute: str = "none") -> None:
        super().__init__()
        self.recompute = choice("recompute", recompute, RECOMPUTE)
        sp = dict(sequence_parallel=sequence_parallel, regather=regather)
        self.ln1, self.ln2 = _layer_norm(block.ln1, sequence_parallel), _layer_norm(block.ln2, sequence_parallel)
        self.attn = ParallelAttention(block.attn, comm, recompute=recompute, **sp)
        self.mlp = ParallelMLP(block.mlp, comm, **sp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full":
            return checkpoint(self._forward, x, use_reentrant=True)
        return self._forward(x)


def _layer_norm(ln: nn.LayerNorm, sequence_parallel: bool) -> nn.LayerNorm:
    """A replicated copy of a LayerNorm (its parameters flagged partial-gradient under SP)."""
    out = copy.deepcopy(ln)
    for p in out.parameters():
        p.sequence_parallel = sequence_parallel
    return out


class TensorParallelGPT(nn.Module):
    """Rank ``comm.rank``'s share of ``gpt`` (a ``course_lib.model.GPT``; its "math" attention).

    ``forward(idx, targets=None)``: ``idx`` (b, s) is the same on every rank; returns this rank's
    vocabulary slice of the logits (b, s, V/t), or ``(logits, loss)`` with the full mean loss.
    Parameter names are ``gpt``'s. Under ``sequence_parallel`` call
    :meth:`reduce_sequence_parallel_grads` after ``backward()`` and before the optimizer step: the
    LayerNorm, bias and position parameters saw only this rank's positions."""

    def __init__(self, gpt: GPT, comm, *, sequence_parallel: bool = False, regather: bool = True,
                 recompute: str = "none") -> None:
        super().__init__()
        self.comm, self.cfg, self.sequence_parallel = as_comm(comm), gpt.cfg, sequence_parallel
        sp = dict(sequence_parallel=sequence_parallel)
        self.tok = VocabParallelEmbedding(gpt.tok, self.comm, **sp)
        self.pos = copy.deepcopy(gpt.pos)
        self.pos.weight.sequence_parallel = sequence_parallel
        self.blocks = nn.ModuleList(ParallelBlock(b, self.comm, regather=regather, recompute=recompute, **sp)
                                    for b in gpt.blocks)
        self.ln_f = _layer_norm(gpt.ln_f, sequence_parallel)
        self.regather = regather
        self.head = None if gpt.cfg.tie_embeddings else ColumnParallelLinear(gpt.head, self.comm, **sp, regather=regather)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        S, t, r = idx.shape[1], self.comm.world_size, self.comm.rank
        positions = torch.arange(r * S // t, (r + 1) * S // t) if self.sequence_parallel else torch.arange(S)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if self.head is not None:
            logits = self.head(x)
        elif self.sequence_parallel:
            logits = GatheredLinear.apply(x, self.tok.weight, None, self.comm, self.regather)
        else:
            logits = F.linear(copy_to_tp(x, self.comm), self.tok.weight)
        if targets is None:
            return logits
        return logits, vocab_parallel_cross_entropy(logits, targets, self.comm, self.tok.start)

    def reduce_sequence_parallel_grads(self) -> None:
        """Sum the partial gradients of the sequence-sharded replicated parameters (one all-reduce)."""
        ps = [p for p in self.parameters() if getattr(p, "sequence_parallel", False) and p.grad is not None]
        if ps:
            total = _all_reduce(self.comm, torch.cat([p.grad.reshape(-1) for p in ps]))
            for p, g in zip(ps, total.split([p.numel() for p in ps])):
                p.grad.copy_(g.view_as(p))

