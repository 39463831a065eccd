"""Launch real multi-process ``torch.distributed`` runs from a notebook, a test or ``torchrun``.

``launch(worker, world_size=4, steps=3)`` starts ``world_size`` fresh Python processes (spawn),
gives each a process group (gloo on CPU, NCCL when there is one GPU per rank), calls
``worker(ctx, steps=3)`` in every rank and returns the ranks' return values in rank order.

Guarantees, each covered by a test: the launcher itself holds the rendezvous store, on a port the
operating system picked (so concurrent launches never race for a port); the process group
and the whole run have timeouts, the collectives' shorter than the run's; if any rank raises,
``launch`` raises ``RankError`` carrying that rank's traceback; a rank that died (its exit code or
signal) is named before the peers that only lost it; a rank that hangs is named, with what it was
doing (each rank stamps its progress, :mod:`course_lib.dist_progress`), instead of the peers that
timed out waiting for it; and no process outlives the call, whatever happens: a rank and all it
started are killed when the run ends, a child in a session of its own and a double-forked daemon
included (:mod:`course_lib.dist_reap`: each rank is a child subreaper, and the launcher kills each
rank's whole tree); a SIGTERM to the launching process stops the run as Ctrl-C does, then ends the
process as it would have ended. If the launching process is killed outright (SIGKILL), the ranks
die with it, but what they started in sessions of their own can outlive them.

A worker is any importable module-level function, or a function defined in a notebook: its
source is shipped to the ranks and executed there, so it must import what it uses inside itself.
A lambda, a closure, a function defined inside another, and a notebook function that uses the
notebook's names are refused before any process starts: the ranks could not run them as written.
The same worker runs unchanged under ``torchrun -m course_lib.dist module:function``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import socket
import sys
import time
from typing import Any
from collections.abc import Callable

from . import dist_progress
from .dist_errors import (_GRACE_S, _MAIN_HINT, _UNGUARDED_MAIN_EXIT, _WAITED, RankError, RankHung, _blame, _hang,
                          _waited)
from .dist_rank import RankContext, _make_context, _rank_main, _resolve, _worker_spec
from .dist_reap import POLL_S, SigtermStopsTheRun, Tracker, kill_groups

__all__ = ["RankContext", "RankError", "RankHung", "launch", "free_port", "default_backend", "run_from_env"]


def free_port() -> int:
    """A TCP port on localhost that nothing is listening on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rendezvous_store(world_size: int, timeout: float):
    """The TCPStore the ranks meet at, served by the launching process on a port the OS picks.

    Picking a free port and handing it to rank 0 to bind leaves a window in which another launch
    (another notebook, a parallel test) can take it; a store bound to port 0 has no such window."""
    import torch.distributed as tdist
    return tdist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))


def default_backend(world_size: int) -> str:
    """NCCL when every rank can have its own CUDA device, gloo otherwise."""
    import torch
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _stop(procs: list, tracker: Tracker) -> None:
    """Kill every rank still running with all it started, and what the tracker recorded of the
    ranks that ended (:mod:`course_lib.dist_reap`); reap the ranks (a process that never started,
    because starting an earlier one failed, is skipped); then kill what is left of each rank's
    process group: the processes the ranks started, which outlive a rank that exits."""
    tracker.stop()
    procs = [p for p in procs if p.pid is not None]
    deadline = time.monotonic() + 3.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(2.0)
    kill_groups([p.pid for p in procs])


