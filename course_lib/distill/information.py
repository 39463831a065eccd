"""Entropy, cross-entropy and KL divergence of discrete distributions, in nats.

They are the quantities distillation losses are made of (``course_lib.distill.train`` trains with
them); each checks that its arguments are probability distributions and names the one that is not.
The cost side of the chapter is ``distill.costs``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["entropy", "cross_entropy", "kl_divergence"]


def _dist(name: str, p: Sequence[float]) -> list[float]:
    try:
        values = [float(x) for x in p]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of probabilities, got {p!r}") from None
    if not values or any(math.isnan(x) or x < 0 for x in values):
        raise ValueError(f"{name} must be non-empty with non-negative entries, got {p!r}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1, sums to {sum(values):.6g}")
    return values


def entropy(p: Sequence[float]) -> float:
    """H(p) = −Σ p log p in nats (0 log 0 = 0)."""
    return -sum(x * math.log(x) for x in _dist("p", p) if x > 0)


def cross_entropy(p: Sequence[float], q: Sequence[float]) -> float:
    """H(p, q) = −Σ p log q in nats: the loss of predicting q when the truth is drawn from p.
    Infinite if q puts zero mass where p does not."""
    pv, qv = _dist("p", p), _dist("q", q)
    if len(pv) != len(qv):
        raise ValueError(f"q must have the same length as p ({len(pv)}), got {len(qv)}")
    if any(a > 0 and b == 0 for a, b in zip(pv, qv)):
        return math.inf
    return -sum(a * math.log(b) for a, b in zip(pv, qv) if a > 0)


def kl_divergence(p: Sequence[float], q: Sequence[float]) -> float:
    """KL(p ‖ q) = Σ p log(p/q) = H(p, q) − H(p) in nats; ≥ 0, zero only when q = p."""
    return cross_entropy(p, q) - entropy(p)
