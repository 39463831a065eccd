"""Hiding the dispatch all-to-all behind the shared expert's compute.

A shared expert (DeepSeek-MoE, DeepSeek-V3 arXiv 2412.19437 §2.1.2) sees every token and needs no
routed token, so it can compute while the dispatch all-to-all is still moving the routed tokens:
issue the exchange asynchronously, run the shared expert, then wait. DeepSeek-V3's DualPipe (§3.2.1)
pushes the idea further (one microbatch's dispatch and combine under another's attention and MLP);
this module does the smallest version of it, inside one layer's forward:

* :func:`dispatch_async` issues ``torch.distributed.all_to_all_single(..., async_op=True)`` and
  returns a :class:`Pending` handle: ``wait()`` gives the received rows. The handle knows when the
  exchange was issued and when it completed (a callback on the work's future stamps the moment),
  so a timeline can show the communication in flight beside the compute.
* :func:`forward` is :class:`~course_lib.expert.ep.ExpertParallelMoE`'s dropless forward with
  the dispatch issued before the shared expert and waited for after it (``overlap=True``), or
  waited for at once (``overlap=False``: the serial order). Same operations in the same order on
  the same data, so both give the layer's own output bit for bit; only *when* the rank waits
  differs. It records its intervals as :class:`course_lib.pipeline.gantt.Event` s.

Times are host clock stamps (``time.perf_counter``): on CPU they are the work itself; on a GPU
they mark when work was queued and the future completed, so read a GPU timeline from
``torch.profiler`` instead. Forward only (no autograd through the asynchronous exchange): the backward mirrors it, with the
shared expert's backward under the combine's gradient exchange.

On CPU gloo the exchange itself costs CPU (copies through the loopback socket), so on a machine
with as many busy threads as cores the overlap hides little: the compute slows down by what the
communication takes. A GPU's NCCL moves the data with its own SMs and copy engines while the
compute kernels run; DeepSeek-V3 gives 20 of an H800's 132 SMs to communication (§3.2.2).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..parallel.counting import CountingComm, as_comm
from ..pipeline.gantt import Event

__all__ = ["Pending", "dispatch_async", "forward", "COMM_KINDS"]

#: Event kinds that are an all-to-all in flight (the rest run on the rank's compute thread).
COMM_KINDS = ("dispatch", "combine")


@dataclass
class Pending:
    """An all-to-all in flight. ``issued`` / ``done`` are ``time.perf_counter`` stamps (``done`` is
    set when the exchange completes, by the thread that completes it); ``sent_bytes`` counts the rows
    that leave this rank, as ``CountingComm`` counts them."""

    output: torch.Tensor
    work: object = field(repr=False)
    issued: float
    sent_bytes: int
    payload_bytes: int
    comm: CountingComm = field(repr=False)
    done: float | None = None
    _booked: bool = field(default=False, repr=False)

    def wait(self) -> torch.Tensor:
        """Block until the rows have arrived; book the call in the comm's ``all_to_all`` stats."""
        self.work.wait()
        while self.done is None:        # the completion callback may still be running: a few µs
            time.sleep(0)
        if not self._booked:
            s = self.comm.stats["all_to_all"]
            s.calls += 1
            s.payload_bytes += self.payload_bytes
            s.sent_bytes += self.sent_bytes
            s.seconds += self.done - self.issued
            self._booked = True
        return self.output


def _agreed(ins: list[int], outs: list[int], row: int, comm: CountingComm) -> None:
    """Raise on every rank alike unless the ranks' splits agree: rank i sends rank j what rank j
    expects from rank i, in rows of one size. One all-gather of 2p + 1 integers (uncounted)."""
    p = comm.world_size
    every = [torch.zeros(2 * p + 1, dtype=torch.int64) for _ in range(p)]
    dist.all_gather(every, torch.tensor(ins + outs + [row], dtype=torch.int64), group=comm.group)
    t = torch.stack(every)
    send, recv, rows = t[:, :p], t[:, p:2 * p], t[:, -1].tolist()
    bad = [f"rank {i} sends rank {j} {int(send[i, j])} rows, rank {j} expects {int(recv[j, i])}"
           for i in range(p) for j in range(p) if send[i, j] != recv[j, i]]
    if len(set(rows)) > 1:
        bad.append(f"the ranks' rows hold {rows} values (rank order)")
    if bad:
        raise ValueError("dispatch_async: the ranks' splits disagree: " + "; ".join(bad) + " (rank i's "
                         "input_splits[j] must equal rank j's output_splits[i])")


