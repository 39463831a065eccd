"""Collectives that count their own bytes: the instrument behind every "measured" byte count.

``CountingComm(group)`` offers the three collectives data parallelism needs — ``all_reduce``,
``reduce_scatter`` and ``all_gather`` on flat 1-D tensors — plus the ``all_to_all_single`` of
expert parallelism (chapter 14; rows split along dim 0, uneven splits allowed), and records, per kind, how many calls
were made, how many bytes this rank *sent*, and how long the calls took. It is a small object passed
explicitly to the code that communicates; nothing global is patched.

Two algorithms:

* ``"ring"`` (default): the collectives are written here, from scratch, as rings of point-to-point
  sends (``torch.distributed.isend`` / ``irecv``). Every byte is counted where it is sent, so the
  count is exact on any backend, NCCL included. This is the textbook algorithm whose cost the ZeRO
  paper's formulas assume: reduce-scatter and all-gather send (n−1)/n of the full buffer,
  all-reduce is the two back to back.
* ``"native"``: the calls go to ``torch.distributed`` (gloo's or NCCL's own algorithms). The bytes
  are then read from the operating system (see :func:`os_bytes_written`), which works for gloo's
  TCP sockets on Linux and not for NCCL (NVLink traffic never reaches a socket).

Both modes also record the kernel's count of bytes written by the process (``os_bytes``) during
each call: on CPU it is an independent check of the ring's own count.

Calls can be asynchronous (``async_op=True`` returns a handle with ``wait()``). They then run, in
order, on one background thread — the CPU stand-in for a GPU's communication stream — so ranks
issue collectives in the same order, and compute can continue while bytes move. A synchronous
call with nothing queued runs directly in the caller's thread.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, asdict
from collections.abc import Callable

import torch
import torch.distributed as dist

from .._validate import choice

__all__ = ["OpStats", "CountingComm", "as_comm", "os_bytes_written", "KINDS"]

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "all_to_all_splits")


def os_bytes_written() -> int | None:
    """Bytes this process has written through ``write``-family system calls (sockets included),
    from Linux's ``/proc/self/io`` (``wchar``); None where that file does not exist."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class OpStats:
    """What one kind of collective cost this rank so far."""

    calls: int = 0
    payload_bytes: int = 0      # size of the full logical buffer (input of RS, output of AG)
    sent_bytes: int = 0         # bytes this rank sent, counted by the ring (or by the OS in native mode)
    os_bytes: int = 0           # bytes the kernel saw this process write during the calls
    seconds: float = 0.0        # time spent inside the calls (on the communication thread)


@dataclass
class _Handle:
    """A pending collective; ``wait()`` blocks until it is done and books the blocked time."""

    future: Future
    comm: CountingComm = field(repr=False)

    def wait(self) -> None:
        t0 = time.perf_counter()
        self.future.result()
        self.comm.wait_seconds += time.perf_counter() - t0


