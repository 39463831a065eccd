"""Compute-optimal scaling (Chinchilla): how big a model, how many tokens, what loss, what price.

Training compute is C = 6·N·D FLOP (``course_lib.flops``). Hoffmann et al. 2022 (arXiv
2203.15556) model the final loss as L(N, D) = E + A/N^α + B/D^β ("Approach 3"). Minimising it
on the line C = 6ND gives the closed form (their eq. 4)

    N*(C) = G·(C/6)^(β/(α+β)),   D*(C) = C/(6·N*),   G = (αA/(βB))^(1/(α+β)).

Two published constant sets are built in: Hoffmann's as printed (rounded) and the Besiroglu et al.
2024 refit of Hoffmann's own data (arXiv 2404.10102), which agrees with ~20 tokens/parameter;
a third rule, ``"tokens_per_param"``, is the D = 20·N rule of thumb with no loss model.
Any ``LossFit`` (for example one fitted to this machine's runs by ``fit_loss``) can be passed
wherever a ``fit`` name is accepted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validate import calculator, choice, positive, positive_int

__all__ = ["LossFit", "FITS", "TOKENS_PER_PARAM", "FIT_NAMES", "get_fit", "compute_optimal",
           "loss", "overtraining_cost", "size_for_tokens", "min_size_fraction", "inference_optimal",
           "optimal_loss", "compute_equivalent", "fit_power_law", "fit_loss", "isoflop_minimum",
           "PUBLISHED_MODELS", "CHINCHILLA_TABLE3"]

TOKENS_PER_PARAM = 20.0


@dataclass(frozen=True)
class LossFit:
    """L(N, D) = E + A/N^alpha + B/D^beta, in nats per token of the data it was fitted on."""

    name: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    source: str = ""

    def loss(self, n_params, n_tokens):
        """Predicted loss; works elementwise on numpy arrays."""
        return self.E + self.A / np.power(n_params, self.alpha) + self.B / np.power(n_tokens, self.beta)

    @property
    def a(self) -> float:
        """Exponent of N*(C) ∝ C^a, a = β/(α+β) (and D* ∝ C^(1−a))."""
        return self.beta / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    def optimum(self, compute):
        """(N*, D*) minimising the loss at ``compute`` = 6ND FLOP (elementwise on arrays)."""
        n = self.G * np.power(np.asarray(compute, dtype=float) / 6.0, self.a)
        return n, np.asarray(compute, dtype=float) / (6.0 * n)


FITS: dict[str, LossFit] = {
    "hoffmann": LossFit("hoffmann", 1.69, 406.4, 410.7, 0.34, 0.28,
                        "Hoffmann et al. 2022, arXiv 2203.15556, Approach 3 (constants as printed, rounded)"),
    "besiroglu": LossFit("besiroglu", 1.8172, 482.01, 2085.43, 0.3478, 0.3658,
                         "Besiroglu et al. 2024, arXiv 2404.10102, refit of Hoffmann's data"),
}
FIT_NAMES = ("tokens_per_param", "hoffmann", "besiroglu")

# (parameters, training tokens, source) of models whose papers state both.
PUBLISHED_MODELS: dict[str, tuple[float, float, str]] = {
    "GPT-3 175B": (175e9, 300e9, "Brown et al. 2020, arXiv 2005.14165"),
    "Gopher 280B": (280e9, 300e9, "Rae et al. 2021, arXiv 2112.11446"),
    "Chinchilla 70B": (70e9, 1.4e12, "Hoffmann et al. 2022, arXiv 2203.15556"),
    "Llama 2 7B": (6.74e9, 2.0e12, "Touvron et al. 2023, arXiv 2307.09288"),
    "Llama 3 8B": (8.03e9, 15e12, "Grattafiori et al. 2024, arXiv 2407.21783 (\"15T+\" tokens)"),
    "Llama 3 405B": (405e9, 15.6e12, "Grattafiori et al. 2024, arXiv 2407.21783"),
}

# Hoffmann et al. 2022, Table 3 (Approach 1 projections): (parameters, FLOPs, tokens).
CHINCHILLA_TABLE3: tuple[tuple[float, float, float], ...] = (
    (400e6, 1.92e19, 8.0e9), (1e9, 1.21e20, 20.2e9), (10e9, 1.23e22, 205.1e9),
    (67e9, 5.76e23, 1.5e12), (175e9, 3.85e24, 3.7e12), (280e9, 9.90e24, 5.9e12),
    (520e9, 3.43e25, 11.0e12), (1e12, 1.27e26, 21.2e12), (10e12, 1.30e28, 216.2e12),
)


def get_fit(fit: str | LossFit) -> LossFit:
    """The ``LossFit`` for a published name ("hoffmann", "besiroglu") or a ``LossFit`` itself;
    ValueError naming ``fit`` otherwise (including "tokens_per_param", which has no loss model)."""
    if isinstance(fit, LossFit):
        return fit
    choice("fit", fit, tuple(FITS))
    return FITS[fit]


@calculator
def compute_optimal(compute: float, fit: str | LossFit = "hoffmann") -> tuple[float, float]:
    """Compute-optimal (n_params, n_tokens) for ``compute`` FLOP under C = 6ND.

    ``fit="tokens_per_param"``: D = 20N, so C = 120N², N = √(C/120), D = √(20C/6).
    A loss fit: the closed-form minimum of E + A/N^α + B/D^β on the line C = 6ND.
    """
    if not isinstance(fit, LossFit):
        choice("fit", fit, FIT_NAMES)
    c = positive("compute", compute)
    if fit == "tokens_per_param":
        n = math.sqrt(c / (6.0 * TOKENS_PER_PARAM))
        return n, TOKENS_PER_PARAM * n
    with np.errstate(divide="ignore", over="ignore"):   # a subnormal compute: @calculator reports it
        n, d = get_fit(fit).optimum(c)
    return float(n), float(d)


@calculator
def loss(n_params: float, n_tokens: float, fit: str | LossFit = "hoffmann") -> float:
    """Predicted final training loss (nats/token) of ``n_params`` trained on ``n_tokens``."""
    lf = get_fit(fit)
    n = positive("n_params", n_params)
    d = positive("n_tokens", n_tokens)
    return float(lf.loss(n, d))


@calculator
def optimal_loss(compute: float, fit: str | LossFit = "hoffmann") -> float:
    """Predicted loss of the compute-optimal model for ``compute`` FLOP."""
    lf = get_fit(fit)
    n, d = compute_optimal(compute, lf)
    return float(lf.loss(n, d))


def _log_optimal_loss(lf: LossFit, log_c: float) -> float:
    """``optimal_loss`` at compute e^log_c, in log space so no intermediate overflows."""
    log_n = math.log(lf.G) + lf.a * (log_c - math.log(6.0))
    log_d = log_c - math.log(6.0) - log_n
    return lf.E + lf.A * math.exp(-lf.alpha * log_n) + lf.B * math.exp(-lf.beta * log_d)


@calculator
def compute_equivalent(n_params: float, n_tokens: float, fit: str | LossFit = "hoffmann") -> float:
    """The compute (FLOP) a compute-optimal model needs to reach the predicted loss of
    ``n_params`` trained on ``n_tokens``; 6ND divided by it, minus 1, is the over-training price."""
    import scipy.optimize as so
    lf = get_fit(fit)
    target = loss(n_params, n_tokens, lf)
    log_c = math.log(6.0) + math.log(float(n_params)) + math.log(float(n_tokens))

    def gap(lc: float) -> float:
        return _log_optimal_loss(lf, lc) - target

    lo = log_c - 60.0
    for _ in range(40):   # the optimum needs less compute than 6ND; widen downwards until bracketed
        if gap(lo) > 0:
            break
        lo -= 60.0
    else:
        raise ValueError(f"n_params={n_params!r}, n_tokens={n_tokens!r}: no compute-optimal model "
                         f"within e^-2400 of 6ND reaches their loss (inputs too extreme)")
    c = math.exp(so.brentq(gap, lo, log_c + 1e-9, xtol=1e-12))
    if c == 0.0:
        raise ValueError(f"n_params={n_params!r}, n_tokens={n_tokens!r}: the equivalent compute "
                         f"underflows a float (inputs too small)")
    return c


def min_size_fraction(fit: str | LossFit = "hoffmann") -> float:
    """Smallest N/N* that can still reach the compute-optimal loss with unlimited tokens:
    (1 + α/β)^(−1/α). Below it the parameter term alone exceeds the target."""
    f = get_fit(fit)
    return (1.0 + f.alpha / f.beta) ** (-1.0 / f.alpha)


@calculator
def overtraining_cost(size_fraction: float, fit: str | LossFit = "hoffmann") -> tuple[float, float]:
    """Train a model of ``size_fraction``·N* to the same loss as the compute-optimal (N*, D*):
    return (token_multiplier D/D*, extra_compute_fraction 6ND/6N*D* − 1).

    At the optimum αA/N*^α = βB/D*^β, so the answer does not depend on the budget:
    (D/D*)^(−β) = 1 + (β/α)(1 − f^(−α)) with f = size_fraction.
    """
    lf = get_fit(fit)
    f = positive("size_fraction", size_fraction)
    inner = 1.0 + (lf.beta / lf.alpha) * (1.0 - f ** (-lf.alpha))
    if inner <= 0:
        raise ValueError(f"size_fraction={size_fraction!r} is too small: below "
                         f"{min_size_fraction(lf):.3f} no token budget reaches the target loss")
    k = inner ** (-1.0 / lf.beta)
    return k, f * k - 1.0


@calculator
def size_for_tokens(token_multiplier: float, fit: str | LossFit = "hoffmann") -> tuple[float, float]:
    """The inverse question: train on ``token_multiplier``·D* tokens; how small can the model be
    at the same loss? Returns (size_fraction N/N*, extra_compute_fraction)."""
    lf = get_fit(fit)
    k = positive("token_multiplier", token_multiplier)
    inner = 1.0 + (lf.alpha / lf.beta) * (1.0 - k ** (-lf.beta))
    if inner <= 0:
        raise ValueError(f"token_multiplier={token_multiplier!r} is too small to reach the target loss")
    f = inner ** (-1.0 / lf.alpha)
    return f, f * k - 1.0


@calculator
def inference_optimal(compute: float, inference_tokens: float, fit: str | LossFit = "hoffmann",
                      grid: int = 2001) -> dict:
    """Pick the model size that minimises training + lifetime inference FLOP at a fixed loss.

    The target loss is that of the compute-optimal model for ``compute``. A model of f·N* needs
    k(f)·D* tokens (``overtraining_cost``) and then serves ``inference_tokens`` at 2N FLOP each:
    total(f) = 6·fN*·k(f)D* + 2·fN*·inference_tokens. Minimised over f on a log grid (the
    optimum depends only on inference_tokens/D*). Returns a dict of the optimum and the
    Chinchilla baseline (f = 1) for comparison.
    """
    c = positive("compute", compute)
    inf = positive("inference_tokens", inference_tokens, allow_zero=True)
    lf = get_fit(fit)
    grid = positive_int("grid", grid, minimum=2, maximum=10 ** 7)   # the grid is an array: bounded
    n_star, d_star = (float(v) for v in lf.optimum(c))
    lo = math.log(min_size_fraction(lf)) + 1e-6
    fs = np.exp(np.linspace(lo, 0.0, grid))
    inner = 1.0 + (lf.beta / lf.alpha) * (1.0 - fs ** (-lf.alpha))
    ks = np.power(np.maximum(inner, 1e-300), -1.0 / lf.beta)
    with np.errstate(over="ignore"):   # checked just below, naming the inputs
        train = 6.0 * fs * n_star * ks * d_star
        total = train + 2.0 * fs * n_star * inf
    base_total = c + 2.0 * n_star * inf
    if not (np.all(np.isfinite(total)) and math.isfinite(base_total)):
        raise ValueError(f"inputs out of range: compute={compute!r}, inference_tokens={inference_tokens!r} "
                         f"(the lifetime FLOP overflow a float)")
    i = int(np.argmin(total))
    return {"size_fraction": float(fs[i]), "token_multiplier": float(ks[i]),
            "n_params": float(fs[i] * n_star), "n_tokens": float(ks[i] * d_star),
            "training_flops": float(train[i]), "inference_flops": float(total[i] - train[i]),
            "total_flops": float(total[i]), "chinchilla_total_flops": float(base_total),
            "saving_fraction": float(1.0 - total[i] / base_total),
            "target_loss": float(lf.loss(n_star, d_star))}


def fit_power_law(x, y) -> tuple[float, float]:
    """Least-squares line in log-log space: y ≈ coef·x^exponent. Returns (coef, exponent)."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if lx.size < 2 or lx.shape != ly.shape or not (np.all(np.isfinite(lx)) and np.all(np.isfinite(ly))):
        raise ValueError("x and y must be equal-length arrays of at least 2 positive numbers")
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(math.exp(intercept)), float(slope)


