"""Bytes and seconds of the collectives behind data parallelism, ZeRO and FSDP.

Ring algorithms (the bandwidth-optimal ones NCCL and gloo use for large messages): with n ranks,
each rank sends, per collective on a buffer of S bytes,

* reduce-scatter: (n−1)/n·S  (S is the full input; each rank ends with one reduced S/n shard)
* all-gather:     (n−1)/n·S  (S is the full output; each rank starts with one S/n shard)
* all-reduce:     2(n−1)/n·S (a reduce-scatter followed by an all-gather)

Per training step with Ψ parameters of ``bytes_per_value`` bytes (2 for bf16 on GPUs):
DP all-reduces the gradients, 2(n−1)/n·Ψ; ZeRO-1/2 reduce-scatter gradients and all-gather
parameters, the same 2(n−1)/n·Ψ; ZeRO-3/FSDP all-gathers parameters for forward, again for
backward, and reduce-scatters gradients, 3(n−1)/n·Ψ = 1.5× DP (ZeRO paper, arXiv 1910.02054, §7).

The step-time model at the end turns bytes into seconds and into MFU, to show where FSDP stops
scaling: per-GPU compute shrinks as 1/n at a fixed global batch, per-GPU traffic does not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import calculator, choice, flag, fraction, positive, positive_int, zero_stage
from .hardware import lookup
from .network import DGX_H100_NDR, Network

__all__ = ["KINDS", "IB_NDR_BANDWIDTH", "collective_bytes", "collective_time", "dp_bytes_per_step",
           "zero_bytes_per_step", "fsdp_bytes_per_step", "hsdp_bytes_per_step", "max_dp_degree",
           "StepEstimate", "step_estimate", "crossover_gpus", "Network", "DGX_H100_NDR",
           "tp_bytes_per_layer", "cp_bytes_per_layer", "ep_bytes_per_layer", "ep_node_bytes"]

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
# Bytes/s per GPU per direction of a ring across 8-GPU H100 servers with eight 400 Gb/s NDR NICs:
# one ring per NIC, 8 × 50 GB/s (course_lib.network; issue #19 corrected the 50 GB/s of one NIC).
IB_NDR_BANDWIDTH = DGX_H100_NDR.ring_bandwidth


def _ring(kind: str, size: float, n: int) -> float:
    """Ring bytes per rank, on inputs already checked (callers validate under their own names)."""
    return (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n * size


@calculator
def collective_bytes(kind: str, size_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring ``kind`` over a buffer of ``size_bytes`` (the full buffer:
    all-reduce's tensor, reduce-scatter's input, all-gather's output) among ``n`` ranks."""
    k = choice("kind", kind, KINDS)
    s = positive("size_bytes", size_bytes, allow_zero=True)
    return _ring(k, s, positive_int("n", n))


@calculator
def collective_time(kind: str, size_bytes: float, n: int, bandwidth: float,
                    latency: float = 0.0) -> float:
    """Seconds for a ring ``kind``: bytes sent per rank / ``bandwidth`` (bytes/s per direction per
    rank, the slowest link of the ring) + one ``latency`` (s) per ring step."""
    sent = collective_bytes(kind, size_bytes, n)
    bw = positive("bandwidth", bandwidth)
    lat = positive("latency", latency, allow_zero=True)
    steps = (2 if kind == "all_reduce" else 1) * (positive_int("n", n) - 1)
    return sent / bw + steps * lat


@calculator
def dp_bytes_per_step(n_params: float, n: int, bytes_per_value: float = 2) -> float:
    """Bytes per rank per step of plain data parallelism: one all-reduce of the gradients,
    2(n−1)/n·Ψ·bytes_per_value."""
    psi = positive("n_params", n_params)
    n = positive_int("n", n)
    b = positive("bytes_per_value", bytes_per_value)
    return _ring("all_reduce", psi * b, n)


@calculator
def zero_bytes_per_step(n_params: float, n: int, stage: int, bytes_per_value: float = 2) -> float:
    """Bytes per rank per step for ZeRO ``stage`` 0–3: 2(n−1)/n·Ψ·b for 0, 1, 2; 3(n−1)/n·Ψ·b for 3."""
    stage = zero_stage("stage", stage)
    psi = positive("n_params", n_params)
    n = positive_int("n", n)
    b = positive("bytes_per_value", bytes_per_value)
    return (3 if stage == 3 else 2) * _ring("all_gather", psi * b, n)


