"""Memory per GPU for model states under data parallelism and the three ZeRO stages.

Model states are the parameters, their gradients and the optimizer state. Mixed-precision Adam as
in the ZeRO paper (Rajbhandari et al. 2020, arXiv 1910.02054, §3.1) keeps per parameter:
2 bytes of bf16/fp16 weights, 2 bytes of gradients and K = 12 bytes of optimizer state (an fp32
master copy of the weight, Adam's first and second moments) — 16 bytes in all. With Ψ parameters
and a data-parallel degree of n, the bytes per GPU are:

=========  ====================  =========================
stage      what is sharded        bytes per GPU
=========  ====================  =========================
0 (DP)     nothing                (2 + 2 + K)·Ψ  = 16Ψ
1          optimizer state        (2 + 2)·Ψ + K·Ψ/n
2          + gradients            2Ψ + (2 + K)·Ψ/n
3 (FSDP)   + parameters           (2 + 2 + K)·Ψ/n = 16Ψ/n
=========  ====================  =========================

Activations, temporary buffers, the communication buckets and the fragmentation of the allocator
come on top; ``reserved_bytes`` lets a caller set them aside. The course's CPU demos train in fp32
with plain AdamW: 4 bytes of weights, 4 of gradients and 8 of moments — also 16 bytes per
parameter, split differently (use :func:`zero_memory_breakdown` with those byte counts).

Activations are the other half of the memory bill (chapter 11): :func:`activation_bytes_per_layer`
counts what one transformer layer keeps for its backward pass under tensor parallelism, sequence
parallelism and activation recomputation, in Korthikanti et al.'s convention (arXiv 2205.05198).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import calculator, choice, flag, positive, positive_int, zero_stage

__all__ = ["ZeroMemory", "zero_memory_breakdown", "zero_memory_per_gpu", "min_zero3_degree",
           "max_params_per_gpu", "RECOMPUTE", "activation_bytes_per_layer", "llama_activation_bytes_per_layer",
           "logits_bytes", "saved_activation_bytes", "BLOCKS"]

RECOMPUTE = ("none", "selective", "full")
# How a layer's activations are counted: "gpt" Korthikanti et al.'s GELU / multi-head / dropout block
# (activation_bytes_per_layer), "llama" RMSNorm / grouped-query / SwiGLU / no dropout
# (llama_activation_bytes_per_layer)
BLOCKS = ("gpt", "llama")


@dataclass(frozen=True)
class ZeroMemory:
    """Bytes per GPU for each kind of model state."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


@calculator
def zero_memory_breakdown(n_params: float, dp_degree: int, stage: int, *, param_bytes: float = 2,
                          grad_bytes: float = 2, optimizer_bytes: float = 12) -> ZeroMemory:
    """Parameter, gradient and optimizer bytes per GPU for ZeRO ``stage`` (0 = plain DP).

    Defaults are mixed-precision Adam (2 + 2 + 12); fp32 AdamW without a master copy is
    ``param_bytes=4, grad_bytes=4, optimizer_bytes=8``.
    """
    psi = positive("n_params", n_params)
    n = positive_int("dp_degree", dp_degree)
    s = zero_stage("stage", stage)
    pb = positive("param_bytes", param_bytes)
    gb = positive("grad_bytes", grad_bytes)
    ob = positive("optimizer_bytes", optimizer_bytes, allow_zero=True)
    return _breakdown(psi, n, s, pb, gb, ob)


def _breakdown(psi: float, n: int, s: int, pb: float, gb: float, ob: float) -> ZeroMemory:
    return ZeroMemory(params=pb * psi / (n if s >= 3 else 1),
                      grads=gb * psi / (n if s >= 2 else 1),
                      optimizer=ob * psi / (n if s >= 1 else 1))


@calculator
def zero_memory_per_gpu(n_params: float, dp_degree: int, stage: int,
                        bytes_per_param: float = 16) -> float:
    """Bytes of model states per GPU: 16Ψ, 4Ψ + 12Ψ/n, 2Ψ + 14Ψ/n, 16Ψ/n for stages 0–3.

    ``bytes_per_param`` is the total per parameter; 2 of it are weights and 2 gradients (bf16),
    the rest (K = bytes_per_param − 4) optimizer state, so it must be at least 4.
    """
    psi = positive("n_params", n_params)
    n = positive_int("dp_degree", dp_degree)
    s = zero_stage("stage", stage)
    return _breakdown(psi, n, s, 2.0, 2.0, _optimizer_bytes(bytes_per_param)).total


def _optimizer_bytes(bytes_per_param: object) -> float:
    b = positive("bytes_per_param", bytes_per_param)
    if b < 4:
        raise ValueError(f"bytes_per_param must be >= 4 (2 for bf16 weights + 2 for gradients), got {bytes_per_param!r}")
    return b - 4


