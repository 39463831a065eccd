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

__all__ = ["Accelerator", "ACCELERATORS", "ALIASES", "get_accelerator", "lookup", "accelerator_names"]


@dataclass(frozen=True)
class Accelerator:
    """One accelerator's datasheet numbers.

    ``link_bandwidth`` is the scale-up link (NVLink / ICI) bandwidth **per direction** per chip;
    ``domain_size`` is how many chips share that fast domain in the usual system.
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

    def peak(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError naming ``dtype`` if the chip has none."""
        choice("dtype", dtype, tuple(self.peak_flops))
        return self.peak_flops[dtype]


def _freeze(d: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(d))


_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023): 'specifications 1/2 lower without sparsity'"

ACCELERATORS: Mapping[str, Accelerator] = MappingProxyType({
    a.name: a for a in [
        Accelerator(
            "H100-SXM",
            _freeze({"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494.5e12, "fp32": 67e12}),
            hbm_bytes=80e9, hbm_bandwidth=3.35e12, link_bandwidth=450e9, domain_size=8,
            source=_NV_H100 + "; NVLink 4: 18 links, 900 GB/s total = 450 GB/s per direction",
            sparse_flops=_freeze({"bf16": 1979e12, "fp8": 3958e12}),
        ),
        Accelerator(
            "H100-PCIe",
            _freeze({"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "tf32": 378e12, "fp32": 51e12}),
            hbm_bytes=80e9, hbm_bandwidth=2.0e12, link_bandwidth=300e9, domain_size=2,
            source=_NV_H100 + "; NVLink bridge 600 GB/s total between a pair of cards",
            sparse_flops=_freeze({"bf16": 1513e12, "fp8": 3026e12}),
        ),
        Accelerator(
            "H200",
            _freeze({"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "tf32": 494.5e12, "fp32": 67e12}),
            hbm_bytes=141e9, hbm_bandwidth=4.8e12, link_bandwidth=450e9, domain_size=8,
            source="NVIDIA H200 datasheet (2024): H100 SXM compute, 141 GB HBM3e at 4.8 TB/s",
        ),
        Accelerator(
            "A100",
            _freeze({"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
            hbm_bytes=80e9, hbm_bandwidth=2.039e12, link_bandwidth=300e9, domain_size=8,
            source="NVIDIA A100 datasheet (SXM4 80GB): 312 TFLOPS dense BF16, NVLink 3 600 GB/s total",
        ),
        Accelerator(
            "B200",
            _freeze({"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "tf32": 1.1e15, "fp32": 75e12}),
            hbm_bytes=180e9, hbm_bandwidth=8e12, link_bandwidth=900e9, domain_size=8,
            source="NVIDIA HGX/DGX B200 specifications (dense = half the sparse figures); NVLink 5 1.8 TB/s total",
            notes="192 GB physical HBM3e; 180 GB usable in HGX/DGX B200 systems",
        ),
        Accelerator(
            "B300",
            _freeze({"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15}),
            hbm_bytes=288e9, hbm_bandwidth=8e12, link_bandwidth=900e9, domain_size=72,
            source="NVIDIA B300 (Blackwell Ultra) documentation: 288 GB HBM3e per GPU; GB300 NVL72 = 72 GPUs in one NVLink 5 domain",
            notes="dense BF16 taken equal to B200 (Blackwell Ultra raised FP4, not BF16); check the datasheet for your SKU",
        ),
        Accelerator(
            "TPUv4",
            _freeze({"bf16": 275e12}),
            hbm_bytes=32 * 2**30, hbm_bandwidth=1.2e12, link_bandwidth=150e9, domain_size=4096,
            source="Google Cloud TPU v4 documentation: 275 TFLOPS bf16, 32 GiB HBM2 at 1200 GB/s, 4096-chip pod (3D torus, optical switches)",
            notes="ICI quoted as 2400 Gbps per chip; taken here as both directions together",
        ),
        Accelerator(
            "TPUv5p",
            _freeze({"bf16": 459e12, "int8": 918e12}),
            hbm_bytes=95e9, hbm_bandwidth=2.765e12, link_bandwidth=300e9, domain_size=6144,
            source="Google Cloud TPU v5p documentation: 459 TFLOPS bf16, 95 GB HBM2e at 2765 GB/s; 8960-chip pod, largest slice 6144 chips",
            notes="ICI quoted as 4800 Gbps per chip; taken here as both directions together",
        ),
    ]
})

ALIASES: Mapping[str, str] = MappingProxyType({
    "H100": "H100-SXM", "H100-SXM5": "H100-SXM", "H100SXM": "H100-SXM", "H100PCIE": "H100-PCIe",
    "A100-SXM": "A100", "A100-80GB": "A100", "TPU-V4": "TPUv4", "TPUV4": "TPUv4", "TPU-V5P": "TPUv5p",
    "TPUV5P": "TPUv5p", "H200-SXM": "H200",
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