@calculator
def fsdp_bytes_per_step(n_params: float, n: int, bytes_per_value: float = 2,
                        reshard_after_forward: bool = True) -> float:
    """Bytes per rank per step of FSDP / ZeRO-3: all-gather (forward) + all-gather (backward) +
    reduce-scatter (gradients) = 3(n−1)/n·Ψ·b. Without resharding after forward the backward
    gather disappears: 2(n−1)/n·Ψ·b, like DP (but the full parameters stay in memory)."""
    psi = positive("n_params", n_params)
    n = positive_int("n", n)
    b = positive("bytes_per_value", bytes_per_value)
    gathers = 2 if flag("reshard_after_forward", reshard_after_forward) else 1
    return gathers * _ring("all_gather", psi * b, n) + _ring("reduce_scatter", psi * b, n)


@calculator
def hsdp_bytes_per_step(n_params: float, n: int, shard_size: int,
                        bytes_per_value: float = 2) -> tuple[float, float]:
    """Hybrid sharding: FSDP inside groups of ``shard_size`` ranks (a fast domain), plain DP across
    the n/shard_size groups on each gradient shard. Returns (bytes per rank inside the domain,
    bytes per rank across domains): 3(d−1)/d·Ψ·b and 2(r−1)/r·Ψ·b/d with r = n/d replicas."""
    psi = positive("n_params", n_params)
    n = positive_int("n", n)
    d = positive_int("shard_size", shard_size)
    if n % d:
        raise ValueError(f"shard_size ({d}) must divide n ({n})")
    b = positive("bytes_per_value", bytes_per_value)
    return _hsdp(psi, b, n, d)


