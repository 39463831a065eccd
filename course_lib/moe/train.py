"""The tiny MoE GPT: build it, train it, read its routers, and measure token drops after training.

``moe_gpt`` swaps every block's dense MLP of the course GPT for a ``moe.MoE`` layer; ``train`` is a
bare AdamW loop with the Switch load-balancing loss as an option; ``balance_experiment`` trains a
top-1 token-choice model and routes a validation batch at several capacity factors, beside the
independent-routing theory of ``moe.expected_drop_fraction``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
import torch.nn as nn

from .. import corpus
from .._validate import positive, positive_int
from ..model import GPT
from . import MoE, expected_drop_fraction, switch_aux_loss, token_choice

__all__ = ["moe_gpt", "aux_loss", "train", "router_logits", "drop_curve", "balance_experiment"]


def moe_gpt(cfg, n_experts: int = 4, seed: int = 0, **moe_kwargs):
    """The course's tiny GPT with every block's MLP replaced by an ``MoE(**moe_kwargs)`` layer.

    Parameters are re-initialised from ``seed`` with the GPT's own deterministic scheme.
    """
    model = GPT(cfg, seed=seed)
    for block in model.blocks:
        block.mlp = MoE(cfg.d_model, cfg.ff, n_experts, **moe_kwargs)
    model.reset_parameters(seed)
    return model


def aux_loss(model: nn.Module) -> torch.Tensor:
    """Mean Switch auxiliary loss over the MoE layers of ``model`` (from their last forward)."""
    losses = [m.aux_loss for m in model.modules() if isinstance(m, MoE)]
    return torch.stack(losses).mean() if losses else torch.zeros(())


def train(model: nn.Module, steps: int, batch_size: int = 16, lr: float = 3e-3,
          aux_coef: float = 0.0, seed: int = 0, tokens: torch.Tensor | None = None,
          on_step: Callable[[nn.Module], None] | None = None) -> list[float]:
    """AdamW on next-byte prediction of ``tokens`` (default: the course corpus's training split,
    ``course_lib.corpus``); returns the LM losses. ``aux_coef`` weighs the Switch load-balancing
    loss (0 = off). ``on_step(model)``, if given, runs after every optimizer step, while the MoE
    layers still hold that step's routing (to record loads, or update balancing biases).
    Deliberately bare (constant LR, no clipping): the chapter is about routing."""
    positive_int("steps", steps)
    positive("aux_coef", aux_coef, allow_zero=True)
    tokens = corpus.load().train if tokens is None else tokens
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=positive("lr", lr), weight_decay=0.0)
    seq_len, losses = model.cfg.seq_len, []
    model.train()
    for _ in range(steps):
        x, y = corpus.get_batch(tokens, batch_size, seq_len, gen)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        (loss + aux_coef * aux_loss(model)).backward()
        opt.step()
        if on_step is not None:
            on_step(model)
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def router_logits(model: nn.Module, idx: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` on token ids ``idx`` (B, S); return each MoE layer's router logits (B, S, E)."""
    model(idx)
    return [m.logits for m in model.modules() if isinstance(m, MoE)]


def drop_curve(logits: torch.Tensor, capacity_factors: Iterable[float], top_k: int = 1,
               group: str = "batch", priority: str = "position") -> np.ndarray:
    """Token-choice drop fraction of the given router logits at each capacity factor."""
    return np.array([token_choice(logits, top_k, cf, group, priority).stats()["drop_fraction"]
                     for cf in capacity_factors])


def balance_experiment(cfg, n_experts: int, aux_coef: float, steps: int = 120,
                       capacity_factors: Iterable[float] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0),
                       batch_size: int = 16, seed: int = 0) -> dict:
    """Train a top-1 token-choice MoE GPT (no capacity limit, so training does not depend on CF),
    then route one validation batch (one group of B·S tokens, as in Switch) at each capacity factor.

    Returns per layer the measured drop fractions, the load shares, the imbalance (max/mean load)
    and the auxiliary loss, plus two theories: balanced independent routing, and independent
    routing with the measured load shares (``expected_drop_fraction``).
    """
    cfs = [positive("capacity_factors", cf) for cf in capacity_factors]
    model = moe_gpt(cfg, n_experts, seed=seed, router="token")
    losses = train(model, steps, batch_size, aux_coef=aux_coef, seed=seed)
    x, _ = corpus.get_batch(corpus.load().val, batch_size, cfg.seq_len, torch.Generator().manual_seed(seed + 1))
    T, out = x.numel(), {"drops": [], "theory_load": [], "load": [], "imbalance": [], "aux": []}
    for logits in router_logits(model, x):
        r = token_choice(logits)
        load = (r.assigned.sum((0, 1)).float() / T).tolist()
        out["drops"].append(drop_curve(logits, cfs, group="batch"))
        out["theory_load"].append([expected_drop_fraction(T, n_experts, cf, load=load) for cf in cfs])
        out["load"].append(load)
        out["imbalance"].append(r.stats()["imbalance"])
        out["aux"].append(float(switch_aux_loss(logits, r.assigned)))
    out = {k: np.array(v) for k, v in out.items()}
    out.update(capacity_factors=np.array(cfs), n_tokens=T, n_experts=n_experts, aux_coef=aux_coef,
               theory_balanced=np.array([expected_drop_fraction(T, n_experts, cf) for cf in cfs]),
               final_loss=float(np.mean(losses[-10:])), model=model)
    return out

