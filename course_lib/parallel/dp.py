"""Data parallelism from scratch: every rank holds the whole model and averages gradients.

After ``loss.backward()`` each rank has the gradient of *its* slice of the batch; averaging those
gradients over ranks gives exactly the gradient of the whole batch (the loss is a mean over equal
slices), so every rank takes the same optimizer step and the replicas never drift apart.

:class:`DataParallel` wraps any module, like PyTorch's ``DistributedDataParallel``, and does the
averaging with all-reduces on flat *buckets* of gradients (one dtype and device per bucket):

* ``bucket_bytes=None`` — one bucket per dtype holding every gradient, all-reduced at the end of
  backward (the simplest correct DP); ``bucket_bytes=0`` — one all-reduce per parameter;
* ``overlap=True`` — each bucket's all-reduce starts, on the communication thread, as soon as the
  last gradient of the bucket has been accumulated (a ``post_accumulate_grad`` hook), while
  backward keeps computing the gradients of earlier layers. That is what PyTorch's DDP does
  (Li et al. 2020, arXiv 2006.15704).

Gradients live *in* the buckets: before each forward every ``p.grad`` is pointed at its slice of
the bucket, so autograd accumulates straight into it and the bucket costs no extra memory. Where
``p.grad`` is somewhere else when its hook fires (set to None and the forward did not go through
the wrapper, or replaced by the user), the hook copies it into the bucket and re-points it. The
gradients are averaged by the time ``loss.backward()`` returns (a callback queued on the autograd
engine waits for the all-reduces), so the user's own optimizer and its ``zero_grad()``, in either
mode, work unchanged.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.autograd import Variable

from .counting import CountingComm, as_comm

__all__ = ["Bucket", "make_buckets", "unique_params", "broadcast_from_rank0", "queue_end_of_backward",
           "DataParallel"]


@dataclass
class Bucket:
    """Parameters of one dtype and device whose gradients travel together in one flat buffer."""

    params: list[nn.Parameter]
    offsets: list[int]
    numel: int                      # padded to a multiple of the world size
    grad: torch.Tensor | None = None
    slots: list[torch.Tensor] = field(default_factory=list)   # each parameter's view of ``grad``
    ready: int = 0
    handle: object = None
    extra: dict = field(default_factory=dict)

    @property
    def used(self) -> int:
        """Elements holding parameters (the rest, up to ``numel``, is padding)."""
        return self.offsets[-1] + self.params[-1].numel()

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each parameter's slice of ``flat``, shaped like the parameter."""
        return [flat[o:o + p.numel()].view_as(p) for p, o in zip(self.params, self.offsets)]

    def new_flat(self) -> torch.Tensor:
        """An uninitialised buffer for this bucket with zeroed padding."""
        p0 = self.params[0]
        flat = torch.empty(self.numel, dtype=p0.dtype, device=p0.device)
        flat[self.used:].zero_()
        return flat


def unique_params(model: nn.Module) -> list[nn.Parameter]:
    """Trainable parameters, each once (a tied matrix appears once), in registration order."""
    return [p for p in model.parameters() if p.requires_grad]


