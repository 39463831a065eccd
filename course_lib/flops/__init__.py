"""FLOP accounting for transformer training: 6ND, MFU/HFU, the attention term, parameter counts.

Conventions (Kaplan et al. 2020, arXiv 2001.08361; PaLM, arXiv 2204.02311 App. B):
a multiply-add is 2 FLOP; forward ≈ 2N FLOP per token, backward ≈ 4N, so training ≈ 6N per
token. Full activation recomputation adds one more forward (8N): that is hardware FLOPs (HFU),
while MFU always counts 6N. The attention-score matmuls (QKᵀ and A·V) are *not* in 2N; per
token and layer they cost 4·s·d forward over the full s×s matrix, or 2·s·d with a causal mask
that skips the upper triangle.
"""
from __future__ import annotations

from dataclasses import dataclass

from .._validate import calculator, choice, flag, positive, positive_int, utilisation
from ..hardware import lookup

SECONDS_PER_DAY = 86_400.0

__all__ = [
    "training_flops", "training_days", "gpus_needed", "mfu", "attention_flops_per_token",
    "attention_fraction", "attention_crossover", "GPTShape", "gpt_params", "PUBLISHED_SHAPES",
]


@calculator
def training_flops(n_params: float, n_tokens: float) -> float:
    """Training compute C = 6·N·D in FLOP for ``n_params`` parameters and ``n_tokens`` tokens."""
    n = positive("n_params", n_params)
    d = positive("n_tokens", n_tokens)
    return 6.0 * n * d


@calculator
def training_days(n_params: float, n_tokens: float, n_gpus: float, mfu: float,
                  gpu: str = "H100-SXM", dtype: str = "bf16") -> float:
    """Wall-clock days to train: 6ND / (n_gpus · dense peak · MFU) / 86 400."""
    c = training_flops(n_params, n_tokens)
    g, u = positive("n_gpus", n_gpus), utilisation("mfu", mfu)
    return c / (g * lookup("gpu", gpu).peak(dtype) * u) / SECONDS_PER_DAY


@calculator
def gpus_needed(n_params: float, n_tokens: float, days: float, mfu: float,
                gpu: str = "H100-SXM", dtype: str = "bf16") -> float:
    """Chips needed to finish in ``days`` (a float, not rounded up: the caller decides how)."""
    c = training_flops(n_params, n_tokens)
    t, u = positive("days", days) * SECONDS_PER_DAY, utilisation("mfu", mfu)
    return c / (t * lookup("gpu", gpu).peak(dtype) * u)


@calculator
def mfu(n_params: float, tokens_per_second_per_gpu: float, gpu: str = "H100-SXM",
        recompute: bool = False, dtype: str = "bf16") -> float:
    """Model FLOPs utilisation 6·N·throughput / peak; with ``recompute=True`` the hardware FLOPs
    utilisation (HFU), which counts the recomputed forward too (8·N per token)."""
    n = positive("n_params", n_params)
    tps = positive("tokens_per_second_per_gpu", tokens_per_second_per_gpu)
    per_token = 8.0 if flag("recompute", recompute) else 6.0
    return per_token * n * tps / lookup("gpu", gpu).peak(dtype)


