"""The scale-out network behind chapter 4's step model: what a NCCL ring gets per GPU across nodes.

**Bandwidth.** NCCL builds one ring (a *channel*) per NIC and splits each buffer over the rings.
Every ring crosses each node boundary once, on its own NIC, and makes its other hops over NVLink.
With k NICs of rate r per node, a ring collective spanning nodes therefore moves k·r of *bus
bandwidth* per GPU (the quantity nccl-tests prints as ``busbw``), capped by the scale-up link
that carries the hops inside the node. An 8-GPU H100 server with eight 400 Gb/s NDR NICs gets
8 × 50 GB/s = 400 GB/s, not the 50 GB/s of one NIC. ``PUBLISHED_BUSBW`` holds measurements that
tests check this against.

**Latency.** NCCL's own cost model (``src/graph/tuning.cc``, NCCL 2.20.3, ring algorithm, Simple
protocol, the one used for large messages) charges a ring collective a base latency plus one
hardware latency per ring step: 8.4 µs + 3.4 µs per step inside a node (NVLink) + 14 µs per step
that crosses the network (on multi-node runs NCCL raises the in-node figure to 3× its per-message
network overhead where that is larger: 3 µs on Intel hosts, 6 µs on AMD; we keep 3.4 µs). All-gather and reduce-scatter take n−1 steps, N−1 of them between the N
nodes; all-reduce takes 2(n−1), 2N of them between nodes. All-gather and reduce-scatter have no
tree algorithm there (only ring, or NVLS/CollNet with switch offload), so under FSDP, whose three
collectives per unit are exactly these, the latency grows linearly with the GPU count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import calculator, choice, positive, positive_int

__all__ = ["NDR_NIC_BANDWIDTH", "Network", "DGX_H100_NDR", "HGX_A100_HDR4", "PUBLISHED_BUSBW",
           "ring_steps"]

NDR_NIC_BANDWIDTH = 400e9 / 8   # bytes/s per direction of one 400 Gb/s InfiniBand NDR port
_NCCL = ("NCCL 2.20.3 src/graph/tuning.cc, ring/Simple: baseLat 8.4 us, hwLat NVLINK 3.4 us, "
         "hwLat NET 14.0 us per step")


@calculator
def ring_steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    """(steps inside a node, steps across nodes) of a ring ``kind`` over ``n`` ranks on ``nodes``
    nodes, counted as NCCL 2.20.3's tuning model counts them."""
    k = choice("kind", kind, ("all_reduce", "all_gather", "reduce_scatter"))
    n = positive_int("n", n)
    nodes = positive_int("nodes", nodes, maximum=n)
    if k == "all_reduce":
        total, inter = 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    else:
        total, inter = n - 1, nodes - 1
    return total - inter, inter


@dataclass(frozen=True)
class Network:
    """One node type and its scale-out fabric: GPUs and NICs per node, NIC bit rate, and the ring
    latencies (seconds) of NCCL's model. ``ring_bandwidth`` and ``ring_latency`` derive from them."""

    name: str
    gpus_per_node: int
    nics_per_node: int
    nic_bits_per_s: float
    base_latency: float = 8.4e-6
    intra_latency: float = 3.4e-6
    inter_latency: float = 14.0e-6
    source: str = _NCCL

    def __post_init__(self):
        positive_int("gpus_per_node", self.gpus_per_node)
        positive_int("nics_per_node", self.nics_per_node)
        positive("nic_bits_per_s", self.nic_bits_per_s)
        for name in ("base_latency", "intra_latency", "inter_latency"):
            positive(name, getattr(self, name), allow_zero=True)
        if not 0 < self.ring_bandwidth < math.inf:    # 5e-324 bits/s is 0 bytes/s; 2**53 NICs of 1e308 overflow
            raise ValueError(f"nic_bits_per_s ({self.nic_bits_per_s!r}) on nics_per_node ({self.nics_per_node!r}) "
                             f"gives {self.ring_bandwidth!r} bytes/s per GPU: out of float range")

    @property
    def nic_bandwidth(self) -> float:
        """Bytes/s per direction of one NIC (bits / 8)."""
        return self.nic_bits_per_s / 8

    @property
    def ring_bandwidth(self) -> float:
        """Bus bandwidth per GPU (bytes/s per direction) of a ring spanning nodes, before the
        scale-up cap: one ring per NIC, so NICs per node × NIC rate."""
        return self.nics_per_node * self.nic_bandwidth

    @calculator
    def ring_latency(self, kind: str, n: int, gpus_per_node: int | None = None) -> float:
        """Seconds of latency of one ring ``kind`` over ``n`` ranks, packed ``gpus_per_node`` to a
        node (default: this network's): base + intra steps · intra_latency + inter steps ·
        inter_latency. Zero for one rank."""
        n = positive_int("n", n)
        g = self.gpus_per_node if gpus_per_node is None else positive_int("gpus_per_node", gpus_per_node)
        if n == 1:
            return 0.0
        intra, inter = ring_steps(kind, n, math.ceil(n / g))
        return self.base_latency + intra * self.intra_latency + inter * self.inter_latency

    @calculator
    def collective_time(self, kind: str, size_bytes: float, n: int, link_bandwidth: float) -> float:
        """Seconds for a ring ``kind`` over ``size_bytes`` among ``n`` ranks spanning nodes: ring bytes
        per rank / min(ring_bandwidth, ``link_bandwidth``) + ``ring_latency``. A time that overflows a
        float (``size_bytes=1e308``) is a ValueError naming the inputs, never inf."""
        k = choice("kind", kind, ("all_reduce", "all_gather", "reduce_scatter"))
        size = positive("size_bytes", size_bytes, allow_zero=True)
        n = positive_int("n", n)
        link = positive("link_bandwidth", link_bandwidth)
        if n <= self.gpus_per_node:
            raise ValueError(f"n ({n}) fits in one node of {self.gpus_per_node} GPUs: the ring never "
                             f"touches the network (use comm.collective_time with the scale-up link)")
        sent = (2.0 if k == "all_reduce" else 1.0) * (n - 1) / n * size
        return sent / min(self.ring_bandwidth, link) + self.ring_latency(k, n)


# NVIDIA DGX H100 datasheet: "8x single-port NVIDIA ConnectX-7 VPI, up to 400 Gb/s InfiniBand".
DGX_H100_NDR = Network("8x H100 SXM, 8x ConnectX-7 400 Gb/s NDR", 8, 8, 400e9)
# NVIDIA DGX A100 / HGX A100 systems with four 200 Gb/s HDR NICs for eight GPUs (the cluster of
# nccl-tests issue #119 below).
HGX_A100_HDR4 = Network("8x A100 SXM, 4x 200 Gb/s HDR", 8, 4, 200e9)

# Published multi-node ring all-reduce bus bandwidth at large messages: (network, low, high, source).
PUBLISHED_BUSBW = (
    (DGX_H100_NDR, 8 * 46e9, 8 * 48e9,
     "NVIDIA/nccl-tests#290 (2025-03-03), NCCL maintainer: \"For NDR @ 400Gbps you should see "
     "46-48GB/s per NIC\" (ring, NCCL_ALGO=RING); eight NICs per node"),
    (HGX_A100_HDR4, 84.8e9, 96e9,
     "NVIDIA/nccl-tests#119 (2022-11-17): 3 nodes x 8 A100 SXM4, 4x HDR 200 Gb/s each, all_reduce_perf "
     "up to 128 MB: average busbw 84.8 GB/s, peak about 96 GB/s, against 200G x 4 / 8 = 100 GB/s"),
)
