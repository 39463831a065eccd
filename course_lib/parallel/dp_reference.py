"""What the data-parallel lab's runs are checked against: the demo GPT, its batches and the answers.

``DEMO_CONFIG`` is the tiny GPT every strategy trains, ``make_batches`` the fixed global batches
its ranks slice, ``STRATEGIES`` the strategies' names and ``ADAMW`` the optimizer settings they
all use. ``reference_run`` trains the whole batch in one process (the losses, first-step
gradients and final weights every strategy must reproduce); ``expected_bytes_per_step`` is the
theory (``course_lib.comm``) for the bytes each strategy sends. The runs themselves are
``course_lib.parallel.labs``.
"""
from __future__ import annotations

from typing import Any

import torch

from ..model import GPT, GPTConfig

__all__ = ["DEMO_CONFIG", "STRATEGIES", "ADAMW", "root_params", "expected_bytes_per_step", "make_batches",
           "reference_run"]

DEMO_CONFIG = dict(vocab_size=256, seq_len=64, n_layers=4, n_heads=4, d_model=64)
STRATEGIES = ("dp", "dp_overlap", "zero1", "zero2", "fsdp", "torch_ddp", "torch_fsdp2")
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def root_params(config: dict | None = None) -> int:
    """Parameters of the demo GPT outside its blocks (embeddings, final norm; head tied)."""
    model = GPT(GPTConfig(**(config or DEMO_CONFIG)))
    return model.n_params() - sum(p.numel() for p in model.blocks.parameters())


def expected_bytes_per_step(strategy: str, n_params: int, n: int, element_size: int = 4,
                            root: int = 0, reshard_root: bool = True) -> float:
    """Theory for what :func:`train_worker` measures, per rank per step (course_lib.comm formulas).

    ``torch_fsdp2`` on gloo differs from the textbook in two ways the lab measures: FSDP2 keeps the
    root's parameters after forward (no backward re-gather of the ``root`` parameters), and gloo's
    reduce-scatter is an all-reduce followed by taking one chunk (twice the ring bytes; PyTorch
    PR #118911). ``torch_ddp`` is plain DP.
    """
    from .. import comm as cm
    k = (n - 1) / n * element_size
    if strategy in ("dp", "dp_overlap", "torch_ddp"):
        return cm.dp_bytes_per_step(n_params, n, element_size)
    if strategy in ("zero1", "zero2"):
        return cm.zero_bytes_per_step(n_params, n, int(strategy[-1]), element_size)
    if strategy == "fsdp":
        return cm.fsdp_bytes_per_step(n_params, n, element_size) - (0 if reshard_root else k * root)
    if strategy == "torch_fsdp2":
        return k * (n_params + (n_params - root) + 2 * n_params)
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")


def make_batches(cfg: GPTConfig, global_batch: int, steps: int, seed: int) -> torch.Tensor:
    """``steps`` global batches of token ids, shape (steps, global_batch, seq_len + 1)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (steps, global_batch, cfg.seq_len + 1), generator=gen)


def _loss(model, batch: torch.Tensor) -> torch.Tensor:
    return model(batch[:, :-1], batch[:, 1:])[1]


def reference_run(config: dict | None = None, global_batch: int = 8, steps: int = 3,
                  seed: int = 0, lr: float = ADAMW["lr"]) -> dict[str, Any]:
    """One process, whole batch: losses, first-step gradients and final weights by name."""
    cfg = GPTConfig(**(config or DEMO_CONFIG))
    model = GPT(cfg, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), **{**ADAMW, "lr": lr})
    batches = make_batches(cfg, global_batch, steps, seed)
    losses, grads0 = [], {}
    for i in range(steps):
        loss = _loss(model, batches[i])
        loss.backward()
        if i == 0:
            grads0 = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "grads0": grads0,
            "params": {k: p.detach().clone() for k, p in model.named_parameters()}}
