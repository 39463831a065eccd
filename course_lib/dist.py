"""Launch real multi-process ``torch.distributed`` runs from a notebook, a test or ``torchrun``.

``launch(worker, world_size=4, steps=3)`` starts ``world_size`` fresh Python processes (spawn),
gives each a process group (gloo on CPU, NCCL when there is one GPU per rank), calls
``worker(ctx, steps=3)`` in every rank and returns the ranks' return values in rank order.

Guarantees, each covered by a test: a free port is picked for the rendezvous; the process group
and the whole run have timeouts; if any rank raises, ``launch`` raises ``RankError`` carrying
that rank's traceback; if a rank hangs or dies, ``launch`` raises instead of waiting forever; and
no process outlives the call, whatever happens (children also die if the launching process dies).

A worker is any importable module-level function, or a function defined in a notebook: its
source is shipped to the ranks and executed there, so it must import what it uses inside itself.
The same worker runs unchanged under ``torchrun -m course_lib.dist module:function``.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib
import inspect
import json
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import signal
import socket
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

__all__ = ["RankContext", "RankError", "launch", "free_port", "default_backend", "run_from_env"]


class RankError(RuntimeError):
    """A rank raised or died; ``rank`` and ``remote_traceback`` say which and where."""

    def __init__(self, rank: int, remote_traceback: str) -> None:
        self.rank = rank
        self.remote_traceback = remote_traceback
        super().__init__(f"rank {rank} failed:\n{remote_traceback}")


@dataclass
class RankContext:
    """What a worker knows about its place in the run; the process group is passed explicitly."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: Any   # torch.device
    group: Any    # torch.distributed.ProcessGroup (the world group of this run)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def free_port() -> int:
    """A TCP port on localhost that nothing is listening on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(world_size: int) -> str:
    """NCCL when every rank can have its own CUDA device, gloo otherwise."""
    import torch
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def _worker_spec(worker: Callable) -> tuple[str, str, str]:
    """How a rank finds ``worker``: by import path, or by source for notebook-defined functions."""
    if not callable(worker) or not hasattr(worker, "__qualname__"):
        raise ValueError(f"worker must be a function, got {worker!r}")
    module = getattr(worker, "__module__", None)
    if module and module != "__main__" and "<locals>" not in worker.__qualname__:
        return ("ref", module, worker.__qualname__)
    try:
        source = textwrap.dedent(inspect.getsource(worker))
    except (OSError, TypeError) as exc:
        raise ValueError(f"worker {worker.__qualname__!r} is neither importable nor has source "
                         f"that can be shipped to the ranks") from exc
    return ("src", source, worker.__name__)


def _resolve(spec: tuple[str, str, str]) -> Callable:
    kind, a, b = spec
    if kind == "ref":
        obj: Any = importlib.import_module(a)
        for part in b.split("."):
            obj = getattr(obj, part)
        return obj
    namespace: dict[str, Any] = {"__name__": "__course_worker__"}
    exec(compile(a, f"<worker {b}>", "exec"), namespace)
    return namespace[b]


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no rank is ever orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _make_context(rank: int, world_size: int, local_rank: int, backend: str):
    import torch
    import torch.distributed as dist
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return RankContext(rank, world_size, local_rank, backend, device, dist.group.WORLD)


def _rank_main(rank: int, world_size: int, port: int, backend: str, timeout_s: float,
               threads: int, spec: tuple[str, str, str], kwargs: dict, results: Any,
               parent_pid: int) -> None:  # noqa: ARG001 (kept for logs)
    """Entry point of one spawned rank: set up, run the worker, report, tear down."""
    _die_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), PYTHONWARNINGS="ignore")
    import warnings
    warnings.simplefilter("ignore")
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(threads)
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        try:
            out = _resolve(spec)(_make_context(rank, world_size, rank, backend), **kwargs)
            results.put(("ok", rank, pickle.dumps(out)))
        finally:
            dist.destroy_process_group()
    except BaseException:  # report everything, including SystemExit from student code
        results.put(("error", rank, traceback.format_exc()))


_MAIN_HINT = ("; if you called launch() at the top level of a script, move the call under "
              "`if __name__ == '__main__':` (every rank imports the script's main module)")


def _stop(procs: list) -> None:
    """Terminate, then kill, every process still alive, and reap them all (a process that
    never started, because starting an earlier one failed, is skipped)."""
    procs = [p for p in procs if p.pid is not None]
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(2.0)


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
           timeout: float = 120.0, threads_per_rank: int | None = None, **kwargs: Any) -> list:
    """Run ``worker(ctx, **kwargs)`` on ``world_size`` real processes; return results by rank.

    ``timeout`` bounds the whole run and each collective (seconds). Raises ``RankError`` when a
    rank raises or dies, ``TimeoutError`` naming the ranks that had not finished, and
    ``ValueError`` for bad arguments. All ranks are stopped before this function returns.
    """
    from ._validate import positive, positive_int
    world_size = positive_int("world_size", world_size)
    timeout = positive("timeout", timeout)
    backend = backend or default_backend(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    spec = _worker_spec(worker)
    ctx = _mp_context()
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, name=f"course-rank-{r}",
                         args=(r, world_size, port, backend, timeout, threads, spec, kwargs,
                               results, os.getpid()))
             for r in range(world_size)]
    out: dict[int, Any] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(out) < world_size:
            try:
                status, rank, payload = results.get(timeout=0.2)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world_size)) - set(out))
                    raise TimeoutError(f"ranks {missing} did not finish within {timeout:g} s "
                                       f"(a hang, a deadlock or a missing collective?)") from None
                for r, p in enumerate(procs):
                    if r not in out and p.exitcode not in (None, 0):
                        # give a dying rank's report a moment to arrive before blaming a signal
                        try:
                            status, rank, payload = results.get(timeout=1.0)
                        except queue_mod.Empty:
                            raise RankError(r, f"process exited with code {p.exitcode} "
                                               f"without reporting a result"
                                               f"{_MAIN_HINT if p.exitcode == 1 else ''}") from None
                        break
                else:
                    continue
            if status == "error":
                raise RankError(rank, payload)
            out[rank] = pickle.loads(payload)
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
        return [out[r] for r in range(world_size)]
    finally:
        _stop(procs)
        results.close()
        results.join_thread()


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
    ap.add_argument("worker", help="module:function, e.g. course_lib.dist_demos:allreduce_worker")
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
