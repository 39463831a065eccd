"""Accelerator datasheet figures used by every calculator, each with the source it comes from.

All values are plain SI: FLOP/s, bytes, bytes/s. Peak FLOP/s are **dense** figures; vendors also
print 2:4-sparsity figures that are exactly twice as large, and mixing them up is the most common
error in back-of-the-envelope training estimates (see the FLOPs chapter).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Mapping

from ._validate import choice

__all__ = ["GIB", "Accelerator", "ACCELERATORS", "ALIASES", "get_accelerator", "lookup", "accelerator_names"]


@dataclass(frozen=True)
class Accelerator:
    """One accelerator's datasheet numbers.

    ``link_bandwidth`` is the scale-up link (NVLink / ICI) bandwidth **per direction** per chip;
    ``domain_size`` is how many chips share that fast domain in the usual system. ``hbm_bytes`` is
    the capacity as the datasheet means it: NVIDIA's and AMD's "80 GB" / "128 GB" stacks are
    binary (80 GiB = 85.9e9 bytes, what ``torch.cuda.mem_get_info`` reports as total on an H100).
    ``nic_bits_per_s`` is the scale-out NIC rate per chip of the generation's reference system
    (``nic_source``): the default a planner uses when the user names no network.
    ``storage_bytes_per_s`` and ``restart_seconds`` are what a published training cluster of the
    generation measured or reported for its checkpoint writes and for one restart after a failure
    (``cluster_source``; a generation with no published figure borrows its contemporary's, and
    says so): chapter 12's inputs, which the planner uses unless given its own.
    """

    name: str
    peak_flops: Mapping[str, float]
    hbm_bytes: float
    hbm_bandwidth: float
    link_bandwidth: float
    domain_size: int
    source: str
    notes: str = ""
    sparse_flops: Mapping[str, float] = field(default_factory=dict)
    nic_bits_per_s: float = 400e9
    nic_source: str = ""
    # the checkpoint filesystem's write rate (bytes/s, the whole cluster's) and the time one restart
    # takes (s) on a published cluster of the generation (``cluster_source``): the planner's defaults
    storage_bytes_per_s: float = 2e12
    restart_seconds: float = 600.0
    cluster_source: str = ""

    @property
    def training_dtype(self) -> str:
        """The 16-bit format mixed-precision training uses on this chip: bf16, or fp16 where the
        chip has no bf16 tensor cores (V100)."""
        return "bf16" if "bf16" in self.peak_flops else "fp16"

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError naming ``dtype`` if the chip has none."""
        choice("dtype", dtype, tuple(self.peak_flops))
        return self.peak_flops[dtype]


def _freeze(d: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(d))


_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023): 'specifications 1/2 lower without sparsity'"
GIB = 2.0 ** 30
# Scale-out NIC per GPU of each generation's reference server (one NIC per GPU in each).
_NDR = "NVIDIA DGX H100 datasheet: 8x ConnectX-7, up to 400 Gb/s InfiniBand NDR per GPU"
_HDR = "NVIDIA DGX A100 datasheet: 8x single-port ConnectX-6 VPI, 200 Gb/s HDR InfiniBand (compute fabric)"
_EDR = ("NVIDIA DGX-1 (V100) datasheet: 4x 100 Gb/s EDR InfiniBand for 8 GPUs; DGX-2: 8x EDR for 16 "
        "(the rate per port; the count is the planner's nics_per_node)")
_XDR = "NVIDIA DGX B300 specifications: 8x ConnectX-8 SuperNIC, up to 800 Gb/s per GPU"
# Checkpoint storage and restart time of a published cluster per generation (chapter 12's inputs).
_HOPPER_CLUSTER = dict(
    storage_bytes_per_s=2e12, restart_seconds=600.0,
    cluster_source="storage: arXiv 2407.21783 §3.3.1 (Llama 3's Tectonic filesystem for up to 16K H100: a "
                   "sustainable throughput of 2 TB/s, 7 TB/s peak); restart: arXiv 2509.16293 §2.3 (ByteRobust: "
                   "failover often takes more than 10 minutes for training on 10,000 GPUs)")
_AMPERE_CLUSTER = dict(
    storage_bytes_per_s=273e9, restart_seconds=600.0,
    cluster_source="storage: arXiv 2104.04473 §5.10 (checkpoint saves of the 1T model on 3,072 A100 reached "
                   "273 GB/s, 40 % of the filesystem's peak write bandwidth); restart: arXiv 2402.15627 §6.3 "
                   "(MegaScale, over 10,000 Ampere GPUs: detecting a failure and running the diagnostic tests "
                   "take under 10 minutes on average)")