@calculator
def min_zero3_degree(n_params: float, gpu_bytes: float, reserved_bytes: float = 0) -> int:
    """Smallest ZeRO-3 degree n with 16Ψ/n ≤ gpu_bytes − reserved_bytes (model states only).

    ``reserved_bytes`` is what the caller keeps for activations and buffers; it must leave room.
    """
    psi = positive("n_params", n_params)
    cap = positive("gpu_bytes", gpu_bytes)
    res = positive("reserved_bytes", reserved_bytes, allow_zero=True)
    if res >= cap:
        raise ValueError(f"reserved_bytes ({reserved_bytes!r}) must be smaller than gpu_bytes ({gpu_bytes!r})")
    need = _breakdown(psi, 1, 3, 2.0, 2.0, 12.0).total
    n = math.ceil(need / (cap - res) * (1 - 1e-12))   # guard against 16Ψ/cap landing on 3.0000000001
    return max(1, n)


@calculator
def max_params_per_gpu(gpu_bytes: float, dp_degree: int, stage: int, bytes_per_param: float = 16) -> float:
    """Largest Ψ whose model states fit in ``gpu_bytes`` at this stage and degree (inverse of
    :func:`zero_memory_per_gpu`; ZeRO-1/2 never get below the unsharded part)."""
    cap = positive("gpu_bytes", gpu_bytes)
    n, s = positive_int("dp_degree", dp_degree), zero_stage("stage", stage)
    return cap / _breakdown(1.0, n, s, 2.0, 2.0, _optimizer_bytes(bytes_per_param)).total


