"""Silent data corruption: a flipped bit, and the invariants that catch it at scale.

* :func:`flip_bit` — flip bit ``bit`` (0 = the last fraction bit, 23–30 the exponent, 31 the sign)
  of one float32 element, in place: what a faulty multiplier or a marginal SRAM cell does to a value.
* :func:`fingerprint` — a CRC-32 over tensors' bytes. Data-parallel replicas hold bitwise-equal
  parameters after every step (they apply the same averaged gradient), so fingerprints that differ
  across replicas name a replica whose state or update was corrupted *after* the all-reduce.
* recomputation — a rank's local gradient is a deterministic function of the parameters and its
  batch: another rank recomputes it and compares fingerprints; this catches corruption *before* the
  all-reduce, which the replicas' fingerprints cannot (the all-reduce copies it into every replica).
* :class:`Anomaly` — a loss or gradient norm far outside what clean steps give (a z-score against
  calibration steps, or not finite): cheap, and blind to flips in the low bits.
"""
from __future__ import annotations

import math
import statistics
import zlib

import torch

__all__ = ["flip_bit", "fingerprint", "Anomaly"]


def flip_bit(tensor: torch.Tensor, index: int, bit: int) -> float:
    """Flip bit ``bit`` of element ``index`` (flat) of a float32 tensor in place; return the old value."""
    if tensor.dtype != torch.float32:
        raise ValueError(f"tensor must be float32 (a bit position means a float32 bit), got {tensor.dtype}")
    if not 0 <= int(bit) < 32:
        raise ValueError(f"bit must be in 0..31, got {bit!r}")
    flat = tensor.detach().view(-1)
    if not 0 <= int(index) < flat.numel():
        raise ValueError(f"index must be in 0..{flat.numel() - 1}, got {index!r}")
    old = float(flat[index])
    bits = flat.view(torch.int32)
    mask = torch.tensor(1 << bit if bit < 31 else -(1 << 31), dtype=torch.int32)
    bits[index] = bits[index] ^ mask
    return old


def fingerprint(tensors) -> int:
    """CRC-32 of the tensors' bytes in order: equal exactly when every bit is equal (up to CRC
    collisions, 1 in 2^32)."""
    crc = 0
    for t in tensors:
        crc = zlib.crc32(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes(), crc)
    return crc


class Anomaly:
    """Flags a value more than ``z`` standard deviations from the mean of calibration values, or
    not finite. ``calibrate(values)`` first (clean steps); ``__call__(x)`` then says if x is anomalous."""

    def __init__(self, z: float = 6.0) -> None:
        from .._validate import positive
        self.z = positive("z", z)
        self.mean = self.std = None

    def calibrate(self, values) -> Anomaly:
        values = [float(v) for v in values]
        if len(values) < 2:
            raise ValueError(f"calibrate needs at least two clean values, got {len(values)}")
        self.mean, self.std = statistics.fmean(values), statistics.stdev(values)
        return self

    def __call__(self, x: float) -> bool:
        if self.mean is None:
            raise ValueError("Anomaly.calibrate(values) must be called with clean values first")
        x = float(x)
        return not math.isfinite(x) or abs(x - self.mean) > self.z * max(self.std, 1e-12 * abs(self.mean))
