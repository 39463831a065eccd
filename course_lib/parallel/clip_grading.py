"""Driver for chapter 4's graded clipping question: a student's sharded clip run on real ranks.

The student writes ``clip_sharded(grads, max_norm, group) -> norm``: ``grads`` is this rank's list
of gradient pieces (together, over the ranks, every element of the model's gradient exactly once),
and the function must scale them, on every rank by the same factor, so that the *global* 2-norm is
at most ``max_norm``, returning that norm — FSDP's ``clip_grad_norm_``. :func:`clip_check_worker`
runs it in fresh processes (the sandbox's, in a graded run) and returns what it produced; the
trusted grader compares with :func:`clip_inputs` clipped by ``torch.nn.utils.clip_grad_norm_``.
"""
from __future__ import annotations

from typing import Any

import torch

from ..model import GPT, GPTConfig

__all__ = ["CONFIG", "clip_inputs", "rank_pieces", "clip_check_worker"]

CONFIG = GPTConfig(vocab_size=32, seq_len=8, n_layers=1, n_heads=2, d_model=16)


def clip_inputs(seed: int) -> torch.Tensor:
    """The whole-batch gradient of a tiny GPT (batch and initialisation from ``seed``), flat."""
    model = GPT(CONFIG, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    batch = torch.randint(0, CONFIG.vocab_size, (4, CONFIG.seq_len + 1), generator=g)
    model(batch[:, :-1], batch[:, 1:])[1].backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def rank_pieces(flat: torch.Tensor, rank: int, world_size: int) -> list[torch.Tensor]:
    """Rank ``rank``'s share of ``flat`` (uneven chunks), cut into three pieces, copied."""
    return [t.clone() for t in flat.tensor_split(world_size)[rank].tensor_split(3)]


def clip_check_worker(ctx, source: str, fn_name: str, seed: int, max_norms: list[float]) -> list[dict]:
    """Call the student's function once per ``max_norms`` entry on fresh pieces; return, per call,
    the norm it returned and the pieces it left (as lists of floats)."""
    namespace: dict[str, Any] = {"__name__": "__student__"}
    exec(compile(source, "<student code>", "exec"), namespace)
    fn = namespace[fn_name]
    flat, out = clip_inputs(seed), []
    for max_norm in max_norms:
        pieces = rank_pieces(flat, ctx.rank, ctx.world_size)
        norm = fn(pieces, max_norm, ctx.group)
        out.append({"norm": float(norm), "values": torch.cat([p.reshape(-1) for p in pieces]).tolist(),
                    "shapes_ok": [p.shape for p in pieces] ==
                                 [p.shape for p in rank_pieces(flat, ctx.rank, ctx.world_size)]})
    return out
