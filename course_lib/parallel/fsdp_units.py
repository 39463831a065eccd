"""FSDP's moving parts for one unit: flat groups of shards, gather and free, reduce-scatter of grads.

A *group* holds the parameters of one unit that share a dtype and ``requires_grad``. It is laid out
as one flat vector, padded to a multiple of the world size n, of which rank r owns the slice
[r·S, (r+1)·S), S = padded size / n. Every original parameter keeps a Parameter of its own holding
its piece of that slice (1-D, possibly empty): that is what the optimizer, ``parameters()`` and
``state_dict()`` see, under the parameter's own name. While the unit runs, one all-gather per group
rebuilds the full flat vector (in the compute dtype) and the module's parameters are views of it.

Gradients: a trainable group's gather is a custom autograd function whose forward all-gathers and
whose backward reduce-scatters, so autograd itself delivers each shard's averaged gradient and
accumulates it into ``.grad`` the way it does for any leaf (either ``zero_grad`` mode works).
Freeing is ``storage.resize_(0)`` on the full buffer: tensors saved for backward keep pointing at
the storage, and the backward re-gather refills it in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves, tree_map

from .counting import CountingComm
from .dp import queue_end_of_backward

__all__ = ["MixedPrecision"]


@dataclass(frozen=True)
class MixedPrecision:
    """The dtypes FSDP computes and communicates in, as PyTorch FSDP2's ``MixedPrecisionPolicy``.

    ``param_dtype``: floating parameters are all-gathered and used in this dtype (None: their own);
    the shards the optimizer steps keep their own dtype (fp32 master weights, fp32 optimizer state).
    ``reduce_dtype``: gradients are reduce-scattered in this dtype (None: ``param_dtype``), then cast
    to the shard's dtype. ``output_dtype``: the root's floating outputs are cast to it (None: kept).
    ``cast_forward_inputs``: each unit casts its floating forward inputs to ``param_dtype``.
    """

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, torch.dtype) and v.is_floating_point):
                raise ValueError(f"{name} must be a floating-point torch.dtype or None; got {v!r}")


@dataclass
class Shared:
    """What every unit of one FSDP wrapper shares: the communicator, the precision policy, whether
    gradients are synchronised now (False inside ``no_sync``), and the end-of-backward callback."""

    comm: CountingComm
    mp: MixedPrecision
    sync: bool = True
    queued: bool = False
    units: list = field(default_factory=list)

    def finish_backward(self) -> None:
        """Runs once when a backward pass ends: free every full buffer still held (frozen groups,
        whose gather has no backward of its own to free it)."""
        self.queued = False
        for u in self.units:
            u.free_last()


class Group:
    """One flat vector of a unit's parameters: its layout, this rank's pieces, gather and reduce."""

    def __init__(self, params: list[nn.Parameter], owners: list[list[tuple[nn.Module, str]]],
                 shared: Shared) -> None:
        self.shared, self.owners = shared, owners      # owners[i]: every (module, attr) of param i
        comm, mp, p0 = shared.comm, shared.mp, params[0]
        n, r = comm.world_size, comm.rank
        self.dtype, self.requires_grad = p0.dtype, p0.requires_grad
        fp = p0.dtype.is_floating_point
        self.gather_dtype = mp.param_dtype if mp.param_dtype is not None and fp else p0.dtype
        self.reduce_dtype = mp.reduce_dtype if mp.reduce_dtype is not None and fp else self.gather_dtype
        self.shapes = [p.shape for p in params]
        self.offsets, o = [], 0
        for p in params:
            self.offsets.append(o)
            o += p.numel()
        self.numel = -(-o // n) * n
        self.shard_numel = s = self.numel // n
        self.start = r * s
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        self.pieces = []                                   # (a, b): param i's part of my slice
        for p, off, own in zip(params, self.offsets, owners):
            a = min(max(off, self.start), self.start + s)
            b = max(min(off + p.numel(), self.start + s), a)
            self.pieces.append((a - self.start, b - self.start))
            shard = nn.Parameter(flat[a:b].clone(), requires_grad=p.requires_grad)
            for owner, attr in own:
                owner._parameters[attr] = shard          # the module now holds its shard
        self.acc: torch.Tensor | None = None               # unsharded grad kept under no_sync

    @property
    def shards(self) -> list[nn.Parameter]:
        """This rank's pieces, read from the modules (so ``.to()`` or ``assign=True`` loads stick)."""
        return [own[0][0]._parameters[own[0][1]] for own in self.owners]

    def views(self, full: torch.Tensor) -> list[torch.Tensor]:
        return [full[o:o + shape.numel()].view(shape) for o, shape in zip(self.offsets, self.shapes)]

    def install(self, tensors) -> None:
        """Make ``tensors`` (full views, or the shards again) the modules' parameters."""
        for t, own in zip(tensors, self.owners):
            for owner, attr in own:
                owner._parameters[attr] = t

    def fill_mine(self, flat: torch.Tensor, values) -> torch.Tensor:
        """Copy ``values`` (this rank's pieces, None = zeros) into ``flat``'s slice of this rank."""
        mine = flat.narrow(0, self.start, self.shard_numel)
        dst, src = [], []
        for (a, b), v in zip(self.pieces, values):
            if b <= a:
                continue
            if v is None:
                mine[a:b].zero_()
            else:
                dst.append(mine[a:b])
                src.append(v.detach())
        if dst:
            torch._foreach_copy_(dst, src)                 # casts to the gather dtype on the way
        return mine

    def gather(self, full: torch.Tensor | None = None) -> torch.Tensor:
        """All-gather into a new full buffer, or refill a freed one in place (backward re-gather)."""
        if full is None:
            full = torch.empty(self.numel, dtype=self.gather_dtype, device=self.shards[0].device)
        elif full.untyped_storage().nbytes() == 0:
            full.untyped_storage().resize_(self.numel * full.element_size())
        else:
            return full
        buf = full.data     # writes that autograd must not see: saved views expect these values
        self.shared.comm.all_gather(buf, self.fill_mine(buf, self.shards))
        return full

    def reduce(self, grad: torch.Tensor) -> list[torch.Tensor | None]:
        """Full gradient -> this rank's averaged shard gradients, one per parameter (reduce-scatter
        in ``reduce_dtype``). Under ``no_sync`` the full gradient is accumulated locally instead."""
        if not self.shared.sync:
            if self.acc is None:
                self.acc = grad.to(self.dtype, copy=True)
            else:
                self.acc.add_(grad)
            return [None] * len(self.pieces)
        if self.acc is not None:
            grad, self.acc = self.acc.add_(grad), None
        grad = grad.to(self.reduce_dtype).contiguous()
        out = torch.empty(self.shard_numel, dtype=self.reduce_dtype, device=grad.device)
        self.shared.comm.reduce_scatter(out, grad, average=True)
        out = out.to(self.dtype)
        return [out[a:b] for a, b in self.pieces]