def isoflop_minimum(n_params, losses) -> float:
    """Hoffmann's Approach 2 for one budget: fit a parabola to loss vs log N, return its vertex N."""
    ln = np.log(np.asarray(n_params, dtype=float))
    c2, c1, _ = np.polyfit(ln, np.asarray(losses, dtype=float), 2)
    if c2 <= 0:
        raise ValueError("losses are not U-shaped in log N (parabola opens downward)")
    return float(math.exp(-c1 / (2.0 * c2)))


def _huber_objective(theta, ln, ld, llos, delta):
    """Hoffmann's objective: Huber(LSE(a−α·logN, b−β·logD, e) − log L), summed, with gradient."""
    a, b, e, al, be = theta
    terms = np.stack([a - al * ln, b - be * ld, np.full_like(ln, e)])
    m = terms.max(axis=0)
    w = np.exp(terms - m)
    lse = m + np.log(w.sum(axis=0))
    r = lse - llos
    small = np.abs(r) <= delta
    val = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta)).sum()
    dr = np.where(small, r, delta * np.sign(r))
    p = w / w.sum(axis=0)
    grad = np.array([(dr * p[0]).sum(), (dr * p[1]).sum(), (dr * p[2]).sum(),
                     -(dr * p[0] * ln).sum(), -(dr * p[1] * ld).sum()])
    return val, grad


