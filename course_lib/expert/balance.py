"""Load balancing without an auxiliary loss: a per-expert bias that steers top-k selection only.

The Switch / GShard recipe (Fedus et al., arXiv 2101.03961 eq. 4–6; Lepikhin et al., arXiv
2006.16668) adds α · E · Σ_e f_e · P_e to the loss (``course_lib.moe.switch_aux_loss``): f_e the
share of assignments expert e received, P_e its mean router probability. Its gradient reaches the
router through P_e only, and it competes with the language-model loss for the same parameters: too
small an α does not balance, too large an α costs quality.

Wang et al. (arXiv 2408.15664), adopted by DeepSeek-V3 (arXiv 2412.19437 §2.1.2, eq. 16), balance
with no gradient at all. Each expert carries a bias b_e that is **added to the routing score for
choosing the top-k experts and for nothing else**: the gate that weighs the expert's output is the
unbiased score. After every training step each bias moves by a fixed γ against its expert's load
error:

    b_e ← b_e + γ · sign(c̄ − c_e)

with c_e the tokens routed to expert e during the step and c̄ their mean over experts: an overloaded
expert becomes harder to choose, an idle one easier. The step size γ does not depend on how large
the error is (DeepSeek-V3: γ = 0.001 for most of training, 0 for the last 500B tokens).

:class:`BiasBalancedRouter` is that router as a module; it plugs into ``course_lib.moe.MoE`` (a
``router`` callable returning a ``Routing``), and :func:`bias_balance` installs one per MoE layer of
a model. Under data or expert parallelism every rank must apply the same update: sum the loads over
the ranks first (``update(loads)`` with the all-reduced counts).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..moe import MoE, Routing, dropped_tokens, expert_capacity
from .._validate import choice, positive, positive_int

__all__ = ["BiasBalancedRouter", "bias_balance", "bias_update", "load_imbalance", "drop_share"]


def bias_update(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    """The auxiliary-loss-free update rule: ``bias + gamma · sign(mean(load) − load)``.

    An expert exactly at the mean load keeps its bias (sign 0). Returns a new tensor."""
    load = torch.as_tensor(load, dtype=torch.float64)
    if load.shape != bias.shape:
        raise ValueError(f"load must have one count per expert, shape {tuple(bias.shape)}, got {tuple(load.shape)}")
    return bias + positive("gamma", gamma, allow_zero=True) * torch.sign(load.mean() - load).to(bias.dtype)


class BiasBalancedRouter(nn.Module):
    """Top-k token choice where a per-expert ``bias`` (a buffer, not a parameter) steers selection.

    ``forward(logits) -> Routing`` for logits (B, S, E): scores s = softmax(logits) (or sigmoid, as
    DeepSeek-V3; then the k selected scores are renormalised to sum to 1, its eq. 13), the experts
    chosen are the top-k of s + bias, their gates the unbiased s. No capacity limit: nothing is
    dropped (DeepSeek-V3 drops no tokens in training). In training mode each forward adds its
    per-expert assignment counts to ``load``; :meth:`update` applies
    b ← b + γ · sign(c̄ − c) to them and clears ``load``. Call it once after each optimizer step.
    """

    def __init__(self, n_experts: int, top_k: int = 1, gamma: float = 1e-3, score: str = "softmax") -> None:
        super().__init__()
        self.n_experts = positive_int("n_experts", n_experts)
        self.top_k = positive_int("top_k", top_k)
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k must be <= n_experts={n_experts}, got {top_k!r}")
        self.gamma = positive("gamma", gamma, allow_zero=True)
        self.score = choice("score", score, ("softmax", "sigmoid"))
        self.register_buffer("bias", torch.zeros(self.n_experts))
        self.register_buffer("load", torch.zeros(self.n_experts))

    def forward(self, logits: torch.Tensor) -> Routing:
        if logits.dim() != 3 or logits.size(-1) != self.n_experts:
            raise ValueError(f"logits must have shape (B, S, {self.n_experts}), got {tuple(logits.shape)}")
        s = logits.float().softmax(-1) if self.score == "softmax" else logits.float().sigmoid()
        top_i = (s.detach() + self.bias).topk(self.top_k, dim=-1).indices      # selection: biased
        gate = s.gather(-1, top_i)                                             # weight: unbiased
        if self.score == "sigmoid":
            gate = gate / gate.sum(-1, keepdim=True)
        assigned = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, top_i, True)
        combine = torch.zeros_like(s).scatter(-1, top_i, gate)
        if self.training:
            self.load += assigned.sum((0, 1)).to(self.load.dtype)
        return Routing(assigned, combine, assigned, None)

    @torch.no_grad()
    def update(self, load: torch.Tensor | None = None) -> torch.Tensor:
        """Move every bias by ±γ against its load error; returns the signs applied.

        ``load`` defaults to the counts gathered since the last update (this process's tokens);
        pass the counts summed over all ranks in a parallel run so every rank moves alike."""
        c = self.load if load is None else torch.as_tensor(load, dtype=torch.float64)
        new = bias_update(self.bias.double(), c, self.gamma)
        signs = torch.sign(new - self.bias.double())
        self.bias.copy_(new.to(self.bias.dtype))
        self.load.zero_()
        return signs


def bias_balance(model: nn.Module, gamma: float = 1e-3, score: str = "softmax") -> list[BiasBalancedRouter]:
    """Give every ``course_lib.moe.MoE`` layer of ``model`` its own :class:`BiasBalancedRouter`
    (in place, keeping the layer's ``top_k``); returns the routers, one per layer, in order."""
    routers = []
    for m in model.modules():
        if isinstance(m, MoE):
            m.router_kind = BiasBalancedRouter(m.n_experts, m.top_k, gamma, score)
            routers.append(m.router_kind)
    if not routers:
        raise ValueError("model has no course_lib.moe.MoE layer to balance")
    return routers


def load_imbalance(counts) -> float:
    """Busiest expert's load over the mean load, max_e c_e / c̄ (1 = balanced, E = collapsed)."""
    c = torch.as_tensor(counts, dtype=torch.float64)
    if c.dim() != 1 or not len(c) or bool((c < 0).any()) or float(c.sum()) <= 0:
        raise ValueError(f"counts must be non-negative counts per expert, not all zero, got {c.tolist()!r}")
    return float(c.max() / c.mean())


def drop_share(counts, capacity_factor: float, top_k: int = 1) -> float:
    """Share of the assignments a capacity limit would drop: Σ_e max(0, c_e − C) / Σ_e c_e with
    C = ``expert_capacity(T, E, CF, k)`` and T = Σ c / k tokens in the group (chapter 8)."""
    c = [int(x) for x in torch.as_tensor(counts).tolist()]
    total = sum(c)
    k = positive_int("top_k", top_k)
    if total % k:
        raise ValueError(f"counts sum to {total}, not a multiple of top_k={k}")
    cap = expert_capacity(total // k, len(c), capacity_factor, k)
    return dropped_tokens(c, cap) / total
