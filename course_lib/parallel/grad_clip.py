"""Gradient clipping when the gradients are spread over ranks, and a placeholder that fails loudly.

``torch.nn.utils.clip_grad_norm_(params, max_norm)`` scales every gradient by
``min(1, max_norm / (‖g‖ + 1e-6))``, where ‖g‖ is the norm of *all* gradients as one vector. With
the gradients sharded (ZeRO, FSDP) each rank holds only part of that vector, so torch's function,
run on one rank, measures the wrong norm, and each rank clips by a different factor. The true norm
needs one scalar all-reduce: ‖g‖ₚᵖ = Σ over ranks of (Σ over this rank's shards of ‖shard‖ₚᵖ),
plus, once, the parameters every rank holds in full (replicated, already averaged); for p = ∞ the
sums become maxima. :func:`clip_grads_` does that, and scales with the same factor on every rank —
what PyTorch's ``FullyShardedDataParallel.clip_grad_norm_`` does.

:class:`HeldGrad` is what ZeroOptimizer leaves in ``p.grad`` once it has moved the gradient into its
buckets: a tensor of the right shape (and no memory) on which any computation raises an error that
says where the gradient is. torch's ``clip_grad_norm_``, a gradient-norm logger or an optimizer
stepping ``p`` directly then fail with that message instead of silently seeing no gradient.

:class:`ShardGrad` is what FSDP leaves in a shard's ``.grad`` after backward on more than one rank:
the real gradient of this rank's piece, on which every computation works (an optimizer steps it,
``zero_grad`` clears it) except a *norm*: the norm of one rank's piece is not the parameter's, so
``torch.nn.utils.clip_grad_norm_`` (or a gradient-norm logger) raises naming ``fsdp.clip_grad_norm_``
instead of clipping each rank by a different, wrong factor. ``grad.local()`` is the plain tensor,
for whoever does want the piece's own norm.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .counting import CountingComm

__all__ = ["HeldGrad", "held_grad", "ShardGrad", "shard_grad", "clip_grads_"]

_METADATA = frozenset({"__get__", "size", "stride", "dim", "numel", "element_size", "is_contiguous",
                       "__len__"})


class HeldGrad(torch.Tensor):
    """A placeholder ``p.grad``: shape, dtype and device of the gradient, no storage of its own
    (a zero-stride view of one element); every operation on it raises, naming the way out."""

    MESSAGE = ("this gradient is held in ZeroOptimizer's shards, not in p.grad: clip with "
               "zero_optimizer.clip_grad_norm_(max_norm) (torch.nn.utils.clip_grad_norm_ would see "
               "no gradient), read it with zero_optimizer.full_grads(), clear it with "
               "zero_optimizer.zero_grad()")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        raise RuntimeError(f"{getattr(func, '__name__', func)}: {cls.MESSAGE}")

    def __deepcopy__(self, memo) -> HeldGrad:
        """A copy of the model (``copy.deepcopy``: an EMA, a reference) gets a placeholder too."""
        return held_grad(self)

    def __repr__(self, **_) -> str:
        return f"HeldGrad(shape={tuple(self.shape)}: {self.MESSAGE})"


def held_grad(p: torch.Tensor) -> HeldGrad:
    """The placeholder for ``p``'s gradient."""
    one = torch.zeros((), dtype=p.dtype, device=p.device)
    return torch.Tensor._make_subclass(HeldGrad, one.expand(p.shape))


_NORMS = frozenset({"norm", "linalg_norm", "linalg_vector_norm", "linalg_matrix_norm", "nuclear_norm",
                    "_foreach_norm"})


class ShardGrad(torch.Tensor):
    """A shard's gradient under FSDP: a plain tensor for every operation but norms (see above).
    Results of operations are plain tensors; in-place operations keep the object as it is."""

    MESSAGE = ("this gradient is this rank's shard of a parameter FSDP splits over the ranks, so "
               "its norm is not the parameter's (torch.nn.utils.clip_grad_norm_ would clip every "
               "rank by a different, wrong factor): clip with fsdp.clip_grad_norm_(max_norm), the "
               "norm over every shard on every rank; grad.local() is this shard's plain tensor")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in _NORMS:
            raise RuntimeError(f"{func.__name__}: {cls.MESSAGE}")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    def local(self) -> torch.Tensor:
        """This shard's gradient as a plain tensor (the same memory)."""
        with torch._C.DisableTorchFunctionSubclass():
            return self.as_subclass(torch.Tensor)

    def __deepcopy__(self, memo) -> ShardGrad:
        return shard_grad(self.local().clone())

    def __reduce_ex__(self, proto):
        return (shard_grad, (self.local().clone(),))

    def __repr__(self, **_) -> str:
        return f"ShardGrad({self.local()!r})"


def shard_grad(g: torch.Tensor) -> ShardGrad:
    """``g`` (the same memory) as a :class:`ShardGrad`; one already is, it is returned as it is."""
    if isinstance(g, ShardGrad):
        return g
    return torch.Tensor._make_subclass(ShardGrad, g)


def _plain(g: torch.Tensor) -> torch.Tensor:
    return g.local() if isinstance(g, ShardGrad) else g


def _all_reduce(value: torch.Tensor, comm: CountingComm, op) -> torch.Tensor:
    if comm.world_size > 1:
        dist.all_reduce(value, op=op, group=comm.group)   # one scalar: not counted as traffic
    return value


@torch.no_grad()
def clip_grads_(sharded, replicated, max_norm: float, norm_type: float, comm: CountingComm,
                error_if_nonfinite: bool = False) -> torch.Tensor:
    """Clip gradients spread over ``comm``'s ranks by their global norm; return that norm.

    ``sharded``: this rank's pieces of gradients that are split over the ranks (each element on
    exactly one rank); ``replicated``: gradients every rank holds in full and equal (counted once).
    A collective: every rank calls it, every rank gets the same norm and scales by the same factor
    ``min(1, max_norm / (norm + 1e-6))``, as ``torch.nn.utils.clip_grad_norm_`` does on one process.
    """
    max_norm, p = float(max_norm), float(norm_type)
    if not max_norm >= 0:
        raise ValueError(f"max_norm must be >= 0, got {max_norm!r}")
    if not p > 0:
        raise ValueError(f"norm_type must be > 0 (or inf), got {norm_type!r}")
    sharded = [g for g in sharded if g is not None]
    replicated = [g for g in replicated if g is not None]
    dev = (sharded + replicated)[0].device if sharded or replicated else torch.device("cpu")

    def part(grads) -> torch.Tensor:
        """Σ ‖g‖ₚᵖ (max |g| for p = ∞) over ``grads``, in float64."""
        if not grads:
            return torch.zeros((), dtype=torch.float64, device=dev)
        norms = torch.stack([torch.linalg.vector_norm(_plain(g).double(), p) if g.numel() else
                             torch.zeros((), dtype=torch.float64, device=dev) for g in grads])
        return norms.max() if math.isinf(p) else norms.pow(p).sum()

    if math.isinf(p):
        total = torch.maximum(_all_reduce(part(sharded), comm, dist.ReduceOp.MAX), part(replicated))
    else:
        total = (_all_reduce(part(sharded), comm, dist.ReduceOp.SUM) + part(replicated)).pow(1 / p)
    total = total.float()
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is {float(total)}: "
                           "non-finite, so clipping would spoil them (error_if_nonfinite=True)")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in sharded + replicated:
        _plain(g).mul_(coef.to(g.dtype))
    return total
