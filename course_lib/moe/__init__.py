"""Mixture-of-experts feed-forward layers, their routers, and the capacity arithmetic behind them.

A router scores every token against every expert (``logits``, shape (B, S, E)) and decides which
expert(s) process which token. Two families, and why they differ for causality:

* **token choice** (Switch, arXiv 2101.03961; GShard, arXiv 2006.16668): each token picks its
  top-k experts. With no capacity limit the decision for token n uses token n alone. With a
  capacity C per expert the overflow is *dropped* (the token skips the layer through the
  residual), and who is dropped depends on the priority order over the routing group:
  ``"position"`` (first come, first served; a token's k choices together), ``"rank"`` (GShard:
  every first choice before any second choice) or ``"score"`` (highest router probability first,
  the batch-prioritised routing of V-MoE, arXiv 2106.05974).
* **expert choice** (Zhou et al., arXiv 2202.09368): each expert picks its top-C tokens of the
  group. Perfect balance by construction, but whether token n is picked depends on every other
  token in the group, future ones included.

The routing group is ``"sequence"`` (each sequence routes alone) or ``"batch"`` (all B·S tokens
compete, flattened row-major as in Switch). Routers are pure functions returning a ``Routing``;
``MoE`` is an ``nn.Module`` with ``forward(x) -> y`` that stores ``aux_loss`` and ``stats`` on itself
so it drops into ``course_lib.model.Block`` in place of the dense MLP (``moe_train`` builds and
trains the tiny MoE GPT).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Iterable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .._validate import _show, calculator, choice, positive, positive_int

__all__ = ["expert_capacity", "dropped_tokens", "expected_drop_fraction", "Routing", "token_choice",
           "expert_choice", "mask_router", "switch_aux_loss", "MoE"]


# ----------------------------------------------------------------------------- calculators
_MAX_TERMS = 10 ** 7   # expected_drop_fraction's exact sum holds an (E, C) array: bounded


@calculator
def expert_capacity(n_tokens: int, n_experts: int, capacity_factor: float, top_k: int = 1) -> int:
    """Slots per expert: ⌈k · T · CF / E⌉ (Switch eq. 3, times k for top-k routing).

    ``n_tokens`` is the size of the routing group (a sequence, or the whole batch). Rounded up (as
    DeepSpeed-MoE does), so CF = 1 with perfectly balanced routing never drops a token.
    """
    t = positive_int("n_tokens", n_tokens)
    e = positive_int("n_experts", n_experts)
    cf = positive("capacity_factor", capacity_factor)
    k = positive_int("top_k", top_k)
    if k > e:
        raise ValueError(f"top_k must be <= n_experts={e}, got {top_k!r}")
    x = k * t * cf / e
    r = round(x)
    return int(r) if abs(x - r) <= 1e-9 * max(1.0, x) else math.ceil(x)


@calculator
def dropped_tokens(expert_counts: Iterable[int], capacity: int) -> int:
    """Token-expert assignments that overflow: Σ_e max(0, count_e − capacity)."""
    cap = positive_int("capacity", capacity, minimum=0)
    if isinstance(expert_counts, (str, bytes)) or not hasattr(expert_counts, "__iter__"):
        raise ValueError(f"expert_counts must be a sequence of counts, one per expert, got {expert_counts!r}")
    items = expert_counts.tolist() if hasattr(expert_counts, "tolist") else list(expert_counts)
    if not isinstance(items, list) or not items:
        raise ValueError(f"expert_counts must be a non-empty 1-D sequence, got {_show(expert_counts)}")
    # element by element, before numpy sees them: a list nested 900 deep is one bad element,
    # not numpy's "maximum number of dimensions" error
    counts = [positive_int(f"expert_counts[{i}]", x, minimum=0) for i, x in enumerate(items)]
    return sum(max(0, c - cap) for c in counts)


@calculator
def expected_drop_fraction(n_tokens: int, n_experts: int, capacity_factor: float, top_k: int = 1,
                           load: Iterable[float] | None = None) -> float:
    """Expected share of the k·T assignments dropped if tokens route independently.

    ``load[e]`` is the share of assignments that go to expert e (uniform by default). Expert e then
    receives N_e ~ Binomial(T, k·load[e]) tokens and drops E[max(0, N_e − C)] of them; the sum over
    experts is exact by linearity of expectation. Real tokens are not independent, so a measured
    drop rate above this number means the router's choices are correlated across tokens.
    """
    from scipy.stats import binom
    cap = expert_capacity(n_tokens, n_experts, capacity_factor, top_k)
    t, e, k = int(n_tokens), int(n_experts), int(top_k)
    if cap * e > _MAX_TERMS:
        raise ValueError(f"n_tokens={n_tokens!r}, capacity_factor={capacity_factor!r}: the exact sum needs "
                         f"{cap * e:.3g} terms (capacity x n_experts), more than {_MAX_TERMS:,}")
    try:
        p = np.full(e, 1.0 / e) if load is None else np.asarray(list(load), dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"load must be {e} non-negative shares summing to 1, got {load!r}") from None
    if p.shape != (e,) or np.any(p < 0) or not math.isclose(p.sum(), 1.0, rel_tol=1e-6):
        raise ValueError(f"load must be {e} non-negative shares summing to 1, got {p.tolist()!r}")
    q = np.clip(k * p, 0.0, 1.0)
    n = np.arange(cap)
    # E[max(0, N − C)] = E[N] − C + Σ_{n<C} (C − n) P(N = n)
    over = t * q - cap + ((cap - n)[None, :] * binom.pmf(n[None, :], t, q[:, None])).sum(1)
    return float(np.clip(over, 0, None).sum() / (k * t))


# ----------------------------------------------------------------------------- routers
PRIORITIES = ("position", "rank", "score")


@dataclass
class Routing:
    """What a router decided for logits of shape (B, S, E).

    ``kept[b, s, e]`` marks the (token, expert) pairs that are processed; ``combine`` holds their
    gate weights (zero elsewhere); ``assigned`` marks the pairs the router wanted before any
    capacity limit; ``capacity`` is the per-expert slot count used (None = unlimited).
    """

    kept: torch.Tensor
    combine: torch.Tensor
    assigned: torch.Tensor
    capacity: int | None

    def stats(self) -> dict:
        """Load and drops: counts per expert before/after the limit, and summary shares."""
        wanted = self.assigned.sum((0, 1)).float()
        kept = self.kept.sum((0, 1)).float()
        per_token = self.kept.sum(-1)
        n_assign = float(self.assigned.sum())
        return {"wanted": wanted.tolist(), "kept": kept.tolist(),
                "drop_fraction": float((self.assigned & ~self.kept).sum()) / max(n_assign, 1.0),
                "imbalance": float(wanted.max() / wanted.mean().clamp_min(1e-12)),
                "unprocessed_fraction": float((per_token == 0).float().mean()),
                "experts_per_token": float(per_token.float().mean())}


def _groups(logits: torch.Tensor, group: str) -> torch.Tensor:
    """(B, S, E) → (G, T, E): one routing group per sequence, or the whole batch row-major."""
    choice("group", group, ("sequence", "batch"))
    if logits.dim() != 3:
        raise ValueError(f"logits must have shape (B, S, E), got {tuple(logits.shape)}")
    return logits if group == "sequence" else logits.reshape(1, -1, logits.size(-1))


def token_choice(logits: torch.Tensor, top_k: int = 1, capacity_factor: float | None = None,
                 group: str = "sequence", priority: str = "position",
                 capacity_tokens: int | None = None) -> Routing:
    """Each token sends itself to its top-k experts (gate = softmax probability).

    With ``capacity_factor`` set, each expert keeps at most ``expert_capacity(T, E, CF, k)``
    assignments per group, T being the group size or ``capacity_tokens`` if given (e.g. the
    training length, so a prefix gets the same slots as in training). Assignments are served in
    ``priority`` order: ``"position"`` (token by token, each token's choices in rank order),
    ``"rank"`` (all first choices by position, then all second choices, …) or ``"score"`` (all
    first choices by descending probability, then second choices, …). The rest are dropped.
    """
    B, S, E = logits.shape
    k = positive_int("top_k", top_k)
    choice("priority", priority, PRIORITIES)
    g = _groups(logits, group)
    G, T, _ = g.shape
    probs = g.float().softmax(-1)
    top_v, top_i = probs.topk(k, dim=-1)                                     # (G, T, k)
    assigned = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, top_i, True)
    if capacity_factor is None:
        combine = torch.zeros_like(probs).scatter_(-1, top_i, top_v)
        return Routing(assigned.reshape(B, S, E), combine.reshape(B, S, E), assigned.reshape(B, S, E), None)
    cap = expert_capacity(capacity_tokens or T, E, capacity_factor, k)
    a_e = top_i.transpose(1, 2).reshape(G, k * T)                             # rank-major layout
    a_v = top_v.transpose(1, 2).reshape(G, k * T)
    rank = torch.arange(k).repeat_interleave(T).expand(G, -1)
    pos = torch.arange(T).repeat(k).expand(G, -1)
    key = {"position": pos * k + rank, "rank": rank * T + pos,
           "score": rank * 2.0 + (1.0 - a_v)}[priority]
    order = key.argsort(dim=1, stable=True)                                  # serve in this order
    e_sorted = a_e.gather(1, order)
    slot = (F.one_hot(e_sorted, E).cumsum(1).gather(2, e_sorted[..., None])[..., 0]) - 1
    keep = torch.zeros_like(slot, dtype=torch.bool).scatter_(1, order, slot < cap)
    keep = keep.reshape(G, k, T).transpose(1, 2)                             # (G, T, k)
    combine = torch.zeros_like(probs).scatter_(-1, top_i, top_v * keep)
    kept = torch.zeros_like(assigned).scatter_(-1, top_i, keep)
    return Routing(kept.reshape(B, S, E), combine.reshape(B, S, E), assigned.reshape(B, S, E), cap)


def expert_choice(logits: torch.Tensor, capacity_factor: float = 1.0, top_k: int = 1,
                  group: str = "sequence", capacity_tokens: int | None = None) -> Routing:
    """Each expert takes the top-C tokens of its group, C = expert_capacity(T, E, CF, k) with T the
    group size (or ``capacity_tokens``), at most T.

    Gates are the softmax over experts (Zhou et al. eq. 1). Every expert is exactly full, so there
    is no imbalance; but a token may be taken by no expert (it passes through the residual) and
    whether it is taken depends on the scores of all other tokens in the group.
    """
    B, S, E = logits.shape
    g = _groups(logits, group)
    G, T, _ = g.shape
    cap = min(expert_capacity(capacity_tokens or T, E, capacity_factor, top_k), T)
    probs = g.float().softmax(-1)
    top_v, top_i = probs.topk(cap, dim=1)                                    # (G, C, E)
    combine = torch.zeros_like(probs).scatter_(1, top_i, top_v)
    kept = torch.zeros_like(probs, dtype=torch.bool).scatter_(1, top_i, True)
    return Routing(kept.reshape(B, S, E), combine.reshape(B, S, E), torch.ones(B, S, E, dtype=torch.bool), cap)


def mask_router(kept_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], Routing]:
    """Turn ``kept_fn(logits) -> bool (B, S, E)`` (which pairs are processed) into a router for
    ``MoE``; gates are the softmax probabilities of the kept pairs. For exercises: write only the
    decision, reuse the layer."""
    def route(logits: torch.Tensor) -> Routing:
        kept = torch.as_tensor(kept_fn(logits.detach())).bool()
        if kept.shape != logits.shape:
            raise ValueError(f"the router returned a mask of shape {tuple(kept.shape)}, "
                             f"expected {tuple(logits.shape)}")
        return Routing(kept, logits.float().softmax(-1) * kept, kept, None)
    return route


def switch_aux_loss(logits: torch.Tensor, assigned: torch.Tensor) -> torch.Tensor:
    """Switch load-balancing loss E · Σ_e f_e · P_e (arXiv 2101.03961 eq. 4–6).

    f_e is the share of (pre-capacity) assignments that go to expert e, P_e the mean router
    probability of e. Equals 1 for perfectly balanced routing; only P_e carries a gradient.
    """
    E = logits.size(-1)
    probs = logits.float().softmax(-1).reshape(-1, E)
    f = assigned.reshape(-1, E).float()
    f = f.sum(0) / f.sum()
    return E * (f * probs.mean(0)).sum()


# ----------------------------------------------------------------------------- the layer
class _ExpertLinear(nn.Module):
    """E independent weight matrices (E, d_in, d_out); no bias."""

    def __init__(self, n_experts: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_experts, d_in, d_out) * 0.02)


class MoE(nn.Module):
    """MoE feed-forward: router + ``n_experts`` GELU MLPs; ``forward(x) -> y`` with x, y (B, S, D).

    ``router`` is ``"token"`` or ``"expert"`` or any callable ``logits -> Routing``. Dropped /
    unpicked tokens get y = 0, so inside a pre-norm block they pass through the residual unchanged.
    After each forward, ``aux_loss`` (Switch loss, a tensor) and ``stats`` (dict) describe the call,
    and ``logits`` holds the detached router logits. ``shared_expert`` adds a dense MLP every token
    passes through (as in Llama 4 and DeepSeek-MoE).
    """

    def __init__(self, d_model: int, d_ff: int, n_experts: int, top_k: int = 1,
                 router: str | Callable[[torch.Tensor], Routing] = "token",
                 capacity_factor: float | None = None, group: str = "sequence",
                 priority: str = "position", capacity_tokens: int | None = None,
                 shared_expert: bool = False) -> None:
        super().__init__()
        self.d_model = positive_int("d_model", d_model)
        self.n_experts = positive_int("n_experts", n_experts)
        self.top_k = positive_int("top_k", top_k)
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k must be <= n_experts={n_experts}, got {top_k!r}")
        if not callable(router):
            choice("router", router, ("token", "expert"))
        if capacity_factor is not None:
            positive("capacity_factor", capacity_factor)
        choice("group", group, ("sequence", "batch"))
        choice("priority", priority, PRIORITIES)
        if capacity_tokens is not None:
            positive_int("capacity_tokens", capacity_tokens)
        self.router_kind, self.capacity_factor, self.group, self.priority = router, capacity_factor, group, priority
        self.capacity_tokens = capacity_tokens
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.up = _ExpertLinear(n_experts, d_model, positive_int("d_ff", d_ff))
        self.down = _ExpertLinear(n_experts, d_ff, d_model)
        self.shared = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model)) if shared_expert else None
        self.aux_loss = torch.zeros(())
        self.logits: torch.Tensor | None = None
        self.routing: Routing | None = None

    @property
    def stats(self) -> dict:
        """Load and drop statistics of the last forward (see ``Routing.stats``)."""
        return self.routing.stats() if self.routing is not None else {}

    def route(self, logits: torch.Tensor) -> Routing:
        """Apply this layer's routing rule to router logits (B, S, E)."""
        if callable(self.router_kind):
            return self.router_kind(logits)
        if self.router_kind == "expert":
            return expert_choice(logits, self.capacity_factor or 1.0, self.top_k, self.group, self.capacity_tokens)
        return token_choice(logits, self.top_k, self.capacity_factor, self.group, self.priority,
                            self.capacity_tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        logits = self.router(x)
        r = self.route(logits)
        self.aux_loss = switch_aux_loss(logits, r.assigned)
        self.logits, self.routing = logits.detach(), Routing(r.kept, r.combine.detach(), r.assigned, r.capacity)
        flat, gates = x.reshape(-1, D), r.combine.reshape(-1, self.n_experts).to(x.dtype)
        kept = r.kept.reshape(-1, self.n_experts)
        y = torch.zeros_like(flat)
        for e in range(self.n_experts):          # gather the expert's tokens, run it, scatter back
            idx = kept[:, e].nonzero().squeeze(1)
            if idx.numel():
                h = F.gelu(flat[idx] @ self.up.weight[e]) @ self.down.weight[e]
                y.index_add_(0, idx, h * gates[idx, e, None])
        y = y.reshape(B, S, D)
        return y + self.shared(x) if self.shared is not None else y

    def forward_dense(self, x: torch.Tensor) -> torch.Tensor:
        """Reference: every expert on every token, weighted by the combine tensor (einsum form)."""
        r = self.route(self.router(x))
        h = torch.einsum("bsd,edf->bsef", x, self.up.weight)
        y = torch.einsum("bsef,efd,bse->bsd", F.gelu(h), self.down.weight, r.combine.to(x.dtype))
        return y + self.shared(x) if self.shared is not None else y
