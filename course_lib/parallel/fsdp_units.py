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

Activation checkpointing (``torch.utils.checkpoint``, reentrant or not, around a unit or inside
one): a unit's backward starts (its pre-backward hook) by refilling its buffers *and* installing
the views its forward used again, so a recompute inside the unit finds full parameters; a forward
of the unit between its pre-backward and the end of its gradient is such a recompute and gathers
nothing new, frees nothing; once its gradient is reduced the shards are the parameters again (what
FSDP2 does with its training states).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves

from .counting import CountingComm
from .dp import queue_end_of_backward
from .grad_clip import shard_grad
from .fsdp_precision import MixedPrecision, _cast

__all__ = ["MixedPrecision"]


@dataclass
class Shared:
    """What every unit of one FSDP wrapper shares: the communicator, the precision policy, whether
    gradients are synchronised now (False inside ``no_sync``), and the end-of-backward callback."""

    comm: CountingComm
    mp: MixedPrecision
    sync: bool = True
    queued: bool = False
    units: list = field(default_factory=list)
    replicated: list = field(default_factory=list)      # trainable parameters kept whole on every rank

    def finish_backward(self) -> None:
        """Runs once when a backward pass ends: free every full buffer still held (frozen groups,
        whose gather has no backward of its own to free it), and average the replicated
        parameters' gradients over the ranks (unless inside ``no_sync``). On more than one rank the
        shards' gradients become :class:`~course_lib.parallel.grad_clip.ShardGrad` (same memory),
        whose norm raises: torch's clip would measure this rank's piece only."""
        self.queued = False
        for u in self.units:
            u.free_last()
            if self.comm.world_size > 1:
                for g in u.groups:
                    for s in g.shards:
                        if s.grad is not None and type(s.grad) is torch.Tensor:
                            s.grad = shard_grad(s.grad)
        if self.sync:
            self.all_reduce_replicated()

    @torch.no_grad()
    def all_reduce_replicated(self) -> None:
        """Average ``p.grad`` of every replicated parameter over the ranks, one flat all-reduce per
        dtype and device (a parameter without gradient takes part with zeros, as in DDP). Linear,
        so a gradient accumulated under ``no_sync`` is averaged once, by the next synced backward."""
        by_kind: dict[tuple, list] = {}
        for p in self.replicated:
            by_kind.setdefault((p.dtype, p.device), []).append(p)
        for ps in by_kind.values():
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps])
            self.comm.all_reduce(flat, average=True)
            for p, v in zip(ps, flat.split([p.numel() for p in ps])):
                if p.grad is None:
                    p.grad = v.view_as(p).clone()
                else:
                    p.grad.copy_(v.view_as(p))


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
        self._hidden: list[nn.Parameter] | None = None     # the shards, while full views are installed

    @property
    def shards(self) -> list[nn.Parameter]:
        """This rank's pieces, read from the modules (so ``.to()`` or ``assign=True`` loads stick)."""
        if self._hidden is not None:
            return self._hidden
        return [own[0][0]._parameters[own[0][1]] for own in self.owners]

    def views(self, full: torch.Tensor) -> list[torch.Tensor]:
        return [full[o:o + shape.numel()].view(shape) for o, shape in zip(self.offsets, self.shapes)]

    def _set(self, tensors) -> None:
        for t, own in zip(tensors, self.owners):
            for owner, attr in own:
                owner._parameters[attr] = t

    def install_views(self, views) -> None:
        """Make ``views`` (of a full buffer) the modules' parameters; the shards are kept aside."""
        if self._hidden is None:
            self._hidden = self.shards
        self._set(views)

    def install_shards(self) -> None:
        """Make the shards the modules' parameters again (does nothing if they already are)."""
        if self._hidden is not None:
            self._set(self._hidden)
            self._hidden = None

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
    def forward(ctx, group: Group, done, *shards: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        full = group.gather()
        ctx.group, ctx.done, ctx.storage = group, done, full.untyped_storage()
        return full

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        group, ctx.group = ctx.group, None
        ctx.storage.resize_(0)
        grads = group.reduce(grad_full)
        ctx.done(group)
        return (None, None, *grads)


def _free(t: torch.Tensor) -> None:
    t.untyped_storage().resize_(0)


class _Call:
    """One forward of a unit: its full buffers and the views of them the forward used, whether the
    buffers were freed after forward, and how far its backward got (``pending`` groups to reduce)."""

    def __init__(self, groups: list[Group]) -> None:
        self.fulls: list[torch.Tensor] = []
        self.views: list[list[torch.Tensor]] = []
        self.freed = self.started = self.finished = False
        self.pending = sum(g.requires_grad for g in groups) if torch.is_grad_enabled() else 0

    @property
    def in_backward(self) -> bool:
        """Its backward has begun and has not finished (gradients reduced, or the pass ended)."""
        return self.started and not self.finished


class Unit:
    """One FSDP unit: hooks that gather its groups before its forward, free them after, gather
    them again before its backward; ``reshard=False`` keeps them from forward to backward."""

    def __init__(self, module: nn.Module, groups: list[Group], shared: Shared, reshard: bool,
                 is_root: bool) -> None:
        self.module, self.groups, self.shared = module, groups, shared
        self.reshard, self.is_root = reshard, is_root
        self.last: _Call | None = None
        self.backward_call: _Call | None = None           # whose pre-backward ran last
        self._recomputing = False
        self.peak_bytes = 0                                # bytes of full params while gathered
        module.register_forward_pre_hook(self.pre_forward, with_kwargs=True)
        module.register_forward_hook(self.post_forward)

    def pre_forward(self, module, args, kwargs):  # noqa: ARG002
        call = self.backward_call
        self._recomputing = call is not None and call.in_backward
        if self._recomputing:                      # a checkpoint re-running this unit in its backward
            self._refill(call)
        else:
            grad = torch.is_grad_enabled()
            call = _Call(self.groups)
            for g in self.groups:
                if g.requires_grad and grad:
                    full = _GatherParams.apply(g, lambda grp, c=call: self._group_done(c, grp), *g.shards)
                else:
                    with torch.no_grad():
                        full = g.gather()
                call.fulls.append(full)
                call.views.append(g.views(full))
                g.install_views(call.views[-1])
            self.last = call
            self.peak_bytes = max(self.peak_bytes, sum(f.untyped_storage().nbytes() for f in call.fulls))
        dt = self.shared.mp.param_dtype
        if dt is not None and self.shared.mp.cast_forward_inputs:
            args, kwargs = _cast((args, kwargs), dt)
        return args, kwargs

    def _refill(self, call: _Call) -> None:
        """Refill ``call``'s buffers if freed and install the views its forward used."""
        if call.freed:
            call.freed = False
            for g, f in zip(self.groups, call.fulls):
                g.gather(f)
        for g, v in zip(self.groups, call.views):
            g.install_views(v)

    def _group_done(self, call: _Call, group: Group) -> None:
        """``group``'s gradient of ``call`` is reduced: its shards are the parameters again."""
        group.install_shards()
        call.pending -= 1
        call.finished = call.pending == 0

    def post_forward(self, module, args, output):  # noqa: ARG002
        if self._recomputing:                      # the recompute's buffers are backward's: keep them
            self._recomputing = False
            return output
        call = self.last
        for g in self.groups:
            g.install_shards()
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
        if not call.finished:                      # (a late hook after its gradient is done: nothing)
            call.started = True
            self.backward_call = call
            self._refill(call)
        if not self.shared.queued:
            self.shared.queued = True
            queue_end_of_backward(self.shared.finish_backward)
        return grad

    def free_last(self) -> None:
        """Shards back in the modules; the last call's buffers freed unless its backward is under
        way (a reentrant checkpoint's inner backward ends inside the outer one)."""
        self._recomputing = False
        for g in self.groups:
            g.install_shards()
        for call in (self.last, self.backward_call):
            if call is not None and not (call.in_backward and call.pending > 0):
                for f in call.fulls:
                    _free(f)
                call.freed = call.finished = True
        if self.backward_call is not None and self.backward_call.finished:
            self.backward_call = None