class _GatherParams(torch.autograd.Function):
    """forward: shards -> full flat parameters (all-gather); backward: full grad -> shard grads
    (reduce-scatter, averaged over ranks), and the full buffer is freed."""

    @staticmethod
    def forward(ctx, group: Group, *shards: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        full = group.gather()
        ctx.group, ctx.storage = group, full.untyped_storage()
        return full

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        group, ctx.group = ctx.group, None
        ctx.storage.resize_(0)
        return (None, *group.reduce(grad_full))


def _free(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(0)


class _Call:
    """One forward of a unit: its full buffers, and whether they were freed after forward."""

    def __init__(self, fulls: list[torch.Tensor], shards: list[list[nn.Parameter]]) -> None:
        self.fulls, self.shards, self.freed = fulls, shards, False


class Unit:
    """One FSDP unit: hooks that gather its groups before its forward, free them after, gather
    them again before its backward; ``reshard=False`` keeps them from forward to backward."""

    def __init__(self, module: nn.Module, groups: list[Group], shared: Shared, reshard: bool,
                 is_root: bool) -> None:
        self.module, self.groups, self.shared = module, groups, shared
        self.reshard, self.is_root = reshard, is_root
        self.last: _Call | None = None
        self.peak_bytes = 0                                # bytes of full params while gathered
        module.register_forward_pre_hook(self.pre_forward, with_kwargs=True)
        module.register_forward_hook(self.post_forward)

    def pre_forward(self, module, args, kwargs):  # noqa: ARG002
        grad = torch.is_grad_enabled()
        fulls, shards = [], []
        for g in self.groups:
            s = g.shards
            if g.requires_grad and grad:
                full = _GatherParams.apply(g, *s)
            else:
                with torch.no_grad():
                    full = g.gather()
            g.install(g.views(full))
            fulls.append(full)
            shards.append(s)
        self.last = _Call(fulls, shards)
        self.peak_bytes = max(self.peak_bytes, sum(f.untyped_storage().nbytes() for f in fulls))
        dt = self.shared.mp.param_dtype
        if dt is not None and self.shared.mp.cast_forward_inputs:
            args, kwargs = _cast((args, kwargs), dt)
        return args, kwargs

    def post_forward(self, module, args, output):  # noqa: ARG002
        call = self.last
        for g, s in zip(self.groups, call.shards):
            g.install(s)
        if not torch.is_grad_enabled():
            self.free_last()
        else:
            if self.reshard:
                for f in call.fulls:
                    _free(f)
                call.freed = True
            for t in tree_leaves(output):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda grad, call=call: self._pre_backward(call, grad))
        dt = self.shared.mp.output_dtype
        return _cast(output, dt) if self.is_root and dt is not None else output

    def _pre_backward(self, call: _Call, grad: torch.Tensor) -> torch.Tensor:
        if call.freed:
            call.freed = False
            for g, f in zip(self.groups, call.fulls):
                g.gather(f)
        if not self.shared.queued:
            self.shared.queued = True
            queue_end_of_backward(self.shared.finish_backward)
        return grad

    def free_last(self) -> None:
        if self.last is not None:
            for f in self.last.fulls:
                _free(f)


def _cast(tree, dtype: torch.dtype):
    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
                    else t, tree)
