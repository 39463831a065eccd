"""FSDP / ZeRO-3 from scratch: parameters sharded per layer, gathered only while they are used.

ZeRO-1/2 still keep every parameter on every rank. ZeRO-3 (Rajbhandari et al. 2020,
arXiv 1910.02054), which PyTorch ships as FSDP (Zhao et al. 2023, arXiv 2304.11277), shards the
parameters too. The model is cut into *units* (here: each transformer block, plus the root holding
the embeddings, final norm and head). For each unit, rank r stores only shard r of the unit's flat
parameter vector, with its gradient and optimizer state. Per step:

* forward: before a unit runs, **all-gather** its full parameters; after it ran, free them;
* backward: before the unit's backward, **all-gather again** (they were freed); when its
  gradient is complete, **reduce-scatter** it, so rank r keeps the average gradient of shard r,
  and free the full parameters;
* the optimizer steps the shards, elementwise, with no further communication.

That is three passes of Ψ values through ring collectives, 3(n−1)/n·Ψ per rank — 1.5× DP's
2(n−1)/n·Ψ. The extra Ψ is the backward re-gather, the price of never holding more than a unit
or two of full parameters. (Keeping a unit's parameters after forward, ``reshard=False``, skips
that re-gather: PyTorch's ``fully_shard`` does so for the root by default.)

Mechanics: a unit's gather is a custom autograd function whose forward all-gathers and whose
backward reduce-scatters, so autograd itself routes the full gradient into the shard. Freeing is
``storage.resize_(0)`` on the full buffer: tensors saved for backward keep pointing at the
storage, and the backward re-gather refills it in place.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .counting import CountingComm, storage_bytes

__all__ = ["FSDP"]


class _GatherParams(torch.autograd.Function):
    """forward: shard -> full parameters (all-gather); backward: full grad -> shard grad
    (reduce-scatter, averaged over ranks)."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, unit: _Unit) -> torch.Tensor:  # noqa: ARG004
        ctx.unit = unit
        return unit.gather()

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        unit, ctx.unit = ctx.unit, None
        return unit.reduce_grad(grad_full.contiguous()), None


