"""Chapter 11 calculators: activation bytes per layer (Korthikanti et al. 2022, Table 2) and the
bytes tensor and context parallelism send per layer, checked against the formulas written out by
hand, against each other (what sequence parallelism and recomputation must change) and on bad
input."""
from __future__ import annotations

import math
import re

import pytest
import torch

from course_lib import comm, memory
from course_lib.__main__ import main

S, B, H, A = 2048, 1, 12288, 96          # GPT-3 175B's layer, the paper's running example


def test_no_parallelism_is_34_plus_5as_over_h():
    sbh = S * B * H
    assert memory.activation_bytes_per_layer(S, B, H, A) == pytest.approx(sbh * (34 + 5 * A * S / H), rel=1e-12)
    # the parts the paper sums: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh
    assert memory.activation_bytes_per_layer(S, B, H, A) == pytest.approx(
        11 * sbh + 5 * A * S * S * B + 19 * sbh + 4 * sbh, rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_table_2_rows(t):
    sbh, big = S * B * H, 5 * A * S / (H * t)
    f = memory.activation_bytes_per_layer
    assert f(S, B, H, A, tp=t) == pytest.approx(sbh * (10 + 24 / t + big), rel=1e-12)
    assert f(S, B, H, A, tp=t, sequence_parallel=True) == pytest.approx(sbh * (34 / t + big), rel=1e-12)
    assert f(S, B, H, A, tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert f(S, B, H, A, tp=t, sequence_parallel=True, recompute="selective") == pytest.approx(sbh * 34 / t)
    assert f(S, B, H, A, tp=t, recompute="full") == pytest.approx(2 * sbh)
    assert f(S, B, H, A, tp=t, sequence_parallel=True, recompute="full") == pytest.approx(2 * sbh / t)


def test_the_papers_gpt3_numbers():
    """Korthikanti et al. §4: for GPT-3 at t = 8 the 5as/h term (80) dwarfs the 34 of the rest,
    and selective recomputation keeps only the 34/t: 342 MiB → 102 MiB per layer."""
    assert 5 * A * S / H == 80
    full = memory.activation_bytes_per_layer(S, B, H, A, tp=8, sequence_parallel=True)
    sel = memory.activation_bytes_per_layer(S, B, H, A, tp=8, sequence_parallel=True, recompute="selective")
    assert full / 2 ** 20 == pytest.approx(342.0) and sel / 2 ** 20 == pytest.approx(102.0)
    assert sel / full == pytest.approx((34 / 8) / (34 / 8 + 10), rel=1e-12)   # 70 % of it was attention


def test_linear_in_batch_and_scores_quadratic_in_sequence():
    f = memory.activation_bytes_per_layer
    assert f(S, 4, H, A, tp=4) == pytest.approx(4 * f(S, 1, H, A, tp=4))
    assert f(2 * S, 1, H, A, recompute="selective") == pytest.approx(2 * f(S, 1, H, A, recompute="selective"))
    grow = f(2 * S, 1, H, A) - 2 * f(S, 1, H, A)                    # only the s² term grows faster
    assert grow == pytest.approx(5 * A * B * (2 * S) ** 2 - 2 * 5 * A * B * S ** 2)


@pytest.mark.parametrize("kwargs, name", [
    (dict(tp=5), "tp"), (dict(tp=0), "tp"), (dict(tp=2.5), "tp"), (dict(recompute="partial"), "recompute"),
    (dict(recompute=True), "recompute"), (dict(sequence_parallel="yes"), "sequence_parallel"),
    (dict(seq_len=float("nan")), "seq_len"), (dict(micro_batch=0), "micro_batch"),
    (dict(d_model=-4), "d_model"), (dict(n_heads=0), "n_heads"),
])
def test_bad_input_names_the_argument(kwargs, name):
    args = dict(seq_len=S, micro_batch=B, d_model=H, n_heads=A) | kwargs
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        memory.activation_bytes_per_layer(**args)


def test_tp_bytes_are_four_all_reduces_of_sbh():
    for t in (1, 2, 4, 8):
        expected = 4 * 2 * (t - 1) / t * S * B * H * 2
        assert comm.tp_bytes_per_layer(S, B, H, t) == pytest.approx(expected, rel=1e-12)
        assert comm.tp_bytes_per_layer(S, B, H, t) == pytest.approx(
            4 * comm.collective_bytes("all_reduce", S * B * H * 2, t), rel=1e-12)
        # sequence parallelism: reduce-scatter + all-gather instead of each all-reduce, same bytes
        rs_ag = comm.collective_bytes("reduce_scatter", S * B * H * 2, t) + comm.collective_bytes(
            "all_gather", S * B * H * 2, t)
        assert comm.tp_bytes_per_layer(S, B, H, t) == pytest.approx(4 * rs_ag, rel=1e-12)
    assert comm.tp_bytes_per_layer(S, B, H, 8, bytes_per_value=4) == 2 * comm.tp_bytes_per_layer(S, B, H, 8)


def test_cp_bytes_are_p_minus_1_over_p_of_k_and_v():
    for p in (1, 2, 4, 16):
        assert comm.cp_bytes_per_layer(8192, 1, 1024, p) == pytest.approx(2 * (p - 1) / p * 8192 * 1024 * 2)
    with pytest.raises(ValueError, match=r"\bcp\b"):
        comm.cp_bytes_per_layer(1000, 1, 1024, 16)
    with pytest.raises(ValueError, match=r"\bkv_dim\b"):
        comm.cp_bytes_per_layer(1024, 1, 0, 4)
    with pytest.raises(ValueError, match=r"\btp\b"):
        comm.tp_bytes_per_layer(1024, 1, 64, math.nan)


def test_cli(capsys):
    assert main(["activation_bytes_per_layer", "--seq-len", "2048", "--micro-batch", "1", "--d-model",
                 "12288", "--n-heads", "96", "--tp", "8", "--sequence-parallel", "true", "--json"]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(342.0 * 2 ** 20, rel=1e-5)
    with pytest.raises(SystemExit):
        main(["activation_bytes_per_layer", "--seq-len", "2048", "--micro-batch", "1", "--d-model",
              "12288", "--n-heads", "96", "--tp", "7"])
    assert re.search(r"error: arguments? (--[\w-]+, )*--tp\b", capsys.readouterr().err)


def test_llama_block_counted_tensor_by_tensor_beside_korthikanti():
    """RMSNorm + GQA + FlashAttention + SwiGLU, no dropout: 2sbh(6 + 2kv/a) + 6sbF + 4sba + 8sb
    bytes. For Llama 3 405B (h 16384, 128 heads, 8 KV heads, F 53248) that is 31.78·sbh, below
    Korthikanti's 34·sbh (GELU, multi-head, two 1-byte dropout masks) by the dropout masks and GQA."""
    from course_lib import memory
    s, h = 8192, 16384
    llama = memory.llama_activation_bytes_per_layer(s, 1, h, 128, 8, 53248)
    want = 2 * s * h * (6 + 2 * 8 / 128) + 6 * s * 53248 + 4 * s * 128 + 8 * s
    assert llama == pytest.approx(want, rel=1e-12)
    assert llama / (s * h) == pytest.approx(31.78, abs=0.01)
    assert memory.activation_bytes_per_layer(s, 1, h, 128, recompute="selective") == 34 * s * h
    # TP + SP shards everything, without SP the norms' 4sbh·2 bytes (and 8sb of rstd) stay whole
    sp = memory.llama_activation_bytes_per_layer(s, 1, h, 128, 8, 53248, tp=8, sequence_parallel=True)
    assert sp == pytest.approx(llama / 8, rel=1e-12)
    no_sp = memory.llama_activation_bytes_per_layer(s, 1, h, 128, 8, 53248, tp=8)
    assert no_sp - sp == pytest.approx((8 * s * h + 8 * s) * (1 - 1 / 8), rel=1e-12)
    # fewer K/V heads than TP ranks: each rank keeps one whole K/V head, not a fraction of one
    one = memory.llama_activation_bytes_per_layer(s, 1, h, 128, 1, 53248, tp=8, sequence_parallel=True)
    eight = memory.llama_activation_bytes_per_layer(s, 1, h, 128, 8, 53248, tp=8, sequence_parallel=True)
    assert one == pytest.approx(eight, rel=1e-12)
    with pytest.raises(ValueError, match="kv_heads"):
        memory.llama_activation_bytes_per_layer(s, 1, h, 128, 256, 53248)
    with pytest.raises(ValueError, match="kv_heads"):
        memory.llama_activation_bytes_per_layer(s, 1, h, 128, 48, 53248)


class _RMSNorm(torch.autograd.Function):
    """RMSNorm as the fused kernels save it (Apex / Transformer Engine): the input and the FP32
    reciprocal RMS; the output is saved by the GEMM that reads it."""

    @staticmethod
    def forward(ctx, x, w):
        r = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, r)
        return (x.float() * r).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        x, w, r = ctx.saved_tensors
        n = x.float() * r
        gn = g.float() * w.float()
        gx = r * (gn - n * (gn * n).mean(-1, keepdim=True))
        return gx.to(x.dtype), (g.float() * n).sum((0, 1)).to(w.dtype)


class _SwiGLU(torch.autograd.Function):
    """silu(gate) * up keeping only gate and up, the SiLU recomputed in the backward (Megatron-Core's
    fused SwiGLU saves its input alone)."""

    @staticmethod
    def forward(ctx, g, u):
        ctx.save_for_backward(g, u)
        return torch.nn.functional.silu(g) * u

    @staticmethod
    def backward(ctx, d):
        g, u = (x.detach().requires_grad_() for x in ctx.saved_tensors)
        with torch.enable_grad():
            y = torch.nn.functional.silu(g) * u
        return torch.autograd.grad(y, (g, u), d)


@pytest.mark.parametrize("kv", [2, 8])
def test_llama_count_is_what_autograd_saves_for_a_real_block(kv):
    """One Llama block in BF16 (RMSNorm, rotary, grouped-query causal attention through PyTorch's
    own FlashAttention kernel, SwiGLU), run under saved_tensors_hooks: the bytes autograd keeps
    equal llama_activation_bytes_per_layer to the byte. An eager silu(g) * u keeps the SiLU's
    output as well, 2sbF bytes more, which the count says is a fused kernel's saving."""
    from course_lib import memory
    F = torch.nn.functional
    torch.manual_seed(0)
    s, b, h, a, f = 128, 2, 256, 8, 704
    hd, dt = h // a, torch.bfloat16
    shapes = dict(q=(h, h), k=(kv * hd, h), v=(kv * hd, h), o=(h, h), g=(f, h), u=(f, h), d=(h, f))
    w = {k: (0.02 * torch.randn(*x, dtype=dt)).requires_grad_() for k, x in shapes.items()}
    w.update(n1=torch.ones(h, dtype=dt, requires_grad=True), n2=torch.ones(h, dtype=dt, requires_grad=True))
    angle = torch.arange(s)[:, None] / 10000 ** (torch.arange(0, hd, 2) / hd)[None]
    cos, sin = (torch.cat([fn(angle)] * 2, -1).to(dt) for fn in (torch.cos, torch.sin))

    def rotary(t):
        t1, t2 = t.chunk(2, -1)
        return t * cos + torch.cat([-t2, t1], -1) * sin

    def block(x, swiglu):
        n1 = _RMSNorm.apply(x, w["n1"])
        q, k, v = (F.linear(n1, w[n]).view(b, s, -1, hd).transpose(1, 2) for n in "qkv")
        o = F.scaled_dot_product_attention(rotary(q), rotary(k), v, is_causal=True, enable_gqa=True)
        x2 = x + F.linear(o.transpose(1, 2).reshape(b, s, h), w["o"])
        n2 = _RMSNorm.apply(x2, w["n2"])
        return x2 + F.linear(swiglu(F.linear(n2, w["g"]), F.linear(n2, w["u"])), w["d"])

    x = torch.randn(b, s, h, dtype=dt, requires_grad=True)
    consts = list(w.values()) + [cos, sin]
    fused = memory.saved_activation_bytes(block, x, _SwiGLU.apply, exclude=consts)
    eager = memory.saved_activation_bytes(block, x, lambda g, u: F.silu(g) * u, exclude=consts)
    want = memory.llama_activation_bytes_per_layer(s, b, h, a, kv, f)
    assert fused == want
    assert eager - fused == 2 * s * b * f
    block(x, _SwiGLU.apply).float().sum().backward()     # the block is a real one: it has a backward
    assert x.grad is not None and torch.isfinite(x.grad.float()).all()


def test_logits_memory_with_and_without_vocab_parallel_or_chunked_cross_entropy():
    """10 bytes per logit (BF16 logits, FP32 copy, FP32 gradient) for s·b tokens × V."""
    from course_lib import memory
    full = memory.logits_bytes(8192, 1, 128_256)
    assert full == 10 * 8192 * 128_256                                   # 10.5 GB at Llama 3's vocabulary
    assert memory.logits_bytes(8192, 1, 128_256, tp=8) == full / 8      # vocabulary-parallel CE
    assert memory.logits_bytes(8192, 1, 128_256, tp=8, vocab_parallel=False) == full
    assert memory.logits_bytes(8192, 1, 128_256, chunks=8) == full / 8  # chunked CE: one chunk alive
    with pytest.raises(ValueError, match="chunks"):
        memory.logits_bytes(8192, 1, 128_256, chunks=0)
