"""Context parallelism: ring attention over a sequence split across ranks, exact forward and backward.

Liu et al. 2023 (arXiv 2310.01889): each of p ranks holds 1/p of the sequence's queries, keys and
values. The K/V blocks travel once around the ring (point-to-point ``isend``/``irecv``); while
the next block is in flight, a rank computes attention of its queries against the block it has,
and merges the partial results with the online softmax (log-sum-exp rescaling, as in
FlashAttention), so the result is exactly full causal attention. Each rank sends (p−1)/p of K and
V per layer forward. The backward pass is a second lap: K/V go round again, and the gradients dK,
dV travel with their block, collecting every rank's contribution, until they are home (p hops).

A contiguous split is unbalanced under the causal mask: rank 0's queries see one block, rank
p−1's see p. The **zig-zag** split gives rank r chunks r and 2p−1−r of 2p, so every rank
computes the same number of score entries (2p+1 quarter-blocks against the contiguous split's
worst 4p). :class:`RingComm` counts both the bytes sent and the score entries each rank computed.
"""
from __future__ import annotations

import copy
import math
import time

import torch
import torch.distributed as dist

from .._validate import choice

__all__ = ["SCHEMES", "chunk_ids", "split_sequence", "merge_sequence", "RingComm", "ring_attention",
           "causal_attention", "ContextParallelAttention", "ContextParallelGPT"]

SCHEMES = ("contiguous", "zigzag")


def chunk_ids(rank: int, p: int, scheme: str = "contiguous") -> list[int]:
    """Which of the sequence's equal chunks rank ``rank`` of ``p`` holds: [r] of p (contiguous),
    or [r, 2p−1−r] of 2p (zig-zag)."""
    choice("scheme", scheme, SCHEMES)
    return [rank] if scheme == "contiguous" else [rank, 2 * p - 1 - rank]