def _mp_context():
    """Fresh processes forked from multiprocessing's fork server, which imports torch once.

    Forking from a clean server (not from the caller, which may hold threads and OpenMP state)
    is as safe as spawn and makes every launch after the first start in a fraction of a second.
    The server is one helper process that lives as long as the caller and exits with it.
    It also preloads ``torch._dynamo``, which every ``torch.optim`` step imports: ~1.5 CPU-s per
    rank per launch otherwise (it starts no threads, so forking after it stays safe).
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["course_lib._forkserver_guard", "torch", "torch.distributed", "torch._dynamo",
                                "course_lib.dist"])
    return ctx


def launch(worker: Callable, world_size: int = 2, *, backend: str | None = None,
           timeout: float = 120.0, threads_per_rank: int | None = None,
           collective_timeout: float | None = None, **kwargs: Any) -> list:
    """Run ``worker(ctx, **kwargs)`` on ``world_size`` real processes; return results by rank.

    ``timeout`` bounds the whole run (seconds); ``collective_timeout`` each collective (default
    three quarters of ``timeout``): shorter, so that a rank left waiting for a hung peer gives up
    and reports while the run still has time to say which rank hung. Raises ``RankError`` when a
    rank raises or dies (a rank that died is named before the peers that lost it), ``RankHung``
    (a ``TimeoutError``) naming the rank that stopped making progress and what it was doing
    (from each rank's progress stamps, :mod:`course_lib.dist_progress`), and ``ValueError`` for
    bad arguments or a worker the ranks could not run (a lambda, a closure, a nested function, a
    notebook function using the notebook's names). Every rank, and every process a rank started,
    is stopped before this returns, also when this process gets SIGTERM meanwhile (in the main
    thread, where Python runs signal handlers): the run is stopped first, then the signal is
    delivered as if the launch had not been there.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        # This process is a rank still importing the launching script, which calls launch() at
        # its top level: multiprocessing would raise an obscure bootstrap error; say it plainly.
        print(f"course_lib.dist.launch: {_MAIN_HINT}", file=sys.stderr, flush=True)
        os._exit(_UNGUARDED_MAIN_EXIT)
    from ._validate import positive, positive_int
    world_size = positive_int("world_size", world_size)
    timeout = positive("timeout", timeout)
    collective_timeout = 0.75 * timeout if collective_timeout is None else positive(
        "collective_timeout", collective_timeout)
    if collective_timeout >= timeout:
        raise ValueError(f"collective_timeout ({collective_timeout:g} s) must be shorter than timeout "
                         f"({timeout:g} s): a rank waiting for a hung peer must give up while the run "
                         f"can still report which rank hung")
    backend = backend or default_backend(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    spec = _worker_spec(worker)
    ctx = _mp_context()
    store = _rendezvous_store(world_size, timeout)   # held here, so its port cannot be taken meanwhile
    port = store.port
    pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]   # one (reader, writer) per rank
    stamps = dist_progress.make(ctx, world_size)
    procs = [ctx.Process(target=_rank_main, name=f"course-rank-{r}",
                         args=(r, world_size, port, backend, collective_timeout, threads, spec, kwargs, w,
                               stamps, timeout))
             for r, (_, w) in enumerate(pipes)]
    tracker = Tracker()
    # SIGTERM stops the run as Ctrl-C does, then ends the caller as it would have ended
    with SigtermStopsTheRun(lambda: _stop(procs, tracker)) as run:
        try:
            for p, (_, w) in zip(procs, pipes):
                p.start()
                tracker.add_rank(p.pid)
                w.close()   # the rank holds the only writer now: its death reads as end-of-file here
            deadline = time.monotonic() + timeout
            reports = _collect(procs, [r for r, _ in pipes], deadline, timeout,
                               lambda pending, reports: _hang(pending, reports, dist_progress.read(stamps, world_size),
                                                              timeout=timeout, collective_timeout=collective_timeout),
                               tick=tracker.poll)
            for p in procs:
                p.join(timeout=max(1.0, deadline - time.monotonic()))
            return [pickle.loads(reports[r][1]) for r in range(world_size)]
        finally:
            run.stop()
            for reader, writer in pipes:
                reader.close()
                writer.close()
            del store


def _collect(procs: list, readers: list, deadline: float, timeout: float,
             hang: Callable[[list[int], dict], Exception], tick: Callable[[], None] = lambda: None,
             ) -> dict[int, tuple]:
    """Every rank's report, or the error that says which rank to blame.

    A rank is done when its report arrives or its pipe closes without one (it died). After the
    first failure the others get ``_GRACE_S`` more to report or die: a peer's "connection closed"
    error often arrives before the dead rank's exit is seen, and must not be blamed. When no rank
    died or raised an error of its own (the errors only say that they waited for a peer),
    ``hang(still_running, reports)`` makes the error that names the rank that hung. ``tick()`` is
    called at least every ``dist_reap.POLL_S`` while it waits."""
    reports: dict[int, tuple] = {}
    died: list[int] = []
    pending = dict(enumerate(readers))
    failed, until = False, deadline
    while pending and time.monotonic() < until:
        ready = mp_connection.wait(list(pending.values()), timeout=min(POLL_S, until - time.monotonic()))
        tick()
        for r in [r for r, conn in pending.items() if conn in ready]:
            try:
                reports[r] = pending.pop(r).recv()
            except EOFError:
                died.append(r)
            if not failed and (r in died or reports[r][0] == "error"):
                failed, until = True, min(deadline, time.monotonic() + _GRACE_S)
    if not failed and not pending:
        return reports
    for r in died:   # the fork server relays exit statuses: give it a moment
        procs[r].join(max(0.5, until - time.monotonic()))
    errors = [reports[r][1] for r in reports if reports[r][0] == "error"]
    if not died and all(_waited(e) for e in errors) and (pending or any(m in e for e in errors for m in _WAITED)):
        raise hang(sorted(pending), reports)
    raise _blame(reports, died, procs)


def run_from_env(worker: Callable, **kwargs: Any) -> Any:
    """Run ``worker`` in a process started by ``torchrun``; rank 0 returns the list of results."""
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=600))
    try:
        res = worker(_make_context(rank, world, local, backend), **kwargs)
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(res, gathered, dst=0)
        return gathered
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc-per-node N -m course_lib.dist pkg.module:function --kwargs '{...}'``."""
    ap = argparse.ArgumentParser(prog="python -m course_lib.dist", description=main.__doc__)
    ap.add_argument("worker", help="module:function, e.g. course_lib.dist_check:allreduce_worker")
    ap.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for the worker")
    args = ap.parse_args(argv)
    module, _, name = args.worker.partition(":")
    fn = _resolve(("ref", module, name))
    results = run_from_env(fn, **json.loads(args.kwargs))
    if results is not None:
        for r, res in enumerate(results):
            print(f"rank {r}: {res!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
