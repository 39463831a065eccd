"""A 4D layout planner: pick (TP, CP, PP, DP), the ZeRO stage and recomputation for a cluster.

For every layout whose degrees multiply to the GPU count, the planner asks two questions:

1. **Does it fit?** Model states per GPU are ZeRO's (chapter 4) for Ψ/(TP·PP) parameters sharded
   over the DP·CP ranks that hold the same weights. Activations are Korthikanti et al.'s per-layer
   bytes (``memory.activation_bytes_per_layer``, with sequence parallelism whenever TP > 1), or a
   Llama block's counted tensor by tensor with ``block="llama"``
   (``memory.llama_activation_bytes_per_layer``), at the context-parallel shard s/CP, times the
   layers a first pipeline stage keeps alive: ⌈L/PP⌉ layers for min(PP, m) microbatches under 1F1B, × (1 + (PP−1)/(PP·v)) with v interleaved chunks (their
   §4.2.3; at most m); L layers of one microbatch without PP. What must fit is ``usable_fraction`` of HBM (the
   rest is logits, workspace, communication buffers and fragmentation, not modelled).
2. **How long is a step?** Compute is timed op by op on one GPU (``course_lib.stepmodel``): each
   GEMM of a layer from its shape after the TP and CP splits, FlashAttention at its rate for the
   block length, the memory-bound ops and the optimizer step over HBM, plus what recomputation
   reruns (one forward with full recomputation, attention's forward with selective); MFU is the
   output. (``compute_mfu=x`` instead spreads 6Ψ + attention over the GPUs at x of the peak: the
   old flat what-if.) The pipeline adds its bubble, (PP−1)/(v·m) of the pipeline's busy time, and
   every level adds its *exposed* communication: TP's four all-reduces per layer
   (``comm.tp_bytes_per_layer``) over NVLink, on the critical path unless ``tp_overlap=True``
   hides them behind the layer's GEMMs; CP's K/V exchange (``comm.cp_bytes_per_layer``, three
   times the forward bytes with the backward), as a ring minus the attention compute it hides
   behind, or as Llama 3's all-gather, exposed (``cp_comm``); PP's point-to-point activations (all
   counted, an upper bound); DP's ZeRO collectives over the network (``course_lib.network``) minus
   the compute they overlap (the last microbatch's backward for ZeRO 0–2, whose gradients are
   reduced once per step; the whole step for ZeRO-3, which re-gathers the parameters for every
   microbatch's forward and backward). ``Layout.breakdown`` holds the compute by op and
   ``Layout.hidden`` the communication each level hid.

Ranks are numbered TP fastest, then CP, PP, DP (Llama 3's order, arXiv 2407.21783 §3.3.2), so a
group lives inside one node when the degrees inside it multiply to at most the GPUs per node;
across nodes each GPU gets its share of the node's NICs per group member in the node. TP never
leaves a node. A layout is refused when the batch is too small for it: DP·m·b·s ≤ B tokens with
m ≥ 1 microbatch per pipeline (chapter 4's floor: PP does not lift it, CP and TP do). Fewer
microbatches than stages are allowed and pay their bubble, (PP−1)/(v·m) of the busy time, as
Llama 3 ran at its batch limit (arXiv 2407.21783 §3.3.2).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from . import comm, layout_moe, stepmodel
from ._validate import calculator, choice, flag, fraction, positive, positive_int, zero_stage
from .hardware import lookup
from .memory import BLOCKS, RECOMPUTE, _activation_bytes, _breakdown, _llama_activation_bytes
from .layout_explain import MEGATRON_2021, explain, gb, llama3_405b, megatron_1t
from .network import DGX_H100_NDR, Network

__all__ = ["Layout", "plan_layouts", "estimate", "layout", "explain", "llama3_405b", "megatron_1t", "MEGATRON_2021",
           "USABLE_FRACTION"]

_POW2 = tuple(2 ** i for i in range(8))   # 1 ... 128: the TP, CP and PP degrees searched
_INTERLEAVES = (1, 2, 4, 8)                # model chunks per pipeline rank searched
_MAX_LAYERS = 10 ** 5
# The share of HBM a training step may plan for. The rest goes to the CUDA context, NCCL's buffers
# and, mostly, the caching allocator's fragmentation: GMLake (Guo et al., ASPLOS 2024,
# arXiv 2401.08156) recovers 9.2 GB on average (up to 25 GB) of an 80 GB A100 across eight LLM
# training workloads by defragmenting PyTorch's allocator, i.e. ~11 % lost, so 0.9 is the average
# case, not the worst. Llama 3 405B's published 8K layout (arXiv 2407.21783 §3.3.2) fits at it,
# as Meta ran it (tests/test_layout.py checks both).
USABLE_FRACTION = 0.9
# ZB-H1 (Qi et al. 2023, arXiv 2401.10241 §3.1) splits each backward into B (input gradient) and W
# (weight gradient) and runs W late, so a pipeline idles (p-1)(T_F + T_B - T_W) instead of 1F1B's
# (p-1)(T_F + T_B + T_W) when m >= p. A layer's 6N FLOPs give T_F : T_B : T_W = 1 : 1 : 1, so a third
# of 1F1B's bubble (chapter 5's simulator replays the schedule and gives the same, tests/test_layout.py).
ZB_H1_BUBBLE_SHARE = (1 + 1 - 1) / (1 + 1 + 1)
GMLAKE_A100_FRAGMENTATION_BYTES = 9.2e9     # the average above, of an 80 GB A100


@dataclass(frozen=True)
class Layout:
    """One layout and what the planner estimates for it (bytes per GPU, seconds per step)."""

    tp: int
    cp: int
    pp: int
    dp: int
    v: int
    zero: int
    recompute: str
    microbatches: int
    states_bytes: float
    activation_bytes: float
    usable_bytes: float
    compute_s: float
    bubble_s: float
    tp_s: float
    cp_s: float
    pp_s: float
    dp_s: float
    mfu: float
    memory_bytes: float    # states + activations
    step_s: float          # compute + bubble + the four exposed communication terms
    explanation: str = ""
    breakdown: dict = field(default_factory=dict, compare=False)   # compute by part, seconds per step
    hidden: dict = field(default_factory=dict, compare=False)      # communication hidden, per level
    ep: int = 1            # expert parallelism, carved from DP (a mixture of experts)
    ep_s: float = 0.0      # the exposed all-to-all of the MoE layers
    schedule: str = "1f1b"  # the pipeline schedule ("zb-h1": zero-bubble's split backward)

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.usable_bytes

    def shape(self) -> str:
        """``TP 8 · CP 1 · PP 16 (v=2) · DP 128``."""
        v = f" (v={self.v})" if self.v > 1 else (" (ZB-H1)" if self.schedule == "zb-h1" and self.pp > 1 else "")
        ep = f" (EP {self.ep})" if self.ep > 1 else ""
        return f"TP {self.tp} · CP {self.cp} · PP {self.pp}{v} · DP {self.dp}{ep}"


@dataclass(frozen=True)
class _Job:
    psi: float
    L: int
    h: int
    a: int
    s: int
    tokens: float
    n: int
    kv: int
    b: int
    flash: bool
    peak: float
    rate: float | None  # FLOP/s at a given flat compute_mfu (the what-if); None: the step model
    link: float
    g: int
    net: Network
    usable: float
    max_cp: int
    max_zero: int
    sp: bool = True          # sequence parallelism with TP (Korthikanti et al. 2022, arXiv 2205.05198)
    selective: bool = True   # selective recomputation offered (same paper; needs stored scores)
    gpu: str = "H100-SXM"
    hbm_bandwidth: float = 3.35e12
    tp_overlap: bool = False  # TP collectives hidden behind the layer's GEMMs (Megatron's tp-comm-overlap)
    cp_comm: str = "ring"     # "ring" (K/V passed round, hidden behind attention) or "all_gather" (exposed)
    vocab: int = 0            # vocabulary size: the last stage's logits and loss (0: not counted)
    moe: layout_moe.MoE | None = None   # a mixture of experts (course_lib.layout_moe)
    schedule: str = "1f1b"    # "zb-h1": zero-bubble's B/W split (given layouts only, estimate)
    block: str = "gpt"        # how activations are counted (memory.BLOCKS): Korthikanti's or a Llama block's


def _in_node(g: int, sizes: tuple[int, ...], dims: tuple[int, ...]) -> int:
    """How many members of the group spanning ``dims`` (indices into TP, CP, PP, DP) one node of
    ``g`` consecutive ranks holds."""
    k, stride = 1, 1
    for i, size in enumerate(sizes):
        if i in dims:
            k *= min(size, max(1, g // stride))
        stride *= size
    return k


def _bandwidth(job: _Job, sizes: tuple[int, ...], dims: tuple[int, ...], p2p: bool = False) -> tuple[float, int]:
    """(bytes/s per GPU, members per node) of a group: the scale-up link inside one node, else the
    node's NIC bandwidth shared by its GPUs, times the group's members there for a collective
    (NCCL spreads its rings over their NICs), once for point-to-point sends (one NIC per GPU)."""
    k = _in_node(job.g, sizes, dims)
    if k == math.prod(sizes[i] for i in dims):
        return job.link, k
    return min(job.link, (1 if p2p else k) * job.net.ring_bandwidth / job.g), k


def _latency(net: Network, kind: str, n: int, k: int) -> float:
    """NCCL's ring latency (``Network.ring_latency``) for ``n`` ranks, ``k`` to a node, unchecked."""
    if n == 1:
        return 0.0
    nodes = -(-n // k)
    total, inter = (2 * (n - 1), 2 * nodes if nodes > 1 else 0) if kind == "all_reduce" else (n - 1, nodes - 1)
    return net.base_latency + (total - inter) * net.intra_latency + inter * net.inter_latency


def _layer_activations(job: _Job, s_cp: int, tp: int, sp: bool) -> float:
    """What one layer keeps for its backward without its s×s scores (FlashAttention's, or after
    selective recomputation): Korthikanti et al.'s count of a GPT block (``block="gpt"``), or the
    Llama block's, tensor by tensor (``block="llama"``: ``memory.llama_activation_bytes_per_layer``,
    with the SwiGLU width F = MLP parameters / 3h, as ``stepmodel.layer_time`` reads it; for a
    mixture of experts the active parameters give the k experts a token passes through)."""
    if job.block == "gpt":
        return _activation_bytes(s_cp, job.b, job.h, job.a, tp, sp, "selective")
    a_kv = job.a * job.kv // job.h                                # kv_heads
    mlp = _mlp_params(job.psi, job.L, job.h, job.kv)
    return _llama_activation_bytes(s_cp, job.b, job.h, job.a, a_kv, mlp / (3.0 * job.h), tp, sp)


def _in_flight(p: int, m: int, v: int) -> float:
    """Stage-activations the first stage holds at its peak: min(p, m) under 1F1B; interleaved,
    min(p(1 + (p−1)/(pv)), m) (Megatron's warm-up; equal to ``pipeline.peak_in_flight``)."""
    return min(p * (1 + (p - 1) / (p * v)), m) if v > 1 else min(p, m)


def _evaluate(job: _Job, tp: int, cp: int, pp: int, dp: int, v: int, zero: int, mode: str, ep: int = 1,
              first_layers: int | None = None) -> Layout:
    sizes, s_cp = (tp, cp, pp, dp), job.s // cp
    m = int(job.tokens / job.s // (dp * job.b))
    sp = tp > 1 and job.sp
    # memory: ZeRO states of this GPU's Ψ/(TP·PP) over the DP·CP replicas, then activations
    moe = job.moe
    psi_gpu = (job.psi - (moe.routed_active() if moe else 0.0)) / (tp * pp)   # the dense part
    experts_gpu = moe.routed_total() / (pp * ep) if moe else 0.0              # E/ep experts, whole
    per_stage = math.ceil(job.L / pp)
    states = _breakdown(psi_gpu, dp * cp, zero, 2.0, 2.0, 12.0).total
    if moe:
        states += _breakdown(experts_gpu, dp * cp // ep, zero, 2.0, 2.0, 12.0).total
    if zero == 3:
        states += 2 * 2.0 * psi_gpu / per_stage                   # two gathered layers in flight
    kept = _layer_activations(job, s_cp, tp, sp)
    act = kept
    if mode == "full":
        act = _activation_bytes(s_cp, job.b, job.h, job.a, tp, sp, "full")
    elif mode == "none" and not job.flash:                        # scores of s/cp queries × s keys
        act += 5.0 * job.a * s_cp * job.s * job.b / tp
    first = per_stage if first_layers is None else first_layers  # layers on the first stage
    held = job.L if pp == 1 else first * _in_flight(pp, m, v)
    activations = act * held + (kept if mode == "full" else 0.0)  # + the layer being recomputed
    if job.vocab:   # the last stage: its layers for one microbatch in flight, and the logits
        logits = _logits_bytes(s_cp * job.b, job.vocab, tp)
        if pp == 1:
            activations += logits
        else:
            last = act * first + (kept if mode == "full" else 0.0) + logits
            activations = max(activations, last)
    # compute: op by op (course_lib.stepmodel), or 6Ψ + 3·attention at a given flat efficiency
    layers = job.L / pp
    t_mb = job.b * s_cp                                           # tokens per microbatch on this GPU
    m_f = job.tokens / (job.s * dp * job.b)                       # the batch's microbatches (m rounds it down)
    parts = _parts(job, tp, cp, t_mb, sp) if moe is None else _moe_parts(job, tp, cp, t_mb, sp, ep)
    rerun = {"none": 0.0, "selective": parts["attention_forward"], "full": parts["forward"]}[mode]
    if job.rate is None:
        per_layer = parts["gemm"] + parts["attention"] + parts["memory"] + rerun
        updated = (psi_gpu / (dp * cp) + experts_gpu * ep / (dp * cp)) if zero >= 1 else psi_gpu + experts_gpu
        optim = stepmodel.optimizer_seconds(updated, job.hbm_bandwidth)
        compute = m_f * layers * per_layer + optim
        breakdown = {k: m_f * layers * v for k, v in (("gemm", parts["gemm"]), ("attention", parts["attention"]),
                                                     ("memory", parts["memory"]), ("recompute", rerun))}
        breakdown["optimizer"] = optim
    else:
        attn = 2.0 * job.L * job.s * job.h                        # causal forward, per token
        rerun_f = {"none": 0.0, "selective": attn, "full": 2 * job.psi + attn}[mode]
        compute = job.tokens * (6 * job.psi + 3 * attn + rerun_f) / job.n / job.rate
        breakdown = {"compute": compute}
    # TP: four all-reduces per layer and microbatch (six with full recomputation), inside the node;
    # with tp_overlap hidden behind the layer's GEMMs as far as they last
    reps = 1.5 if mode == "full" else 1.0
    tp_layer = reps * 4 * (comm._ring("all_reduce", 2.0 * s_cp * job.b * job.h, tp) / job.link
                           + _latency(job.net, "all_reduce", tp, job.g)) if tp > 1 else 0.0
    tp_hidden = min(tp_layer, parts["gemm"] * (reps if mode == "full" else 1.0)) if job.tp_overlap else 0.0
    tp_s = m * layers * (tp_layer - tp_hidden)
    # CP: K/V of the other ranks, forward + backward = 3× the forward bytes. "ring": passed round
    # block by block, hidden behind the attention compute of the blocks (Liu et al., arXiv
    # 2310.01889); "all_gather": gathered before attention and reduced after, exposed (Llama 3,
    # arXiv 2407.21783 §3.3.2)
    cp_s = cp_hidden = 0.0
    if cp > 1:
        bw, _ = _bandwidth(job, sizes, (1,), p2p=job.cp_comm == "ring")
        kv = max(job.kv // tp, job.h // job.a)                    # K/V width on one TP rank
        ring = 3 * (2 * comm._ring("all_gather", 2.0 * job.s * job.b * kv, cp) / bw
                    + (cp - 1) * job.net.inter_latency)
        if job.cp_comm == "ring":
            hide = parts["attention"] if job.rate is None else 3 * 2.0 * job.s * job.h * s_cp * job.b / tp / job.rate
            cp_hidden = min(ring, hide)
        cp_s = m * layers * (ring - cp_hidden)
    # PP: one activation message forward and one gradient back per chunk and microbatch
    pp_s = 0.0
    if pp > 1:
        bw, _ = _bandwidth(job, sizes, (2,), p2p=True)
        pp_s = m * 2 * v * (2.0 * s_cp * job.b * job.h / tp / bw + job.net.inter_latency)
    # EP: the all-to-all of each MoE layer, inside the node over NVLink, beyond it over the NICs
    ep_s = ep_hidden = 0.0
    if moe and ep > 1:
        in_node = min(ep, max(1, job.g // (tp * cp * pp)))       # DP replicas are strided by TP·CP·PP
        a2a = layout_moe.all_to_all_seconds(moe, t_mb / tp, job.h, ep, in_node, job.link,
                                            job.net.ring_bandwidth / job.g, job.net.inter_latency)
        if moe.overlap:
            ep_hidden = min(a2a, parts["moe_layer"])
        ep_s = m * (moe.moe_layers / pp) * (a2a - ep_hidden)
    busy = compute + tp_s + cp_s + ep_s
    bubble = busy * (pp - 1) / (v * m)
    if job.schedule == "zb-h1" and m >= pp:
        bubble *= ZB_H1_BUBBLE_SHARE
    # DP: ZeRO's collectives over the DP·CP replicas (ZeRO-3 gathers per microbatch, twice)
    dp_s = dp_hidden = 0.0
    n = dp * cp
    if n > 1:
        bw, k = _bandwidth(job, sizes, (1, 3))
        kinds = [(kd, 1) for kd in comm._PASSES[zero]] if zero < 3 else [("all_gather", 2 * m), ("reduce_scatter", 1)]
        t = sum(c * (comm._ring(kd, psi_gpu * 2.0, n) / bw + per_stage * _latency(job.net, kd, n, k))
                for kd, c in kinds)
        if moe and n // ep > 1:   # expert gradients over the expert-data-parallel group
            t += sum(c * comm._ring(kd, experts_gpu * 2.0, n // ep) / bw for kd, c in kinds)
        dp_hidden = min(t, busy if zero == 3 else busy * 2 / (3 * m))   # ZeRO 0-2: the last backward
        dp_s = t - dp_hidden
    step = compute + bubble + tp_s + cp_s + pp_s + dp_s + ep_s
    hidden = {"tp": m * layers * tp_hidden, "cp": m * layers * cp_hidden, "dp": dp_hidden}
    if moe:
        hidden["ep"] = m * (moe.moe_layers / pp) * ep_hidden
    return Layout(tp, cp, pp, dp, v, zero, mode, m, states, activations, job.usable, compute, bubble,
                  tp_s, cp_s, pp_s, dp_s, 6 * job.psi * job.tokens / job.n / (job.peak * step),
                  states + activations, step, breakdown=breakdown, hidden=hidden, ep=ep, ep_s=ep_s,
                  schedule=job.schedule)


def _moe_parts(job: _Job, tp: int, cp: int, t_mb: float, sp: bool, ep: int) -> dict[str, float]:
    """A mixture of experts' layer times, averaged over its dense and MoE layers: a dense layer's
    MLP is the active one, (k + shared) experts; an MoE layer has its shared experts (TP-split
    like a dense MLP) and its routed experts on this GPU (``layout_moe.routed_seconds``, for the
    t/TP tokens of this TP rank). What Ψ holds beyond attention and the active experts (the
    embeddings) is spread over the layers as more dense GEMM work, as for a dense model.
    ``moe_layer`` is one MoE layer's compute, what an overlapped all-to-all can hide behind."""
    moe, h = job.moe, job.h
    attn = 2.0 * h * h + 2.0 * h * job.kv
    active = (moe.top_k + moe.shared) * moe.expert_params
    rest = max(job.psi / job.L - attn - active, 0.0)
    dense = _layer_parts(job.psi, job.L, h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                         tp, cp, t_mb, sp, mlp=active + rest)
    shared = _layer_parts(job.psi, job.L, h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                          tp, cp, t_mb, sp, mlp=moe.shared * moe.expert_params + rest)
    routed = layout_moe.routed_seconds(moe, t_mb / tp, h, ep, job.gpu, job.peak, job.hbm_bandwidth)
    w = moe.moe_layers / job.L
    out = {k: (1 - w) * dense[k] + w * shared[k] for k in dense}
    for k in ("gemm", "memory", "forward"):
        out[k] += w * routed[k]
    out["moe_layer"] = shared["gemm"] + shared["attention"] + shared["memory"] + sum(
        routed[k] for k in ("gemm", "memory"))
    return out


def _logits_bytes(tokens: float, vocab: int, tp: int) -> float:
    """``memory.logits_bytes`` on checked inputs: 10 bytes per logit (BF16 logits, their FP32 copy
    and FP32 gradient), vocabulary-parallel over the TP ranks (Megatron-LM's cross-entropy)."""
    return 10.0 * tokens * vocab / tp


def _parts(job: _Job, tp: int, cp: int, t_mb: float, sp: bool) -> dict[str, float]:
    """One layer's op times on one GPU for one microbatch (``stepmodel.layer_time``)."""
    return _layer_parts(job.psi, job.L, job.h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                        tp, cp, t_mb, sp)


@functools.lru_cache(maxsize=4096)
def _layer_parts(psi, n_layers, h, kv, s, b, gpu, peak, hbm, tp, cp, t_mb, sp, mlp=None) -> dict[str, float]:
    """A pure function of its arguments, cached: the search asks it again for every PP, DP, v,
    ZeRO stage and recomputation mode of one (TP, CP). ``mlp``: the MLP's parameters, by default
    the rest of a layer's share of Ψ after attention."""
    if mlp is None:
        mlp = _mlp_params(psi, n_layers, h, kv)
    shape = stepmodel.LayerShape(t_mb, h, kv, mlp, tp, sp, s, cp, b)
    return stepmodel.layer_time(shape, gpu, peak, hbm)


def _mlp_params(psi: float, n_layers: int, h: int, kv: int) -> float:
    """A layer's MLP parameters: its share of Ψ after attention's Q, O (h² each) and K, V (h·kv
    each, kv the K/V width), at least h²."""
    return max(psi / n_layers - (2.0 * h * h + 2.0 * h * kv), h * h)


def _candidates(job: _Job, recompute: tuple[str, ...]):
    """Every (tp, cp, pp, dp, v, zero, recompute, ep) of the searched grid (powers of two, ``_INTERLEAVES``,
    ``layout_moe.expert_degrees``) that breaks none of ``_rule_broken``'s rules."""
    for tp in _POW2:
        for cp in _POW2:
            for pp in _POW2:
                if job.n % (tp * cp * pp):
                    continue
                dp = job.n // (tp * cp * pp)
                # m < PP runs, with its bubble (Llama 3 at its batch limit, arXiv 2407.21783 §3.3.2,
                # whose schedule also lets m be any count when interleaved)
                for v in [1] if pp == 1 else _INTERLEAVES:
                    if _rule_broken(job, tp, cp, pp, dp, v, 0, "none", 1):
                        continue
                    for zero in range(job.max_zero + 1):
                        for mode in recompute:
                            for ep in (layout_moe.expert_degrees(job.moe, dp, _POW2) if job.moe else (1,)):
                                yield tp, cp, pp, dp, v, zero, mode, ep


def _rule_broken(job: _Job, tp: int, cp: int, pp: int, dp: int, v: int, zero: int, mode: str, ep: int) -> str:
    """The first rule a layout breaks ("" when none): the rules the search filters its grid with
    (``_candidates``) and ``estimate`` checks a given layout against. A published layout may use
    degrees the search does not try (BLOOM ran PP 12, Megatron-LM's 1T model DP 6), so any whole
    degree is evaluated."""
    if tp > job.g or job.g % tp:
        return f"TP must divide the {job.g} GPUs of a node (its all-reduces need the scale-up link)"
    if job.a % tp:
        return f"TP must divide the {job.a} heads"
    if job.s % cp or cp > job.max_cp:
        return f"CP must divide the sequence ({job.s} tokens)"
    if pp > job.L:
        return f"PP cannot exceed the {job.L} layers"
    if int(job.tokens / job.s // (dp * job.b)) < 1:
        return ("each pipeline needs at least one microbatch: DP may be at most the "
                f"{job.tokens / job.s:g} sequences of a step")
    if pp == 1 and v > 1:
        return "interleaving (v > 1) needs a pipeline (PP > 1)"
    if v * pp > job.L:
        return "v chunks of at least one layer per stage (v·PP <= n_layers)"
    if job.moe is not None and (ep > dp or dp % ep or job.moe.n_experts % ep):
        return f"EP must divide DP ({dp}) and the {job.moe.n_experts} experts"
    return ""


def _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu, network,
         compute_mfu, usable_fraction, flash_attention, kv_heads, micro_batch, max_cp, max_zero,
         sequence_parallel=True, selective_recompute=True, tp_overlap=False, cp_comm="ring",
         vocab_size=None, moe=None, block="gpt") -> _Job:
    a = positive_int("n_heads", n_heads)
    kv = a if kv_heads is None else positive_int("kv_heads", kv_heads)
    if kv > a or a % kv:
        raise ValueError(f"kv_heads ({kv}) must divide n_heads ({a}): each K/V head serves a whole group "
                         f"of query heads")
    if not isinstance(network, Network):
        raise ValueError(f"network must be a course_lib.network.Network, got {network!r:.40}")
    h = positive_int("d_model", d_model)
    if h % a:    # d_model 1000 with 7 heads, or 32 with 64: no such attention exists
        raise ValueError(f"n_heads ({a}) must divide d_model ({h}): each head gets d_model/n_heads "
                         f"dimensions, a whole number of at least 1")
    s = positive_int("seq_len", seq_len)
    tokens = positive("global_batch_tokens", global_batch_tokens)
    if tokens < s:
        raise ValueError(f"global_batch_tokens ({global_batch_tokens!r}) is less than one sequence "
                         f"(seq_len={s})")
    acc = lookup("gpu", gpu)
    u = None if compute_mfu is None else fraction("compute_mfu", compute_mfu)
    peak = acc.peak(acc.training_dtype)
    return _Job(positive("n_params", n_params), positive_int("n_layers", n_layers, maximum=_MAX_LAYERS), h, a, s,
                tokens, positive_int("n_gpus", n_gpus), kv * h // a, positive_int("micro_batch", micro_batch),
                flag("flash_attention", flash_attention), peak, None if u is None else peak * u,
                acc.link_bandwidth, network.gpus_per_node, network,
                acc.hbm_bytes * fraction("usable_fraction", usable_fraction), positive_int("max_cp", max_cp),
                zero_stage("max_zero", max_zero), flag("sequence_parallel", sequence_parallel),
                flag("selective_recompute", selective_recompute), acc.name, acc.hbm_bandwidth,
                flag("tp_overlap", tp_overlap), choice("cp_comm", cp_comm, ("ring", "all_gather")),
                0 if vocab_size is None else positive_int("vocab_size", vocab_size, minimum=2),
                _moe(moe, n_layers), block=choice("block", block, BLOCKS))


def _moe(moe, n_layers) -> layout_moe.MoE | None:
    if moe is None:
        return None
    if not isinstance(moe, layout_moe.MoE):
        raise ValueError(f"moe must be a course_lib.layout_moe.MoE or None, got {moe!r:.40}")
    return moe.checked(positive_int("n_layers", n_layers, maximum=_MAX_LAYERS))


def _all(job: _Job) -> list[Layout]:
    modes = ("none", "full") if job.flash or not job.selective else ("none", "selective", "full")
    return sorted((_evaluate(job, *c) for c in _candidates(job, modes)), key=lambda x: x.step_s)


@calculator
def plan_layouts(n_params: float, n_layers: int, d_model: int, n_heads: int, seq_len: int,
                 global_batch_tokens: float, n_gpus: int, *, gpu: str = "H100-SXM",
                 network: Network = DGX_H100_NDR, compute_mfu: float | None = None,
                 usable_fraction: float = USABLE_FRACTION,
                 flash_attention: bool = True, kv_heads: int | None = None,
                 micro_batch: int = 1, max_cp: int = 128, max_zero: int = 3, sequence_parallel: bool = True,
                 selective_recompute: bool = True, tp_overlap: bool = False, cp_comm: str = "ring",
                 vocab_size: int | None = None, moe: layout_moe.MoE | None = None,
                 block: str = "gpt") -> list[Layout]:
    """Every layout that fits, fastest first (see the module docstring for the model).

    ``network`` gives the GPUs per node and the NICs; ``kv_heads`` (grouped-query attention)
    shrinks what the CP ring carries; ``flash_attention`` (the default, as in every large run
    today) means no s×s scores are stored, so selective recomputation has nothing to save;
    ``max_cp=1`` plans without context parallelism (as before 2023), ``max_zero=0`` without
    sharded optimizer states (Megatron-LM in 2021); ``sequence_parallel=False`` and
    ``selective_recompute=False`` take away the two 2022 techniques of Korthikanti et al.
    (arXiv 2205.05198), leaving no recomputation or full recomputation.

    Compute time is the step model's (``course_lib.stepmodel``: each GEMM, attention and the
    memory-bound ops from their shapes), unless ``compute_mfu`` gives one flat efficiency (the old
    what-if: 6Ψ + attention at that fraction of peak). ``tp_overlap=True`` hides TP's collectives
    behind the layer's GEMMs (Megatron-LM's ``--tp-comm-overlap``, off by default there);
    ``cp_comm`` is "ring" (K/V passed round behind the attention compute, Megatron-Core's form) or
    "all_gather" (gathered up front and exposed, as Llama 3 did). ``vocab_size`` counts the last
    stage's logits and cross-entropy (``memory.logits_bytes``, vocabulary-parallel over TP) on top
    of its layers for one microbatch; left None, logits are not counted. ``moe`` plans a mixture
    of experts (``course_lib.layout_moe``): ``n_params`` are then the active parameters, and an
    expert-parallel degree carved from DP joins the search. ``block`` says how a layer's
    activations are counted: "gpt", Korthikanti et al.'s GELU / multi-head / dropout block
    (``memory.activation_bytes_per_layer``), or "llama", an RMSNorm / grouped-query / SwiGLU block
    without dropout, counted tensor by tensor (``memory.llama_activation_bytes_per_layer``).
    """
    job = _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu, network,
               compute_mfu, usable_fraction, flash_attention, kv_heads, micro_batch, max_cp, max_zero,
               sequence_parallel, selective_recompute, tp_overlap, cp_comm, vocab_size, moe, block)
    return [x for x in _all(job) if x.fits]


@calculator
def estimate(tp: int, cp: int, pp: int, dp: int, *, n_params: float, n_layers: int, d_model: int,
             n_heads: int, seq_len: int, global_batch_tokens: float, v: int = 1, zero: int = 1,
             recompute: str = "none", gpu: str = "H100-SXM", network: Network = DGX_H100_NDR,
             compute_mfu: float | None = None, usable_fraction: float = USABLE_FRACTION, flash_attention: bool = True,
             kv_heads: int | None = None, trim_first_last: bool = False, tp_overlap: bool = False,
             cp_comm: str = "ring", vocab_size: int | None = None, moe: layout_moe.MoE | None = None,
             ep: int = 1, schedule: str = "1f1b", block: str = "gpt") -> Layout:
    """The planner's memory and step time for one given layout (e.g. a published one), whether or
    not it fits; it must satisfy the same rules (TP inside a node, m ≥ 1, CP dividing s). Inputs
    whose step time or memory overflows a float (``n_params=1e308``) are a ValueError naming them.

    ``trim_first_last=True`` lays the layers out as Llama 3 did (arXiv 2407.21783 §3.3.2, "we
    reduce one Transformer layer each from the first and the last stages"): the stages hold
    ⌈(L + 2)/PP⌉ layers but the first and the last one fewer, so the first stage, which keeps the
    most microbatches in flight, counts one layer less; ``v`` may then go up to one layer per chunk
    (v = ⌈(L + 2)/PP⌉, Llama 3's 126 layers in 16 stages of 8 chunks), beyond the search's v·PP ≤ L.
    The model states stay those of the average stage, Ψ/(TP·PP): the first stage's embedding
    table takes the place of the layer it gives up.

    ``schedule="zb-h1"`` times the pipeline as ZB-H1 (zero-bubble with 1F1B's memory, DeepSeek-V2's
    schedule, arXiv 2405.04434 §3.2): a third of 1F1B's bubble when m >= PP (``ZB_H1_BUBBLE_SHARE``),
    1F1B's below; it needs v = 1. The search does not try it.
    """
    degrees = {k: positive_int(k, x) for k, x in dict(tp=tp, cp=cp, pp=pp, dp=dp, v=v).items()}
    job = _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, math.prod(
        degrees[k] for k in ("tp", "cp", "pp", "dp")), gpu, network, compute_mfu, usable_fraction,
        flash_attention, kv_heads, 1, degrees["cp"], zero_stage("zero", zero), tp_overlap=tp_overlap,
        cp_comm=cp_comm, vocab_size=vocab_size, moe=moe, block=block)
    ep = positive_int("ep", ep)
    sched = choice("schedule", schedule, ("1f1b", "zb-h1"))
    if sched == "zb-h1" and v > 1:
        raise ValueError(f"schedule='zb-h1' is a schedule without interleaving: it needs v=1, got v={v}")
    job = replace(job, schedule=sched)
    if ep > 1 and job.moe is None:
        raise ValueError(f"ep={ep}: expert parallelism needs a mixture of experts (moe=...)")
    mode = choice("recompute", recompute, ("none", "full") if job.flash else RECOMPUTE)
    want = (tp, cp, pp, dp, v, zero, mode, ep)
    first = None
    if trim_first_last:
        flag("trim_first_last", trim_first_last)
        stage = math.ceil((job.L + 2) / pp)
        if pp < 3 or v > stage:
            raise ValueError(f"trim_first_last needs pp >= 3 (a first, a middle and a last stage) and "
                             f"v <= {stage} layers per stage, got pp={pp}, v={v}")
        first = stage - 1
        want = (tp, cp, pp, dp, 1, zero, mode, ep)      # the other rules, checked as for v = 1
    broken = _rule_broken(job, *want)
    if broken:
        ep_text = f", ep={ep}" if ep > 1 else ""
        raise ValueError(f"tp={tp}, cp={cp}, pp={pp}, dp={dp}, v={v}{ep_text} breaks a rule: {broken}")
    return _evaluate(job, tp, cp, pp, dp, v, zero, mode, ep, first)


@calculator
def layout(n_params: float, n_layers: int, d_model: int, n_heads: int, seq_len: int,
           global_batch_tokens: float, n_gpus: int, gpu: str = "H100-SXM", gpus_per_node: int = 8,
           nics_per_node: int = 8, nic_bits_per_s: float | None = None, kv_heads: int | None = None,
           compute_mfu: float | None = None, usable_fraction: float = USABLE_FRACTION, flash_attention: bool = True,
           max_cp: int = 128, max_zero: int = 3, sequence_parallel: bool = True,
           selective_recompute: bool = True, tp_overlap: bool = False, cp_comm: str = "ring",
           vocab_size: int | None = None, moe: layout_moe.MoE | None = None, block: str = "gpt") -> Layout:
    """The fastest layout that fits, with its explanation (``python -m course_lib layout``): the
    planner of :func:`plan_layouts` on nodes of ``gpus_per_node`` GPUs and ``nics_per_node`` NICs
    of ``nic_bits_per_s`` each (default: the NIC of ``gpu``'s generation, ``Accelerator.nic_bits_per_s``)."""
    nic = lookup("gpu", gpu).nic_bits_per_s if nic_bits_per_s is None else nic_bits_per_s
    net = Network("custom", positive_int("gpus_per_node", gpus_per_node),
                  positive_int("nics_per_node", nics_per_node), positive("nic_bits_per_s", nic))
    job = _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu, net,
               compute_mfu, usable_fraction, flash_attention, kv_heads, 1, max_cp, max_zero,
               sequence_parallel, selective_recompute, tp_overlap, cp_comm, vocab_size, moe, block)
    everything = _all(job)
    plans = [x for x in everything if x.fits]
    if not plans:
        small = min(everything, key=lambda x: x.memory_bytes, default=None)
        why = (f"the smallest needs {gb(small.memory_bytes)} per GPU" if small else
               "the GPU count and the batch floor (a sequence per data-parallel replica) allow no layout")
        if small and small.activation_bytes > small.states_bytes:   # then the width and length are the cause
            why += (f", {gb(small.activation_bytes)} of it activations (d_model={job.h}, "
                    f"seq_len={job.s})")
        raise ValueError(f"no layout fits: n_params={n_params!r} on n_gpus={n_gpus!r} with "
                         f"global_batch_tokens={global_batch_tokens!r} and usable_fraction="
                         f"{usable_fraction!r} of HBM: {why}")
    return replace(plans[0], explanation=explain(plans, everything))
