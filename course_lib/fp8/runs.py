"""Measurements the chapter runs: quantization error per recipe, the outlier channel, FP8 training.

``error_stats`` says what a recipe did to one tensor: signal-to-noise ratio, the share of
nonzero values flushed to zero (underflow) and the share clipped at the format's max
(saturation). ``outlier_tensor`` builds, by construction, the activation shape that breaks
per-tensor scaling: SwiGLU models grow a few feature channels orders of magnitude larger than
the rest in long training (Fishman et al., arXiv 2409.12517), and one scale for the whole
tensor then maps every ordinary value below half of E4M3's smallest subnormal.
``train`` trains the course's tiny GPT with its block Linears in FP8 (``linear.convert_gpt``)
next to FP32 and BF16 runs on the same data and seed.
"""
from __future__ import annotations

import math

import torch

from .._validate import choice, positive, positive_int
from ..model import GPT, GPTConfig
from .formats import spec
from .linear import LINEAR_RECIPES, convert_gpt
from .recipes import RECIPES, AmaxHistory, dequantize, quantize

__all__ = ["error_stats", "outlier_tensor", "train", "TRAIN_CONFIG", "PRECISIONS"]

# d_model 128 so that every block GEMM tiles into DeepSeek-V3's 128-wide tiles; batch·seq = 256 tokens.
TRAIN_CONFIG = GPTConfig(vocab_size=64, seq_len=32, n_layers=2, n_heads=4, d_model=128)
PRECISIONS = ("fp32", "bf16") + tuple(f"fp8_{r}" for r in LINEAR_RECIPES)


def error_stats(x: torch.Tensor, recipe: str, fmt: str = "e4m3", *, history: AmaxHistory | None = None,
                mask: torch.Tensor | None = None) -> dict:
    """Quantize ``x`` and measure against x itself (in float64): ``snr_db`` (10·log10 of signal
    power over error power), ``underflow`` (share of nonzero entries that came back 0),
    ``saturated`` (share with |x·scale| beyond the format's max, clipped), ``max_rel_error``
    over the entries that neither underflowed nor saturated. ``mask`` (bool, x's shape): the
    whole tensor is quantized, but the statistics count only the entries where it is True (the
    ordinary values beside an outlier, say)."""
    values, scales = quantize(x, recipe, fmt, history=history)
    back = dequantize(values, scales, recipe).double()
    x64 = x.detach().double()
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != x.shape:
            raise ValueError(f"mask must be a bool tensor of x's shape {tuple(x.shape)}")
        x64, back, values = x64[mask], back[mask], values[mask]
    err = back - x64
    nz = x64 != 0
    under = nz & (back == 0)
    half_ulp = 2.0 ** -(spec(fmt).mantissa_bits + 1)      # relative rounding bound of a normal value
    sat = (values.float().abs() == spec(fmt).max) & (x64.abs() > back.abs() * (1 + half_ulp))
    ok = nz & ~under & ~sat
    sig, noise = float(x64.square().sum()), float(err.square().sum())
    return {"recipe": recipe, "fmt": fmt,
            "snr_db": math.inf if noise == 0 else 10 * math.log10(sig / noise),
            "underflow": float(under.sum()) / max(1, int(nz.sum())),
            "saturated": float(sat.sum()) / max(1, x64.numel()),
            "max_rel_error": float((err.abs() / x64.abs())[ok].max()) if bool(ok.any()) else math.nan}


def outlier_tensor(tokens: int = 256, channels: int = 512, *, outlier_channel: int = 7, ratio: float = 1e6,
                   seed: int = 0) -> torch.Tensor:
    """Activations (tokens, channels): ordinary entries with magnitude uniform in [0.5, 1] and
    random sign, and one channel ``ratio`` times larger (its amax exactly ``ratio``).

    Per-tensor E4M3 scaling then maps an ordinary entry to at most 448/ratio; at the default
    1e6 that is 4.5e-4, below half the smallest subnormal (2**-10 ≈ 9.8e-4) by a factor 2.2, so
    every ordinary entry rounds to zero: the failure is arithmetic, not chance.
    """
    tokens = positive_int("tokens", tokens, maximum=1 << 16)
    channels = positive_int("channels", channels, minimum=2, maximum=1 << 16)
    outlier_channel = positive_int("outlier_channel", outlier_channel, minimum=0, maximum=channels - 1)
    ratio = positive("ratio", ratio)
    gen = torch.Generator().manual_seed(int(seed))
    mag = 0.5 + 0.5 * torch.rand(tokens, channels, generator=gen)
    sign = torch.where(torch.rand(tokens, channels, generator=gen) < 0.5, -1.0, 1.0)
    x = mag * sign
    x[:, outlier_channel] *= ratio
    x[0, outlier_channel] = ratio
    return x


def _counting_batch(vocab: int, seq_len: int, batch: int, gen: torch.Generator):
    """Sequences counting up from a random start in steps of 1, 2 or 3 (set by the start):
    learnable in a few hundred steps, so a loss gap is visible above the noise."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    idx = (start + (1 + start % 3) * torch.arange(seq_len + 1)) % vocab
    return idx[:, :-1], idx[:, 1:]


def train(precision: str, *, steps: int = 40, lr: float = 3e-3, batch: int = 4, seed: int = 0,
          cfg: GPTConfig = TRAIN_CONFIG) -> dict:
    """Train the tiny GPT for ``steps`` AdamW steps in ``precision`` (one of :data:`PRECISIONS`):
    ``"fp32"``, ``"bf16"`` (autocast: matmuls in BF16, weights FP32) or ``"fp8_<recipe>"``
    (block Linears in FP8 under that recipe, the rest FP32). Same initial weights and batches
    for every precision. Returns per-step ``losses`` and the converted layers."""
    precision = choice("precision", precision, PRECISIONS)
    steps = positive_int("steps", steps, maximum=100_000)
    batch = positive_int("batch", batch, maximum=4096)
    lr = positive("lr", lr)
    model = GPT(cfg, seed=seed)
    converted = convert_gpt(model, precision[4:]) if precision.startswith("fp8_") else []
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)      # matrices this small: extra threads only spin on a busy 2-core machine
    try:
        _loop(model, opt, gen, cfg, batch, steps, precision, losses)
    finally:
        torch.set_num_threads(threads)
    return {"precision": precision, "losses": losses, "converted": converted}


def _loop(model, opt, gen, cfg, batch, steps, precision, losses) -> None:
    for _ in range(steps):
        x, y = _counting_batch(cfg.vocab_size, cfg.seq_len, batch, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))


def recipes_on(x: torch.Tensor, fmt: str = "e4m3") -> list[dict]:
    """:func:`error_stats` of every recipe on one tensor (delayed: a fresh history, so its first
    step equals current scaling)."""
    return [error_stats(x, r, fmt, history=AmaxHistory() if r == "tensor_delayed" else None)
            for r in RECIPES]
