"""ZeRO stages 1 and 2 from scratch: shard the optimizer state (and the gradients) over the ranks.

Plain data parallelism keeps, on every rank, the parameters, the gradients and the optimizer state
of the whole model — with Adam the state is the biggest of the three. ZeRO (Rajbhandari et al.
2020, arXiv 1910.02054) notices that the optimizer step is elementwise, so rank r only needs the
state, and the reduced gradient, of its own 1/n of the parameters:

1. backward, then **reduce-scatter** each gradient bucket: rank r receives the average of shard r;
2. the optimizer updates shard r of the parameters, with state for shard r only;
3. **all-gather** the updated shards so every rank has the whole model for the next forward.

Reduce-scatter + all-gather is exactly an all-reduce cut in two with the optimizer step in the
middle, so ZeRO-1/2 send the same bytes as DP: 2(n−1)/n·Ψ values per rank and step.

* Stage 1 (``P_os``) keeps the full gradient buffers (the ring reduce-scatters in place).
* Stage 2 (``P_os+g``) drops each gradient bucket as soon as it has been reduce-scattered and keeps
  only its shard, so gradients also cost 1/n.

Each bucket (one per param group, dtype and device, see :func:`~course_lib.parallel.dp.make_buckets`)
of the flat parameter buffer is sharded separately (rank r owns chunk r of every bucket); the
parameters the model uses are views into these buffers, and rank r's inner optimizer — any
elementwise ``torch.optim`` optimizer: SGD, Adam, AdamW... — updates its chunk in place, so fp32
training needs no separate master copy.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .counting import as_comm
from .state_bytes import optimizer_state_bytes, storage_bytes
from .dp import broadcast_from_rank0, make_buckets, queue_end_of_backward
from .grad_clip import HeldGrad, clip_grads_, held_grad

__all__ = ["ZeroOptimizer"]


class ZeroOptimizer(torch.optim.Optimizer):
    """``optimizer_cls(params, **defaults)`` with its state sharded over ranks (ZeRO stage 1 or 2).

    A ``torch.optim.Optimizer``: ``param_groups`` are the user's (an LR scheduler's changes take
    effect at the next ``step``), ``zero_grad(set_to_none)`` works in both modes. Per step:
    ``loss.backward(); zopt.step(); zopt.zero_grad()``; the reduce-scatters start during backward,
    bucket by bucket. Successive backwards before a ``step`` accumulate, as with ``p.grad``.

    * ``params``: parameters or param groups, as for any optimizer, or an ``nn.Module`` (its
      parameters; its buffers are then broadcast from rank 0 too). Frozen parameters are broadcast
      and otherwise left alone.
    * ``comm``: a :class:`~course_lib.parallel.counting.CountingComm` or a plain ProcessGroup
      (``process_group=`` works too); ``broadcast=True`` copies rank 0's values to every rank at
      construction and then resets ``comm``'s counts.
    * Gradients go from ``p.grad`` into the buckets as each is accumulated; ``p.grad`` is then a
      :class:`~course_lib.parallel.grad_clip.HeldGrad` placeholder on which any computation raises
      (so ``torch.nn.utils.clip_grad_norm_`` fails loudly instead of seeing no gradient).
      :meth:`clip_grad_norm_` clips by the true global norm (after backward, before ``step``);
      :meth:`full_grads` gathers the averaged gradients (after ``step``).
    * ``state_dict()`` is this rank's shard of the optimizer state: each rank saves its own and
      loads it back into a ZeroOptimizer built the same way on the same number of ranks.
      :meth:`full_state_dict` gathers the whole state in ``optimizer_cls``'s own format (what an
      unsharded optimizer over the same params would save), which :meth:`load_full_state_dict`
      loads on any number of ranks and a plain ``optimizer_cls`` loads too.
    """

    def __init__(self, params, optimizer_cls: type[torch.optim.Optimizer] = torch.optim.AdamW, *,
                 comm=None, process_group=None, stage: int = 1, bucket_bytes: int | None = None,
                 broadcast: bool = True, **defaults) -> None:
        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2 (ZeRO-3 is course_lib.parallel.fsdp), got {stage!r}")
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, torch.optim.Optimizer)):
            raise ValueError(f"optimizer_cls must be a torch.optim.Optimizer class, got {optimizer_cls!r}")
        buffers = []
        if isinstance(params, nn.Module):
            buffers, params = list(params.buffers()), params.parameters()
        super().__init__(params, defaults)
        self.comm, self.stage = as_comm(comm, process_group), stage
        n, r = self.comm.world_size, self.comm.rank
        if broadcast:
            broadcast_from_rank0(self.comm, [*(p for g in self.param_groups for p in g["params"]), *buffers])
            self.comm.reset()
        self.buckets, self._slot_of, inner_groups = [], {}, []
        for group in self.param_groups:
            buckets = make_buckets([p for p in group["params"] if p.requires_grad], bucket_bytes, n)
            for b in buckets:
                flat = b.new_flat()
                with torch.no_grad():
                    for i, (p, v) in enumerate(zip(b.params, b.views(flat))):
                        v.copy_(p)
                        p.data = v                   # the model now reads its weights from the bucket
                        self._slot_of[id(p)] = (b, i)
                b.extra["param"] = flat
                b.extra["shard"] = nn.Parameter(flat.chunk(n)[r])   # a view: updated in place
            self.buckets += buckets
            inner_groups.append({**group, "params": [b.extra["shard"] for b in buckets]})
        if not self.buckets:
            raise ValueError("params holds no parameter that requires grad")
        for b in self.buckets:
            for p in b.params:
                p.register_hook(lambda g, p=p: self._drop_placeholder(p, g))
                p.register_post_accumulate_grad_hook(self._on_grad)
        self.optim = optimizer_cls(inner_groups)
        for outer, inner in zip(self.param_groups, self.optim.param_groups):
            for k, v in inner.items():               # the inner optimizer's defaults, for the user
                outer.setdefault(k, v)
        self.defaults = {**self.optim.defaults, **defaults}
        self._in_backward = False

    # ------------------------------------------------------------------ backward
    @staticmethod
    def _drop_placeholder(p: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        """Before autograd accumulates into ``p.grad``: the placeholder goes, the bucket adds up."""
        if isinstance(p.grad, HeldGrad):
            p.grad = None
        return grad

    def _on_grad(self, p: torch.Tensor) -> None:
        b, i = self._slot_of[id(p)]
        if not self._in_backward:                # the first gradient of this backward pass
            self._begin_backward()
        if b.grad is None:                       # stage 2 dropped it after the last reduce-scatter
            b.grad = b.new_flat()
            b.slots = b.views(b.grad)
        with torch.no_grad():
            b.slots[i].copy_(p.grad)
        p.grad = held_grad(p)
        b.extra["filled"][i] = True
        b.ready += 1
        if b.ready == len(b.params):
            self._launch(b)

    def _begin_backward(self) -> None:
        self._in_backward = True
        self._collect()                          # the buckets are about to be reused
        for b in self.buckets:
            acc = b.extra.get("acc")
            if acc is not None and b.grad is not None and \
                    acc.untyped_storage().data_ptr() == b.grad.untyped_storage().data_ptr():
                b.extra["acc"] = acc.clone()     # accumulating: keep the reduced shard apart
            b.ready, b.extra["filled"] = 0, [False] * len(b.params)
        queue_end_of_backward(self._end_of_backward)

    def _end_of_backward(self) -> None:
        """Reduce-scatter the buckets some of whose parameters got no gradient (zeros for those)."""
        self._in_backward = False
        for b in self.buckets:
            if b.handle is None:
                if b.grad is None:
                    b.grad = b.new_flat()
                    b.slots = b.views(b.grad)
                for v, filled in zip(b.slots, b.extra["filled"]):
                    if not filled:
                        v.zero_()
                self._launch(b)

    def _launch(self, b) -> None:
        n, r = self.comm.world_size, self.comm.rank
        if self.stage == 1 and self.comm.algorithm == "ring":
            out = b.grad.chunk(n)[r]                 # reduce in place: the shard is part of the bucket
        else:
            out = torch.empty(b.numel // n, dtype=b.grad.dtype, device=b.grad.device)
        b.extra["out"] = out
        b.handle = self.comm.reduce_scatter(out, b.grad, average=True, async_op=True)
        if self.stage == 2:                          # only the shard survives (once the call is done)
            b.grad, b.slots = None, []

    def _collect(self) -> None:
        """Wait for the reduce-scatters in flight and add their shards to the accumulated ones."""
        for b in self.buckets:
            if b.handle is not None:
                b.handle.wait()
                out, acc = b.extra.pop("out"), b.extra.get("acc")
                b.extra["acc"] = out if acc is None else acc.add_(out)
                b.handle = None

    # ------------------------------------------------------------------ the optimizer interface
    @torch.no_grad()
    def step(self, closure=None):
        """Update this rank's shards with the averaged gradients, then all-gather the parameters."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._collect()
        for b in self.buckets:
            b.extra["shard"].grad = b.extra.get("acc")
        for outer, inner in zip(self.param_groups, self.optim.param_groups):
            inner.update({k: v for k, v in outer.items() if k != "params"})   # e.g. a scheduler's lr
        self.optim.step()
        handles = [self.comm.all_gather(b.extra["param"], b.extra["shard"].detach(), async_op=True)
                   for b in self.buckets]
        for h in handles:
            h.wait()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the accumulated gradients (and clear any ``p.grad``, as torch's optimizers do)."""
        for g in self.param_groups:
            for p in g["params"]:
                if isinstance(p.grad, HeldGrad):
                    p.grad = None
        super().zero_grad(set_to_none)
        self._collect()
        for b in self.buckets:
            b.extra["acc"] = b.extra["shard"].grad = None

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False) -> torch.Tensor:
        """Scale the averaged gradients so that their global ``norm_type``-norm (over every shard
        on every rank, as if one process held them all) is at most ``max_norm``; return that norm
        (before clipping). A collective: call it on every rank after backward, before ``step``;
        every rank scales by the same factor, as ``torch.nn.utils.clip_grad_norm_`` does."""
        self._collect()
        return clip_grads_([b.extra.get("acc") for b in self.buckets], [], max_norm, norm_type,
                           self.comm, error_if_nonfinite)

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state, with the param groups' hyperparameters."""
        inner = self.optim.state_dict()
        groups = [{**{k: v for k, v in outer.items() if k != "params"}, "params": ig["params"]}
                  for outer, ig in zip(self.param_groups, inner["param_groups"])]
        return {"state": inner["state"], "param_groups": groups, "zero": self._layout()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load what :meth:`state_dict` saved on this rank (same ranks, same buckets)."""
        if state_dict.get("zero") != self._layout():
            raise ValueError(f"state_dict was saved with layout {state_dict.get('zero')}; this optimizer "
                             f"has {self._layout()} (each rank loads its own shard)")
        self.optim.load_state_dict({"state": state_dict["state"], "param_groups": state_dict["param_groups"]})
        for outer, saved in zip(self.param_groups, state_dict["param_groups"]):
            outer.update({k: v for k, v in saved.items() if k != "params"})

    def _param_index(self) -> dict[int, int]:
        """Position of each parameter in the user's param groups: its key in a torch state dict."""
        return {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def full_state_dict(self) -> dict:
        """The whole optimizer state, unsharded, in ``optimizer_cls``'s own state-dict format.

        A collective (every rank calls it, every rank gets the same dict): each state tensor shaped
        like a shard is all-gathered bucket by bucket and cut back into one tensor per parameter;
        per-shard scalars (Adam's ``step``) are the same on every rank and are copied."""
        index, state = self._param_index(), {}
        for b, shard_state in zip(self.buckets, (self.optim.state.get(b.extra["shard"], {}) for b in self.buckets)):
            per_param = [{} for _ in b.params]
            for key, value in shard_state.items():
                if torch.is_tensor(value) and value.shape == b.extra["shard"].shape:
                    full = torch.empty(b.numel, dtype=value.dtype, device=value.device)
                    self.comm.all_gather(full, value.contiguous())
                    for d, v in zip(per_param, b.views(full)):
                        d[key] = v.clone()
                else:
                    for d in per_param:
                        d[key] = value.clone() if torch.is_tensor(value) else value
            state.update({index[id(p)]: d for p, d in zip(b.params, per_param) if d})
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_full_state_dict(self, state_dict: dict) -> None:
        """Load an unsharded state dict (from :meth:`full_state_dict`, on any number of ranks, or from
        a plain ``optimizer_cls`` over the same params): each rank keeps its own shard of it."""
        index, saved = self._param_index(), state_dict["state"]
        if len(state_dict["param_groups"]) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(state_dict['param_groups'])} param groups; "
                             f"this optimizer has {len(self.param_groups)}")
        n, r, inner = self.comm.world_size, self.comm.rank, {}
        for i, b in enumerate(self.buckets):
            states = [saved.get(index[id(p)], saved.get(str(index[id(p)]))) for p in b.params]
            if all(st is None for st in states):
                continue
            if any(st is None for st in states):
                raise ValueError("state_dict has state for some parameters of a bucket but not all")
            shard = {}
            for key, value in states[0].items():
                # elementwise state has each parameter's shape; anything else (Adam's step) is shared
                if all(torch.is_tensor(st[key]) and st[key].shape == p.shape for st, p in zip(states, b.params)) \
                        and not (key == "step" and all(p.numel() == 1 for p in b.params)):
                    full = torch.zeros(b.numel, dtype=value.dtype, device=b.extra["shard"].device)
                    for v, st in zip(b.views(full), states):
                        v.copy_(st[key])
                    shard[key] = full.chunk(n)[r].clone()
                else:
                    shard[key] = value.clone() if torch.is_tensor(value) else value
            inner[i] = shard
        groups = self.optim.state_dict()["param_groups"]
        self.optim.load_state_dict({"state": inner, "param_groups": groups})
        for outer, g in zip(self.param_groups, state_dict["param_groups"]):
            outer.update({k: v for k, v in g.items() if k != "params"})

    def _layout(self) -> dict:
        return {"rank": self.comm.rank, "world_size": self.comm.world_size, "stage": self.stage,
                "buckets": [b.numel for b in self.buckets]}

    # ------------------------------------------------------------------ measuring
    def full_grads(self) -> dict[torch.Tensor, torch.Tensor]:
        """The averaged gradient of every trained parameter (keyed by the parameter), gathered from
        the shards: a collective, call on all ranks after ``step`` and before ``zero_grad``."""
        self._collect()
        out = {}
        for b in self.buckets:
            full = torch.empty(b.numel, dtype=b.extra["param"].dtype, device=b.extra["param"].device)
            self.comm.all_gather(full, b.extra["acc"])
            for p, v in zip(b.params, b.views(full)):
                out[p] = v.clone()
        return out

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds for parameters, gradients and optimizer state (live storages)."""
        grads = [b.grad for b in self.buckets] + [b.extra.get("acc") for b in self.buckets]
        return {"params": storage_bytes(b.extra["param"] for b in self.buckets),
                "grads": storage_bytes(grads),
                "optimizer": optimizer_state_bytes(self.optim)}