def make_buckets(params: list[nn.Parameter], bucket_bytes: int | None, world_size: int) -> list[Bucket]:
    """Group ``params`` in *reverse* order (the order backward produces their gradients) into
    buckets of about ``bucket_bytes`` (None: one bucket; 0: one parameter per bucket), one open
    bucket per (dtype, device), as DDP does. Each bucket's length is padded up to a multiple of
    ``world_size`` so it splits into equal shards."""
    if bucket_bytes is not None and bucket_bytes < 0:
        raise ValueError(f"bucket_bytes must be None or >= 0, got {bucket_bytes!r}")
    groups: list[list[nn.Parameter]] = []
    open_group: dict[tuple, tuple[int, int]] = {}        # (dtype, device) -> (group index, bytes)
    for p in reversed(params):
        key, nbytes = (p.dtype, p.device), p.numel() * p.element_size()
        i, size = open_group.get(key, (-1, 0))
        if i < 0 or (bucket_bytes is not None and size + nbytes > bucket_bytes and size > 0):
            groups.append([])
            i, size = len(groups) - 1, 0
        groups[i].append(p)
        open_group[key] = (i, size + nbytes)
    buckets = []
    for g in groups:
        offsets, o = [], 0
        for p in g:
            offsets.append(o)
            o += p.numel()
        buckets.append(Bucket(g, offsets, -(-o // world_size) * world_size))
    return buckets


@torch.no_grad()
def broadcast_from_rank0(comm: CountingComm, tensors) -> None:
    """Overwrite every tensor in ``tensors`` with rank 0's copy (parameters, frozen or not, and
    buffers: replicas must start identical)."""
    for t in tensors:
        if t.is_contiguous():
            comm.broadcast(t)
        else:
            tmp = t.contiguous()
            comm.broadcast(tmp)
            t.copy_(tmp)


def queue_end_of_backward(callback) -> None:
    """Run ``callback()`` once the running backward pass has finished (call from a grad hook)."""
    Variable._execution_engine.queue_callback(callback)


class DataParallel(nn.Module):
    """Wrap ``module`` so that backward averages its gradients over ranks (module docstring).

    Usage, as with DDP: ``dp = DataParallel(model, comm); opt = AnyOptimizer(dp.parameters())``,
    then per step ``loss = loss_fn(dp(x)); loss.backward(); opt.step(); opt.zero_grad()``.
    ``comm``: a :class:`CountingComm` (the course's ring, bytes counted) or a plain
    ``torch.distributed`` ProcessGroup (torch's collectives; ``process_group=`` works too).
    ``parameters()`` and ``state_dict()`` are the wrapped module's, under the prefix ``module.``
    like DDP's (``dp.module.state_dict()`` has the plain names). ``broadcast=True`` copies rank 0's
    parameters and buffers to every rank at construction (then resets ``comm``'s counts);
    ``broadcast_buffers=True`` also copies rank 0's buffers before every forward, as DDP does.
    The set of trainable parameters is fixed at construction. ``no_sync()`` skips the averaging
    for gradient accumulation. Gradient clipping: :meth:`clip_grad_norm_`, or torch's own function
    on ``dp.parameters()`` (the gradients are whole and equal on every rank: both are right).
    """

    def __init__(self, module: nn.Module, comm=None, *, process_group=None,
                 bucket_bytes: int | None = None, overlap: bool = False, broadcast: bool = True,
                 broadcast_buffers: bool = True) -> None:
        super().__init__()
        self.module = module
        self.comm = as_comm(comm, process_group)
        self.overlap, self.broadcast_buffers = overlap, broadcast_buffers
        self.params = unique_params(module)
        self.buckets = make_buckets(self.params, bucket_bytes, self.comm.world_size)
        if broadcast:
            broadcast_from_rank0(self.comm, [*module.parameters(), *module.buffers()])
            self.comm.reset()
        self._slot_of = {}
        for b in self.buckets:
            b.grad = torch.zeros(b.numel, dtype=b.params[0].dtype, device=b.params[0].device)
            b.slots = b.views(b.grad)
            for i, p in enumerate(b.params):
                self._slot_of[id(p)] = (b, i)
        self._require_sync = True             # False inside no_sync()
        self._forward_sync: bool | None = None  # what the last forward decided (DDP's semantics)
        self._in_backward = self._sync_now = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    def forward(self, *args, **kwargs):
        """Call the wrapped module (after pointing gradients at the buckets, syncing buffers)."""
        if torch.is_grad_enabled():
            self._forward_sync = self._require_sync
            self._point_grads_at_buckets()
        if self.broadcast_buffers:
            broadcast_from_rank0(self.comm, self.module.buffers())
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward only accumulates local gradients; the first backward after it averages
        the accumulated sum (the forward decides, as in DDP)."""
        old, self._require_sync = self._require_sync, False
        try:
            yield
        finally:
            self._require_sync = old

    @torch.no_grad()
    def _point_grads_at_buckets(self) -> None:
        """Make every ``p.grad`` its bucket slot: a None gradient becomes a zeroed slot, a gradient
        held elsewhere is copied in. Costs nothing when the gradients are already there."""
        for b in self.buckets:
            grads = [p.grad for p in b.params]
            if all(g is None for g in grads):
                b.grad.zero_()
            for p, g, v in zip(b.params, grads, b.slots):
                if g is None or g.data_ptr() != v.data_ptr():
                    if g is None:
                        v.zero_()
                    else:
                        v.copy_(g)
                    p.grad = v

    def _on_grad(self, p: torch.Tensor) -> None:
        b, i = self._slot_of[id(p)]
        if not self._in_backward:                # the first gradient of this backward pass
            self._in_backward = True
            fwd, self._forward_sync = self._forward_sync, None
            self._sync_now = self._require_sync if fwd is None else fwd
            for bk in self.buckets:
                bk.ready, bk.handle = 0, None
            queue_end_of_backward(self._end_of_backward)
        v = b.slots[i]
        if p.grad.data_ptr() != v.data_ptr():    # p.grad was None (or foreign) at the forward
            with torch.no_grad():
                v.copy_(p.grad)
            p.grad = v
        if self._sync_now:
            b.ready += 1
            if self.overlap and b.ready == len(b.params):
                b.handle = self.comm.all_reduce(b.grad, average=True, async_op=True)

    def _end_of_backward(self) -> None:
        self._in_backward = False
        self.finish()

    def finish(self) -> None:
        """Wait until every bucket has been all-reduced (every one, each backward: a rank whose
        batch did not touch some parameters still takes part). Backward calls this at its end;
        calling it again does nothing."""
        if not self._sync_now:
            return
        self._sync_now = False
        for b in self.buckets:
            if b.handle is None:
                b.handle = self.comm.all_reduce(b.grad, average=True, async_op=True)
        for b in self.buckets:
            b.handle.wait()
            b.ready, b.handle = 0, None

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        error_if_nonfinite: bool = False) -> torch.Tensor:
        """Clip the averaged gradients by their total norm and return it, as
        ``torch.nn.utils.clip_grad_norm_(dp.parameters(), ...)`` does — which is also right here:
        after backward every rank holds the same, whole averaged gradient (no communication).
        Offered so that one loop (``model.clip_grad_norm_`` when it exists) serves DP, ZeRO and FSDP."""
        self.finish()
        return torch.nn.utils.clip_grad_norm_(self.params, max_norm, norm_type, error_if_nonfinite)

    def memory_bytes(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds for parameters, gradients and optimizer state (live storages)."""
        from .state_bytes import optimizer_state_bytes, storage_bytes
        return {"params": storage_bytes(self.params),
                "grads": storage_bytes([b.grad for b in self.buckets]),
                "optimizer": optimizer_state_bytes(optimizer) if optimizer is not None else 0}