class CountingComm:
    """Counting collectives over ``group`` (see the module docstring).

    ``algorithm``: ``"ring"`` (from scratch, exact byte count) or ``"native"`` (torch.distributed's
    own collectives, bytes from the OS). ``stats`` maps each kind to its :class:`OpStats`;
    ``wait_seconds`` is the time the caller spent blocked in ``wait()`` (exposed communication).
    """

    def __init__(self, group=None, *, algorithm: str = "ring") -> None:
        self.algorithm = choice("algorithm", algorithm, ("ring", "native"))
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self._ranks = [dist.get_global_rank(self.group, r) for r in range(self.world_size)]
        self.stats: dict[str, OpStats] = {k: OpStats() for k in KINDS}
        self.wait_seconds = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._last: Future | None = None      # the most recently queued call

    # ------------------------------------------------------------------ bookkeeping
    def reset(self) -> None:
        """Forget all counts (e.g. after the one-off broadcast at start-up)."""
        self.stats = {k: OpStats() for k in KINDS}
        self.wait_seconds = 0.0

    def snapshot(self) -> dict[str, dict]:
        """The counts as plain dicts (picklable, for returning from a rank)."""
        return {k: asdict(v) for k, v in self.stats.items()}

    def total(self, field_name: str = "sent_bytes") -> float:
        """Sum of one :class:`OpStats` field over all kinds."""
        return sum(getattr(s, field_name) for s in self.stats.values())

    def close(self) -> None:
        """Stop the communication thread (waits for pending calls)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _submit(self, kind: str, payload: int, fn: Callable[[], int], async_op: bool,
                then: Callable[[], None] | None = None):
        """Run ``fn`` (which returns the bytes it sent) on the comm thread — or right here when the
        call is synchronous and nothing is queued — and book its cost."""
        def job() -> None:
            before, t0 = os_bytes_written(), time.perf_counter()
            sent = fn()
            elapsed, after = time.perf_counter() - t0, os_bytes_written()
            os_sent = (after - before) if before is not None and after is not None else 0
            s = self.stats[kind]
            s.calls += 1
            s.payload_bytes += payload
            s.sent_bytes += os_sent if sent is None else sent
            s.os_bytes += os_sent
            s.seconds += elapsed
            if then is not None:
                then()
        if not async_op and (self._last is None or self._last.done()):
            t0 = time.perf_counter()
            job()                 # nothing queued: run in the caller's thread, skip the hand-off
            self.wait_seconds += time.perf_counter() - t0    # the caller waited for all of it
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="comm")
        self._last = self._pool.submit(job)
        handle = _Handle(self._last, self)
        if async_op:
            return handle
        handle.wait()
        return None

    # ------------------------------------------------------------------ ring primitives
    def _chunks(self, flat: torch.Tensor) -> list[torch.Tensor]:
        if flat.dim() != 1 or not flat.is_contiguous():
            raise ValueError("tensor must be a contiguous 1-D tensor (flatten it into a buffer first)")
        if flat.numel() % self.world_size:
            raise ValueError(f"tensor has {flat.numel()} elements, not divisible by world size "
                             f"{self.world_size}: pad the buffer")
        return list(flat.chunk(self.world_size))

    def _exchange(self, send: torch.Tensor, recv: torch.Tensor) -> int:
        """Send ``send`` to the next rank on the ring while receiving ``recv`` from the previous."""
        n, r = self.world_size, self.rank
        works = [dist.isend(send, self._ranks[(r + 1) % n], group=self.group),
                 dist.irecv(recv, self._ranks[(r - 1) % n], group=self.group)]
        for work in works:
            work.wait()
        return send.numel() * send.element_size()

    def _ring_reduce_scatter(self, chunks: list[torch.Tensor]) -> int:
        """In place: afterwards ``chunks[rank]`` holds the sum over ranks. n−1 steps."""
        n, r, sent = self.world_size, self.rank, 0
        tmp = torch.empty_like(chunks[0])
        for s in range(n - 1):
            sent += self._exchange(chunks[(r - s - 1) % n], tmp)
            chunks[(r - s - 2) % n].add_(tmp)
        return sent

    def _ring_all_gather(self, chunks: list[torch.Tensor]) -> int:
        """In place: ``chunks[rank]`` is sent around until every rank has every chunk. n−1 steps."""
        n, r, sent = self.world_size, self.rank, 0
        for s in range(n - 1):
            sent += self._exchange(chunks[(r - s) % n], chunks[(r - s - 1) % n])
        return sent

    # ------------------------------------------------------------------ public collectives
    def all_reduce(self, tensor: torch.Tensor, *, average: bool = False, async_op: bool = False):
        """Sum (or average) ``tensor`` over ranks, in place. Ring: 2(n−1)/n of its bytes sent."""
        payload = tensor.numel() * tensor.element_size()

        def run() -> int | None:
            if self.algorithm == "native":
                dist.all_reduce(tensor, group=self.group)
                sent = None
            elif self.world_size == 1:
                sent = 0
            else:
                chunks = self._chunks(tensor)
                sent = self._ring_reduce_scatter(chunks) + self._ring_all_gather(chunks)
            if average:
                tensor.div_(self.world_size)
            return sent
        return self._submit("all_reduce", payload, run, async_op)

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, *, average: bool = False,
                       async_op: bool = False, then: Callable[[], None] | None = None):
        """``output`` = this rank's 1/n slice of the sum over ranks of ``input``.

        Ring: (n−1)/n of ``input``'s bytes sent. The ring version works inside ``input`` (it is
        used as scratch space). ``then`` runs on the comm thread right after (e.g. to free input).
        """
        if output.numel() * self.world_size != input.numel():
            raise ValueError(f"output has {output.numel()} elements; expected input.numel() / "
                             f"world_size = {input.numel() / self.world_size:g}")
        payload = input.numel() * input.element_size()

        def run() -> int | None:
            if self.algorithm == "native":
                getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(  # torch < 2.13 name
                    output, input, group=self.group)
                sent = None
            else:
                chunks = self._chunks(input)
                sent = self._ring_reduce_scatter(chunks) if self.world_size > 1 else 0
                output.copy_(chunks[self.rank])
            if average:
                output.div_(self.world_size)
            return sent
        return self._submit("reduce_scatter", payload, run, async_op, then)

    def all_gather(self, output: torch.Tensor, input: torch.Tensor, *, async_op: bool = False):
        """``output`` = the concatenation of every rank's ``input``. Ring: (n−1)/n of ``output``'s
        bytes sent. ``input`` may already be ``output``'s own slice (in-place gather)."""
        if input.numel() * self.world_size != output.numel():
            raise ValueError(f"output has {output.numel()} elements; expected world_size × "
                             f"input.numel() = {self.world_size * input.numel()}")
        payload = output.numel() * output.element_size()

        def run() -> int | None:
            if self.algorithm == "native":
                getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(
                    output, input, group=self.group)
                return None
            chunks = self._chunks(output)
            if chunks[self.rank].data_ptr() != input.data_ptr():
                chunks[self.rank].copy_(input)
            return self._ring_all_gather(chunks) if self.world_size > 1 else 0
        return self._submit("all_gather", payload, run, async_op)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: list[int] | None = None,
                          input_split_sizes: list[int] | None = None, *, kind: str = "all_to_all") -> None:
        """Rows ``input[splits_in[j] block]`` go to rank j; ``output`` receives rank j's block in
        slot j (as ``torch.distributed.all_to_all_single``; equal splits when sizes are None).

        Ring mode sends each block with its own ``isend`` (rank j's block straight to rank j, the
        pairwise exchange NCCL uses), so the count is exact: the bytes of every block but this
        rank's own, which never leaves. ``kind`` books the call under another name (the expert
        layer's small exchange of per-expert counts is ``"all_to_all_splits"``)."""
        choice("kind", kind, ("all_to_all", "all_to_all_splits"))
        n = self.world_size
        ins = self._splits("input", input, input_split_sizes)
        outs = self._splits("output", output, output_split_sizes)
        payload = input.numel() * input.element_size()
        row = input.element_size() * (math.prod(input.shape[1:]) if input.dim() > 1 else 1)   # an empty input too

        def run() -> int | None:
            if self.algorithm == "native":
                dist.all_to_all_single(output, input, outs, ins, group=self.group)
                return None
            src, dst = list(input.split(ins)), list(output.split(outs))
            dst[self.rank].copy_(src[self.rank])
            works, sent = [], 0
            for j in range(n):
                if j == self.rank:
                    continue
                if ins[j]:
                    works.append(dist.isend(src[j].contiguous(), self._ranks[j], group=self.group))
                    sent += ins[j] * row
                if outs[j]:
                    works.append(dist.irecv(dst[j], self._ranks[j], group=self.group))
            for w in works:
                w.wait()
            return sent
        self._submit(kind, payload, run, False)

    def _splits(self, name: str, t: torch.Tensor, sizes: list[int] | None) -> list[int]:
        """Row counts per rank for an all-to-all buffer, checked against its shape."""
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        rows = t.shape[0] if t.dim() else 1
        if sizes is None:
            if rows % self.world_size:
                raise ValueError(f"{name} has {rows} rows, not divisible by world size {self.world_size}")
            return [rows // self.world_size] * self.world_size
        sizes = [int(s) for s in sizes]
        if len(sizes) != self.world_size or any(s < 0 for s in sizes) or sum(sizes) != rows:
            raise ValueError(f"{name}_split_sizes must be {self.world_size} non-negative row counts summing to "
                             f"{rows}, got {sizes}")
        return sizes

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        """Copy ``tensor`` from group rank ``src`` to every rank (start-up weight sync)."""
        payload = tensor.numel() * tensor.element_size()

        def run() -> None:
            dist.broadcast(tensor, self._ranks[src], group=self.group)
            return None
        self._submit("broadcast", payload, run, False)


def as_comm(comm=None, process_group=None) -> CountingComm:
    """The :class:`CountingComm` a component communicates through, from what its user passed.

    ``comm`` may be a ``CountingComm`` (used as is: the course's ring, with its byte counts) or a
    plain ``torch.distributed`` ProcessGroup, which is wrapped as ``CountingComm(group,
    algorithm="native")`` so the collectives are torch.distributed's own; ``process_group`` is the
    same as passing a group as ``comm``. Neither: the default (world) group, native."""
    if comm is not None and process_group is not None:
        raise ValueError("pass comm or process_group, not both")
    comm = process_group if comm is None else comm
    if isinstance(comm, CountingComm):
        return comm
    if comm is not None and not isinstance(comm, dist.ProcessGroup):
        raise ValueError(f"comm must be a CountingComm or a torch.distributed ProcessGroup, got {type(comm).__name__}")
    return CountingComm(comm, algorithm="native")
