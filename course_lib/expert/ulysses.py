"""DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509): sequence parallelism by all-to-all.

Each of p ranks holds s/p positions of Q, K and V for all H heads. One all-to-all per tensor
regroups them so each rank holds *all* s positions for H/p heads; attention is then ordinary full
causal attention per head (heads are independent), and a last all-to-all sends the output back to
the sequence split. Forward: four all-to-alls, each rank sending (p−1)/p of its s/p·b·d values per
tensor, 4·(p−1)/p·(s/p)·b·d — shrinking as 1/p, where ring attention's K/V traffic,
2·(p−1)/p·s·b·d, does not. The price: p must divide the number of heads (the KV heads, with GQA).
The backward repeats the four exchanges with the gradients (:class:`~course_lib.expert.ep.AllToAll`).
Every rank must hold the same number of positions (s divisible by p): the ranks first exchange their
shapes (four integers each, uncounted) and all raise the same ValueError otherwise, before any
all-to-all of mismatched blocks could abort a rank.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..tensor_context.context import causal_attention
from ..parallel.counting import CountingComm, as_comm
from .ep import all_to_all

__all__ = ["ulysses_attention", "ulysses_worker"]


def _seq_to_heads(x: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """(B, H, s/p, hd) sequence-split → (B, H/p, s, hd) head-split (rank order = sequence order)."""
    B, H, s, hd = x.shape
    p = comm.world_size
    rows = x.permute(1, 0, 2, 3).reshape(p, H // p, B, s, hd).contiguous().view(p * (H // p), B, s, hd)
    got = all_to_all(rows, comm, [H // p] * p, [H // p] * p)          # block j: rank j's positions
    return got.view(p, H // p, B, s, hd).permute(2, 1, 0, 3, 4).reshape(B, H // p, p * s, hd)


def _heads_to_seq(y: torch.Tensor, comm: CountingComm) -> torch.Tensor:
    """Inverse of :func:`_seq_to_heads`: (B, H/p, s, hd) → (B, H, s/p, hd)."""
    B, h, S, hd = y.shape
    p = comm.world_size
    rows = y.reshape(B, h, p, S // p, hd).permute(2, 1, 0, 3, 4).contiguous().view(p * h, B, S // p, hd)
    got = all_to_all(rows, comm, [h] * p, [h] * p)                      # block j: heads of rank j
    return got.view(p * h, B, S // p, hd).permute(1, 0, 2, 3)


def _same_shape(q: torch.Tensor, comm: CountingComm) -> None:
    """Raise on every rank alike unless every rank's ``q`` has the same shape: the all-to-alls swap
    equal blocks (an uneven sequence split would abort a rank inside the collective)."""
    every = [torch.zeros(4, dtype=torch.int64) for _ in range(comm.world_size)]
    dist.all_gather(every, torch.tensor(q.shape, dtype=torch.int64), group=comm.group)
    shapes = [tuple(t.tolist()) for t in every]
    if len(set(shapes)) > 1:
        lengths = [sh[2] for sh in shapes]
        raise ValueError(f"ulysses_attention: every rank must hold the same (batch, heads, s/p, head_dim) "
                         f"slice, got q shapes {shapes} on the {comm.world_size} ranks (rank order): a "
                         f"sequence of {sum(lengths)} positions split as {lengths}; the length must divide "
                         f"evenly by the group size {comm.world_size} (pad it, or choose p)")


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, comm) -> torch.Tensor:
    """Causal attention of this rank's positions over the whole sequence, Ulysses style.

    ``q``, ``k``, ``v``: (batch, heads, s/p, head_dim), this rank's contiguous slice of the
    sequence; ``comm``: a CountingComm (or ProcessGroup) over the p sequence-parallel ranks.
    Returns this rank's slice of the output, differentiable."""
    comm = as_comm(comm)
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must share one (batch, heads, s/p, head_dim) shape, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    _same_shape(q, comm)
    if q.size(1) % comm.world_size:
        raise ValueError(f"the {q.size(1)} heads must divide evenly over {comm.world_size} ranks: "
                         f"Ulysses splits attention by head")
    out = causal_attention(*(_seq_to_heads(t, comm) for t in (q, k, v)))
    return _heads_to_seq(out, comm)


def ulysses_worker(ctx, *, batch: int = 1, heads: int = 4, seq_len: int = 32, head_dim: int = 8) -> dict:
    """Ulysses and chapter 11's ring attention, same Q, K, V, against full attention on one process.

    Every rank draws the same full tensors and output gradient. Returns the largest output and
    gradient gaps of each method (this rank's slice) and the bytes each sent, forward and backward."""
    from ..tensor_context.context import RingComm, ring_attention, split_sequence
    p, r = ctx.world_size, ctx.rank
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(batch, heads, seq_len, head_dim, generator=g) for _ in range(4)]
    ref = [x.clone().requires_grad_() for x in full[:3]]
    out_ref = causal_attention(*ref)
    out_ref.backward(full[3])
    cut = lambda x: split_sequence(x, r, p, "contiguous")  # noqa: E731
    res = {}
    for name in ("ulysses", "ring"):
        mine = [cut(x).requires_grad_() for x in full[:3]]
        comm = CountingComm(ctx.group) if name == "ulysses" else RingComm(ctx.group)
        out = ulysses_attention(*mine, comm) if name == "ulysses" else ring_attention(*mine, comm)
        fwd = comm.total() if name == "ulysses" else comm.sent_bytes
        out.backward(cut(full[3]))
        total = comm.total() if name == "ulysses" else comm.sent_bytes
        res[name] = {"out_gap": float((out - cut(out_ref)).abs().max()),
                     "grad_gap": max(float((a.grad - cut(b.grad)).abs().max()) for a, b in zip(mine, ref)),
                     "forward_bytes": fwd, "backward_bytes": total - fwd}
    res["values"] = batch * heads * seq_len * head_dim     # s·b·d of one full tensor
    return res
