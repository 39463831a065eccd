"""A training loop whose whole state is explicit, so it can be checkpointed, rolled back and resumed.

One step is forward → loss → backward → (check, unscale, clip) → AdamW update. What a rollback
has to restore is everything that decides the *next* step: the weights, the optimizer's moments,
the step counter (it sets the learning rate), the loss scaler, the random-number state, and the
**data loader's position**. The loader here is random-access — batch ``p`` is drawn from a
generator seeded with ``(seed, p)`` — so "skip the suspect data" is literally "move the position".

Precision. ``precision="fp32"`` trains the FP32 model directly. ``"bf16"`` and ``"fp16"`` emulate
mixed-precision training the way Micikevicius et al. describe it: an FP32 *master* copy of the
weights and the AdamW state, and a low-precision *working* copy that runs the whole forward and
backward pass (weights, activations and gradients all in that dtype). The loss itself is computed
in FP32 from the low-precision logits (as ``torch.autocast`` does). This is stricter than
``torch.autocast``, which also keeps LayerNorm and softmax in FP32; it is what "FP16 weights and
activations" means. ``loss_scaling=True`` adds the dynamic loss scaler; a step whose gradients
contain inf/NaN is then skipped. Without a scaler, a non-finite gradient reaches AdamW and the
run diverges — which is what FP16 training without loss scaling does.

Three ways to induce a spike: ``corrupt=(start, stop)`` makes the batches at data positions in
``[start, stop)`` garbage (each window is one short random byte string repeated, like a shard of
log spam); ``lr_jump=(step, factor, n_steps)`` multiplies the learning rate; ``warmup_steps=0``
starts at the peak learning rate.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .._validate import choice, fraction, positive, positive_int
from ..corpus import CorpusSplit, get_batch
from ..model import GPT, GPTConfig
from .checkpoint import rng_state, set_rng_state
from .scaler import DTYPES, DynamicLossScaler

__all__ = ["TINY", "StabilityConfig", "DataStream", "StepRecord", "Trainer", "lr_schedule", "activation_peaks",
           "train_run", "forward_loss", "first_step_update"]

TINY = GPTConfig(vocab_size=256, seq_len=32, n_layers=2, n_heads=2, d_model=32)


@dataclass(frozen=True)
class StabilityConfig:
    """How to train, and which instability to induce. Steps and data positions are counts of
    optimizer steps and of batches; ``grad_clip=None`` turns clipping off."""

    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float | None = 1.0
    precision: str = "fp32"
    loss_scaling: bool = False
    init_scale: float = 2.0 ** 16
    growth_interval: int = 50
    corrupt: tuple[int, int] | None = None
    lr_jump: tuple[int, float, int] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("steps", self.steps)
        positive_int("batch_size", self.batch_size)
        positive("lr", self.lr)
        positive_int("warmup_steps", self.warmup_steps, minimum=0)
        fraction("min_lr_ratio", self.min_lr_ratio)
        positive("weight_decay", self.weight_decay, allow_zero=True)
        if self.grad_clip is not None:
            positive("grad_clip", self.grad_clip)
        choice("precision", self.precision, tuple(DTYPES))
        positive("init_scale", self.init_scale)
        positive_int("growth_interval", self.growth_interval)
        if self.corrupt is not None:
            a, b = self.corrupt
            if positive_int("corrupt", a, minimum=0) >= positive_int("corrupt", b, minimum=0):
                raise ValueError(f"corrupt must be (start, stop) with start < stop, got {self.corrupt!r}")
        if self.lr_jump is not None:
            start, factor, n_steps = self.lr_jump
            positive_int("lr_jump", start, minimum=0)
            positive("lr_jump", factor)
            positive_int("lr_jump", n_steps)


def lr_schedule(step: int, cfg: StabilityConfig) -> float:
    """Linear warmup over ``warmup_steps``, then a half-cosine to ``min_lr_ratio·lr`` at the last
    step; times the LR-jump factor while the jump lasts."""
    step = positive_int("step", step, minimum=0)
    w = cfg.warmup_steps
    if step < w:
        lr = cfg.lr * (step + 1) / w
    else:
        progress = min(1.0, (step - w) / max(1, cfg.steps - 1 - w))
        lr = cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
    if cfg.lr_jump is not None and cfg.lr_jump[0] <= step < cfg.lr_jump[0] + cfg.lr_jump[2]:
        lr *= cfg.lr_jump[1]
    return lr


class DataStream:
    """A random-access stream of training batches: ``batch(p)`` depends only on ``(seed, p)``.

    ``position`` is the index of the next batch; saving and restoring it (``state_dict``) is all a
    checkpoint needs, and moving it forward skips data. Positions in ``corrupt = (start, stop)``
    yield corrupted batches instead of text.
    """

    def __init__(self, tokens: torch.Tensor, batch_size: int, seq_len: int, seed: int = 0,
                 corrupt: tuple[int, int] | None = None) -> None:
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.seed, self.corrupt, self.position = seed, corrupt, 0

    def is_corrupt(self, position: int) -> bool:
        return self.corrupt is not None and self.corrupt[0] <= position < self.corrupt[1]

    def batch(self, position: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + position)
        if not self.is_corrupt(position):
            return get_batch(self.tokens, self.batch_size, self.seq_len, gen)
        motif = torch.randint(0, 256, (5,), generator=gen)       # one short junk string, repeated
        window = motif.repeat(self.batch_size, (self.seq_len + 1) // 5 + 2)[:, : self.seq_len + 1]
        return window[:, :-1], window[:, 1:]

    def next(self) -> tuple[int, torch.Tensor, torch.Tensor]:
        """The batch at the current position, and advance."""
        p = self.position
        self.position += 1
        return (p, *self.batch(p))

    def state_dict(self) -> dict:
        """The seed fixes the order of the data, the position where we are in it."""
        return {"seed": self.seed, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.position = int(state["seed"]), int(state["position"])


@dataclass(frozen=True)
class StepRecord:
    """One executed optimizer step: ``skipped`` when the loss scaler found an overflow."""

    step: int
    position: int
    loss: float
    lr: float
    grad_norm: float
    scale: float
    skipped: bool
    corrupt: bool


class Trainer:
    """The tiny GPT, its AdamW optimizer, a :class:`DataStream` and (for FP16) a loss scaler."""

    def __init__(self, model_cfg: GPTConfig, cfg: StabilityConfig, split: CorpusSplit) -> None:
        self.model_cfg, self.cfg, self.split = model_cfg, cfg, split
        self.master = GPT(model_cfg, seed=cfg.seed)
        self.dtype = DTYPES[cfg.precision]
        self.work = self.master if self.dtype == torch.float32 else copy.deepcopy(self.master).to(self.dtype)
        decay = [p for p in self.master.parameters() if p.dim() >= 2]
        rest = [p for p in self.master.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
        self.scaler = DynamicLossScaler(cfg.init_scale, growth_interval=cfg.growth_interval) if cfg.loss_scaling else None
        self.data = DataStream(split.train, cfg.batch_size, model_cfg.seq_len, cfg.seed, cfg.corrupt)
        self.step = 0

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, scale: float = 1.0) -> float:
        """Forward and backward on the working copy with the loss multiplied by ``scale``; the
        gradients stay in the working dtype (``self.work``'s ``.grad``). Returns the FP32 loss."""
        if self.work is not self.master:
            with torch.no_grad():
                for w, m in zip(self.work.parameters(), self.master.parameters()):
                    w.copy_(m)
        self.work.zero_grad(set_to_none=True)
        logits = self.work(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        (loss * scale).backward()
        return float(loss.detach())

    def train_step(self) -> StepRecord:
        """One optimizer step on the next batch of the stream."""
        lr = lr_schedule(self.step, self.cfg)
        for group in self.opt.param_groups:
            group["lr"] = lr
        position, x, y = self.data.next()
        scale = self.scaler.scale if self.scaler is not None else 1.0
        loss = self.forward_backward(x, y, scale)
        grads = [p.grad for p in self.work.parameters()]
        found_inf = DynamicLossScaler.found_inf(grads)
        skipped = self.scaler is not None and found_inf
        grad_norm = float("nan")
        if not skipped:
            for m, g in zip(self.master.parameters(), grads):
                m.grad = g.float() / scale if g is not None else None
            clip = self.cfg.grad_clip if self.cfg.grad_clip is not None else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.master.parameters(), clip))
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update(found_inf)
        self.step += 1
        return StepRecord(self.step - 1, position, loss, lr, grad_norm, scale, skipped,
                          self.data.is_corrupt(position))

    @torch.no_grad()
    def evaluate(self, n_batches: int = 8, seed: int = 1234) -> float:
        """Mean validation loss of the FP32 master weights on ``n_batches`` fixed batches."""
        gen = torch.Generator().manual_seed(seed)
        losses = [self.master(*get_batch(self.split.val, self.cfg.batch_size, self.model_cfg.seq_len, gen))[1]
                  for _ in range(positive_int("n_batches", n_batches))]
        return float(torch.stack(losses).mean())

    def state_dict(self) -> dict:
        """Everything the next step depends on (tensors and plain Python values only)."""
        return {"model": self.master.state_dict(), "optimizer": self.opt.state_dict(),
                "step": self.step, "data": self.data.state_dict(), "rng": rng_state(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.master.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.data.load_state_dict(state["data"])
        set_rng_state(state["rng"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])


@torch.no_grad()
def activation_peaks(model: GPT, x: torch.Tensor) -> dict[str, float]:
    """Largest magnitudes in a forward pass of ``model`` on ``x``: ``"attn_logits"``, the raw
    attention scores q·kᵀ as the "math" attention computes them (before the 1/√d_head scaling;
    in FP16 this product is what overflows first), and ``"residual"``, the residual stream after
    each block."""
    peaks = {"attn_logits": 0.0, "residual": 0.0}

    def on_qkv(module, inputs, out) -> None:
        B, S, D3 = out.shape
        h = model.cfg.n_heads
        q, k, _ = out.float().split(D3 // 3, dim=2)
        q, k = (t.view(B, S, h, -1).transpose(1, 2) for t in (q, k))
        peaks["attn_logits"] = max(peaks["attn_logits"], float((q @ k.transpose(-2, -1)).abs().max()))

    def on_block(module, inputs, out) -> None:
        peaks["residual"] = max(peaks["residual"], float(out.abs().max()))

    hooks = [b.attn.qkv.register_forward_hook(on_qkv) for b in model.blocks]
    hooks += [b.register_forward_hook(on_block) for b in model.blocks]
    try:
        model(x)
    finally:
        for hk in hooks:
            hk.remove()
    return peaks


def train_run(model_cfg: GPTConfig, cfg: StabilityConfig, split: CorpusSplit, eval_batches: int = 8,
              peak_every: int = 0, max_skips: int = 10, stop_after: int | None = None,
              keep_model: bool = False) -> dict:
    """Train for ``cfg.steps`` steps with no spike guard and return a JSON-friendly dict.

    Per step: ``loss``, ``lr``, ``grad_norm``, ``scale``, ``skipped``, ``corrupt``. ``status`` is
    ``"ok"``, ``"diverged"`` (a non-finite loss or weight was not caught by a loss scaler) or
    ``"stalled"`` (``max_skips`` overflow-skipped steps in a row: the scaler cannot help because
    the overflow is in the forward pass); the run stops there (``stopped_at``). ``val_loss`` is
    NaN unless ``ok``. With ``peak_every`` > 0, ``peaks`` lists ``[step, attn_logits, residual]``
    measured on the FP32 master weights every ``peak_every`` steps; ``failures`` lists the same
    for (up to three) low-precision steps whose loss was not finite, measured on the exact FP32
    weights and batch of that step — it shows which activation left the format's range.
    ``stop_after`` ends the run early (the schedule still spans ``cfg.steps``); ``keep_model``
    adds the trained FP32 ``model`` and, after a failure, ``failure_model`` (FP32 weights that met
    the first failing batch) and ``failure_batch``."""
    trainer = Trainer(model_cfg, cfg, split)
    records, peaks, status, run_of_skips, failures, extras = [], [], "ok", 0, [], {}
    for _ in range(cfg.steps if stop_after is None else min(cfg.steps, positive_int("stop_after", stop_after))):
        x_next, y_next = trainer.data.batch(trainer.data.position)
        if peak_every and trainer.step % peak_every == 0:
            p = activation_peaks(trainer.master, x_next)
            peaks.append([trainer.step, p["attn_logits"], p["residual"]])
        before = copy.deepcopy(trainer.master.state_dict()) if trainer.work is not trainer.master else None
        r = trainer.train_step()
        records.append(r)
        if not math.isfinite(r.loss) and before is not None and len(failures) < 3:
            probe = GPT(model_cfg)          # the weights that met this batch, in FP32
            probe.load_state_dict(before)
            p = activation_peaks(probe, x_next)
            failures.append([r.step, p["attn_logits"], p["residual"]])
            if keep_model and len(failures) == 1:
                extras = {"failure_model": probe, "failure_batch": (x_next, y_next)}
        run_of_skips = run_of_skips + 1 if r.skipped else 0
        finite = all(bool(torch.isfinite(p).all()) for p in trainer.master.parameters())
        if not finite or (not math.isfinite(r.loss) and not r.skipped):
            status = "diverged"
        elif run_of_skips >= max_skips:
            status = "stalled"
        if status != "ok":
            break
    out = {k: [getattr(r, k) for r in records] for k in StepRecord.__dataclass_fields__}
    out.update(status=status, stopped_at=records[-1].step if status != "ok" else None, peaks=peaks,
               failures=failures,
               val_loss=trainer.evaluate(eval_batches) if status == "ok" else float("nan"))
    if keep_model:
        out.update(model=trainer.master, **extras)
    return out


@torch.no_grad()
def forward_loss(model: GPT, x: torch.Tensor, y: torch.Tensor, precision: str) -> float:
    """Loss of one batch with a copy of ``model`` running its whole forward pass in ``precision``
    (the cross-entropy itself in FP32, as in training): does this batch overflow in that format?"""
    m = copy.deepcopy(model).to(DTYPES[choice("precision", precision, tuple(DTYPES))])
    logits = m(x)
    return float(F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)))


def first_step_update(split: CorpusSplit, grad_clip: float | None, lr: float = 0.4) -> tuple[float, float]:
    """Adam's first step without warmup: one AdamW step of ``TINY`` at ``lr``, returning the median
    |Δw| over the weights it moved and the gradient norm. The first update is ≈ lr·sign(g) per
    weight whatever the gradient's size, so clipping (a positive rescale of g) does not shrink it."""
    cfg = StabilityConfig(steps=10, lr=lr, warmup_steps=0, grad_clip=grad_clip, weight_decay=0.0)
    t = Trainer(TINY, cfg, split)
    before = [p.detach().clone() for p in t.master.parameters()]
    rec = t.train_step()
    deltas = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(t.master.parameters(), before)])
    return float(deltas[deltas > 0].median()), rec.grad_norm
