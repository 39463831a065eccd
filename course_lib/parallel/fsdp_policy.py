"""FSDP's wrap policy: which modules' parameters are sharded; every other parameter is replicated.

Sharding pays off for the large matrices. A LayerNorm's gain and bias are a few thousand values:
sharding them buys nothing and splits each into pieces of unequal size on the ranks (on 2 ranks a
64-value RMSNorm gain may be 64 values on rank 0 and none on rank 1). ``FSDP(model, shard=...)``
(:class:`~course_lib.parallel.fsdp.FSDP`) says which modules to shard, the way PyTorch FSDP1's
``auto_wrap_policy=ModuleWrapPolicy({nn.Linear})`` does:

* every module ``shard`` matches (the model itself excluded) becomes a unit, and every parameter
  of a matching module is sharded (a tied weight too, if any module holding it matches: it is
  sharded in the innermost unit holding every user of it, the root if need be);
* every other parameter is *replicated*: kept whole on every rank, broadcast from rank 0, its
  gradient averaged over the ranks by one all-reduce per dtype when backward ends (DDP for that
  part, ``FSDP``'s ``replicate=``), and in the optimizer's eyes an ordinary full tensor;
* ``shard`` is a module type, a set/tuple/list of types, PyTorch's own
  ``torch.distributed.fsdp.wrap.ModuleWrapPolicy``, or a predicate ``shard(module) -> bool``
  (``lambda m: isinstance(m, nn.Linear) and m.weight.numel() >= 1 << 20``). A model the policy
  matches itself is sharded whole (there is no "rest"); a policy matching no module raises.

FSDP1's ``auto_wrap_policy`` shards the rest too, in the root unit; that is still
``FSDP(model, units=[...])`` (the default, unchanged). PyTorch FSDP2 has no policy object: one
calls ``fully_shard`` on each module to shard, and a parameter outside every ``fully_shard`` module
stays a plain tensor that FSDP2 does not synchronise at all (``fully_shard`` on each Linear and
none at the root leaves the norms' gradients different on every rank). Its pair for this policy is
``fully_shard`` on each matching module plus ``torch.distributed._composable.replicate`` (DDP,
which leaves the ``fully_shard`` parameters alone) on the root.
:mod:`course_lib.parallel.fsdp_policy_runs` runs that pair on 2 gloo ranks (torch 2.13, CPU)
next to ``FSDP(model, ctx.group, shard={nn.Linear})``: the gradients and the parameters after
AdamW steps are equal bit for bit (the same kernels on the same values; a mean of two ranks'
gradients does not depend on the order they are added in).

This is the contract of Stanford CS336 assignment 2's FSDP tests (``tests/test_fsdp.py`` of
``stanford-cs336/assignment2-systems``, 2026: ``test_fsdp_correctness``, ``test_fsdp_gradient_sync``): the model's
``Linear`` and ``Embedding`` modules sharded, everything else (the RMSNorm gains) replicated, each
replicated gradient equal on every rank after backward (the test ``dist.all_gather``-s it: with
everything sharded the pieces differ in size between ranks, and that all-gather cannot succeed). Its
adapters, on this class::

    def get_fsdp(module, compute_dtype=None):
        mp = MixedPrecision(param_dtype=compute_dtype) if compute_dtype is not None else None
        return FSDP(module, shard={Linear, Embedding}, mixed_precision=mp)

    def fsdp_on_after_backward(fsdp_model, optimizer):
        pass                                  # gradients are reduced by the time backward returns

    def fsdp_gather_full_params(fsdp_model):
        return fsdp_model.full_state()        # name -> full tensor (replicated ones as they are)
"""
from __future__ import annotations

from collections.abc import Callable

import torch.nn as nn

__all__ = ["shard_predicate", "split_by_policy"]


def _types(value) -> tuple[type, ...] | None:
    """``value`` as a tuple of nn.Module subclasses, or None if it is not a type or a collection of them."""
    items = [value] if isinstance(value, type) else list(value) if isinstance(value, (set, frozenset, tuple, list)) else None
    if items and all(isinstance(t, type) and issubclass(t, nn.Module) for t in items):
        return tuple(items)
    return None


def shard_predicate(shard) -> Callable[[nn.Module], bool]:
    """``shard`` (see the module docstring) as a predicate over modules; ValueError naming ``shard``
    for anything else (an empty set, a type that is not a module, a string)."""
    try:
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    except ImportError:                                   # a torch built without distributed
        ModuleWrapPolicy = ()                             # noqa: N806
    if ModuleWrapPolicy and isinstance(shard, ModuleWrapPolicy):   # FSDP1's call: (module, recurse)
        return lambda m: bool(shard(m, False))
    types = _types(shard)
    if types is not None:
        return lambda m: isinstance(m, types)
    if callable(shard) and not isinstance(shard, type):
        return lambda m: bool(shard(m))
    raise ValueError(f"shard must be an nn.Module type, a non-empty set/tuple/list of them, a "
                     f"torch ModuleWrapPolicy, or a predicate module -> bool; got {shard!r}")


def split_by_policy(model: nn.Module, shard) -> tuple[list[nn.Module], set[int]]:
    """(the units: every module of ``model`` that ``shard`` matches, in model order, the model itself
    excluded; the ids of the parameters to replicate: those of no matching module)."""
    match = shard_predicate(shard)
    units = [m for m in model.modules() if m is not model and match(m)]
    if match(model):
        return units, set()
    if not units:
        kinds = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(f"shard matched no module of the model, so nothing would be sharded; its "
                         f"modules are of types {', '.join(kinds)}")
    sharded = {id(p) for u in units for p in u.parameters()}
    return units, {id(p) for p in model.parameters() if id(p) not in sharded}