def _borrowed(cluster: dict, generation: str, why: str) -> dict:
    """A generation without a published cluster figure takes ``cluster``'s and says so."""
    return dict(cluster, cluster_source=f"no published figure found for {why}: {generation}'s, "
                                        f"{cluster['cluster_source']}")


_ICI = ("inside a TPU slice every hop is ICI (the pod is one torus): the 'network' beyond a host is the same "
        "ICI, so its rate is the per-chip ICI figure")

ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType({
    a.name: a for a in [
        Accelerator(
            "H100-SXM",
            _freeze({"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494.5e12, "fp32": 67e12}),
            hbm_bytes=80 * GIB, hbm_bandwidth=3.35e12, link_bandwidth=450e9, domain_size=8,
            source=_NV_H100 + "; 80 GB HBM3 (80 GiB); NVLink 4: 18 links, 900 GB/s total = 450 GB/s per direction",
            sparse_flops=_freeze({"bf16": 1979e12, "fp8": 3958e12}), nic_bits_per_s=400e9, nic_source=_NDR,
            **_HOPPER_CLUSTER,
        ),
        Accelerator(
            "H100-PCIe",
            _freeze({"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "tf32": 378e12, "fp32": 51e12}),
            hbm_bytes=80 * GIB, hbm_bandwidth=2.0e12, link_bandwidth=300e9, domain_size=2,
            source=_NV_H100 + "; 80 GB HBM2e (80 GiB); NVLink bridge 600 GB/s total between a pair of cards",
            sparse_flops=_freeze({"bf16": 1513e12, "fp8": 3026e12}), nic_bits_per_s=400e9, nic_source=_NDR,
            **_HOPPER_CLUSTER,
        ),
        Accelerator(
            "H800",
            _freeze({"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494.5e12, "fp32": 67e12}),
            hbm_bytes=80 * GIB, hbm_bandwidth=3.35e12, link_bandwidth=200e9, domain_size=8,
            source="NVIDIA H800 SXM5 specifications: H100 SXM compute and 80 GB HBM3, NVLink cut to 400 GB/s total "
                   "(200 GB/s per direction); DeepSeek-V3's cluster (arXiv 2412.19437 §3.1: 2048 H800, 8 per node)",
            nic_bits_per_s=400e9,
            nic_source="arXiv 2412.19437 §3.2.2: InfiniBand at 50 GB/s (400 Gb/s) per GPU across nodes",
            **_HOPPER_CLUSTER,
        ),
        Accelerator(
            "H200",
            _freeze({"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494.5e12, "fp32": 67e12}),
            hbm_bytes=141e9, hbm_bandwidth=4.8e12, link_bandwidth=450e9, domain_size=8,
            source="NVIDIA H200 datasheet (2024): H100 SXM compute, 141 GB HBM3e at 4.8 TB/s",
            notes="141 GB taken as decimal: the enabled capacity is not a power of two",
            nic_bits_per_s=400e9, nic_source=_NDR,
            **_HOPPER_CLUSTER,
        ),
        Accelerator(
            "A100",
            _freeze({"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
            hbm_bytes=80 * GIB, hbm_bandwidth=2.039e12, link_bandwidth=300e9, domain_size=8,
            source="NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOPS dense BF16, 80 GB HBM2e (80 GiB) at 2,039 GB/s, "
                   "NVLink 3 600 GB/s total",
            nic_bits_per_s=200e9, nic_source=_HDR,
            **_AMPERE_CLUSTER,
        ),
        Accelerator(
            "A100-40GB",
            _freeze({"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
            hbm_bytes=40 * GIB, hbm_bandwidth=1.555e12, link_bandwidth=300e9, domain_size=8,
            source="NVIDIA A100 datasheet (SXM4 40GB): 312 TFLOPS dense BF16, 40 GB HBM2 (40 GiB) at 1,555 GB/s, "
                   "NVLink 3 600 GB/s total",
            nic_bits_per_s=200e9, nic_source=_HDR,
            **_AMPERE_CLUSTER,
        ),
        Accelerator(
            "V100",
            _freeze({"fp16": 125e12, "fp32": 15.7e12}),
            hbm_bytes=32 * GIB, hbm_bandwidth=900e9, link_bandwidth=150e9, domain_size=8,
            source="NVIDIA V100 datasheet (SXM2 32GB): 125 TFLOPS FP16 tensor (dense; Volta has no sparsity), "
                   "32 GB HBM2 (32 GiB) at 900 GB/s, NVLink 2 300 GB/s total = 150 GB/s per direction",
            notes="no BF16 tensor cores: mixed precision trains in FP16 with loss scaling (training_dtype)",
            nic_bits_per_s=100e9, nic_source=_EDR,
            **_borrowed(_AMPERE_CLUSTER, "Ampere", "a V100 training cluster"),
        ),
        Accelerator(
            "B200",
            _freeze({"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "tf32": 1.1e15, "fp32": 75e12}),
            hbm_bytes=180e9, hbm_bandwidth=8e12, link_bandwidth=900e9, domain_size=8,
            source="NVIDIA HGX/DGX B200 specifications (dense = half the sparse figures); NVLink 5 1.8 TB/s total",
            notes="192 GB physical HBM3e; 180 GB usable in HGX/DGX B200 systems",
            nic_bits_per_s=400e9, nic_source="NVIDIA DGX B200 datasheet: 8x ConnectX-7, 400 Gb/s InfiniBand per GPU",
            **_borrowed(_HOPPER_CLUSTER, "Hopper", "a Blackwell training cluster"),
        ),
        Accelerator(
            "B300",
            _freeze({"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15}),
            hbm_bytes=288e9, hbm_bandwidth=8e12, link_bandwidth=900e9, domain_size=72,
            source="NVIDIA B300 (Blackwell Ultra) documentation: 288 GB HBM3e per GPU; GB300 NVL72 = 72 GPUs in one NVLink 5 domain",
            notes="dense BF16 taken equal to B200 (Blackwell Ultra raised FP4, not BF16); check the datasheet for your SKU",
            nic_bits_per_s=800e9, nic_source=_XDR,
            **_borrowed(_HOPPER_CLUSTER, "Hopper", "a Blackwell training cluster"),
        ),
        Accelerator(
            "MI250X",
            _freeze({"bf16": 383e12, "fp16": 383e12, "fp32": 95.7e12}),
            hbm_bytes=128 * GIB, hbm_bandwidth=3.2768e12, link_bandwidth=400e9, domain_size=4,
            source="AMD Instinct MI250X datasheet: 383 TFLOPS peak FP16/BF16 matrix (no sparsity), 128 GB HBM2e "
                   "(128 GiB) at 3.2768 TB/s, up to 800 GB/s aggregate Infinity Fabric (taken as 400 per direction)",
            notes="one package = two GCDs, each seen as a GPU by ROCm (half of every figure); 4 packages per "
                  "Frontier/LUMI node",
            nic_bits_per_s=200e9,
            nic_source="OLCF Frontier user guide: 4x HPE Slingshot 200 Gb/s NICs per node, one per MI250X",
            **_borrowed(_AMPERE_CLUSTER, "Ampere (its contemporary)", "an MI250X training cluster"),
        ),
        Accelerator(
            "MI300X",
            _freeze({"bf16": 1307.4e12, "fp16": 1307.4e12, "fp8": 2614.9e12, "fp32": 163.4e12}),
            hbm_bytes=192 * GIB, hbm_bandwidth=5.3e12, link_bandwidth=448e9, domain_size=8,
            source="AMD Instinct MI300X datasheet: 1307.4 TFLOPS peak BF16 dense (2614.9 with sparsity), 192 GB "
                   "HBM3 (192 GiB) at 5.3 TB/s; 7 Infinity Fabric links of 64 GB/s per direction = 448 GB/s to its 7 peers",
            sparse_flops=_freeze({"bf16": 2614.9e12, "fp8": 5229.8e12}),
            nic_bits_per_s=400e9,
            nic_source="AMD Instinct MI300X platform: 8 GPUs, one 400 Gb/s NIC each (the DGX H100 pattern)",
            **_borrowed(_HOPPER_CLUSTER, "Hopper (its contemporary)", "an MI300X training cluster"),
        ),
        Accelerator(
            "TPUv4",
            _freeze({"bf16": 275e12}),
            hbm_bytes=32 * GIB, hbm_bandwidth=1.2e12, link_bandwidth=150e9, domain_size=4096,
            source="Google Cloud TPU v4 documentation: 275 TFLOPS bf16, 32 GiB HBM2 at 1200 GB/s, 4096-chip pod (3D torus, optical switches)",
            notes="ICI quoted as 2400 Gbps per chip; taken here as both directions together",
            nic_bits_per_s=150e9 * 8, nic_source=_ICI,
            **_borrowed(_AMPERE_CLUSTER, "Ampere (its contemporary)", "a TPU v4 pod"),
        ),
        Accelerator(
            "TPUv5e",
            _freeze({"bf16": 197e12, "int8": 393e12}),
            hbm_bytes=16 * GIB, hbm_bandwidth=819e9, link_bandwidth=200e9, domain_size=256,
            source="Google Cloud TPU v5e documentation: 197 TFLOPs bf16, 16 GB HBM2 at 819 GBps, 400 GBps "
                   "bidirectional ICI per chip, 256-chip pod (2D torus)",
            nic_bits_per_s=200e9 * 8, nic_source=_ICI,
            **_borrowed(_HOPPER_CLUSTER, "Hopper (its contemporary)", "a TPU pod of this generation"),
        ),
        Accelerator(
            "TPUv5p",
            _freeze({"bf16": 459e12, "int8": 918e12}),
            hbm_bytes=95e9, hbm_bandwidth=2.765e12, link_bandwidth=300e9, domain_size=6144,
            source="Google Cloud TPU v5p documentation: 459 TFLOPS bf16, 95 GB HBM2e at 2765 GB/s; 8960-chip pod, largest slice 6144 chips",
            notes="ICI quoted as 4800 Gbps per chip; taken here as both directions together",
            nic_bits_per_s=300e9 * 8, nic_source=_ICI,
            **_borrowed(_HOPPER_CLUSTER, "Hopper (its contemporary)", "a TPU pod of this generation"),
        ),
        Accelerator(
            "TPUv6e",
            _freeze({"bf16": 918e12, "int8": 1836e12}),
            hbm_bytes=32 * GIB, hbm_bandwidth=1.638e12, link_bandwidth=400e9, domain_size=256,
            source="Google Cloud TPU v6e (Trillium) documentation: 918 TFLOPs bf16, 32 GB HBM at 1638 GBps, 800 GBps "
                   "bidirectional ICI per chip, 256-chip pod (2D torus)",
            nic_bits_per_s=400e9 * 8, nic_source=_ICI,
            **_borrowed(_HOPPER_CLUSTER, "Hopper (its contemporary)", "a TPU pod of this generation"),
        ),
    ]
})

ALIASES: Mapping[str, str] = MappingProxyType({
    "H100": "H100-SXM", "H100-SXM5": "H100-SXM", "H100SXM": "H100-SXM", "H100PCIE": "H100-PCIe",
    "A100-SXM": "A100", "A100-80GB": "A100", "TPU-V4": "TPUv4", "TPUV4": "TPUv4", "TPU-V5P": "TPUv5p",
    "TPUV5P": "TPUv5p", "H200-SXM": "H200", "A100-40G": "A100-40GB", "A100-SXM-40GB": "A100-40GB",
    "V100-SXM2": "V100", "V100-32GB": "V100", "TPU-V5E": "TPUv5e", "TPUV5E": "TPUv5e", "TPU-V6E": "TPUv6e",
    "TPUV6E": "TPUv6e", "TRILLIUM": "TPUv6e", "H800-SXM": "H800",
})


def accelerator_names() -> list[str]:
    """Canonical names in the table, in a stable order."""
    return list(ACCELERATORS)


def get_accelerator(name: str) -> Accelerator:
    """Look up an accelerator by canonical name or alias (case-insensitive).

    Raises ValueError naming ``name`` and listing the known names if it is unknown.
    """
    return lookup("name", name)


def lookup(arg: str, value: object) -> Accelerator:
    """``get_accelerator(value)`` for a calculator whose argument is called ``arg`` (``gpu``): the
    same lookup, but an unknown name is reported under ``arg``, the name the user typed."""
    if not isinstance(value, str):
        raise ValueError(f"{arg} must be an accelerator name string, got {value!r}")
    by_upper = {k.upper(): k for k in ACCELERATORS}
    key = value.strip().upper()
    if key in by_upper:
        return ACCELERATORS[by_upper[key]]
    if key in ALIASES:
        return ACCELERATORS[ALIASES[key]]
    shown = value if len(value) <= 40 else value[:37] + "..."
    raise ValueError(f"{arg}: unknown accelerator {shown!r}; known names: {', '.join(ACCELERATORS)} "
                     f"(aliases: {', '.join(ALIASES)})")