@calculator
def activation_bytes_per_layer(seq_len: int, micro_batch: int, d_model: int, n_heads: int, tp: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes one transformer layer keeps for its backward pass, per GPU, per microbatch.

    Korthikanti et al. 2022 (arXiv 2205.05198, §4, Table 2) count a GPT layer with 16-bit
    activations, 1-byte dropout masks and attention that stores its s×s scores. With s =
    ``seq_len``, b = ``micro_batch``, h = ``d_model``, a = ``n_heads``, t = ``tp``:

    * none: sbh(34 + 5as/h) without TP; sbh(10 + 24/t + 5as/(ht)) with TP, whose LayerNorms,
      dropouts and the two blocks' inputs (10sbh) stay replicated; sbh(34/t + 5as/(ht)) with
      sequence parallelism, which shards those along the sequence too;
    * selective: recompute the attention core (scores, softmax, its dropout) in the backward, so
      the 5as²b/t term goes: sbh(10 + 24/t), or sbh·34/t with sequence parallelism;
    * full: keep only the layer's input, 2sbh (2sbh/t with sequence parallelism, where the input
      is sharded along the sequence), and rerun the whole forward in the backward.
    """
    s = positive_int("seq_len", seq_len)
    b = positive_int("micro_batch", micro_batch)
    h = positive_int("d_model", d_model)
    a = positive_int("n_heads", n_heads)
    t = positive_int("tp", tp)
    sp = flag("sequence_parallel", sequence_parallel)
    mode = choice("recompute", recompute, RECOMPUTE)
    if a % t:
        raise ValueError(f"tp ({t}) must divide n_heads ({a}): tensor parallelism gives each rank "
                         f"whole attention heads")
    return _activation_bytes(s, b, h, a, t, sp, mode)


def _activation_bytes(s: float, b: float, h: float, a: float, t: float, sp: bool, mode: str) -> float:
    """The formula on checked inputs (``s`` may be a context-parallel shard, s/cp)."""
    sbh = float(s) * b * h
    t_sp = t if sp else 1
    if mode == "full":
        return 2.0 * sbh / t_sp
    linear = sbh * (10.0 / t_sp + 24.0 / t)
    return linear if mode == "selective" else linear + 5.0 * a * s * s * b / t


@calculator
def llama_activation_bytes_per_layer(seq_len: int, micro_batch: int, d_model: int, n_heads: int, kv_heads: int,
                                     ffn_dim: int, tp: int = 1, sequence_parallel: bool = False) -> float:
    """Bytes a Llama-style layer keeps for its backward, per GPU and microbatch: RMSNorm, grouped-
    query attention through FlashAttention (no s×s scores), SwiGLU MLP, no dropout, 16-bit tensors.

    Counted tensor by tensor, beside Korthikanti et al.'s 34·sbh for a GELU, multi-head, dropout
    block (:func:`activation_bytes_per_layer`): the two norms' inputs and outputs (4sbh) and their
    FP32 reciprocal RMS (8sb bytes), Q (sbh) and K, V (2sbh·kv/a, grouped-query), the attention
    output that FlashAttention's backward and the output projection both read (sbh), each 2 bytes;
    the gate and up projections (2·sbF) and their SwiGLU product, the down projection's input
    (sbF), 2 bytes each, with a fused SwiGLU that recomputes the SiLU in its backward (an eager
    ``silu(g) * u`` keeps the SiLU's output too, 2sbF more); FlashAttention's FP32 log-sum-exp,
    4·sba. That is 2sbh(6 + 2kv/a) + 6sbF + 4sba + 8sb, with the GEMM-side tensors divided by t
    under TP (a rank keeps max(kv/t, 1) K/V heads) and the norms' tensors too with sequence
    parallelism: for Llama 3 405B (F = 3.25h, kv/a = 1/16) 31.8·sbh against Korthikanti's 34·sbh.
    ``tests/test_activation_memory.py`` checks the count against what autograd saves for a real
    block (PyTorch's own FlashAttention kernel), byte for byte. The layout planner uses it with
    ``block="llama"``.
    """
    s, b = positive_int("seq_len", seq_len), positive_int("micro_batch", micro_batch)
    h, a = positive_int("d_model", d_model), positive_int("n_heads", n_heads)
    kv = positive_int("kv_heads", kv_heads, maximum=a)
    f, t = positive_int("ffn_dim", ffn_dim), positive_int("tp", tp)
    sp = flag("sequence_parallel", sequence_parallel)
    if a % t or kv % t and t % kv:
        raise ValueError(f"tp ({t}) must divide n_heads ({a}) and divide or be divided by kv_heads ({kv})")
    if a % kv:
        raise ValueError(f"kv_heads ({kv}) must divide n_heads ({a}): each K/V head serves a whole group")
    return _llama_activation_bytes(s, b, h, a, kv, f, t, sp)


def _llama_activation_bytes(s: float, b: float, h: float, a: float, kv: float, f: float, t: float,
                            sp: bool) -> float:
    """The Llama count on checked inputs (``s`` may be a context-parallel shard, s/cp)."""
    sb = float(s) * b
    norms = (2.0 * 4 * sb * h + 8.0 * sb) / (t if sp else 1)    # 2 x (input, output) + FP32 rstd
    q_out = 2.0 * 2 * sb * h / t                                 # Q and the attention output
    k_v = 2.0 * 2 * sb * (h / a) * max(kv / t, 1.0)              # this rank's K/V heads
    mlp = 2.0 * 3 * sb * f / t                                   # gate, up, their product
    lse = 4.0 * sb * a / t
    return norms + q_out + k_v + mlp + lse


def saved_activation_bytes(fn, *args, exclude=()) -> int:
    """Bytes autograd keeps for the backward of ``fn(*args)``: every tensor saved for backward,
    each storage counted once (a view shares its base's), without the storages of ``exclude``
    (the weights: model states, not activations). The measurement beside the activation formulas
    (``torch.autograd.graph.saved_tensors_hooks``)."""
    import torch

    skip = {x.untyped_storage().data_ptr() for x in exclude}
    seen: dict[int, int] = {}

    def pack(x):
        st = x.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        fn(*args)
    return sum(seen.values())


@calculator
def logits_bytes(seq_len: int, micro_batch: int, vocab_size: int, tp: int = 1, vocab_parallel: bool = True,
                 chunks: int = 1) -> float:
    """Peak bytes of the output logits and the cross-entropy on one GPU, per microbatch: the BF16
    logits (2 bytes each), their FP32 copy for a stable softmax (4) and the FP32 gradient the loss
    writes back (4), 10 bytes per logit, for s·b tokens × the vocabulary.

    ``vocab_parallel`` (Megatron-LM's vocabulary-parallel cross-entropy, arXiv 1909.08053 §3)
    keeps each TP rank's V/t columns and exchanges only per-token sums; without it the logits are
    gathered whole on every rank. ``chunks`` > 1 is a chunked (fused linear) cross-entropy (e.g.
    Liger Kernel, arXiv 2410.10989): only one chunk of s·b/chunks tokens is ever materialised. At
    Llama 3's 128,256-entry vocabulary and 8K tokens that is 10.5 GB gathered, 1.3 GB vocabulary-
    parallel over TP 8: memory the last pipeline stage holds on top of its layers (Llama 3 gives
    that stage one layer fewer, arXiv 2407.21783 §3.3.2). The layout planner counts it on the last
    stage when given ``vocab_size`` (the planner of chapter 13 always gives it).
    """
    s, b = positive_int("seq_len", seq_len), positive_int("micro_batch", micro_batch)
    v, t = positive_int("vocab_size", vocab_size), positive_int("tp", tp)
    vp, k = flag("vocab_parallel", vocab_parallel), positive_int("chunks", chunks)
    tokens = math.ceil(s * b / k)
    return 10.0 * tokens * v / (t if vp else 1)