class _Unit:
    """One sharded unit: its flat shard (a Parameter), the slots its full parameters fill."""

    def __init__(self, name: str, module: nn.Module, params: list, comm: CountingComm,
                 reshard: bool) -> None:
        self.name, self.module, self.comm, self.reshard = name, module, comm, reshard
        n, r = comm.world_size, comm.rank
        self.slots = params                                 # [(param, [(owner, attr), ...]), ...]
        self.offsets, o = [], 0
        for p, _ in params:
            self.offsets.append(o)
            o += p.numel()
        self.numel = -(-o // n) * n
        p0 = params[0][0]
        flat = torch.zeros(self.numel, dtype=p0.dtype, device=p0.device)
        for (p, owners), off in zip(params, self.offsets):
            flat[off:off + p.numel()].copy_(p.detach().reshape(-1))
            for owner, attr in owners:
                del owner._parameters[attr]                 # the module no longer owns it
                setattr(owner, attr, None)
        self.shard = nn.Parameter(flat.chunk(n)[r].clone())
        self.full: torch.Tensor | None = None
        self.peak_bytes = 0                                 # bytes of full params while gathered

    # -- communication ------------------------------------------------------------
    def gather(self) -> torch.Tensor:
        """A new full buffer holding every rank's shard (forward all-gather)."""
        full = torch.empty(self.numel, dtype=self.shard.dtype, device=self.shard.device)
        self.comm.all_gather(full, self.shard.detach())
        self.full = full
        return full

    def regather(self) -> None:
        """Refill the freed full buffer in place (backward all-gather)."""
        st = self.full.untyped_storage()
        if st.nbytes() == 0:
            st.resize_(self.numel * self.shard.element_size())
            self.comm.all_gather(self.full.data, self.shard.detach())

    def free(self) -> None:
        if self.full is not None:
            self.full.untyped_storage().resize_(0)

    def reduce_grad(self, grad_full: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(self.shard)
        self.comm.reduce_scatter(out, grad_full, average=True)
        self.free()
        self.full = None
        return out

    # -- hooks ----------------------------------------------------------------------
    def pre_forward(self, module, args) -> None:  # noqa: ARG002
        full = _GatherParams.apply(self.shard, self)
        for (p, owners), off in zip(self.slots, self.offsets):
            view = full[off:off + p.numel()].view(p.shape)
            for owner, attr in owners:
                setattr(owner, attr, view)
        self.peak_bytes = max(self.peak_bytes, full.untyped_storage().nbytes())

    def post_forward(self, module, args, output):  # noqa: ARG002
        if not torch.is_grad_enabled():
            self.free()
            return output
        if self.reshard:
            self.free()
            outs = output if isinstance(output, (tuple, list)) else (output,)
            for t in outs:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(self._pre_backward)
        return output

    def _pre_backward(self, grad: torch.Tensor) -> torch.Tensor:
        if self.full is not None:
            self.regather()
        return grad


class FSDP:
    """Shard ``model`` over ``comm``'s ranks, one unit per module in ``units`` plus the root.

    Usage: ``fsdp = FSDP(model, comm, units=model.blocks)``; optimize ``fsdp.parameters()`` (the
    shards); per step ``loss = model(x, y)[1]; loss.backward(); opt.step(); opt.zero_grad()``.
    ``reshard_root=False`` keeps the root's full parameters from forward to backward, as PyTorch
    FSDP2 does by default. Starting weights must be the same on every rank (same seed).
    """

    def __init__(self, model: nn.Module, comm: CountingComm, *, units=(),
                 reshard_root: bool = True) -> None:
        self.model, self.comm = model, comm
        self._names: dict[int, str] = {}
        for name, p in model.named_parameters():     # tied weights: first name wins
            self._names.setdefault(id(p), name)
        claimed: set[int] = set()
        self.units: list[_Unit] = []
        ordered = list(units) + [model]
        for k, mod in enumerate(ordered):
            params: dict[int, tuple] = {}
            for owner in mod.modules():
                for attr, p in list(owner._parameters.items()):
                    if p is None or id(p) in claimed:
                        continue
                    params.setdefault(id(p), (p, []))[1].append((owner, attr))
            claimed.update(params)
            is_root = k == len(ordered) - 1
            unit = _Unit("root" if is_root else f"unit{k}", mod, list(params.values()), comm,
                         reshard_root if is_root else True)
            mod.register_forward_pre_hook(unit.pre_forward)
            mod.register_forward_hook(unit.post_forward)
            self.units.append(unit)

    def parameters(self) -> list[nn.Parameter]:
        """The shards this rank owns: hand these to the optimizer."""
        return [u.shard for u in self.units]

    def full_state(self, grads: bool = False) -> dict[str, torch.Tensor]:
        """Gather every unit's parameters (or, with ``grads=True``, their averaged gradients) and
        return name -> full tensor. A collective: call it on all ranks."""
        out = {}
        for u in self.units:
            full = torch.empty(u.numel, dtype=u.shard.dtype, device=u.shard.device)
            self.comm.all_gather(full, (u.shard.grad if grads else u.shard).detach())
            for (p, _), off in zip(u.slots, u.offsets):
                out[self._names[id(p)]] = full[off:off + p.numel()].view(p.shape).clone()
        return out

    def memory_bytes(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds between steps for parameters (shards, plus any full buffer still
        alive), gradients (shards) and optimizer state; ``peak_full`` is the largest unit's full
        parameters, held only while that unit runs."""
        from .counting import optimizer_state_bytes
        params = [u.shard for u in self.units] + [u.full for u in self.units]
        return {"params": storage_bytes(params),
                "grads": storage_bytes(u.shard.grad for u in self.units),
                "optimizer": optimizer_state_bytes(optimizer) if optimizer is not None else 0,
                "peak_full": max(u.peak_bytes for u in self.units)}
