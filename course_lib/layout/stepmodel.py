"""One training step's compute, op by op, so that MFU is an output of a layout and not an input.

The layout planner (``course_lib.layout``) used to spread 6ND over the GPUs at one efficiency (50 %
of the dense peak) and add the exposed communication; then every dense model came out at 45–49 %
MFU whatever its width, sequence or cluster. Here one layer's work on one GPU, for one microbatch of
``t`` tokens, is timed from its parts on the accelerator:

* **GEMMs** (QKV, attention output, MLP up and down; forward, and in backward the gradients of the
  input and of the weight): each from its own shape (m, n, k). Time = max(compute, memory):
  compute at the accelerator's *maximum achievable matmul FLOPS* (``MATMUL_CEILING``: the best
  shape measured with ``mamf-finder``) divided by the **wave quantization** of its output tiles
  (NVIDIA, *Matrix Multiplication Background User's Guide*: a grid of T tiles on P processors runs
  ⌈T/P⌉ full waves), with the tiles themselves padded at the edges (tile quantization); memory =
  the three matrices over HBM bandwidth (the roofline: a skinny GEMM is bandwidth-bound).
* **Attention** (FlashAttention): forward FLOPs 4·t·s_kv·h (halved when causal), backward 2.5× the
  forward (FlashAttention-2's count, arXiv 2307.08691), at an efficiency that grows with the block
  length ℓ as E·ℓ/(ℓ + ℓ₀) (``attention_efficiency``) — fitted to FlashAttention-3's forward
  throughput on H100 at ℓ = 512 … 16K (``_FA3_H100``), backward at FlashAttention-2's ratio of
  backward to forward utilisation (63 % / 73 %).
* **Memory-bound work** (two RMSNorms, two residual adds, rotary on Q and K, the SwiGLU product;
  forward once, backward twice): elements moved per token counted in ``_elementwise_elements``,
  in 16-bit, at the datasheet's HBM bandwidth (an optimistic floor: real kernels reach less).
* The **optimizer step** once per step: AdamW reads and writes FP32 master weights and two moments
  and reads the gradient, and writes the 16-bit weights, 30 bytes per parameter it updates.
* **FP8** (``precision="fp8"`` in the planner: ``layer_time(..., fp8_peak=...)``): the GEMMs of
  ``FP8_GEMMS`` (forward, input gradient and weight gradient of each) run at the chip's dense FP8
  peak with the same efficiency model (the BF16 matmul ceiling's fraction, an assumption: the
  MAMF table measures BF16), reading 1-byte inputs; every such GEMM first casts its two inputs
  (``QUANTIZE_BYTES_PER_ELEMENT``, memory-bound at HBM bandwidth, the ``quantize`` part).
  Attention (softmax(QKᵀ)V), the norms and the embedding/output-head share stay BF16.

``layer_time`` returns the parts (seconds per layer and microbatch, forward + backward); the planner
multiplies by layers and microbatches, adds recomputation, the bubble and the exposed communication,
and MFU = 6ND / (GPUs · peak · step time) comes out. Every constant is cited beside it and checked
in ``tests/test_stepmodel.py``; the whole model is judged on published runs none of them came from
(``course_lib.plan.runs.HELD_OUT``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["MATMUL_CEILING", "PROCESSORS", "ATTENTION_CEILING", "gemm_seconds", "attention_efficiency",
           "LayerShape", "layer_time", "optimizer_seconds", "ADAM_BYTES_PER_PARAM", "SUSTAINED", "FP8_GEMMS",
           "FP8_SOURCE", "QUANTIZE_BYTES_PER_ELEMENT", "linear_seconds"]

# The GEMMs that run in FP8 under precision="fp8": the block's four Linear operators, each in its
# forward (Fprop), input-gradient (Dgrad) and weight-gradient (Wgrad) GEMM.
FP8_GEMMS = ("qkv", "attention_output", "mlp_up_gate", "mlp_down")
FP8_SOURCE = ("DeepSeek-V3 (arXiv 2412.19437 §3.3.1, Figure 6): Fprop, Dgrad and Wgrad of the Linear operators in "
              "FP8; the embedding, the output head, MoE gating, normalisation and attention operators kept in "
              "BF16/FP32. NVIDIA Transformer Engine's fp8_autocast likewise runs only its Linear layers' GEMMs in FP8 "
              "(core attention, softmax(QK^T)V, stays BF16 by default)")
# Casting one element of a GEMM input to FP8 before the GEMM: read it in BF16 (2 bytes), write it in
# FP8 (1 byte), and the amax reduction that sets its scale, counted as one more BF16 read (2 bytes):
# per-tensor current scaling reads the tensor for its amax before it can cast (Transformer Engine's
# Float8CurrentScaling; torchao's tensorwise Float8Linear). Delayed and tile-wise scaling fuse the
# amax into the cast's read (3 bytes), and a fused cast-transpose reuses an input between the forward
# and the backward, so counting both inputs of every FP8 GEMM at 5 bytes is an upper bound.
QUANTIZE_BYTES_PER_ELEMENT = 2.0 + 1.0 + 2.0

_MAMF = ("S. Bekman, Machine Learning Engineering Open Book, 'Maximum Achievable Matmul FLOPS comparison "
         "table' (compute/accelerator/README.md, BF16, mean of 100 iterations at the best shape found)")
_UNMEASURED = 0.80   # the median efficiency of the NVIDIA rows of that table, for a chip it does not list

# Fraction of the dense BF16 (FP16 on V100) peak the best-shaped GEMM reaches: (fraction, source).
MATMUL_CEILING = MappingProxyType({
    "H100-SXM": (794.5 / 989, f"{_MAMF}: H100 SXM 794.5 of 989 TFLOPS"),
    "H200": (794.5 / 989, f"{_MAMF}: 'H200 is the same' as H100 SXM, 794.5 of 989"),
    "H800": (794.5 / 989, "the H100 SXM's die and clocks (H800: NVLink cut only); its row of " + _MAMF),
    "H100-PCIe": (_UNMEASURED, f"not in {_MAMF}: the table's median NVIDIA efficiency, assumed"),
    "A100": (271.2 / 312, f"{_MAMF}: A100 SXM 271.2 of 312 TFLOPS"),
    "A100-40GB": (271.2 / 312, "the A100 80GB's die and clocks: its row of " + _MAMF),
    "V100": (_UNMEASURED, f"not in {_MAMF}: the table's median NVIDIA efficiency, assumed"),
    "B200": (1745.0 / 2250, f"{_MAMF}: B200 SXM 1745 of 2250 TFLOPS"),
    "B300": (1769.0 / 2250, f"{_MAMF}: B300 SXM 1769 of 2250 TFLOPS"),
    "MI250X": (147.0 / 191.5, f"{_MAMF}: MI250X 147.0 of 191.5 TFLOPS per GCD"),
    "MI300X": (668.4 / 1307.4, f"{_MAMF}: MI300X 668.4 TFLOPS (TunableOp), over the datasheet's 1307.4"),
    "TPUv4": (_UNMEASURED, f"not in {_MAMF}: assumed, the table's median NVIDIA efficiency"),
    "TPUv5e": (_UNMEASURED, f"not in {_MAMF}: assumed"),
    "TPUv5p": (_UNMEASURED, f"not in {_MAMF}: assumed"),
    "TPUv6e": (_UNMEASURED, f"not in {_MAMF}: assumed"),
})

# (processors that each run one output tile at a time, tile rows, tile columns, source): the wave
# quantization of a GEMM's output grid. NVIDIA's guide illustrates it with 256×128 tiles; the TPU's
# unit is its matrix unit (MXU, 128×128; 256×256 on v6e) and the count is MXUs per chip.
_GUIDE = "NVIDIA Deep Learning Performance Guide, 'Matrix Multiplication Background' (tile and wave quantization, 256×128 tiles)"
PROCESSORS = MappingProxyType({
    "H100-SXM": (132, 256, 128, "NVIDIA H100 whitepaper: 132 SMs on H100 SXM5; " + _GUIDE),
    "H200": (132, 256, 128, "the H100 SXM's GH100 with 132 SMs; " + _GUIDE),
    "H800": (132, 256, 128, "the H100 SXM's GH100 with 132 SMs; " + _GUIDE),
    "H100-PCIe": (114, 256, 128, "NVIDIA H100 whitepaper: 114 SMs on H100 PCIe; " + _GUIDE),
    "A100": (108, 256, 128, "NVIDIA A100 whitepaper: 108 SMs; " + _GUIDE),
    "A100-40GB": (108, 256, 128, "NVIDIA A100 whitepaper: 108 SMs; " + _GUIDE),
    "V100": (80, 256, 128, "NVIDIA V100 whitepaper: 80 SMs; " + _GUIDE),
    "B200": (148, 256, 128, "NVIDIA Blackwell: 148 SMs on B200 (two dies); " + _GUIDE),
    "B300": (148, 256, 128, "taken as B200's 148 SMs (assumed); " + _GUIDE),
    "MI250X": (220, 256, 128, "AMD CDNA2 whitepaper: 220 compute units (2 GCDs x 110); tiles as " + _GUIDE),
    "MI300X": (304, 256, 128, "AMD CDNA3 whitepaper: 304 compute units; tiles as " + _GUIDE),
    "TPUv4": (8, 128, 128, "TPU v4 (arXiv 2304.01433): 2 TensorCores x 4 MXUs of 128x128"),
    "TPUv5e": (4, 128, 128, "Google Cloud TPU v5e documentation: 1 TensorCore, 4 MXUs of 128x128"),
    "TPUv5p": (8, 128, 128, "Google Cloud TPU v5p documentation: 2 TensorCores x 4 MXUs"),
    "TPUv6e": (2, 256, 256, "Google Cloud TPU v6e documentation: 1 TensorCore, 2 MXUs of 256x256"),
})

# FlashAttention-3 forward, BF16, head dim 128, non-causal, batch·length = 16K tokens, 16 heads on
# H100 SXM: TFLOP/s by block length (pytorch/benchmark pull request 2391, the FA3 paper's shapes).
_FA3_H100 = ((512, 430.32), (1024, 517.099), (2048, 565.544), (4096, 590.233), (8192, 614.234), (16384, 620.73))
_FA_L0 = 233.0            # ℓ₀ of E·ℓ/(ℓ + ℓ₀) least-squares fitted to _FA3_H100 (tests/test_stepmodel.py refits it)
_FA_BWD = 0.63 / 0.73     # FlashAttention-2 (arXiv 2307.08691 §4.1): backward up to 63 %, forward up to 73 % of peak
_FA3_E = 629.3e12 / 989e12   # E of that fit, over the H100 SXM dense peak
# Forward FlashAttention at long blocks as a fraction of dense peak: (fraction, source).
ATTENTION_CEILING = MappingProxyType({
    **{k: (_FA3_E, "FlashAttention-3 on H100 (arXiv 2407.08608; throughput of pytorch/benchmark #2391), "
                   "E of the fit to _FA3_H100") for k in ("H100-SXM", "H200", "H800", "H100-PCIe")},
    **{k: (0.73, "FlashAttention-2 on A100 (arXiv 2307.08691 §4.1): forward up to 73 % of peak")
       for k in ("A100", "A100-40GB")},
})


# The share of an isolated kernel's rate a whole training step sustains: clocks under a sustained
# power cap, SMs lent to overlapped NCCL kernels (DeepSeek-V3 gives 20 of an H800's 132 to
# communication, arXiv 2412.19437 §3.2.2), and the slowest of thousands of GPUs setting the pace
# at every synchronisation. Not measured by any benchmark here, so FITTED, once: the value that
# makes Llama 3 405B's published 8K layout reach its published MFU (arXiv 2407.21783 Table 4,
# 41 % counting attention) — an example of plan.runs.RUNS; HELD_OUT stays unfitted.
# tests/test_stepmodel.py refits it.
SUSTAINED = 0.70


def _attention_ceiling(gpu: str) -> float:
    """A chip without a published FlashAttention figure: the H100's ratio of attention to matmul
    ceiling (FA3's E over the MAMF efficiency), applied to its own matmul ceiling — an assumption."""
    if gpu in ATTENTION_CEILING:
        return ATTENTION_CEILING[gpu][0]
    return MATMUL_CEILING[gpu][0] * _FA3_E / MATMUL_CEILING["H100-SXM"][0]


def attention_efficiency(gpu: str, block: float, backward: bool = False) -> float:
    """Fraction of dense peak FlashAttention sustains in a step on blocks of ``block`` queries
    (and keys): the published kernel rate times ``SUSTAINED``."""
    e = SUSTAINED * _attention_ceiling(gpu) * block / (block + _FA_L0)
    return e * _FA_BWD if backward else e


def _pow2_at_least(x: float) -> float:
    return 2.0 ** math.ceil(math.log2(x))


def gemm_seconds(m: float, n: float, k: float, gpu: str, peak: float, hbm_bandwidth: float,
                 bytes_per_value: float = 2.0, out_bytes: float | None = None) -> float:
    """Seconds for one (m×k)·(k×n) GEMM in a training step: the larger of its compute time (at the
    matmul ceiling times ``SUSTAINED``, divided by the share of the waves' processor slots that hold
    a tile's worth of real output) and its memory time.

    Tiles shrink (to a power of two, at least 64) for a matrix smaller than the big tile, and a grid
    of fewer tiles than processors splits its k dimension (split-K / Stream-K, Osama et al., arXiv
    2301.03598) into as many slices as fill the processors, each slice at least 512 deep: what
    cuBLAS's heuristics do, roughly, for small and weight-gradient GEMMs. ``out_bytes``: bytes per
    output value when they differ from the inputs' (an FP8 GEMM writes BF16)."""
    if min(m, n, k) <= 0:
        return 0.0
    units, tm, tn, _ = PROCESSORS[gpu]
    tm, tn = min(tm, max(64.0, _pow2_at_least(m))), min(tn, max(64.0, _pow2_at_least(n)))
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    split = max(1, min(units // tiles, int(k // 512)))
    useful = (m * n) / (tm * tn) * split         # tiles' worth of real output (edge tiles are padded)
    busy = math.ceil(tiles * split / units) * units   # processor-tiles the waves take
    compute = 2.0 * m * n * k / (peak * SUSTAINED * MATMUL_CEILING[gpu][0] * (useful / busy))
    if out_bytes is None:
        memory = bytes_per_value * (m * k + k * n + m * n) / hbm_bandwidth
    else:
        memory = (bytes_per_value * (m * k + k * n) + out_bytes * m * n) / hbm_bandwidth
    return max(compute, memory)


def linear_seconds(m: float, n: float, k: float, gpu: str, peak: float, hbm_bandwidth: float,
                   fp8_peak: float = 0.0) -> tuple[float, float]:
    """(GEMM seconds, quantization seconds) of one GEMM of a Linear operator: in BF16 at ``peak``
    (no quantization), or with ``fp8_peak`` > 0 in FP8: 1-byte inputs and a BF16 output at the FP8
    peak (``gemm_seconds``' efficiency model), after casting both inputs, m·k + k·n elements at
    ``QUANTIZE_BYTES_PER_ELEMENT`` over HBM."""
    if not fp8_peak:
        return gemm_seconds(m, n, k, gpu, peak, hbm_bandwidth), 0.0
    if min(m, n, k) <= 0:
        return 0.0, 0.0
    return (gemm_seconds(m, n, k, gpu, fp8_peak, hbm_bandwidth, bytes_per_value=1.0, out_bytes=2.0),
            QUANTIZE_BYTES_PER_ELEMENT * (m * k + k * n) / hbm_bandwidth)


@dataclass(frozen=True)
class LayerShape:
    """One transformer layer as one GPU of a layout sees it (per microbatch)."""

    tokens: float       # t = micro_batch · seq_len / cp: the rows of every GEMM
    d_model: int
    kv_width: int       # kv_heads · head_dim (d_model without grouped-query attention)
    mlp_params: float   # parameters of the MLP (SwiGLU: gate and up are 2/3 of them, down 1/3)
    tp: int
    sequence_parallel: bool
    seq_len: int        # the whole sequence (keys a query attends to, across CP)
    cp: int
    micro_batch: int
    causal: bool = True


def _elementwise_elements(x: LayerShape, ffn: float) -> float:
    """16-bit elements one layer's memory-bound ops read and write per token, forward only: two
    RMSNorms (read h, write h), two residual adds (read 2h, write h), rotary on Q and K (read and
    write), SwiGLU (read gate and up, write their product). Norms and residuals are split over TP
    ranks only with sequence parallelism; the rest follow the TP split of their GEMMs."""
    h, tp = x.d_model, x.tp
    norms_res = (2 * 2 * h + 2 * 3 * h) / (tp if x.sequence_parallel else 1)
    return norms_res + 2 * (h + x.kv_width) / tp + 3 * ffn / tp


def layer_time(x: LayerShape, gpu: str, peak: float, hbm_bandwidth: float, fp8_peak: float = 0.0,
               bf16_params: float = 0.0) -> dict[str, float]:
    """Seconds one layer takes on one GPU for one microbatch, forward + backward, by part:
    ``gemm``, ``attention``, ``memory`` (memory-bound ops), and ``forward`` (what one more forward
    costs: full recomputation) and ``attention_forward`` (selective recomputation).

    With ``fp8_peak`` > 0 the ``FP8_GEMMS`` run in FP8 (``linear_seconds``) and a ``quantize`` part
    holds their casts (in ``forward`` too, for recomputation); ``bf16_params`` of ``mlp_params``
    (the layer's share of the embedding and output head) are then timed apart, as one BF16 GEMM
    of that width."""
    h, tp, t = x.d_model, x.tp, x.tokens
    ffn = (x.mlp_params - bf16_params) / (3.0 * h)                   # SwiGLU width F: 3·h·F parameters
    shapes = [(t, (h + 2 * x.kv_width) / tp, h), (t, h, h / tp), (t, 2 * ffn / tp, h), (t, h, ffn / tp)]
    fwd = bwd = q_fwd = q_bwd = 0.0
    for m, n, k in shapes:
        g, q = linear_seconds(m, n, k, gpu, peak, hbm_bandwidth, fp8_peak)
        g1, q1 = linear_seconds(m, k, n, gpu, peak, hbm_bandwidth, fp8_peak)
        g2, q2 = linear_seconds(k, n, m, gpu, peak, hbm_bandwidth, fp8_peak)
        fwd, bwd, q_fwd, q_bwd = fwd + g, bwd + (g1 + g2), q_fwd + q, q_bwd + (q1 + q2)
    if bf16_params > 0:                                              # the head's share, in BF16
        m, n, k = t, bf16_params / h / tp, h
        fwd += gemm_seconds(m, n, k, gpu, peak, hbm_bandwidth)
        bwd += gemm_seconds(m, k, n, gpu, peak, hbm_bandwidth) + gemm_seconds(k, n, m, gpu, peak, hbm_bandwidth)
    # attention: each GPU's queries t against the keys before them (the whole sequence across CP)
    flops = 4.0 * t * x.seq_len * h / tp * (0.5 if x.causal else 1.0)
    block = x.seq_len / x.cp
    a_fwd = flops / (peak * attention_efficiency(gpu, block))
    a_bwd = 2.5 * flops / (peak * attention_efficiency(gpu, block, backward=True))
    mem_fwd = 2.0 * t * _elementwise_elements(x, x.mlp_params / (3.0 * h)) / hbm_bandwidth   # as in BF16
    out = {"gemm": fwd + bwd, "attention": a_fwd + a_bwd, "memory": 3.0 * mem_fwd,
           "forward": fwd + a_fwd + mem_fwd, "attention_forward": a_fwd}
    if fp8_peak:
        out["quantize"] = q_fwd + q_bwd
        out["forward"] += q_fwd
    return out


ADAM_BYTES_PER_PARAM = 30.0   # FP32 master, m, v read + written (24), FP32 grad read (4), 16-bit weight written (2)


def optimizer_seconds(params_updated: float, hbm_bandwidth: float) -> float:
    """The AdamW step on the parameters this GPU updates: memory-bound, once per step."""
    return ADAM_BYTES_PER_PARAM * params_updated / hbm_bandwidth
