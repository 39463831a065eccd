"""Data parallelism from scratch: every rank holds the whole model and averages gradients.

After ``loss.backward()`` each rank has the gradient of *its* slice of the batch; averaging those
gradients over ranks gives exactly the gradient of the whole batch (the loss is a mean over equal
slices), so every rank takes the same optimizer step and the replicas never drift apart.

:class:`DataParallel` does the averaging with all-reduces on flat *buckets* of gradients:

* ``bucket_bytes=None`` — one bucket holding every gradient, all-reduced after backward (the
  simplest correct DP); ``bucket_bytes=0`` — one all-reduce per parameter (many small messages);
* ``overlap=True`` — each bucket's all-reduce starts, on the communication thread, as soon as the
  last gradient of the bucket has been accumulated (a ``post_accumulate_grad`` hook), while
  backward keeps computing the gradients of earlier layers. That is what PyTorch's DDP does
  (Li et al. 2020, arXiv 2006.15704).

Gradients live *in* the buckets (``p.grad`` is a view into the bucket), so the bucket costs no
extra memory; call :meth:`DataParallel.zero_grad` (not the optimizer's) between steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from .counting import CountingComm

__all__ = ["Bucket", "make_buckets", "unique_params", "DataParallel"]


@dataclass
class Bucket:
    """Parameters whose gradients travel together in one flat buffer."""

    params: list[nn.Parameter]
    offsets: list[int]
    numel: int                      # padded to a multiple of the world size
    grad: torch.Tensor | None = None
    ready: int = 0
    handle: object = None
    extra: dict = field(default_factory=dict)

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each parameter's slice of ``flat``, shaped like the parameter."""
        return [flat[o:o + p.numel()].view_as(p) for p, o in zip(self.params, self.offsets)]


def unique_params(model: nn.Module) -> list[nn.Parameter]:
    """Trainable parameters, each once (a tied matrix appears once), in registration order."""
    return [p for p in model.parameters() if p.requires_grad]


def make_buckets(params: list[nn.Parameter], bucket_bytes: int | None, world_size: int) -> list[Bucket]:
    """Group ``params`` in *reverse* order (the order backward produces their gradients) into
    buckets of about ``bucket_bytes`` (None: one bucket; 0: one parameter per bucket). Each
    bucket's length is padded up to a multiple of ``world_size`` so it splits into equal shards."""
    if bucket_bytes is not None and bucket_bytes < 0:
        raise ValueError(f"bucket_bytes must be None or >= 0, got {bucket_bytes!r}")
    groups: list[list[nn.Parameter]] = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if not groups or (bucket_bytes is not None and size + nbytes > bucket_bytes and size > 0):
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += nbytes
    buckets = []
    for g in groups:
        offsets, o = [], 0
        for p in g:
            offsets.append(o)
            o += p.numel()
        padded = -(-o // world_size) * world_size
        buckets.append(Bucket(g, offsets, padded))
    return buckets


class DataParallel:
    """Average gradients over ``comm``'s ranks with bucketed all-reduces (see module docstring).

    Usage per step: ``loss.backward(); dp.finish(); opt.step(); dp.zero_grad()``.
    ``broadcast=True`` first copies rank 0's weights to every rank (and then resets the counts).
    """

    def __init__(self, model: nn.Module, comm: CountingComm, *, bucket_bytes: int | None = None,
                 overlap: bool = False, broadcast: bool = True) -> None:
        self.model, self.comm, self.overlap = model, comm, overlap
        self.params = unique_params(model)
        if broadcast:
            with torch.no_grad():
                for p in self.params:
                    comm.broadcast(p.data)
            comm.reset()
        self.buckets = make_buckets(self.params, bucket_bytes, comm.world_size)
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)
        self.zero_grad()

    def zero_grad(self) -> None:
        """Zero the buckets and point every ``p.grad`` into its bucket again."""
        for b in self.buckets:
            if b.grad is None:
                b.grad = torch.zeros(b.numel, dtype=b.params[0].dtype, device=b.params[0].device)
            else:
                b.grad.zero_()
            b.ready, b.handle = 0, None
            for p, v in zip(b.params, b.views(b.grad)):
                p.grad = v

    def _on_grad(self, p: torch.Tensor) -> None:
        b = self._bucket_of[id(p)]
        b.ready += 1
        if self.overlap and b.ready == len(b.params):
            b.handle = self.comm.all_reduce(b.grad, average=True, async_op=True)

    def finish(self) -> None:
        """Make sure every bucket has been all-reduced; afterwards ``p.grad`` is the average."""
        for b in self.buckets:
            if b.handle is None:
                b.handle = self.comm.all_reduce(b.grad, average=True, async_op=True)
        for b in self.buckets:
            b.handle.wait()

    def memory_bytes(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
        """Bytes this rank holds for parameters, gradients and optimizer state (live storages)."""
        from .counting import optimizer_state_bytes, storage_bytes
        return {"params": storage_bytes(self.params),
                "grads": storage_bytes([b.grad for b in self.buckets]),
                "optimizer": optimizer_state_bytes(optimizer) if optimizer is not None else 0}
