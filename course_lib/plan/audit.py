"""Check a plan written by hand against the chapters' calculators, the way a reviewer would.

A proposal is a plain dict: the tokens, the layout (TP, CP, PP, DP, interleave ``v``, ZeRO stage,
recomputation), the global batch, and the figures its author derived from them (memory per GPU,
MFU, days, wall days). ``audit`` asks five questions, each answered by the course's own code:
does the layout obey the rules, does it fit and is its memory what chapter 11's model says, is the
MFU no more than that layout's estimate, do the days follow from the MFU (chapter 1) and the wall
days from chapter 12's goodput, and does it meet the deadline. It checks consistency, not one
right answer: any layout that fits and any honest MFU at or below its estimate passes.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .. import flops
from .._validate import positive, positive_int, utilisation
from ..hardware import lookup
from ..layout import estimate
from .planner import LLAMA3_GPU_MTBF_S, failure_budget

__all__ = ["Finding", "audit", "REQUIRED"]

REQUIRED = ("n_tokens", "tp", "cp", "pp", "dp", "zero", "recompute", "global_batch_tokens", "mfu",
            "memory_bytes", "days", "wall_days")
_CHECKS = ("layout", "memory", "mfu", "days", "deadline")
_ALIASES = {"zero_stage": "zero", "interleave": "v"}    # a Plan's own field names (dataclasses.asdict)


@dataclass(frozen=True)
class Finding:
    """One question of the audit: its name, whether the proposal passes, and why not."""

    check: str
    ok: bool
    detail: str = ""


def _entries(proposal: dict) -> tuple[dict, int, float, float, float, float, float, float]:
    """The proposal's numbers, each checked under its own key (a Finding quotes the message)."""
    deg = {k: positive_int(k, proposal[k]) for k in ("tp", "cp", "pp", "dp")}
    v = positive_int("v", proposal.get("v", 1))
    return (deg, v, positive("n_tokens", proposal["n_tokens"]), positive("global_batch_tokens", proposal[
        "global_batch_tokens"]), utilisation("mfu", proposal["mfu"]), positive("memory_bytes", proposal[
            "memory_bytes"]), positive("days", proposal["days"]), positive("wall_days", proposal["wall_days"]))


def _tolerance(name: str, value: object) -> float:
    """A relative tolerance in [0, 1): inf or 5 would pass any claim."""
    x = positive(name, value, allow_zero=True)
    if x >= 1:
        raise ValueError(f"{name} must be below 1 (a relative tolerance; 0.01 is 1 %), got {value!r}")
    return x


def _close(claimed: float, truth: float, rtol: float) -> bool:
    return abs(claimed - truth) <= rtol * abs(truth)


