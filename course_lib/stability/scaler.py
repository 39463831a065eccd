"""Dynamic loss scaling for FP16 training, and what a number becomes in FP16 or BF16.

Why loss scaling exists: FP16 has a 5-bit exponent. Its largest finite value is 65504 and its
smallest positive (subnormal) value is 2⁻²⁴ ≈ 6.0e-8, so gradients smaller than about 3e-8 round
to zero in the backward pass. Multiplying the loss by a scale S multiplies every gradient by S
(backpropagation is linear in the loss), which moves them up into the representable range; the
optimizer then divides by S in FP32 (Micikevicius et al. 2018, arXiv 1710.03740, §3.2).

Too large an S overflows instead (some gradient becomes inf). The *dynamic* rule finds S on the
fly: if any gradient is non-finite, skip the update and halve S; after ``growth_interval``
overflow-free steps in a row, double S. This is exactly the rule of ``torch.amp.GradScaler``
(defaults: init 2¹⁶, ×2 every 2000 good steps, ×0.5 on overflow), which the tests check step by
step. BF16 keeps FP32's 8-bit exponent, so it needs no scaling; it has fewer mantissa bits instead
(see chapter 7 for precision).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Real

import torch

from .._validate import choice, positive, positive_int

__all__ = ["DynamicLossScaler", "scale_sequence", "cast_outcome", "overflows", "DTYPES",
           "smallest_subnormal", "GradProbe", "gradient_probe", "agree_found_inf", "scaler_worker"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class DynamicLossScaler:
    """The dynamic loss-scale rule, as a small object with explicit state.

    ``scale`` multiplies the loss before ``backward()``; ``update(found_inf)`` is called once per
    step after the gradients were checked. ``growth_tracker`` counts consecutive overflow-free
    steps since the last change of the scale.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        self.scale = positive("init_scale", init_scale)
        self.growth_factor = positive("growth_factor", growth_factor)
        if self.growth_factor <= 1:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
        self.backoff_factor = positive("backoff_factor", backoff_factor)
        if self.backoff_factor >= 1:
            raise ValueError(f"backoff_factor must be < 1, got {backoff_factor!r}")
        self.growth_interval = positive_int("growth_interval", growth_interval)
        self.growth_tracker = 0

    def update(self, found_inf: bool) -> float:
        """Apply one step of the rule and return the new scale.

        Overflow: scale × backoff_factor and the tracker resets. Otherwise the tracker counts up,
        and when it reaches ``growth_interval`` the scale grows by ``growth_factor`` (unless that
        would overflow FP32) and the tracker resets.
        """
        if not isinstance(found_inf, bool):
            raise ValueError(f"found_inf must be a bool, got {found_inf!r}")
        if found_inf:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                grown = self.scale * self.growth_factor
                if math.isfinite(float(torch.tensor(grown, dtype=torch.float32))):
                    self.scale = grown
                self.growth_tracker = 0
        return self.scale

    @staticmethod
    def found_inf(grads: Iterable[torch.Tensor | None]) -> bool:
        """True if any gradient element is inf or NaN (what decides whether to skip a step)."""
        return any(g is not None and not bool(torch.isfinite(g).all()) for g in grads)

    def state_dict(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])


def scale_sequence(overflow_flags: Sequence[bool], init_scale: float = 2.0 ** 16,
                   growth_interval: int = 2000, growth_factor: float = 2.0,
                   backoff_factor: float = 0.5) -> list[float]:
    """The loss scale *after* each step's update, for a sequence of per-step overflow flags.

    ``scale_sequence([False, True, False], 1024, growth_interval=2)`` → ``[1024, 512, 512]``.
    """
    flags = list(overflow_flags)
    for i, f in enumerate(flags):
        if not isinstance(f, bool):
            raise ValueError(f"overflow_flags must hold bools, got {f!r} at index {i}")
    scaler = DynamicLossScaler(init_scale, growth_factor, backoff_factor, growth_interval)
    return [scaler.update(f) for f in flags]


def cast_outcome(value: float, dtype: str) -> str:
    """What ``value`` becomes when rounded (to nearest, ties to even) to ``dtype``.

    Returns ``"overflow"`` (becomes ±inf), ``"zero"`` (a non-zero value flushed to 0),
    ``"subnormal"`` (kept, but with fewer significant bits) or ``"normal"``. ``dtype`` is
    ``"fp16"``, ``"bf16"`` or ``"fp32"``. The value is first held in FP32, as a training tensor
    would be (PyTorch itself casts FP64 to FP16/BF16 through FP32), then rounded to ``dtype``.
    """
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"value must be a finite real number, got {value!r}")
    dt = DTYPES[choice("dtype", dtype, tuple(DTYPES))]
    x = torch.tensor(float(value), dtype=torch.float32)
    y = x.to(dt)
    if torch.isinf(y) and math.isfinite(float(value)):
        return "overflow"
    if float(y) == 0.0 and float(value) != 0.0:
        return "zero"
    if float(value) != 0.0 and abs(float(y)) < torch.finfo(dt).smallest_normal:
        return "subnormal"
    return "normal"


