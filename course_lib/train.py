"""A minimal, readable training loop for the course's tiny GPT on the course corpus.

What a real pretraining loop does, and nothing more: AdamW (decoupled weight decay on matrices
only), linear warmup then cosine decay to ``min_lr_ratio`` of the peak **over exactly the run's
token budget** (Hoffmann et al. 2022 showed that a cosine cycle longer than the run biases a
scaling-law fit), gradient clipping, and a validation loss on a fixed set of held-out batches.

``train(model_cfg, cfg, split)`` returns a ``History`` (steps, tokens, train/val losses, the
6·N·D compute and the wall time) that other chapters reuse for their own experiments.
Everything random (initialisation, batch order, evaluation batches) follows from ``cfg.seed``.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from . import corpus as corpus_mod
from ._validate import fraction, positive, positive_int
from .model import GPT, GPTConfig

__all__ = ["TrainConfig", "History", "lr_at", "evaluate", "clip_gradients", "train"]


@dataclass(frozen=True)
class TrainConfig:
    """How to train: the token budget ``n_tokens`` (rounded to whole steps), the batch shape and
    the optimiser. ``eval_every`` is in steps (0 = only at the end);
    ``eval_batches=None`` scores the whole validation split (see ``evaluate``)."""

    n_tokens: int
    batch_size: int = 16
    lr: float = 3e-3
    warmup_frac: float = 0.05
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 0
    eval_batches: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("n_tokens", self.n_tokens)
        positive_int("batch_size", self.batch_size)
        positive("lr", self.lr)
        if positive("warmup_frac", self.warmup_frac, allow_zero=True) >= 1:
            raise ValueError(f"warmup_frac must be < 1, got {self.warmup_frac!r}")
        fraction("min_lr_ratio", self.min_lr_ratio)
        positive("weight_decay", self.weight_decay, allow_zero=True)
        positive("grad_clip", self.grad_clip)
        positive_int("eval_every", self.eval_every, minimum=0)
        if self.eval_batches is not None:
            positive_int("eval_batches", self.eval_batches)

    def steps(self, seq_len: int) -> int:
        """Optimiser steps needed to consume ``n_tokens`` (at least one)."""
        return max(1, round(self.n_tokens / (self.batch_size * seq_len)))


@dataclass
class History:
    """What a run measured. ``tokens`` counts training tokens actually consumed (steps × batch)."""

    n_params: int
    steps: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def final_val_loss(self) -> float:
        return self.val_loss[-1]

    @property
    def n_tokens(self) -> int:
        return self.tokens[-1] if self.tokens else 0

    @property
    def compute(self) -> float:
        """Training compute by the 6·N·D convention, in FLOP."""
        return 6.0 * self.n_params * self.n_tokens

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(step: int, total_steps: int, peak: float, warmup_frac: float = 0.05,
          min_lr_ratio: float = 0.1) -> float:
    """Learning rate at ``step`` (0-based): linear warmup over ``warmup_frac`` of the run, then a
    half-cosine from ``peak`` down to ``min_lr_ratio·peak`` at the last step."""
    total = positive_int("total_steps", total_steps)
    step = positive_int("step", step, minimum=0)
    warm = max(1, round(warmup_frac * total)) if warmup_frac > 0 else 0
    if step < warm:
        return peak * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - 1 - warm))
    return peak * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model: GPT, data: torch.Tensor, batch_size: int = 16, n_batches: int | None = None,
             seed: int = 1234) -> float:
    """Mean cross-entropy (nats per token = per byte) of ``model`` on ``data``.

    ``n_batches=None`` scores every non-overlapping ``seq_len`` window of ``data`` once, in
    order (the exact, noise-free number to compare models with); an integer instead draws that
    many random batches from a generator seeded with ``seed`` (cheaper, same for every model).
    """
    batch_size = positive_int("batch_size", batch_size)
    seq_len = model.cfg.seq_len
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    if n_batches is None:
        n_win = (data.numel() - 1) // seq_len
        if n_win < 1:
            raise ValueError(f"data of {data.numel()} tokens is shorter than seq_len={seq_len}")
        x_all = data[: n_win * seq_len].long().view(n_win, seq_len)
        y_all = data[1: n_win * seq_len + 1].long().view(n_win, seq_len)
        for i in range(0, n_win, batch_size):
            x, y = x_all[i: i + batch_size], y_all[i: i + batch_size]
            total += model(x, y)[1].item() * x.numel()
            count += x.numel()
    else:
        gen = torch.Generator().manual_seed(seed)
        for _ in range(positive_int("n_batches", n_batches)):
            x, y = corpus_mod.get_batch(data, batch_size, seq_len, gen)
            total += model(x, y)[1].item() * x.numel()
            count += x.numel()
    model.train(was_training)
    return total / count


def clip_gradients(model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> torch.Tensor:
    """Clip the gradients by their global 2-norm and return it (before clipping).

    When the gradients are spread over ranks, only their owner knows the global norm:
    ``optimizer.clip_grad_norm_`` (course_lib's ZeroOptimizer) or ``model.clip_grad_norm_``
    (course_lib's FSDP and DataParallel, PyTorch's FSDP1) are used when they exist; otherwise
    ``torch.nn.utils.clip_grad_norm_`` over ``model.parameters()``, right when every gradient is
    whole in ``p.grad`` (one process, DDP, FSDP2's DTensors)."""
    for owner in (optimizer, model):
        method = getattr(owner, "clip_grad_norm_", None)
        if callable(method):
            return method(max_norm)
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def _optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases and LayerNorm gains)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def train(model_cfg: GPTConfig, cfg: TrainConfig, split: corpus_mod.CorpusSplit | None = None,
          progress=None) -> History:
    """Train a fresh ``GPT(model_cfg, seed=cfg.seed)`` on ``split.train`` for ``cfg.n_tokens``
    tokens and return its ``History``; the last entry is always a validation loss at the end.

    ``progress`` is an optional callable ``progress(step, total_steps)`` (e.g. a progress bar).
    """
    return train_model(model_cfg, cfg, split, progress)[1]


def train_model(model_cfg: GPTConfig, cfg: TrainConfig, split: corpus_mod.CorpusSplit | None = None,
                progress=None, eval_batch_size: int | None = None) -> tuple[GPT, History]:
    """``train`` that also returns the trained model (for chapters that keep it, e.g. a teacher).

    ``eval_batch_size`` fixes the evaluation batch size; by default it is ``cfg.batch_size`` when
    ``cfg.eval_batches`` limits the evaluation and 64 for a full pass.
    """
    split = split if split is not None else corpus_mod.load()
    model = GPT(model_cfg, seed=cfg.seed)
    model.train()
    opt = _optimizer(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    total = cfg.steps(model_cfg.seq_len)
    hist = History(n_params=model.n_params())
    t0 = time.perf_counter()
    run_sum, run_n = 0.0, 0
    for step in range(total):
        lr = lr_at(step, total, cfg.lr, cfg.warmup_frac, cfg.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = corpus_mod.get_batch(split.train, cfg.batch_size, model_cfg.seq_len, gen)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_gradients(model, opt, cfg.grad_clip)
        opt.step()
        run_sum, run_n = run_sum + float(loss.item()), run_n + 1
        done = step + 1
        if done == total or (cfg.eval_every and done % cfg.eval_every == 0):
            hist.steps.append(done)
            hist.tokens.append(done * cfg.batch_size * model_cfg.seq_len)
            hist.train_loss.append(run_sum / run_n)  # mean batch loss since the last eval
            run_sum, run_n = 0.0, 0
            eval_bs = eval_batch_size or (cfg.batch_size if cfg.eval_batches else 64)  # full pass: free
            hist.val_loss.append(evaluate(model, split.val, eval_bs, cfg.eval_batches))
            hist.lr.append(lr)
        if progress is not None:
            progress(done, total)
    hist.wall_s = time.perf_counter() - t0
    return model, hist