def audit(proposal: Mapping, *, n_params: float, n_layers: int, d_model: int, n_heads: int,
          n_gpus: int, kv_heads: int | None = None, gpu: str = "H100-SXM", seq_len: int = 8192,
          max_batch_tokens: float | None = None, deadline_days: float | None = None,
          min_tokens_per_param: float = 0.0, gpu_mtbf_seconds: float = LLAMA3_GPU_MTBF_S,
          rtol: float = 0.01, memory_rtol: float = 0.05, vocab_size: int = 128_256) -> list[Finding]:
    """The five findings (layout, memory, mfu, days, deadline) for ``proposal`` (keys ``REQUIRED``,
    plus ``v`` for the interleave, default 1; a ``Plan``'s own names ``zero_stage`` and ``interleave``
    are read too) on the given model and cluster. A layout that breaks a rule or does not fit leaves
    the rest unchecked (each says so); the deadline is judged on the days the MFU implies. Claimed figures must match the course's
    within ``rtol`` (``memory_rtol`` for the memory); the MFU may be lower than the layout's
    estimate, never more than ``rtol`` above it."""
    # the problem (keyword arguments) is the caller's: a bad one is a ValueError naming it
    n_params, n_gpus = positive("n_params", n_params), positive_int("n_gpus", n_gpus)
    n_layers, d_model, n_heads, seq_len = (positive_int(k, x) for k, x in (
        ("n_layers", n_layers), ("d_model", d_model), ("n_heads", n_heads), ("seq_len", seq_len)))
    if kv_heads is not None and (positive_int("kv_heads", kv_heads) > n_heads or n_heads % kv_heads):
        raise ValueError(f"kv_heads ({kv_heads}) must divide n_heads ({n_heads})")
    if d_model % n_heads:
        raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
    peak = lookup("gpu", gpu).peak("bf16")
    if max_batch_tokens is not None:
        positive("max_batch_tokens", max_batch_tokens)
    if deadline_days is not None:
        positive("deadline_days", deadline_days)
    floor = positive("min_tokens_per_param", min_tokens_per_param, allow_zero=True) * n_params
    if floor == math.inf:
        raise ValueError(f"min_tokens_per_param ({min_tokens_per_param!r}) times n_params overflows a float")
    rtol, memory_rtol = _tolerance("rtol", rtol), _tolerance("memory_rtol", memory_rtol)
    failure_budget(n_params, n_gpus, gpu_mtbf_seconds)     # a cluster that never progresses is refused here
    # the proposal is what is under review: whatever is wrong with it is a finding
    if not isinstance(proposal, Mapping):
        return [Finding("layout", False, f"a plan is a dict with the keys {', '.join(REQUIRED)}; got "
                                         f"{type(proposal).__name__}")] + \
               [Finding(c, False, "not checked: no plan") for c in _CHECKS[1:]]
    proposal = {_ALIASES.get(k, k): x for k, x in proposal.items()}
    missing = [k for k in REQUIRED if k not in proposal]
    if missing:
        return [Finding("layout", False, f"the plan lacks {', '.join(missing)}")] + \
               [Finding(c, False, "not checked: the plan is incomplete") for c in _CHECKS[1:]]
    try:
        deg, v, tokens, batch, mfu, memory, days, wall = _entries(proposal)
        if math.prod(deg.values()) != n_gpus:
            raise ValueError(f"TP·CP·PP·DP = {math.prod(deg.values())}, not the {n_gpus} GPUs of the cluster")
        if max_batch_tokens is not None and batch > max_batch_tokens:
            raise ValueError(f"the global batch of {batch:.4g} tokens is over the {max_batch_tokens:.4g} allowed")
        if tokens < batch:
            raise ValueError(f"n_tokens ({tokens:.4g}) is less than one global batch ({batch:.4g}): not one step")
        if tokens < floor:
            raise ValueError(f"{tokens:.4g} tokens is under {min_tokens_per_param:g} per parameter ({floor:.4g})")
        est = estimate(deg["tp"], deg["cp"], deg["pp"], deg["dp"], v=v, zero=proposal["zero"],
                       recompute=proposal["recompute"], n_params=n_params, n_layers=n_layers,
                       d_model=d_model, n_heads=n_heads, kv_heads=kv_heads, seq_len=seq_len,
                       global_batch_tokens=batch, gpu=gpu, vocab_size=vocab_size)
    except ValueError as e:
        return [Finding("layout", False, str(e))] + \
               [Finding(c, False, "not checked: the layout is not valid") for c in _CHECKS[1:]]
    out = [Finding("layout", True)]
    if not est.fits:
        return out + [Finding("memory", False, f"it needs {est.memory_bytes / 1e9:.1f} GB per GPU, more than "
                                               f"the {est.usable_bytes / 1e9:.1f} GB usable")] + \
               [Finding(c, False, "not checked: the layout does not fit") for c in _CHECKS[2:]]
    if not _close(memory, est.memory_bytes, memory_rtol):
        out.append(Finding("memory", False, "memory_bytes is not what this layout needs per GPU "
                                            "(states + activations, chapter 11's model)"))
    else:
        out.append(Finding("memory", True))
    out.append(Finding("mfu", mfu <= est.mfu * (1 + rtol), "" if mfu <= est.mfu * (1 + rtol) else
                       f"an MFU of {mfu:.3f} is more than this layout's own estimate: the bubble and the "
                       f"exposed communication come off the matmul rate"))
    try:    # chapter 12 at this plan's own step (the MFU claimed), as ``plan`` computes it
        truth = flops.training_days(n_params, tokens, n_gpus, mfu, gpu=gpu)
        good = failure_budget(n_params, n_gpus, gpu_mtbf_seconds, 6.0 * n_params * batch / (n_gpus * peak * mfu))[4]
    except ValueError as e:
        return out + [Finding("days", False, str(e)), Finding("deadline", False, "not checked: no training time")]
    if not _close(days, truth, rtol):
        out.append(Finding("days", False, "days do not follow from the tokens, the GPUs and the MFU (6ND)"))
    elif not _close(wall, days / good, rtol):
        out.append(Finding("days", False, "wall_days do not follow from the days and the goodput at the "
                                          "cluster's failure rate (chapter 12)"))
    else:
        out.append(Finding("days", True))
    late = deadline_days is not None and truth / good > deadline_days * (1 + rtol)
    out.append(Finding("deadline", not late, f"{truth / good:.1f} days of wall time at this MFU, over the "
                                             f"{deadline_days:g} allowed" if late else ""))
    return out
