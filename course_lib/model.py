"""The course's one tiny GPT: a readable decoder-only transformer that every chapter reuses.

Same shape as GPT-2 (learned positions, pre-LayerNorm, GELU MLP, tied embeddings), small enough
to train on a CPU in seconds. Two attention implementations compute the same function:
``"math"`` writes QKᵀ, softmax and A·V as explicit matmuls (so FLOP counters see them), and
``"sdpa"`` calls ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._validate import choice, positive_int

__all__ = ["GPTConfig", "GPT", "Block", "CausalSelfAttention", "MLP"]


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the tiny GPT. ``windows`` optionally gives each layer a sliding-window size
    (None = global attention), for chapters that need heterogeneous layers."""

    vocab_size: int = 256
    seq_len: int = 64
    n_layers: int = 2
    n_heads: int = 2
    d_model: int = 64
    d_ff: int | None = None
    attn: str = "math"
    tie_embeddings: bool = True
    windows: tuple[int | None, ...] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "n_layers", "n_heads", "d_model"):
            positive_int(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        choice("attn", self.attn, ("math", "sdpa"))
        if self.windows is not None and len(self.windows) != self.n_layers:
            raise ValueError(f"windows must have n_layers={self.n_layers} entries, got {len(self.windows)}")

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    def with_(self, **changes) -> GPTConfig:
        """A copy with some fields changed."""
        return replace(self, **changes)


def _mask(seq_len: int, window: int | None, device: torch.device) -> torch.Tensor:
    """Boolean (s, s) mask, True where query i may attend to key j (causal, optionally windowed)."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    keep = j <= i
    if window is not None:
        keep &= (i - j) < window
    return keep


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection."""

    def __init__(self, cfg: GPTConfig, window: int | None = None) -> None:
        super().__init__()
        self.n_heads, self.d_model, self.impl, self.window = cfg.n_heads, cfg.d_model, cfg.attn, window
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)
        q, k, v = (t.view(B, S, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        keep = _mask(S, self.window, x.device)
        if self.impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            scores = scores.masked_fill(~keep, float("-inf"))
            y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, S, D))


class MLP(nn.Module):
    """Two-layer GELU feed-forward block."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.ff)
        self.down = nn.Linear(cfg.ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block; ``mlp`` can be swapped (e.g. for a mixture of experts)."""

    def __init__(self, cfg: GPTConfig, window: int | None = None, mlp: nn.Module | None = None) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, window)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = mlp if mlp is not None else MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, final LayerNorm, LM head.

    ``forward(idx, targets=None)`` returns logits, or ``(logits, loss)`` when targets are given.
    Initialisation follows GPT-2 (normal 0.02; residual projections scaled by 1/√(2L)) and
    is fully determined by ``seed``.
    """

    def __init__(self, cfg: GPTConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        windows = cfg.windows or (None,) * cfg.n_layers
        self.blocks = nn.ModuleList(Block(cfg, w) for w in windows)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok.weight
        self.reset_parameters(seed)

    def reset_parameters(self, seed: int) -> None:
        """Deterministic GPT-2 style initialisation from ``seed`` (independent of global RNG)."""
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if p.dim() == 1:
                    p.fill_(1.0 if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")) else 0.0)
                else:
                    std = 0.02 / math.sqrt(2 * self.cfg.n_layers) if name.endswith("proj.weight") or name.endswith("down.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, S = idx.shape
        if S > self.cfg.seq_len:
            raise ValueError(f"idx has sequence length {S} > cfg.seq_len={self.cfg.seq_len}")
        x = self.tok(idx) + self.pos(torch.arange(S, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def n_params(self) -> int:
        """Distinct trainable parameters (a tied matrix counted once)."""
        return sum(p.numel() for p in self.parameters())

    def matmul_params(self) -> int:
        """Weights that take part in a matmul per token: every Linear weight, the LM head included
        (counted even when tied, because the head multiply happens regardless). Forward matmul
        FLOPs per token are exactly 2× this number, attention scores aside."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, n_new: int, greedy: bool = True,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Append ``n_new`` tokens autoregressively (greedy or sampled)."""
        for _ in range(n_new):
            logits = self(idx[:, -self.cfg.seq_len:])[:, -1]
            if greedy:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