def split_sequence(x: torch.Tensor, rank: int, p: int, scheme: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Rank ``rank``'s part of the full-sequence tensor ``x`` (its chunks, concatenated in order)."""
    n = p * (1 if scheme == "contiguous" else 2)
    if x.shape[dim] % n:
        raise ValueError(f"sequence length {x.shape[dim]} is not divisible by {n} chunks ({scheme} split over {p} ranks)")
    chunks = x.chunk(n, dim)
    return torch.cat([chunks[i] for i in chunk_ids(rank, p, scheme)], dim)


def merge_sequence(parts: list[torch.Tensor], scheme: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The full sequence from every rank's part (inverse of :func:`split_sequence`)."""
    p = len(parts)
    chunks: dict[int, torch.Tensor] = {}
    for r, part in enumerate(parts):
        ids = chunk_ids(r, p, scheme)
        chunks.update(zip(ids, part.chunk(len(ids), dim)))
    return torch.cat([chunks[i] for i in sorted(chunks)], dim)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full causal softmax(QKᵀ/√d)·V on one process: the reference ring attention must equal."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    keep = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v


class RingComm:
    """Point-to-point ring over ``group`` that counts what it sends and the attention work done.

    ``sent_bytes`` / ``sends``: bytes and messages this rank sent; ``score_entries``: q·k products
    this rank's blocks computed (the load the split balances or not); ``compute_seconds`` and
    ``wait_seconds``: time computing blocks and time blocked waiting for the next block."""

    def __init__(self, group) -> None:
        self.group = group
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._ranks = [dist.get_global_rank(self.group, r) for r in range(self.world_size)]
        self.reset()

    def reset(self) -> None:
        """Zero every counter."""
        self.sent_bytes = self.sends = self.score_entries = 0
        self.compute_seconds = self.wait_seconds = 0.0

    def snapshot(self) -> dict:
        """The counters as a plain dict (picklable)."""
        return {k: getattr(self, k) for k in ("sent_bytes", "sends", "score_entries", "compute_seconds", "wait_seconds")}

    def start(self, tensors: list[torch.Tensor]):
        """Send ``tensors`` to the next rank and receive the previous rank's, without waiting.
        Returns a function that waits and gives the received tensors (same shapes)."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        recv = torch.empty_like(flat)
        n, r = self.world_size, self.rank
        works = [dist.isend(flat, self._ranks[(r + 1) % n], group=self.group),
                 dist.irecv(recv, self._ranks[(r - 1) % n], group=self.group)]
        self.sent_bytes += flat.numel() * flat.element_size()
        self.sends += 1

        def wait() -> list[torch.Tensor]:
            t0 = time.perf_counter()
            for w in works:
                w.wait()
            self.wait_seconds += time.perf_counter() - t0
            return [x.view_as(t) for x, t in zip(recv.split([t.numel() for t in tensors]), tensors)]
        return wait


def _pairs(comm: RingComm, scheme: str, src: int):
    """(query chunk i, key chunk j, causal?) for this rank's chunks against ``src``'s; a key chunk
    later than the query chunk is skipped (all masked), the same chunk gets the causal mask."""
    mine, theirs = chunk_ids(comm.rank, comm.world_size, scheme), chunk_ids(src, comm.world_size, scheme)
    return [(i, j, qc == kc) for i, qc in enumerate(mine) for j, kc in enumerate(theirs) if kc <= qc]


def _scores(q, k, causal: bool):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return s


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, comm, scheme):
        p, r, nq = comm.world_size, comm.rank, len(chunk_ids(0, comm.world_size, scheme))
        qs = q.chunk(nq, -2)
        out = [torch.zeros_like(x) for x in qs]
        lse = [torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype) for x in qs]
        kv = [k, v]
        for step in range(p):
            wait = comm.start(kv) if step < p - 1 else None       # the next block moves meanwhile
            t0 = time.perf_counter()
            ks, vs = kv[0].chunk(nq, -2), kv[1].chunk(nq, -2)
            for i, j, causal in _pairs(comm, scheme, (r - step) % p):
                s = _scores(qs[i], ks[j], causal)
                blk = s.logsumexp(-1)
                new = torch.logaddexp(lse[i], blk)
                out[i] = (out[i] * (lse[i] - new).exp()[..., None]
                          + ((s - blk[..., None]).exp() @ vs[j]) * (blk - new).exp()[..., None])
                lse[i] = new
                comm.score_entries += s.numel()
            comm.compute_seconds += time.perf_counter() - t0
            if wait is not None:
                kv = wait()
        out, lse = torch.cat(out, -2), torch.cat(lse, -1)
        ctx.comm, ctx.scheme = comm, scheme
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        comm, scheme = ctx.comm, ctx.scheme
        p, r, nq = comm.world_size, comm.rank, len(chunk_ids(0, comm.world_size, scheme))
        delta = (dout * out).sum(-1)          # rowsum(dO ∘ O), the softmax backward's correction
        qs, dos, ds_, ls = q.chunk(nq, -2), dout.chunk(nq, -2), delta.chunk(nq, -1), lse.chunk(nq, -1)
        dq = [torch.zeros_like(x) for x in qs]
        kv, dkv = [k, v], [torch.zeros_like(k), torch.zeros_like(v)]
        for step in range(p):
            wait = comm.start(kv) if step < p - 1 else None
            t0 = time.perf_counter()
            ks, vs = kv[0].chunk(nq, -2), kv[1].chunk(nq, -2)
            dks, dvs = list(dkv[0].chunk(nq, -2)), list(dkv[1].chunk(nq, -2))
            for i, j, causal in _pairs(comm, scheme, (r - step) % p):
                prob = (_scores(qs[i], ks[j], causal) - ls[i][..., None]).exp()
                dvs[j] = dvs[j] + prob.transpose(-2, -1) @ dos[i]
                dscore = prob * (dos[i] @ vs[j].transpose(-2, -1) - ds_[i][..., None]) / math.sqrt(q.size(-1))
                dq[i] = dq[i] + dscore @ ks[j]
                dks[j] = dks[j] + dscore.transpose(-2, -1) @ qs[i]
                comm.score_entries += prob.numel()
            comm.compute_seconds += time.perf_counter() - t0
            dkv = [torch.cat(dks, -2), torch.cat(dvs, -2)]
            if p > 1:                                  # the gradients follow their block home
                wait_grad = comm.start(dkv)
                kv = wait() if wait is not None else kv
                dkv = wait_grad()
        return torch.cat(dq, -2), dkv[0], dkv[1], None, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, comm: RingComm,
                   scheme: str = "contiguous") -> torch.Tensor:
    """Causal attention of this rank's queries over the whole sequence, by ring attention.

    ``q``, ``k``, ``v``: (batch, heads, s/p, head_dim), this rank's part of the sequence as
    :func:`split_sequence` cuts it with the same ``scheme`` (a (s/p, head_dim) tensor works too).
    Returns this rank's part of the output; differentiable (the backward is a second ring)."""
    choice("scheme", scheme, SCHEMES)
    return _RingAttention.apply(q, k, v, comm, scheme)


class ContextParallelAttention(torch.nn.Module):
    """A ``model.CausalSelfAttention`` (global attention) whose input is this rank's part of the
    sequence: its own projections, ring attention in between. Shares ``attn``'s parameters."""

    def __init__(self, attn: torch.nn.Module, comm: RingComm, scheme: str = "contiguous") -> None:
        super().__init__()
        if attn.window is not None:
            raise ValueError(f"window={attn.window}: ring attention here is for global causal attention")
        self.qkv, self.proj, self.n_heads, self.comm = attn.qkv, attn.proj, attn.n_heads, comm
        self.scheme = choice("scheme", scheme, SCHEMES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = (t.view(B, L, self.n_heads, D // self.n_heads).transpose(1, 2) for t in self.qkv(x).split(D, dim=2))
        y = ring_attention(q, k, v, self.comm, self.scheme)
        return self.proj(y.transpose(1, 2).reshape(B, L, D))


class ContextParallelGPT(torch.nn.Module):
    """A ``model.GPT`` (deep-copied) that takes this rank's part of every sequence.

    ``forward(idx, targets=None)`` with ``idx`` (b, s/p) = ``split_sequence(full, rank, p, scheme,
    dim=1)``: the positions are that part's, attention is ring attention over ``comm``'s group.
    The loss is the mean over this rank's tokens; every weight's gradient is partial, so call
    :meth:`average_grads` (an all-reduce over the group, as data parallelism does) before stepping.
    Unlike data parallelism, the ranks share each *sequence*: CP raises the number of GPUs past
    chapter 4's floor DP·s ≤ B without needing more sequences per batch."""

    def __init__(self, gpt: torch.nn.Module, comm: RingComm, scheme: str = "contiguous") -> None:
        super().__init__()
        self.gpt, self.comm, self.scheme = copy.deepcopy(gpt), comm, choice("scheme", scheme, SCHEMES)
        for block in self.gpt.blocks:
            block.attn = ContextParallelAttention(block.attn, comm, scheme)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        p, r = self.comm.world_size, self.comm.rank
        positions = split_sequence(torch.arange(idx.shape[1] * p), r, p, self.scheme, dim=0)
        g = self.gpt
        x = g.tok(idx) + g.pos(positions)
        for block in g.blocks:
            x = block(x)
        logits = g.head(g.ln_f(x))
        if targets is None:
            return logits
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def average_grads(self) -> None:
        """Average every gradient over the group (equal token counts per rank: the global mean)."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.comm.group)
        for g, new in zip(grads, (flat / self.comm.world_size).split([g.numel() for g in grads])):
            g.copy_(new.view_as(g))