def dispatch_async(x: torch.Tensor, comm, output_splits: list[int], input_splits: list[int], *,
                   check: bool = True) -> Pending:
    """Send ``input_splits[j]`` rows of ``x`` to rank j of ``comm``'s group without waiting.

    ``comm`` is a :class:`CountingComm` or a ProcessGroup (see ``as_comm``); the exchange is always
    torch.distributed's own ``all_to_all_single`` with ``async_op=True`` (gloo runs it on its worker
    threads, NCCL on its own stream), and ``wait()`` books it in the comm's stats. ``check``: first
    exchange every rank's splits (a small blocking all-gather, uncounted) and raise the same
    ValueError on every rank if rank i's ``input_splits[j]`` is not rank j's ``output_splits[i]``
    (mismatched blocks abort a rank inside the collective); ``forward`` skips it, its splits come
    from the exchanged counts."""
    comm = as_comm(comm)
    ins, outs = [int(s) for s in input_splits], [int(s) for s in output_splits]
    if len(ins) != comm.world_size or len(outs) != comm.world_size or sum(ins) != x.shape[0]:
        raise ValueError(f"input_splits must be {comm.world_size} row counts summing to {x.shape[0]} and "
                         f"output_splits {comm.world_size} row counts, got {ins} and {outs}")
    if check:
        _agreed(ins, outs, math.prod(x.shape[1:]), comm)
    x = x.contiguous()
    out = x.new_empty((sum(outs),) + tuple(x.shape[1:]))
    row = x.element_size() * math.prod(x.shape[1:])
    t0 = time.perf_counter()
    work = dist.all_to_all_single(out, x, outs, ins, group=comm.group, async_op=True)
    pending = Pending(out, work, t0, row * (sum(ins) - ins[comm.rank]), x.numel() * x.element_size(), comm)

    def stamp(_fut) -> None:
        pending.done = time.perf_counter()
    work.get_future().then(stamp)
    return pending


def _event(events: list | None, rank: int, kind: str, t0: float, t1: float, step: int) -> None:
    if events is not None:
        events.append(Event(rank, kind, -1, t0, t1, 0, step))


@torch.no_grad()
def forward(layer, x: torch.Tensor, *, overlap: bool = True, events: list | None = None,
            step: int = 0) -> torch.Tensor:
    """One forward of ``layer`` (an ``ExpertParallelMoE`` with a shared expert, dropless routing).

    ``overlap=True``: the dispatch is issued, the shared expert computes while it is in flight, then
    the rank waits. ``overlap=False``: the rank waits for the dispatch before the shared expert.
    When ``events`` is a list, appends this rank's intervals (``Event.rank`` = the layer's rank):
    "route" (router, counts exchange, sort), "dispatch" and "combine" (each all-to-all from issue to
    completion), "shared", "experts" (the local routed experts) and "recv" (blocked waiting)."""
    if layer.shared is None or layer.capacity_factor is not None:
        raise ValueError("forward overlaps the dispatch with the shared expert: the layer needs a shared "
                         "expert and dropless routing (capacity_factor=None)")
    B, S, D = x.shape
    E, L, ep, r = layer.n_experts, layer.local, layer.ep, layer.rank
    clock = time.perf_counter
    t0 = clock()
    # --- the same steps as ExpertParallelMoE.forward / _dropless, in the same order
    route = layer.route(layer.router(x))
    flat = x.reshape(-1, D)
    kept = route.kept.reshape(-1, E)
    gates = route.combine.reshape(-1, E).to(x.dtype)
    tok, exp = kept.nonzero(as_tuple=True)
    order = exp.argsort(stable=True)
    tok, exp = tok[order], exp[order]
    counts = torch.bincount(exp, minlength=E)
    recv_counts = torch.empty_like(counts)
    layer.comm.all_to_all_single(recv_counts, counts, kind="all_to_all_splits")
    send_splits = counts.view(ep, L).sum(1).tolist()
    recv_splits = recv_counts.view(ep, L).sum(1).tolist()
    rows = flat[tok]
    _event(events, r, "route", t0, clock(), step)
    pending = dispatch_async(rows, layer.comm, recv_splits, send_splits, check=False)
    if not overlap:
        w0 = clock()
        recv = pending.wait()
        _event(events, r, "recv", w0, clock(), step)
    s0 = clock()
    shared = layer.shared(x)
    _event(events, r, "shared", s0, clock(), step)
    if overlap:
        w0 = clock()
        recv = pending.wait()
        _event(events, r, "recv", w0, clock(), step)
    _event(events, r, "dispatch", pending.issued, pending.done, step)
    e0 = clock()
    row_expert = torch.arange(L).repeat(ep).repeat_interleave(recv_counts)
    perm = row_expert.argsort(stable=True)
    out = layer._experts(recv[perm], recv_counts.view(ep, L).sum(0).tolist())
    out = out[perm.argsort()]
    _event(events, r, "experts", e0, clock(), step)
    back = dispatch_async(out, layer.comm, send_splits, recv_splits, check=False)
    w0 = clock()
    back_rows = back.wait()
    _event(events, r, "recv", w0, clock(), step)
    _event(events, r, "combine", back.issued, back.done, step)
    y = torch.zeros_like(flat).index_add(0, tok, back_rows * gates[tok, exp, None])
    return y.reshape(B, S, D) + shared