def overflows(value: float, dtype: str) -> bool:
    """True if casting the finite ``value`` to ``dtype`` gives ±inf."""
    return cast_outcome(value, dtype) == "overflow"


def smallest_subnormal(dtype: str) -> float:
    """The smallest positive value of ``dtype`` (2⁻²⁴ for FP16, 2⁻¹³³ for BF16, 2⁻¹⁴⁹ for FP32)."""
    dt = DTYPES[choice("dtype", dtype, tuple(DTYPES))]
    fi = torch.finfo(dt)
    return fi.smallest_normal * fi.eps


@dataclass(frozen=True)
class GradProbe:
    """Gradients of one batch computed in ``dtype`` with loss scale ``scale`` (divided back by the
    scale, in FP32), beside the FP32 reference. ``logit_*`` are dL/dlogits — per-token gradients,
    the smallest in the network — and ``weight_*`` all parameter gradients."""

    dtype: str
    scale: float
    logit: torch.Tensor
    logit_ref: torch.Tensor
    weight: torch.Tensor
    weight_ref: torch.Tensor
    weight_raw: torch.Tensor      # the parameter gradients as stored in ``dtype`` (still scaled)

    @property
    def flushed_fraction(self) -> float:
        """Share of the non-zero reference logit gradients that became exactly 0."""
        nz = self.logit_ref != 0
        return float(((self.logit == 0) & nz).sum() / nz.sum())

    @property
    def predicted_flushed_fraction(self) -> float:
        """The same share predicted from the FP32 values alone: |g·scale| ≤ half the smallest
        subnormal rounds to 0 (round to nearest, ties to even)."""
        nz = self.logit_ref != 0
        cut = smallest_subnormal(self.dtype) / 2
        return float((((self.logit_ref * self.scale).abs() <= cut) & nz).sum() / nz.sum())

    @property
    def subnormal_fraction(self) -> float:
        """Share of the logit gradients that are subnormal in ``dtype`` (kept, but imprecise)."""
        tiny = torch.finfo(DTYPES[self.dtype]).smallest_normal
        v = (self.logit * self.scale).abs()
        return float(((v > 0) & (v < tiny)).float().mean())

    @property
    def overflow(self) -> bool:
        return not bool(torch.isfinite(self.weight_raw).all())

    @property
    def weight_rel_error(self) -> float:
        """‖g − g_ref‖ / ‖g_ref‖ over all parameter gradients."""
        return float((self.weight - self.weight_ref).norm() / self.weight_ref.norm())


def gradient_probe(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: str,
                   scale: float = 1.0) -> GradProbe:
    """Backpropagate one batch through a ``dtype`` copy of ``model`` (forward and backward in that
    dtype, loss in FP32, loss multiplied by ``scale``) and through an FP32 copy; ``model`` itself is
    not modified. ``model(x)`` must return logits."""
    import copy

    import torch.nn.functional as F

    scale = positive("scale", scale)
    dt = DTYPES[choice("dtype", dtype, tuple(DTYPES))]
    out = {}
    for name, d, s in (("ref", torch.float32, 1.0), ("low", dt, scale)):
        m = copy.deepcopy(model).to(d)
        logits = m(x)
        logits.retain_grad()
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        (loss * s).backward()
        raw = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        out[name] = (logits.grad.float().reshape(-1) / s, raw.float() / s, raw)
    return GradProbe(dtype, scale, out["low"][0], out["ref"][0], out["low"][1], out["ref"][1], out["low"][2])


def agree_found_inf(found_inf: bool, group=None) -> bool:
    """Make every rank take the same skip decision: all-reduce the local overflow flag with MAX.

    In data-parallel FP16 training each rank checks only its own gradients (before or after the
    gradient all-reduce, shards differ under ZeRO/FSDP). If one rank skipped a step and another
    applied it, the replicas would silently drift apart, so the flag is reduced over ``group``.
    """
    import torch.distributed as dist

    flag = torch.tensor([1.0 if found_inf else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item() > 0)


def scaler_worker(ctx, flags_by_rank: list[list[bool]], init_scale: float = 2.0 ** 16,
                  growth_interval: int = 2000, agree: bool = True) -> list[float]:
    """Rank worker for ``course_lib.dist.launch``: run the dynamic loss scaler on this rank's
    overflow flags, agreeing with the other ranks first when ``agree``; return the scales."""
    scaler = DynamicLossScaler(init_scale, growth_interval=growth_interval)
    out = []
    for found in flags_by_rank[ctx.rank]:
        if agree:
            found = agree_found_inf(bool(found), ctx.group)
        out.append(scaler.update(bool(found)))
    return out
