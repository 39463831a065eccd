"""One layout's memory and step time (``_evaluate``): ZeRO's states and the activations a first
stage keeps, the step model's compute, the bubble and each level's exposed communication (see
``course_lib.layout`` for the model)."""
from __future__ import annotations

import functools
import math

from .. import comm
from ..memory import _activation_bytes, _breakdown, _llama_activation_bytes
from ..network import Network
from . import stepmodel
from . import bubble as _bubble
from .job import Layout, _Job
from .moe import FP8_DISPATCH_BYTES, all_to_all_seconds, routed_seconds


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
    if job.rank_order == "tp-cp-dp-pp":              # PP outermost: DP (and EP) inside the node
        sizes, dims = (sizes[0], sizes[1], sizes[3], sizes[2]), tuple((0, 1, 3, 2)[d] for d in dims)
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


def _in_flight(p: int, m: int, v: int, schedule: str = "1f1b", fbw: tuple = _bubble.FBW) -> float:
    """Stage-activations the busiest stage holds at its peak (``layout.bubble.in_flight``): min(p, m)
    under 1F1B; interleaved, min(p(1 + (p−1)/(pv)), m) (Megatron's warm-up; equal to
    ``pipeline.peak_in_flight``); the simulator's replayed peak for the other schedules."""
    return _bubble.in_flight(schedule, p, m, v, fbw)


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
    for _ in range(1, _bubble.PARAMETER_COPIES.get(job.schedule, 1) if pp > 1 else 1):
        # DualPipe's second copy of the stage: its weights and gradients (one optimizer state)
        states += _breakdown(psi_gpu, dp * cp, zero, 2.0, 2.0, 0.0).total
        if moe:
            states += _breakdown(experts_gpu, dp * cp // ep, zero, 2.0, 2.0, 0.0).total
    if zero == 3:
        states += 2 * 2.0 * psi_gpu / per_stage                   # two gathered layers in flight
    kept = _layer_activations(job, s_cp, tp, sp)
    act = kept
    if mode == "full":
        act = _activation_bytes(s_cp, job.b, job.h, job.a, tp, sp, "full")
    elif mode == "none" and not job.flash:                        # scores of s/cp queries × s keys
        act += 5.0 * job.a * s_cp * job.s * job.b / tp
    first = per_stage if first_layers is None else first_layers  # layers on the first stage
    held = job.L if pp == 1 else first * _in_flight(pp, m, v, job.schedule, job.fbw)
    activations = act * held + (kept if mode == "full" else 0.0)  # + the layer being recomputed
    if job.vocab:   # the last stage: its layers for one microbatch in flight, and the logits
        logits = _logits_bytes(s_cp * job.b, job.vocab, tp)
        if pp == 1:
            activations += logits
        else:
            last = act * first + (kept if mode == "full" else 0.0) + logits
            activations = max(activations, last)
    # compute: op by op (course_lib.layout.stepmodel), or 6Ψ + 3·attention at a given flat efficiency
    layers = job.L / pp
    t_mb = job.b * s_cp                                           # tokens per microbatch on this GPU
    m_f = job.tokens / (job.s * dp * job.b)                       # the batch's microbatches (m rounds it down)
    parts = _parts(job, tp, cp, t_mb, sp) if moe is None else _moe_parts(job, tp, cp, t_mb, sp, ep)
    rerun = {"none": 0.0, "selective": parts["attention_forward"], "full": parts["forward"]}[mode]
    if job.rate is None:
        per_layer = parts["gemm"] + parts["attention"] + parts["memory"] + rerun
        if job.fp8_peak:
            per_layer += parts["quantize"]
        updated = (psi_gpu / (dp * cp) + experts_gpu * ep / (dp * cp)) if zero >= 1 else psi_gpu + experts_gpu
        optim = stepmodel.optimizer_seconds(updated, job.hbm_bandwidth)
        compute = m_f * layers * per_layer + optim
        breakdown = {k: m_f * layers * v for k, v in (("gemm", parts["gemm"]), ("attention", parts["attention"]),
                                                     ("memory", parts["memory"]), ("recompute", rerun))}
        if job.fp8_peak:
            breakdown["quantize"] = m_f * layers * parts["quantize"]
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
        chunks = 2 if job.schedule in _bubble.V_SHAPED else v       # a V's two chunks: two hops each way
        pp_s = m * 2 * chunks * (2.0 * s_cp * job.b * job.h / tp / bw + job.net.inter_latency)
    # EP: the all-to-all of each MoE layer, inside the node over NVLink, beyond it over the NICs
    ep_s = ep_hidden = 0.0
    if moe and ep > 1:
        in_node = min(ep, _bandwidth(job, sizes, (3,))[1])         # EP members a node holds (of DP's)
        a2a = all_to_all_seconds(moe, t_mb / tp, job.h, ep, in_node, job.link,
                                 job.net.ring_bandwidth / job.g, job.net.inter_latency,
                                 dispatch_bytes=FP8_DISPATCH_BYTES if job.fp8_peak else 2.0)
        if moe.overlap:
            ep_hidden = min(a2a, parts["moe_layer"])
        ep_s = m * (moe.moe_layers / pp) * (a2a - ep_hidden)
    busy = compute + tp_s + cp_s + ep_s
    bubble = busy * _bubble.bubble_share(job.schedule, pp, m, v, job.fbw)   # replayed (layout.bubble)
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
    mfu = 6 * job.psi * job.tokens / job.n / (job.peak * step)
    return Layout(tp, cp, pp, dp, v, zero, mode, m, states, activations, job.usable, compute, bubble,
                  tp_s, cp_s, pp_s, dp_s, mfu, states + activations, step, breakdown=breakdown, hidden=hidden,
                  ep=ep, ep_s=ep_s, schedule=job.schedule, fp8=_fp8_mfu(job, mfu) if job.fp8_peak else {})


def _fp8_mfu(job: _Job, mfu: float) -> dict:
    """An FP8 layout's MFU three ways (``course_lib.fp8.bill.fp8_mfu``'s convention): against the
    BF16 peak (``Layout.mfu``), the FP8 peak, and the mixed peak 1/(f/P8 + (1−f)/P16) of the share
    f of 6N in FP8 GEMMs: all but the embedding and output head, 2·V·h (untied), when the
    vocabulary is given."""
    f = max(0.0, 1.0 - 2.0 * job.vocab * job.h / job.psi)
    mixed = 1.0 / (f / job.fp8_peak + (1.0 - f) / job.peak)
    return {"mfu_vs_bf16": mfu, "mfu_vs_fp8": mfu * job.peak / job.fp8_peak, "mfu_vs_mixed": mfu * job.peak / mixed,
            "fp8_flop_share": f, "gemms_in_fp8": ", ".join(stepmodel.FP8_GEMMS)}


def _moe_parts(job: _Job, tp: int, cp: int, t_mb: float, sp: bool, ep: int) -> dict[str, float]:
    """A mixture of experts' layer times, averaged over its dense and MoE layers: a dense layer's
    MLP is the active one, (k + shared) experts; an MoE layer has its shared experts (TP-split
    like a dense MLP) and its routed experts on this GPU (``routed_seconds``, for the
    t/TP tokens of this TP rank). What Ψ holds beyond attention and the active experts (the
    embeddings) is spread over the layers as more dense GEMM work, as for a dense model.
    ``moe_layer`` is one MoE layer's compute, what an overlapped all-to-all can hide behind."""
    moe, h = job.moe, job.h
    attn = 2.0 * h * h + 2.0 * h * job.kv
    active = (moe.top_k + moe.shared) * moe.expert_params
    rest = max(job.psi / job.L - attn - active, 0.0)
    dense = _layer_parts(job.psi, job.L, h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                         tp, cp, t_mb, sp, active + rest, *_fp8_args(job))
    shared = _layer_parts(job.psi, job.L, h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                          tp, cp, t_mb, sp, moe.shared * moe.expert_params + rest, *_fp8_args(job))
    routed = routed_seconds(moe, t_mb / tp, h, ep, job.gpu, job.peak, job.hbm_bandwidth, job.fp8_peak)
    w = moe.moe_layers / job.L
    out = {k: (1 - w) * dense[k] + w * shared[k] for k in dense}
    for k in ("gemm", "memory", "forward") + (("quantize",) if job.fp8_peak else ()):
        out[k] += w * routed[k]
    out["moe_layer"] = shared["gemm"] + shared["attention"] + shared["memory"] + sum(
        routed[k] for k in ("gemm", "memory"))
    if job.fp8_peak:
        out["moe_layer"] += shared["quantize"] + routed["quantize"]
    return out


def _logits_bytes(tokens: float, vocab: int, tp: int) -> float:
    """``memory.logits_bytes`` on checked inputs: 10 bytes per logit (BF16 logits, their FP32 copy
    and FP32 gradient), vocabulary-parallel over the TP ranks (Megatron-LM's cross-entropy)."""
    return 10.0 * tokens * vocab / tp


def _parts(job: _Job, tp: int, cp: int, t_mb: float, sp: bool) -> dict[str, float]:
    """One layer's op times on one GPU for one microbatch (``stepmodel.layer_time``)."""
    return _layer_parts(job.psi, job.L, job.h, job.kv, job.s, job.b, job.gpu, job.peak, job.hbm_bandwidth,
                        tp, cp, t_mb, sp, None, *_fp8_args(job))


def _fp8_args(job: _Job) -> tuple[float, float]:
    """(FP8 peak, a layer's share of the embedding and output head, 2·V·h/L) for ``_layer_parts``;
    (0, 0) under BF16."""
    return (job.fp8_peak, 2.0 * job.vocab * job.h / job.L) if job.fp8_peak else (0.0, 0.0)


@functools.lru_cache(maxsize=4096)
def _layer_parts(psi, n_layers, h, kv, s, b, gpu, peak, hbm, tp, cp, t_mb, sp, mlp=None, fp8_peak=0.0,
                 head=0.0) -> dict[str, float]:
    """A pure function of its arguments, cached: the search asks it again for every PP, DP, v,
    ZeRO stage and recomputation mode of one (TP, CP). ``mlp``: the MLP's parameters, by default
    the rest of a layer's share of Ψ after attention. ``fp8_peak`` > 0: the block's GEMMs in FP8,
    ``head`` parameters of the MLP's share (the embedding and output head's, at most all but h²)
    timed in BF16 (``stepmodel.layer_time``)."""
    if mlp is None:
        mlp = _mlp_params(psi, n_layers, h, kv)
    shape = stepmodel.LayerShape(t_mb, h, kv, mlp, tp, sp, s, cp, b)
    if not fp8_peak:
        return stepmodel.layer_time(shape, gpu, peak, hbm)
    return stepmodel.layer_time(shape, gpu, peak, hbm, fp8_peak, min(head, max(mlp - h * h, 0.0)))


def _mlp_params(psi: float, n_layers: int, h: int, kv: int) -> float:
    """A layer's MLP parameters: its share of Ψ after attention's Q, O (h² each) and K, V (h·kv
    each, kv the K/V width), at least h²."""
    return max(psi / n_layers - (2.0 * h * h + 2.0 * h * kv), h * h)
