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

* Stage 1 (``P_os``) keeps the full gradient buffers until the step (they were needed anyway).
* Stage 2 (``P_os+g``) frees each gradient bucket as soon as it has been reduce-scattered and keeps
  only its shard, so gradients also cost 1/n.

Each bucket of the flat parameter buffer is sharded separately (rank r owns chunk r of every
bucket); the parameters the model uses are views into these buffers, and rank r's optimizer
updates its chunk in place, so fp32 training needs no separate master copy.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .counting import CountingComm, optimizer_state_bytes, storage_bytes
from .dp import make_buckets, unique_params

__all__ = ["ZeroOptimizer"]


class ZeroOptimizer:
    """AdamW with ZeRO stage 1 or 2 over ``comm``'s ranks.

    Usage per step: ``loss.backward(); zopt.step(); zopt.zero_grad()``. Gradient reduce-scatters
    start during backward (hooks), bucket by bucket, on the communication thread.
    """

    def __init__(self, model: nn.Module, comm: CountingComm, *, stage: int = 1, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, bucket_bytes: int | None = None,
                 broadcast: bool = True) -> None:
        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2 (ZeRO-3 is course_lib.parallel.fsdp), got {stage!r}")
        self.model, self.comm, self.stage = model, comm, stage
        self.params = unique_params(model)
        n, r = comm.world_size, comm.rank
        if broadcast:
            with torch.no_grad():
                for p in self.params:
                    comm.broadcast(p.data)
            comm.reset()
        self.buckets = make_buckets(self.params, bucket_bytes, n)
        self._bucket_of = {}
        for b in self.buckets:
            p0 = b.params[0]
            flat = torch.zeros(b.numel, dtype=p0.dtype, device=p0.device)
            for p, v in zip(b.params, b.views(flat)):
                v.copy_(p.data)
                p.data = v                       # the model now reads its weights from the bucket
                self._bucket_of[id(p)] = b
            b.extra["param"] = flat
            b.extra["shard"] = nn.Parameter(flat.chunk(n)[r])   # a view: updated in place
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)
        self.optimizer = torch.optim.AdamW([b.extra["shard"] for b in self.buckets], lr=lr,
                                           betas=betas, eps=eps, weight_decay=weight_decay)
        self.zero_grad()

    def zero_grad(self) -> None:
        """Fresh zeroed gradient buckets, with every ``p.grad`` a view into its bucket."""
        for b in self.buckets:
            p0 = b.params[0]
            if b.grad is None or b.grad.untyped_storage().nbytes() == 0:
                b.grad = torch.zeros(b.numel, dtype=p0.dtype, device=p0.device)
            else:
                b.grad.zero_()
            b.ready, b.handle = 0, None
            for p, v in zip(b.params, b.views(b.grad)):
                p.grad = v
            b.extra["shard"].grad = None

    def _launch(self, b) -> None:
        n, r = self.comm.world_size, self.comm.rank
        if self.stage == 1 and self.comm.algorithm == "ring":
            out = b.grad.chunk(n)[r]                 # reduce in place: the shard is part of the bucket
        else:
            out = torch.empty(b.numel // n, dtype=b.grad.dtype, device=b.grad.device)
        b.extra["grad_shard"] = out
        grad = b.grad

        def free_bucket() -> None:                   # stage 2: only the shard survives
            grad.untyped_storage().resize_(0)
        then = free_bucket if self.stage == 2 else None
        b.handle = self.comm.reduce_scatter(out, grad, average=True, async_op=True, then=then)

    def _on_grad(self, p: torch.Tensor) -> None:
        b = self._bucket_of[id(p)]
        b.ready += 1
        if b.ready == len(b.params):
            self._launch(b)

    def step(self) -> None:
        """Wait for the reduce-scatters, update this rank's shards, all-gather the parameters."""
        for b in self.buckets:
            if b.handle is None:
                self._launch(b)
        for b in self.buckets:
            b.handle.wait()
            b.extra["shard"].grad = b.extra["grad_shard"]
            if self.stage == 2:
                for p in b.params:
                    p.grad = None
        self.optimizer.step()
        handles = [self.comm.all_gather(b.extra["param"], b.extra["shard"].detach(), async_op=True)
                   for b in self.buckets]
        for h in handles:
            h.wait()

    def full_grads(self) -> dict[str, torch.Tensor]:
        """The averaged gradient of every parameter, gathered from the shards (a collective: call on
        all ranks, after ``step`` and before ``zero_grad``); for checking against a reference."""
        names = {id(p): k for k, p in reversed(list(self.model.named_parameters()))}
        out = {}
        for b in self.buckets:
            full = torch.empty(b.numel, dtype=b.extra["param"].dtype, device=b.extra["param"].device)
            self.comm.all_gather(full, b.extra["grad_shard"])
            for p, v in zip(b.params, b.views(full)):
                out[names[id(p)]] = v.clone()
        return out

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds for parameters, gradients and optimizer state (live storages)."""
        grads = [b.grad for b in self.buckets] if self.stage == 1 else []
        grads += [b.extra.get("grad_shard") for b in self.buckets]
        return {"params": storage_bytes(b.extra["param"] for b in self.buckets),
                "grads": storage_bytes(grads),
                "optimizer": optimizer_state_bytes(self.optimizer)}
