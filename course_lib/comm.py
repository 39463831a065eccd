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

from ._validate import choice, fraction, positive, positive_int
from .hardware import get_accelerator

__all__ = ["KINDS", "IB_NDR_BANDWIDTH", "collective_bytes", "collective_time", "dp_bytes_per_step",
           "zero_bytes_per_step", "fsdp_bytes_per_step", "hsdp_bytes_per_step", "max_dp_degree",
           "StepEstimate", "step_estimate", "crossover_gpus"]

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
IB_NDR_BANDWIDTH = 50e9   # bytes/s per GPU per direction: one 400 Gb/s InfiniBand NDR NIC per GPU


def collective_bytes(kind: str, size_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring ``kind`` over a buffer of ``size_bytes`` (the full buffer:
    all-reduce's tensor, reduce-scatter's input, all-gather's output) among ``n`` ranks."""
    k = choice("kind", kind, KINDS)
    s = positive("size_bytes", size_bytes, allow_zero=True)
    n = positive_int("n", n)
    return (2.0 if k == "all_reduce" else 1.0) * (n - 1) / n * s


def collective_time(kind: str, size_bytes: float, n: int, bandwidth: float,
                    latency: float = 0.0) -> float:
    """Seconds for a ring ``kind``: bytes sent per rank / ``bandwidth`` (bytes/s per direction per
    rank, the slowest link of the ring) + one ``latency`` (s) per ring step."""
    bw = positive("bandwidth", bandwidth)
    lat = positive("latency", latency, allow_zero=True)
    steps = (2 if kind == "all_reduce" else 1) * (positive_int("n", n) - 1)
    return collective_bytes(kind, size_bytes, n) / bw + steps * lat


def dp_bytes_per_step(n_params: float, n: int, bytes_per_value: float = 2) -> float:
    """Bytes per rank per step of plain data parallelism: one all-reduce of the gradients,
    2(n−1)/n·Ψ·bytes_per_value."""
    psi = positive("n_params", n_params)
    b = positive("bytes_per_value", bytes_per_value)
    return collective_bytes("all_reduce", psi * b, n)


def zero_bytes_per_step(n_params: float, n: int, stage: int, bytes_per_value: float = 2) -> float:
    """Bytes per rank per step for ZeRO ``stage`` 0–3: 2(n−1)/n·Ψ·b for 0, 1, 2; 3(n−1)/n·Ψ·b for 3."""
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    if stage == 3:
        return fsdp_bytes_per_step(n_params, n, bytes_per_value)
    psi = positive("n_params", n_params)
    b = positive("bytes_per_value", bytes_per_value)
    if stage == 0:
        return dp_bytes_per_step(psi, n, b)
    return collective_bytes("reduce_scatter", psi * b, n) + collective_bytes("all_gather", psi * b, n)


def fsdp_bytes_per_step(n_params: float, n: int, bytes_per_value: float = 2,
                        reshard_after_forward: bool = True) -> float:
    """Bytes per rank per step of FSDP / ZeRO-3: all-gather (forward) + all-gather (backward) +
    reduce-scatter (gradients) = 3(n−1)/n·Ψ·b. Without resharding after forward the backward
    gather disappears: 2(n−1)/n·Ψ·b, like DP (but the full parameters stay in memory)."""
    psi = positive("n_params", n_params)
    b = positive("bytes_per_value", bytes_per_value)
    gathers = 2 if reshard_after_forward else 1
    return (gathers * collective_bytes("all_gather", psi * b, n)
            + collective_bytes("reduce_scatter", psi * b, n))


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
    return fsdp_bytes_per_step(psi, d, b), dp_bytes_per_step(psi / d, n // d, b)


def max_dp_degree(critical_batch_tokens: float, seq_len: int) -> int:
    """Most data-parallel replicas that still get at least one whole sequence each when the global
    batch may not exceed ``critical_batch_tokens``: floor(B_crit / seq_len). This bounds the DP/FSDP
    degree, not the number of GPUs (tensor, pipeline and context parallelism multiply it)."""
    b = positive("critical_batch_tokens", critical_batch_tokens)
    s = positive_int("seq_len", seq_len)
    if b < s:
        raise ValueError(f"critical_batch_tokens ({critical_batch_tokens!r}) is smaller than one "
                         f"sequence (seq_len={s}): not even one replica gets a whole sequence")
    return int(math.floor(b / s + 1e-9))


@dataclass(frozen=True)
class StepEstimate:
    """One training step per GPU: compute and communication seconds, the step, and MFU."""

    n_gpus: int
    compute_s: float
    comm_s: float
    step_s: float
    mfu: float
    bandwidth: float


def step_estimate(n_params: float, n_gpus: int, global_batch_tokens: float, *,
                  gpu: str = "H100-SXM", stage: int = 3, compute_mfu: float = 0.5,
                  network_bandwidth: float = IB_NDR_BANDWIDTH, overlap: bool = True,
                  bytes_per_value: float = 2, shard_size: int | None = None) -> StepEstimate:
    """A first-order model of a pure data-parallel/ZeRO step on ``n_gpus`` chips.

    Compute: 6·Ψ·(tokens per GPU) at ``compute_mfu`` of the dense peak. Communication: the
    stage's ring bytes over the chip's scale-up link while all GPUs fit in one fast domain
    (NVLink / ICI, ``domain_size`` chips), else over ``network_bandwidth`` per GPU. With
    ``shard_size`` (hybrid sharding, stage 3 only) ZeRO-3 runs inside groups of that many GPUs —
    on the fast link if a group fits in one domain, else on the network — and the gradient shards
    are all-reduced across groups on the network, the two on different wires at the same time. ``overlap=True`` hides the shorter of compute and
    communication behind the longer (best case); False adds them. MFU = 6·Ψ·tokens per GPU /
    (peak · step). Latency, stragglers and activation memory are ignored.
    """
    psi = positive("n_params", n_params)
    n = positive_int("n_gpus", n_gpus)
    tokens = positive("global_batch_tokens", global_batch_tokens)
    u = fraction("compute_mfu", compute_mfu)
    net = positive("network_bandwidth", network_bandwidth)
    acc = get_accelerator(gpu)
    peak = acc.peak("bf16")
    compute = 6.0 * psi * tokens / n / (peak * u)
    if shard_size is not None and n > 1:
        d = min(positive_int("shard_size", shard_size), n)
        if n % d:
            raise ValueError(f"shard_size ({d}) must divide n_gpus ({n})")
        intra, inter = hsdp_bytes_per_step(psi, n, d, bytes_per_value)
        bw_intra = acc.link_bandwidth if d <= acc.domain_size else net
        bw = bw_intra if n == d else net
        comm = max(intra / bw_intra, inter / net)
    else:
        bw = acc.link_bandwidth if n <= acc.domain_size else net
        comm = zero_bytes_per_step(psi, n, stage, bytes_per_value) / bw
    step = max(compute, comm) if overlap else compute + comm
    return StepEstimate(n, compute, comm, step, 6.0 * psi * tokens / n / (peak * step), bw)


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
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    k = 3.0 if stage == 3 else 2.0
    return 1.0 + 6.0 * tokens * bw / (k * b * get_accelerator(gpu).peak("bf16") * u)