# log A, log B, log E, α, β: wide enough for any plausible fit, and keeps L-BFGS from wandering
# off to E → 0 (log E → −∞) when the data cannot resolve the irreducible loss.
_BOUNDS = [(-10.0, 40.0), (-10.0, 40.0), (-5.0, 3.0), (0.0, 3.0), (0.0, 3.0)]


def _huber_grid(grid, ln, ld, llos, delta):
    """The objective at every row (a, b, e, α, β) of ``grid`` at once (vectorised)."""
    a, b, e, al, be = (grid[:, i: i + 1] for i in range(5))
    terms = np.stack([a - al * ln, b - be * ld, np.broadcast_to(e, (grid.shape[0], ln.size))])
    m = terms.max(axis=0)
    r = m + np.log(np.exp(terms - m).sum(axis=0)) - llos
    return np.where(np.abs(r) <= delta, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta)).sum(axis=1)


def fit_loss(n_params, n_tokens, losses, delta: float = 1e-3, n_starts: int = 6,
             name: str = "fitted") -> LossFit:
    """Fit L(N,D) = E + A/N^α + B/D^β the way Hoffmann et al. did (their App. D.2): minimise the
    Huber loss (δ = 1e-3) of log-space residuals with L-BFGS, starting from the best
    ``n_starts`` points of a grid of initialisations, and keep the best result."""
    from scipy.optimize import minimize
    ln, ld, llos = (np.log(np.asarray(v, dtype=float)) for v in (n_params, n_tokens, losses))
    if not (ln.shape == ld.shape == llos.shape) or ln.size < 5:
        raise ValueError("n_params, n_tokens and losses must be equal-length arrays of at least 5 runs")
    grid = np.array(np.meshgrid(np.arange(0.0, 26.0, 5.0), np.arange(0.0, 26.0, 5.0),
                                np.arange(-1.0, 1.6, 0.5), np.arange(0.0, 2.1, 0.5),
                                np.arange(0.0, 2.1, 0.5), indexing="ij")).reshape(5, -1).T
    scores = _huber_grid(grid, ln, ld, llos, delta)
    best = None
    for t in grid[np.argsort(scores)[: max(1, int(n_starts))]]:
        res = minimize(_huber_objective, t, args=(ln, ld, llos, delta), jac=True, method="L-BFGS-B",
                       bounds=_BOUNDS, options={"maxiter": 500, "gtol": 1e-10, "ftol": 1e-13})
        if best is None or res.fun < best.fun:
            best = res
    a, b, e, al, be = best.x
    return LossFit(name, math.exp(e), math.exp(a), math.exp(b), float(al), float(be),
                   f"Huber(δ={delta}) fit of {ln.size} runs, L-BFGS")
