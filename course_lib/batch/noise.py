"""The gradient noise scale B_simple (McCandlish et al. 2018, arXiv 1812.06162, App. A.1).

A gradient averaged over B examples is the true gradient G plus noise of covariance Σ/B, so its
expected squared norm is E|G_B|² = |G|² + tr(Σ)/B. Two batch sizes give two such equations, hence
unbiased estimates of both unknowns:

    |G|²  = (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ) = (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

and B_simple = tr(Σ)/|G|², the batch at which the noise in one step's gradient equals its signal.
Each estimate is unbiased but noisy; their ratio is taken after averaging over repeats (the paper
averages them with EMAs), and its statistical error is the delta method's over those repeats.
"""
from __future__ import annotations

import math

import torch

from .._validate import calculator, positive

__all__ = ["noise_scale", "noise_parts", "noise_scale_stats", "grad_sq_norms"]


def _sizes(batch_small: float, batch_big: float) -> tuple[float, float]:
    bs = positive("batch_small", batch_small)
    bb = positive("batch_big", batch_big)
    if bb <= bs:
        raise ValueError(f"batch_big ({batch_big!r}) must be larger than batch_small ({batch_small!r})")
    return bs, bb


def noise_parts(sq_norm_small: float, batch_small: float, sq_norm_big: float,
                batch_big: float) -> tuple[float, float]:
    """Unbiased ``(|G|², tr(Σ))`` from the squared norms of gradients averaged over
    ``batch_small`` and ``batch_big`` examples (either may come out negative on one noisy draw)."""
    bs, bb = _sizes(batch_small, batch_big)
    s = positive("sq_norm_small", sq_norm_small, allow_zero=True)
    b = positive("sq_norm_big", sq_norm_big, allow_zero=True)
    g2 = (bb * b - bs * s) / (bb - bs)
    tr = (s - b) / (1 / bs - 1 / bb)
    return g2, tr


@calculator
def noise_scale(sq_norm_small: float, batch_small: float, sq_norm_big: float, batch_big: float) -> float:
    """B_simple = tr(Σ)/|G|² (in the unit of the batch sizes: examples, or tokens if given in
    tokens) from squared gradient norms at two batch sizes (McCandlish et al. App. A.1).

    >>> round(noise_scale(2.0, 4, 0.5, 64), 2)   # |G|² = 0.4, tr(Σ) = 6.4
    16.0
    """
    g2, tr = noise_parts(sq_norm_small, batch_small, sq_norm_big, batch_big)
    if g2 <= 0:
        raise ValueError(f"sq_norm_big ({sq_norm_big!r}) at batch_big ({batch_big!r}) is too small against "
                         f"sq_norm_small ({sq_norm_small!r}) at batch_small ({batch_small!r}): the estimated "
                         f"|G|² = (batch_big·sq_norm_big − batch_small·sq_norm_small)/(batch_big − batch_small) "
                         f"is {g2:.3g} <= 0; average more draws before taking the ratio")
    if tr < 0:
        raise ValueError(f"sq_norm_small ({sq_norm_small!r}) is below sq_norm_big ({sq_norm_big!r}): "
                         "a smaller batch cannot have a less noisy gradient on average")
    return tr / g2


def noise_scale_stats(sq_small: list[float], batch_small: float, sq_big: list[float],
                      batch_big: float) -> dict:
    """B_simple from ``n`` paired draws of the two squared norms, with its standard error.

    The per-draw estimates of |G|² and tr(Σ) are averaged first (each is unbiased), then divided;
    the error is the delta method's, from the draws' variances and covariance."""
    if len(sq_small) != len(sq_big) or len(sq_small) < 2:
        raise ValueError(f"sq_small and sq_big need the same number (>= 2) of draws, got "
                         f"{len(sq_small)} and {len(sq_big)}")
    parts = [noise_parts(s, batch_small, b, batch_big) for s, b in zip(sq_small, sq_big)]
    n = len(parts)
    g = [p[0] for p in parts]
    t = [p[1] for p in parts]
    mg, mt = sum(g) / n, sum(t) / n
    vg = sum((x - mg) ** 2 for x in g) / (n - 1) / n
    vt = sum((x - mt) ** 2 for x in t) / (n - 1) / n
    cov = sum((x - mg) * (y - mt) for x, y in zip(g, t)) / (n - 1) / n
    if mg <= 0:
        raise ValueError(f"the mean |G|² estimate over {n} draws is {mg:.3g} <= 0: the gradient is "
                         "lost in its noise; use more draws or a larger batch_big")
    b = mt / mg
    rel2 = vt / mt ** 2 + vg / mg ** 2 - 2 * cov / (mt * mg) if mt > 0 else float("nan")
    return {"b_simple": b, "stderr": abs(b) * math.sqrt(max(rel2, 0.0)), "g2": mg, "trace": mt,
            "g2_stderr": math.sqrt(vg), "trace_stderr": math.sqrt(vt), "draws": n}


def _sq_norm(model: torch.nn.Module) -> float:
    return float(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))


def grad_sq_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                  batch_small: int) -> tuple[float, float]:
    """One paired draw on one big batch ``(x, y)`` of B_big sequences: the squared norm of the
    gradient over the whole batch, and the mean squared norm of the gradients over its
    ``B_big/batch_small`` disjoint small batches (what data-parallel ranks would each hold).
    Returns ``(mean |G_small|², |G_big|²)``; the model's gradients are left zeroed."""
    big = x.shape[0]
    if batch_small < 1 or big % batch_small or big == batch_small:
        raise ValueError(f"batch_small ({batch_small!r}) must divide the big batch ({big}) and be smaller")
    total = [torch.zeros_like(p) for p in model.parameters()]
    smalls = []
    for i in range(0, big, batch_small):
        model.zero_grad(set_to_none=False)
        _, loss = model(x[i:i + batch_small], y[i:i + batch_small])
        loss.backward()
        smalls.append(_sq_norm(model))
        for acc, p in zip(total, model.parameters()):
            acc += p.grad * (batch_small / big)
    model.zero_grad(set_to_none=False)
    sq_big = float(sum((a.double() ** 2).sum() for a in total))
    return sum(smalls) / len(smalls), sq_big