def _hsdp(psi: float, b: float, n: int, d: int) -> tuple[float, float]:
    return 3 * _ring("all_gather", psi * b, d), _ring("all_reduce", psi / d * b, n // d)


@calculator
def max_dp_degree(critical_batch_tokens: float, seq_len: int) -> int:
    """Most data-parallel replicas that still get at least one whole sequence each when the global
    batch may not exceed ``critical_batch_tokens``: floor(B_crit / seq_len). This bounds the DP/FSDP
    degree, not the number of GPUs: tensor and context parallelism multiply it; expert parallelism
    does not (its ranks are data-parallel ranks, each with sequences of its own); pipeline
    parallelism only at the price of its bubble, (p−1)/(m+p−1) of the step with m microbatches
    per pipeline drawn from the same batch."""
    b = positive("critical_batch_tokens", critical_batch_tokens)
    s = positive_int("seq_len", seq_len)
    if b < s:
        raise ValueError(f"critical_batch_tokens ({critical_batch_tokens!r}) is smaller than one "
                         f"sequence (seq_len={s}): not even one replica gets a whole sequence")
    return int(math.floor(b / s + 1e-9))


@calculator
def tp_bytes_per_layer(seq_len: int, micro_batch: int, d_model: int, tp: int,
                       bytes_per_value: float = 2) -> float:
    """Bytes each rank sends per transformer layer and microbatch under Megatron tensor
    parallelism (Shoeybi et al. 2019, arXiv 1909.08053): four ring all-reduces of the s·b·h
    activations, two in the forward (after attention and after the MLP) and two in the backward
    (the conjugate f operators), 4 · 2(t−1)/t · sbh · bytes_per_value. Sequence parallelism
    replaces each all-reduce by a reduce-scatter plus an all-gather: the same bytes (Megatron's SP
    also re-gathers each column-parallel input in the backward, two more all-gathers of
    (t−1)/t · sbh, to keep only the sharded copy). Full recomputation reruns the forward and adds
    two more all-reduces (neither is counted here)."""
    s = positive_int("seq_len", seq_len)
    b = positive_int("micro_batch", micro_batch)
    h = positive_int("d_model", d_model)
    t = positive_int("tp", tp)
    v = positive("bytes_per_value", bytes_per_value)
    return 4 * _ring("all_reduce", float(s) * b * h * v, t)


@calculator
def cp_bytes_per_layer(seq_len: int, micro_batch: int, kv_dim: int, cp: int,
                       bytes_per_value: float = 2) -> float:
    """Bytes each rank sends per layer and microbatch in the *forward* of ring attention (Liu et
    al. 2023, arXiv 2310.01889) over ``cp`` ranks: its K and V shards, s/cp·b·``kv_dim`` values
    each, travel cp − 1 hops, so every rank sends (and receives) (cp−1)/cp of the full K and V,
    2·(cp−1)/cp·s·b·kv_dim·bytes_per_value. ``kv_dim`` is d_model for multi-head attention,
    n_kv_heads·head_dim with grouped-query attention. In the backward K and V go round again and
    their gradients travel with them back home (``course_lib.parallel.context``): (2cp−1)/(cp−1)
    times the forward's bytes, about twice."""
    s = positive_int("seq_len", seq_len)
    b = positive_int("micro_batch", micro_batch)
    d = positive_int("kv_dim", kv_dim)
    p = positive_int("cp", cp)
    v = positive("bytes_per_value", bytes_per_value)
    if s % p:
        raise ValueError(f"cp ({p}) must divide seq_len ({s}): each rank holds s/cp tokens")
    return 2 * _ring("all_gather", float(s) * b * d * v, p)


@calculator
def ep_bytes_per_layer(tokens: int, d_model: int, top_k: int, ep: int, capacity_factor: float | None = None,
                       bytes_per_value: float = 2) -> float:
    """Bytes each rank sends per MoE layer and microbatch under expert parallelism over ``ep``
    ranks (GShard, arXiv 2006.16668): its ``tokens`` tokens make top_k·tokens (token, expert)
    pairs of ``d_model`` values; with experts spread evenly and routing balanced, (ep−1)/ep of
    them leave the rank in the dispatch all-to-all and come back in the combine, and the backward
    repeats both exchanges with the gradients: 4·k·T·(ep−1)/ep·d·bytes_per_value.

    With ``capacity_factor`` the buffers are padded to the capacity, C = k·T·CF/E slots per expert
    (``course_lib.moe.expert_capacity``, exact when that is a whole number): 4·k·T·CF·(ep−1)/ep·d·b
    whatever the routing, dropped and empty slots included. Without it (dropless) this is the
    balanced expectation; a skewed router sends more from some ranks and less from others.
    ``course_lib.expert`` counts every all-to-all on real ranks against this formula."""
    t = positive_int("tokens", tokens)
    d = positive_int("d_model", d_model)
    k = positive_int("top_k", top_k)
    e = positive_int("ep", ep)
    cf = 1.0 if capacity_factor is None else positive("capacity_factor", capacity_factor)
    b = positive("bytes_per_value", bytes_per_value)
    return 4.0 * k * t * cf * (e - 1) / e * d * b


@calculator
def ep_node_bytes(tokens: int, d_model: int, top_k: int, ep: int, gpus_per_node: int,
                  max_nodes: int | None = None, bytes_per_value: float = 2) -> tuple[float, float]:
    """The dropless, balanced ``ep_bytes_per_layer`` split by wire: (bytes per rank inside a node,
    over NVLink; bytes per rank across nodes, over InfiniBand), dispatch + combine, forward and
    backward, with the ``ep`` ranks packed ``gpus_per_node`` to a node.

    Unrestricted: each of a token's k copies lands on a uniformly random rank, (g−1)/ep of them on
    another GPU of this node and (ep−g)/ep on another node. **Node-limited routing**
    (DeepSeek-V3, arXiv 2412.19437 §2.1.2 and §3.2.2: each token goes to at most M = ``max_nodes``
    nodes, sent once per node over IB and forwarded over NVLink to its experts there): M·(N−1)/N
    copies cross IB per token (N = ep/g nodes; its own node is one of the M with chance M/N), and
    each of the k copies takes an NVLink hop unless it already sits on its expert's GPU,
    k·(g−1)/g. Unrestricted here is naive dispatch, one IB copy per chosen expert on another node.
    DeepSeek-V3 (k = 8, M = 4, 8 nodes of 8 GPUs): 7 IB copies a token naive, 3.5 node-limited. Most
    of that 2× is the per-node deduplication, not the limit: deduplicated without a limit the
    expectation is 7·(1 − C(224,8)/C(256,8)) ≈ 4.63 (``comm_alltoall.ep_node_copies``), so the limit
    itself saves ~1.3× in expectation; its real value is the hard bound of M nodes a token reaches."""
    t = positive_int("tokens", tokens)
    d = positive_int("d_model", d_model)
    k = positive_int("top_k", top_k)
    e = positive_int("ep", ep)
    g = positive_int("gpus_per_node", gpus_per_node)
    b = positive("bytes_per_value", bytes_per_value)
    if e % g:
        raise ValueError(f"gpus_per_node ({gpus_per_node!r}) must divide ep ({ep!r}): whole nodes")
    unit = 4.0 * t * d * b
    if max_nodes is None:
        return unit * k * (g - 1) / e, unit * k * (e - g) / e
    n = e // g
    m = positive_int("max_nodes", max_nodes)
    if m > min(n, k):
        raise ValueError(f"max_nodes ({max_nodes!r}) must be at most the number of nodes ep/gpus_per_node "
                         f"= {n} and at most top_k = {k}")
    return unit * k * (g - 1) / g, unit * m * (n - 1) / n


@dataclass(frozen=True)
class StepEstimate:
    """One training step per GPU: compute and communication seconds, the step, and MFU."""

    n_gpus: int
    compute_s: float
    comm_s: float
    step_s: float
    mfu: float
    bandwidth: float
    latency_s: float = 0.0   # the part of comm_s spent in ring latency


@calculator
def step_estimate(n_params: float, n_gpus: int, global_batch_tokens: float, *,
                  gpu: str = "H100-SXM", stage: int = 3, compute_mfu: float = 0.5,
                  network_bandwidth: float | None = None, overlap: bool = True,
                  bytes_per_value: float = 2, shard_size: int | None = None,
                  network: Network = DGX_H100_NDR, n_units: int = 1) -> StepEstimate:
    """A first-order model of a pure data-parallel/ZeRO step on ``n_gpus`` chips.

    Compute: 6·Ψ·(tokens per GPU) at ``compute_mfu`` of the dense peak. Communication: the
    stage's ring bytes over the chip's scale-up link while all GPUs fit in one fast domain
    (NVLink / ICI, ``domain_size`` chips), else over ``network_bandwidth`` per GPU (default: the
    ``network``'s ring bandwidth, NICs per node × NIC rate, capped by the scale-up link), plus ring
    latency: each of the stage's collectives is split into ``n_units`` (FSDP units, DP buckets),
    and each pays ``network.ring_latency`` (NCCL's per-step model; ``course_lib.network``). With
    ``shard_size`` (hybrid sharding, stage 3 only) ZeRO-3 runs inside groups of that many GPUs —
    on the fast link if a group fits in one domain, else on the network — and the gradient shards
    are all-reduced across groups on the network, the two on different wires at the same time. ``overlap=True`` hides the shorter of compute and
    communication behind the longer (best case); False adds them. MFU = 6·Ψ·tokens per GPU /
    (peak · step). Stragglers, tree all-reduce and activation memory are ignored.
    """
    psi = positive("n_params", n_params)
    n = positive_int("n_gpus", n_gpus)
    tokens = positive("global_batch_tokens", global_batch_tokens)
    u = fraction("compute_mfu", compute_mfu)
    if not isinstance(network, Network):
        raise ValueError(f"network must be a course_lib.network.Network, got {network!r:.40}")
    units = positive_int("n_units", n_units)
    stage = zero_stage("stage", stage)
    b = positive("bytes_per_value", bytes_per_value)
    overlap = flag("overlap", overlap)
    acc = lookup("gpu", gpu)
    net = (min(network.ring_bandwidth, acc.link_bandwidth) if network_bandwidth is None
           else positive("network_bandwidth", network_bandwidth))
    peak = acc.peak("bf16")
    compute = 6.0 * psi * tokens / n / (peak * u)
    g = acc.domain_size
    if shard_size is not None and n > 1:
        d = min(positive_int("shard_size", shard_size), n)
        if n % d:
            raise ValueError(f"shard_size ({d}) must divide n_gpus ({n})")
        intra, inter = _hsdp(psi, b, n, d)
        bw_intra = acc.link_bandwidth if d <= acc.domain_size else net
        bw = bw_intra if n == d else net
        lat_in = units * 3 * network.ring_latency("all_gather", d, g)
        lat_out = units * network.ring_latency("all_reduce", n // d, 1)
        comm = max(intra / bw_intra + lat_in, inter / net + lat_out)
        lat = lat_in if intra / bw_intra + lat_in >= inter / net + lat_out else lat_out
    else:
        bw = acc.link_bandwidth if n <= acc.domain_size else net
        kinds = _PASSES[stage]
        lat = units * sum(network.ring_latency(k, n, g) for k in kinds)
        comm = sum(_ring(k, psi * b, n) for k in kinds) / bw + lat
    step = max(compute, comm) if overlap else compute + comm
    return StepEstimate(n, compute, comm, step, 6.0 * psi * tokens / n / (peak * step), bw, lat)


# The ring collectives of one step, per ZeRO stage (each split into n_units messages).
_PASSES = {0: ("all_reduce",), 1: ("reduce_scatter", "all_gather"),
           2: ("reduce_scatter", "all_gather"), 3: ("all_gather", "all_gather", "reduce_scatter")}


@calculator
def crossover_gpus(global_batch_tokens: float, *, gpu: str = "H100-SXM", stage: int = 3,
                   compute_mfu: float = 0.5, bandwidth: float = IB_NDR_BANDWIDTH,
                   bytes_per_value: float = 2) -> float:
    """GPU count at which communication time equals compute time (beyond it MFU falls as 1/n).

    Setting 6·Ψ·B/(n·P·u) = k(n−1)/n·Ψ·b/bw (k = 3 for ZeRO-3, 2 otherwise) gives
    n* = 1 + 6·B·bw / (k·b·P·u): **independent of the model size Ψ** — both sides scale with Ψ.
    """
    tokens = positive("global_batch_tokens", global_batch_tokens)
    u = fraction("compute_mfu", compute_mfu)
    bw = positive("bandwidth", bandwidth)
    b = positive("bytes_per_value", bytes_per_value)
    k = 3.0 if zero_stage("stage", stage) == 3 else 2.0
    return 1.0 + 6.0 * tokens * bw / (k * b * lookup("gpu", gpu).peak("bf16") * u)
