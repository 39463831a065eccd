"""FSDP / ZeRO-3 from scratch: parameters sharded per unit, gathered only while they are used.

ZeRO-1/2 still keep every parameter on every rank. ZeRO-3 (Rajbhandari et al. 2020,
arXiv 1910.02054), which PyTorch ships as FSDP (Zhao et al. 2023, arXiv 2304.11277), shards the
parameters too. The model is cut into *units* (say, each transformer block, plus the root holding
the rest). For each unit, rank r stores only shard r of the unit's flat parameter vector, with its
gradient and optimizer state. Per step:

* forward: before a unit runs, **all-gather** its full parameters; after it ran, free them;
* backward: before the unit's backward, **all-gather again** (they were freed); when its
  gradient is complete, **reduce-scatter** it, so rank r keeps the average gradient of shard r,
  and free the full parameters;
* the optimizer steps the shards, elementwise, with no further communication.

That is three passes of Ψ values through ring collectives, 3(n−1)/n·Ψ per rank — 1.5× DP's
2(n−1)/n·Ψ. The extra Ψ is the backward re-gather, the price of never holding more than a unit
or two of full parameters. (Keeping a unit's parameters after forward, ``reshard=False``, skips
that re-gather: PyTorch's ``fully_shard`` does so for the root by default.)

The mechanics of one unit (flat groups, the gather/reduce-scatter autograd function, hooks) are in
:mod:`course_lib.parallel.fsdp_units`; this module is the wrapper a user's code sees.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn

from .counting import CountingComm, as_comm
from .state_bytes import optimizer_state_bytes, storage_bytes
from .dp import broadcast_from_rank0
from .fsdp_policy import split_by_policy
from .fsdp_state import full_optim_state_dict, load_full_optim_state_dict
from .fsdp_units import Group, MixedPrecision, Shared, Unit
from .grad_clip import clip_grads_

__all__ = ["FSDP", "MixedPrecision"]


def _owners(model: nn.Module) -> dict[int, tuple[nn.Parameter, list[tuple[nn.Module, str]]]]:
    """id(param) -> (param, every (module, attribute) that holds it), in model order."""
    out: dict[int, tuple] = {}
    for mod in model.modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                out.setdefault(id(p), (p, []))[1].append((mod, attr))
    return out


class FSDP(nn.Module):
    """Shard ``module``'s parameters over ``comm``'s ranks: one unit per module in ``units``, plus
    the root (``module`` itself) for every parameter no unit claims. ``comm``: a
    :class:`CountingComm` (the course's ring, bytes counted) or a plain ProcessGroup (torch's own
    collectives); None: the world group.

    Usage, as with PyTorch's FSDP::

        fsdp = FSDP(model, comm, units=model.blocks, mixed_precision=MixedPrecision(torch.bfloat16))
        opt = torch.optim.AdamW(fsdp.parameters())       # this rank's shards, fp32
        loss = fsdp(x, y)[1]; loss.backward(); opt.step(); opt.zero_grad()

    * A parameter belongs to the innermost unit that contains every module using it, so tied
      weights (embedding and head in different units) have one owner and their gradients add up.
      Frozen parameters are sharded with ``requires_grad=False``: never gathered with autograd,
      never reduced, never updated. Buffers stay ordinary buffers, broadcast from rank 0 here;
      ``sync_module_states=True`` broadcasts the parameters too (otherwise build them identically).
    * ``parameters()``, ``named_parameters()`` and ``state_dict()`` are those of ``module``, with
      the original names: each parameter is this rank's 1-D piece of its unit's flat vector
      (possibly empty), and a sharded state dict loads back on the same world size.
      :meth:`full_state_dict` / :meth:`load_full_state_dict` give and take full tensors.
    * Gradient accumulation: inside :meth:`no_sync` backward keeps each unit's full gradient
      (unsharded, fp32: Ψ more bytes) instead of reduce-scattering it; the first backward outside
      adds it in and reduce-scatters once. Without ``no_sync`` every backward reduce-scatters and
      the shard gradients accumulate in ``.grad``, like any leaf's.
    * A unit may run several times in one forward (a shared layer): each call gathers, and
      reduce-scatters in backward, on its own, and the shard gradients add up.
    * ``reshard_root=False`` keeps the root's full parameters from forward to backward, as PyTorch
      FSDP2 does by default. Move the model to its device before wrapping.
    * ``replicate``: parameters kept whole on every rank instead of sharded, their gradients
      averaged over the ranks by one all-reduce at the end of backward (DDP for that part): an
      iterable of parameters and modules (their parameters), or ``True`` for every parameter no
      unit claims (the root's: say LayerNorm gains and biases, when ``units`` are the Linear and
      Embedding layers). They are broadcast from rank 0 here and used in their own dtype.
    * ``shard``: a wrap policy instead of ``units`` — a module type, a set of types, torch's
      ``ModuleWrapPolicy`` or a predicate over modules. Each matching module is a unit and its
      parameters are sharded; every other parameter is replicated as above (``FSDP(model,
      shard={nn.Linear, nn.Embedding})``: matrices sharded, norms whole; a tied embedding stays
      sharded). See :mod:`course_lib.parallel.fsdp_policy`. None (the default): ``units``.
    * Gradient clipping: :meth:`clip_grad_norm_` (the norm over every shard on every rank).
      ``torch.nn.utils.clip_grad_norm_(fsdp.parameters(), ...)`` would see this rank's shards only
      (each rank would clip by its own, wrong norm), so on more than one rank it raises, naming
      the method: the shards' gradients are :class:`~course_lib.parallel.grad_clip.ShardGrad`. Optimizer state: :meth:`full_optim_state_dict`
      and :meth:`load_full_optim_state_dict` (any world size, or a plain optimizer on one process).
    * Activation checkpointing (``torch.utils.checkpoint``, reentrant or not) works around a unit
      or inside one (see :mod:`course_lib.parallel.fsdp_units`).
    """

    def __init__(self, module: nn.Module, comm: CountingComm | None = None, *, units=(),
                 reshard_root: bool = True, mixed_precision: MixedPrecision | None = None,
                 sync_module_states: bool = False, replicate=(), shard=None) -> None:
        super().__init__()
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise ValueError(f"mixed_precision must be a MixedPrecision or None; got {mixed_precision!r}")
        if isinstance(units, nn.Module) and not isinstance(units, (nn.ModuleList, nn.Sequential)):
            units = [units]                      # one module; a ModuleList/Sequential: its children
        units, by_policy = list(units), set()
        if shard is not None:
            if units:
                raise ValueError("give units or shard, not both: shard picks the units (every module it matches)")
            units, by_policy = split_by_policy(module, shard)
        order = units + [module]
        if not all(isinstance(u, nn.Module) for u in order):
            raise ValueError(f"units must be an iterable of nn.Module; got {units!r}")
        members = [{id(m) for m in u.modules()} for u in order]
        if len({id(u) for u in order}) < len(order):
            raise ValueError("units must be distinct submodules of the model, without the model itself")
        if any(id(u) not in members[-1] for u in order):
            raise ValueError("units must all be submodules of the model")
        self.module, self.comm = module, as_comm(comm)
        self._shared = Shared(self.comm, mixed_precision or MixedPrecision())
        broadcast_from_rank0(self.comm, list(module.buffers()) + (list(module.parameters())
                                                                  if sync_module_states else []))
        claims: list[list] = [[] for _ in order]
        for p, owners in _owners(module).values():
            fits = [k for k, mem in enumerate(members) if all(id(m) in mem for m, _ in owners)]
            claims[min(fits, key=lambda k: len(members[k]))].append((p, owners))
        keep = self._replicated_ids(replicate, claims[-1]) | by_policy
        self.replicated = [p for p, _ in _owners(module).values() if id(p) in keep]
        claims = [[(p, o) for p, o in c if id(p) not in keep] for c in claims]
        broadcast_from_rank0(self.comm, self.replicated)
        self._shared.replicated = [p for p in self.replicated if p.requires_grad]
        self.units: list[Unit] = []
        for k, (mod, claimed) in enumerate(zip(order, claims)):
            by_kind: dict[tuple, list] = {}
            for p, owners in claimed:
                by_kind.setdefault((p.dtype, p.device, p.requires_grad), []).append((p, owners))
            groups = [Group([p for p, _ in v], [o for _, o in v], self._shared) for v in by_kind.values()]
            is_root = k == len(order) - 1
            self.units.append(Unit(mod, groups, self._shared, reshard_root if is_root else True, is_root))
        self._shared.units = self.units

    def _replicated_ids(self, replicate, root_claims) -> set[int]:
        if replicate is True:
            return {id(p) for p, _ in root_claims}
        if replicate is False or replicate is None:
            return set()
        items = [replicate] if isinstance(replicate, (nn.Module, torch.Tensor)) else list(replicate)
        mine = {id(p) for p in self.module.parameters()}
        out = set()
        for x in items:
            ps = list(x.parameters()) if isinstance(x, nn.Module) else [x]
            if not all(isinstance(p, torch.Tensor) and id(p) in mine for p in ps):
                raise ValueError(f"replicate must hold parameters or submodules of the model (or be "
                                 f"True); got {type(x).__name__}")
            out |= {id(p) for p in ps}
        return out

    # -- nn.Module: the wrapped module's own names and tensors ----------------------------------
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self.module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self.module.named_buffers(prefix, recurse, remove_duplicate)

    def state_dict(self, *args, **kwargs):
        """The sharded state dict: ``module``'s keys, this rank's pieces (see the class docstring)."""
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.module.load_state_dict(state_dict, strict, assign)

    # -- gradient synchronisation ---------------------------------------------------------------
    def set_requires_gradient_sync(self, requires: bool) -> None:
        """False: backward keeps full gradients locally (see :meth:`no_sync`); True: reduce."""
        self._shared.sync = bool(requires)

    @contextmanager
    def no_sync(self):
        """Accumulate gradients over micro-batches without reduce-scattering them."""
        before = self._shared.sync
        self._shared.sync = False
        try:
            yield
        finally:
            self._shared.sync = before

    # -- the training loop's other needs ---------------------------------------------------------
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False) -> torch.Tensor:
        """Scale the gradients so that their global ``norm_type``-norm — over every shard on every
        rank, and the replicated parameters once — is at most ``max_norm``; return that norm (before
        clipping). A collective, after backward and before ``step``; every rank scales by the same
        factor, so the result is what ``torch.nn.utils.clip_grad_norm_`` does on one process."""
        shards = [s.grad for u in self.units for g in u.groups if g.requires_grad for s in g.shards]
        return clip_grads_(shards, [p.grad for p in self._shared.replicated], max_norm, norm_type,
                           self.comm, error_if_nonfinite)

    def full_optim_state_dict(self, optimizer: torch.optim.Optimizer, rank0_only: bool = False) -> dict:
        """``optimizer``'s state unsharded, in its own format: what the same optimizer over the
        unwrapped model's parameters would save on one process. A collective; see
        :func:`course_lib.parallel.fsdp_state.full_optim_state_dict`."""
        return full_optim_state_dict(self, optimizer, rank0_only)

    def load_full_optim_state_dict(self, optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
        """Load an unsharded optimizer state (from :meth:`full_optim_state_dict` on any world size,
        or a plain optimizer's ``state_dict()``): each rank keeps its pieces. No communication."""
        load_full_optim_state_dict(self, optimizer, state_dict)

    # -- full tensors -----------------------------------------------------------------------------
    def _gather_full(self, grads: bool) -> dict[int, torch.Tensor]:
        """id(shard) -> its full tensor (or full averaged gradient). A collective."""
        out = {}
        for u in self.units:
            for g in u.groups:
                shards = g.shards
                flat = torch.empty(g.numel, dtype=g.dtype, device=shards[0].device)
                self.comm.all_gather(flat, g.fill_mine(flat, [s.grad for s in shards] if grads else shards))
                for s, v in zip(shards, g.views(flat)):
                    out[id(s)] = v
        for p in self.replicated:
            out[id(p)] = (p.grad if p.grad is not None else torch.zeros_like(p)) if grads else p.detach()
        return out

    def full_state(self, grads: bool = False) -> dict[str, torch.Tensor]:
        """Name -> full parameter (or, with ``grads=True``, full averaged gradient; zeros where
        there is none), one entry per distinct parameter. A collective: call it on all ranks."""
        full = self._gather_full(grads)
        return {k: full[id(p)].clone() for k, p in self.module.named_parameters()}

    def full_state_dict(self, rank0_only: bool = False) -> dict[str, torch.Tensor]:
        """The unsharded state dict, keyed and shaped as the unwrapped module's ``state_dict()``:
        what a single-process model loads. A collective; ``rank0_only``: other ranks get {}."""
        full = self._gather_full(False)
        if rank0_only and self.comm.rank != 0:
            return {}
        return {k: (full[id(v)] if id(v) in full else v).detach().clone()
                for k, v in self.module.state_dict(keep_vars=True).items()}

    def load_full_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load an unsharded state dict (from :meth:`full_state_dict` or a single-process model's
        ``state_dict()``): every rank copies its own pieces. No communication."""
        mine = self.module.state_dict(keep_vars=True)
        for what, keys in (("missing", set(mine) - set(state_dict)),
                           ("unexpected", set(state_dict) - set(mine))):
            if keys:
                raise ValueError(f"state_dict has {len(keys)} {what} keys: {', '.join(sorted(keys)[:5])}")
        names = {id(p): k for k, p in self.module.named_parameters()}
        with torch.no_grad():
            for u in self.units:
                for g in u.groups:
                    for s, off, (a, b) in zip(g.shards, g.offsets, g.pieces):
                        s.copy_(state_dict[names[id(s)]].reshape(-1)[g.start + a - off:g.start + b - off])
            for p in self.replicated:
                p.copy_(state_dict[names[id(p)]])
            for k, b in self.module.named_buffers():
                if k in state_dict:
                    b.copy_(state_dict[k])

    def memory_bytes(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds between steps for parameters (shards, plus any full buffer still
        alive), gradients (shards) and optimizer state; ``peak_full`` is the largest unit's full
        parameters, held only while that unit runs."""
        shards = [s for u in self.units for g in u.groups for s in g.shards] + self.replicated
        fulls = [f for u in self.units if u.last is not None for f in u.last.fulls]
        return {"params": storage_bytes(shards + fulls),
                "grads": storage_bytes(s.grad for s in shards),
                "optimizer": optimizer_state_bytes(optimizer) if optimizer is not None else 0,
                "peak_full": max(u.peak_bytes for u in self.units)}
