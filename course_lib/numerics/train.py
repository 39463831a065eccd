"""Low-precision weights in a real training run: round-to-nearest versus stochastic rounding.

When the weights themselves live on a BF16 grid, an Adam update smaller than half an ulp of the
weight rounds back to the old value: every step, in the same direction, a bias that stalls
training. Stochastic rounding keeps the expected value of every update. ``train_low_precision``
trains the course's tiny GPT three ways (FP32 reference, nearest, stochastic) and counts the
updates that vanished, using ``numerics.stochastic_round``.
"""
from __future__ import annotations

import torch

from .._validate import choice, positive_int
from ..model import GPT, GPTConfig
from . import resolve_dtype, stochastic_round

__all__ = ["train_low_precision"]


def _counting_batch(vocab: int, seq_len: int, batch: int, gen: torch.Generator):
    """Sequences that count up from a random start in steps of 1, 2 or 3 (set by the start)."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    idx = (start + (1 + start % 3) * torch.arange(seq_len + 1)) % vocab
    return idx[:, :-1], idx[:, 1:]


def train_low_precision(rounding: str, *, steps: int = 150, lr: float = 1e-3,
                        dtype: str | torch.dtype = "bf16", seed: int = 0) -> dict:
    """Train the course's tiny GPT with Adam where the weights live on the ``dtype`` grid.

    ``rounding="fp32"`` keeps FP32 weights (the reference); ``"nearest"`` rounds every updated
    weight to ``dtype`` (round-to-nearest: updates smaller than half an ulp vanish, every step,
    in the same direction — a bias); ``"stochastic"`` rounds it stochastically (unbiased).
    Gradients and Adam's state stay in FP32, so only the weight update's rounding differs.
    Returns per-step ``losses`` and ``lost_fraction``: the share of nonzero updates that left
    the stored weight unchanged.
    """
    rounding = choice("rounding", rounding, ("fp32", "nearest", "stochastic"))
    steps = positive_int("steps", steps)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1:
        raise ValueError(f"lr must be in (0, 1), got {lr!r}")
    dt = resolve_dtype(dtype)
    model = GPT(GPTConfig(vocab_size=64, seq_len=32, n_layers=1, n_heads=2, d_model=32), seed=seed)
    data_gen = torch.Generator().manual_seed(seed + 1)
    round_gen = torch.Generator().manual_seed(seed + 2)
    params = list(model.parameters())
    if rounding != "fp32":
        with torch.no_grad():
            for p in params:
                p.copy_(p.to(dt).float())
    opt = torch.optim.Adam(params, lr=lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # matrices this small: extra threads only spin (10× slower on 2 cores)
    try:
        losses, lost, moved = _train_loop(model, opt, params, rounding, dt, steps, data_gen, round_gen)
    finally:
        torch.set_num_threads(threads)
    return {"losses": losses, "lost_fraction": lost / moved if moved else 0.0}


def _train_loop(model, opt, params, rounding, dt, steps, data_gen, round_gen):
    losses, lost, moved = [], 0, 0
    for _ in range(steps):
        x, y = _counting_batch(64, 32, 16, data_gen)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in params]
        opt.step()
        if rounding != "fp32":
            with torch.no_grad():
                for p, b in zip(params, before):
                    q = p.to(dt) if rounding == "nearest" else stochastic_round(p, dt, round_gen)
                    q = q.float()
                    moved += int((p != b).sum())
                    lost += int(((q == b) & (p != b)).sum())
                    p.copy_(q)
        losses.append(float(loss.detach()))
    return losses, lost, moved
