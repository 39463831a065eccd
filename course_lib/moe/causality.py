"""A causality test harness for any sequence model, and the train/inference gap it predicts.

A language model is trained on whole sequences at once (teacher forcing) but used one token at a
time: at position n the tokens n+1, n+2, … do not exist yet. The two agree only if output n is a
function of inputs 0..n alone (*causal*) and of its own sequence alone (*batch independent*).
Attention masks guarantee this for attention; a router that lets tokens compete for expert slots
can silently break it.

``check_causality(model, x)`` tests it by experiment: it replaces the input at one position of one
sequence with a random one, reruns the model, and records which outputs moved. A moved output at
an earlier position is a witness of a causality violation; a moved output in another sequence is
a witness of cross-batch leakage. Finite perturbations, not gradients: routing decisions are
piecewise constant, so ``gradient_influence`` (the usual Jacobian test for attention masks) sees
nothing, which the book demonstrates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .._validate import positive, positive_int

__all__ = ["CausalityReport", "check_causality", "probe_router", "gradient_influence", "prefix_consistency"]


@dataclass
class CausalityReport:
    """Result of a causality probe on sequence ``seq`` of the batch.

    ``influence[n, p]``: largest change of output n (same sequence) when input p was replaced.
    ``cross[n, p]``: largest change of output n of any *other* sequence when input p was replaced.
    ``tol``: changes at or below it count as none (relative to the output scale, above the noise
    floor of rerunning the unchanged input).
    """

    name: str
    influence: np.ndarray
    cross: np.ndarray
    tol: float
    probes: int
    notes: list[str] = field(default_factory=list)

    @property
    def future_leaks(self) -> list[tuple[int, int]]:
        """(n, p) pairs with p > n where changing input p moved output n."""
        n, p = np.nonzero(np.triu(self.influence, k=1) > self.tol)
        return list(zip(n.tolist(), p.tolist()))

    @property
    def violating_positions(self) -> list[int]:
        """Output positions n that some later input can change."""
        return sorted({n for n, _ in self.future_leaks})

    @property
    def causal(self) -> bool:
        return not self.future_leaks

    @property
    def batch_independent(self) -> bool:
        return not bool((self.cross > self.tol).any())

    @property
    def cross_future_leaks(self) -> list[tuple[int, int]]:
        """(n, p) with p > n where input p of the probed sequence moved output n of another one."""
        n, p = np.nonzero(np.triu(self.cross, k=1) > self.tol)
        return list(zip(n.tolist(), p.tolist()))

    def summary(self) -> str:
        """One line: verdicts and the first violating positions."""
        S = self.influence.shape[0]
        v = self.violating_positions
        where = f" ({len(v)}/{S} positions, e.g. {v[:6]})" if v else ""
        return (f"{self.name:<38} causal: {'yes' if self.causal else 'NO' + where:<28} "
                f"batch-independent: {'yes' if self.batch_independent else 'NO'}")


def _as_output(y) -> torch.Tensor:
    y = y[0] if isinstance(y, (tuple, list)) else y
    return y.detach().float()


def _reduce(delta: torch.Tensor) -> torch.Tensor:
    """|Δ| (B, S, ...) → max over feature dims → (B, S)."""
    return delta.abs().reshape(delta.shape[0], delta.shape[1], -1).amax(-1)


@torch.no_grad()
def check_causality(model: Callable, x: torch.Tensor, *, name: str = "", trials: int = 3,
                    seq: int = 0, vocab_size: int | None = None, rtol: float = 1e-5,
                    seed: int = 0) -> CausalityReport:
    """Probe ``model`` (any callable: (B, S) token ids or (B, S, D) vectors → (B, S, ...)).

    For every position p of sequence ``seq`` and ``trials`` times, replace input p by a random
    token (ids; ``vocab_size`` or ``model.cfg.vocab_size``) or a random vector of the same scale
    (floats), and record how far every output moved. A violation found is a proof; none found in
    ``trials·S`` probes is evidence, not proof (more trials, more evidence).
    """
    if x.dim() < 2:
        raise ValueError(f"x must have shape (B, S, ...), got {tuple(x.shape)}")
    B, S = x.shape[:2]
    trials = positive_int("trials", trials)
    positive("rtol", rtol)
    if not 0 <= seq < B:
        raise ValueError(f"seq must be in [0, {B}), got {seq!r}")
    discrete = not torch.is_floating_point(x)
    if discrete:
        vocab_size = vocab_size or getattr(getattr(model, "cfg", None), "vocab_size", None)
        vocab_size = positive_int("vocab_size", vocab_size, minimum=2)
    gen = torch.Generator().manual_seed(seed)
    base = _as_output(model(x))
    noise = float(_reduce(_as_output(model(x)) - base).max())
    tol = max(rtol * float(base.abs().max()), 10 * noise)
    influence, cross = np.zeros((S, S)), np.zeros((S, S))
    others = [b for b in range(B) if b != seq]
    scale = x.float().std() if not discrete else None
    for p in range(S):
        for _ in range(trials):
            xp = x.clone()
            if discrete:
                shift = torch.randint(1, vocab_size, (), generator=gen)
                xp[seq, p] = (x[seq, p] + shift) % vocab_size          # always a different token
            else:
                xp[seq, p] = torch.randn(x.shape[2:], generator=gen, dtype=x.dtype) * scale
            d = _reduce(_as_output(model(xp)) - base)
            influence[:, p] = np.maximum(influence[:, p], d[seq].numpy())
            if others:
                cross[:, p] = np.maximum(cross[:, p], d[others].amax(0).numpy())
    notes = [f"noise floor {noise:.1e}"] if noise else []
    return CausalityReport(name, influence, cross, tol, S * trials, notes)


def probe_router(router="token", *, name: str = "", batch: int = 2, seq_len: int = 16,
                 n_experts: int = 4, d_model: int = 16, trials: int = 3, seed: int = 0,
                 **moe_kwargs) -> CausalityReport:
    """``check_causality`` on one MoE layer using ``router`` ("token", "expert" or a callable, see
    ``moe.MoE``) with random weights and inputs from ``seed``. The router weights are scaled up so
    the routing is decisive (as after training) rather than a near-tie."""
    from . import MoE
    torch.manual_seed(seed)
    layer = MoE(d_model, 2 * d_model, n_experts, router=router, **moe_kwargs)
    with torch.no_grad():
        layer.router.weight.mul_(5.0)
    x = torch.randn(batch, seq_len, d_model, generator=torch.Generator().manual_seed(seed + 1))
    return check_causality(layer, x, name=name, trials=trials, seed=seed)


def gradient_influence(model: Callable, x: torch.Tensor, *, seq: int = 0, seed: int = 0) -> np.ndarray:
    """Jacobian-based test: ``G[n, p] = ‖∂(v·y_n)/∂x_p‖`` for a random v, inputs (B, S, D) floats.

    This is how attention masks are usually tested. It is blind to routing: a top-k selection
    has zero derivative with respect to which tokens it selects.
    """
    if not torch.is_floating_point(x) or x.dim() != 3:
        raise ValueError(f"x must be a float tensor (B, S, D), got {x.dtype} {tuple(x.shape)}")
    S = x.shape[1]
    gen = torch.Generator().manual_seed(seed)
    out = np.zeros((S, S))
    for n in range(S):
        xi = x.detach().clone().requires_grad_(True)
        y = model(xi)
        y = y[0] if isinstance(y, (tuple, list)) else y
        v = torch.randn(y.shape[2:], generator=gen, dtype=y.dtype)
        (g,) = torch.autograd.grad((y[seq, n] * v).sum(), xi, allow_unused=False)
        out[n] = g[seq].norm(dim=-1).numpy()
    return out


@torch.no_grad()
def prefix_consistency(model: Callable, idx: torch.Tensor,
                       targets: torch.Tensor | None = None) -> dict:
    """Compare teacher forcing with what generation sees.

    Teacher forcing runs the whole (B, S) batch once. Generation can only run on prefixes: the
    logits at position n come from ``model(idx[:, :n+1])[:, -1]`` (the whole batch's prefixes
    together, as a batched decoder would). Returns the per-position max |Δlogit| and, with
    ``targets``, the cross-entropy of both, per position and averaged; ``argmax_flips`` is the share
    of positions whose greedy next token changes. For a causal,
    batch-independent model the two agree to rounding error.
    """
    if idx.dim() != 2:
        raise ValueError(f"idx must have shape (B, S), got {tuple(idx.shape)}")
    S = idx.shape[1]
    full = _as_output(model(idx))
    pref = torch.stack([_as_output(model(idx[:, :n + 1]))[:, -1] for n in range(S)], dim=1)
    res = {"max_abs_logit_diff": (full - pref).abs().amax(dim=(0, 2)).numpy(),
           "argmax_flips": float((full.argmax(-1) != pref.argmax(-1)).float().mean())}
    if targets is not None:
        V = full.shape[-1]
        def ce(z: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(z.reshape(-1, V), targets.reshape(-1), reduction="none").view(targets.shape)
        tf, ar = ce(full), ce(pref)
        res.update(teacher_forced=float(tf.mean()), autoregressive=float(ar.mean()),
                   tf_by_pos=tf.mean(0).numpy(), ar_by_pos=ar.mean(0).numpy())
    return res