@calculator
def attention_flops_per_token(n_layers: int, d_model: int, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs of the attention scores (QKᵀ and A·V) per token: 2·L·s·d causal, 4·L·s·d full."""
    L = positive_int("n_layers", n_layers)
    d = positive_int("d_model", d_model)
    s = positive_int("seq_len", seq_len)
    return (2.0 if flag("causal", causal) else 4.0) * L * s * d


@calculator
def attention_fraction(n_layers: int, d_model: int, seq_len: int, n_params: float,
                       causal: bool = True) -> float:
    """Attention-score FLOPs divided by the dense 2N FLOPs per token (same ratio for training,
    since backward triples both): L·s·d/N causal, 2·L·s·d/N full."""
    per_token = attention_flops_per_token(n_layers, d_model, seq_len, causal)
    return per_token / (2.0 * positive("n_params", n_params))


@calculator
def attention_crossover(n_layers: int, d_model: int, n_params: float, causal: bool = True) -> float:
    """Sequence length at which attention-score FLOPs equal the dense 2N: N/(L·d) causal, N/(2·L·d) full."""
    L = positive_int("n_layers", n_layers)
    d = positive_int("d_model", d_model)
    n = positive("n_params", n_params)
    return n / ((1.0 if flag("causal", causal) else 2.0) * L * d)


@dataclass(frozen=True)
class GPTShape:
    """The hyper-parameters that fix a decoder-only transformer's parameter count."""

    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    seq_len: int
    d_ff: int | None = None          # default 4·d_model (GELU MLP)
    mlp: str = "gelu"                # "gelu": 2 matrices; "swiglu": 3 matrices
    n_kv_heads: int | None = None    # grouped-query attention; None = n_heads
    tied_embeddings: bool = True
    learned_positions: bool = True   # GPT-2/3 style; False for RoPE models
    bias: bool = True
    norm: str = "layernorm"          # "layernorm" (weight+bias) or "rmsnorm" (weight)


def gpt_params(shape: GPTShape, *, include_embeddings: bool = True) -> int:
    """Exact parameter count of a decoder-only transformer with this shape.

    Reproduces published sizes: GPT-3 175B from its config and Llama-style SwiGLU/GQA models
    (see ``PUBLISHED_SHAPES``). With ``include_embeddings=False`` returns the non-embedding
    count Kaplan et al. use for N.
    """
    L = positive_int("n_layers", shape.n_layers)
    d = positive_int("d_model", shape.d_model)
    h = positive_int("n_heads", shape.n_heads)
    V = positive_int("vocab_size", shape.vocab_size)
    s = positive_int("seq_len", shape.seq_len)
    kv = positive_int("n_kv_heads", shape.n_kv_heads or h)
    if d % h:
        raise ValueError(f"d_model ({d}) must be divisible by n_heads ({h})")
    choice("mlp", shape.mlp, ("gelu", "swiglu"))
    choice("norm", shape.norm, ("layernorm", "rmsnorm"))
    d_head = d // h
    d_ff = positive_int("d_ff", shape.d_ff) if shape.d_ff is not None else 4 * d
    b = 1 if shape.bias else 0
    attn = d * d + 2 * d * kv * d_head + d * d + b * (d + 2 * kv * d_head + d)
    n_mats = 3 if shape.mlp == "swiglu" else 2
    mlp = n_mats * d * d_ff + b * ((n_mats - 1) * d_ff + d)
    norm = (2 if shape.norm == "layernorm" else 1) * d
    per_layer = attn + mlp + 2 * norm
    body = L * per_layer + norm  # final norm
    if not include_embeddings:
        return body
    emb = V * d + (s * d if shape.learned_positions else 0)
    head = 0 if shape.tied_embeddings else V * d
    return body + emb + head


PUBLISHED_SHAPES: dict[str, tuple[GPTShape, float, str]] = {
    "GPT-3 175B": (GPTShape(96, 12288, 96, 50257, 2048), 175e9, "Brown et al. 2020, arXiv 2005.14165, Table 2.1"),
    "GPT-3 1.3B": (GPTShape(24, 2048, 16, 50257, 2048), 1.3e9, "Brown et al. 2020, arXiv 2005.14165, Table 2.1"),
    "Llama 2 7B": (GPTShape(32, 4096, 32, 32000, 4096, d_ff=11008, mlp="swiglu", tied_embeddings=False,
                            learned_positions=False, bias=False, norm="rmsnorm"), 6.74e9,
                   "Touvron et al. 2023, arXiv 2307.09288"),
    "Llama 3 8B": (GPTShape(32, 4096, 32, 128256, 8192, d_ff=14336, mlp="swiglu", n_kv_heads=8,
                            tied_embeddings=False, learned_positions=False, bias=False, norm="rmsnorm"),
                   8.03e9, "Grattafiori et al. 2024, arXiv 2407.21783, Table 3"),
    "Llama 3 405B": (GPTShape(126, 16384, 128, 128256, 8192, d_ff=53248, mlp="swiglu", n_kv_heads=8,
                              tied_embeddings=False, learned_positions=False, bias=False, norm="rmsnorm"),
                     405e9, "Grattafiori et al. 2024, arXiv 2407.21783, Table 3"),
}
