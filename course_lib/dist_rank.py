"""What runs inside each rank that :func:`course_lib.dist.launch` starts: the worker's context,
how a rank finds the worker (by import path, or by the source a notebook shipped), and the set-up,
report and teardown around one call of it.

The launching side (starting the ranks, collecting their reports, naming the one that failed) is
:mod:`course_lib.dist`; this module is the other end of the pipe.
"""
from __future__ import annotations

import ctypes
import datetime
import importlib
import inspect
import os
import pickle
import signal
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RankContext"]


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
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the launcher's own cleanup still stops the ranks
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


def _own_process_group() -> None:
    """Lead a process group of its own, which every process this rank starts joins (unless it
    asks for a new session): the launcher kills the whole group, so none outlives the run."""
    try:
        os.setpgid(0, 0)
    except (AttributeError, OSError):   # not POSIX: only the rank itself is stopped
        pass


def _rank_main(rank: int, world_size: int, port: int, backend: str, timeout_s: float,
               threads: int, spec: tuple[str, str, str], kwargs: dict, conn: Any,
               progress: Any = None, start_timeout_s: float | None = None) -> None:
    """Entry point of one rank: set up, run the worker, send one report down ``conn``, tear down.

    ``timeout_s`` is the collective timeout, ``start_timeout_s`` how long to wait for the peers
    to reach the rendezvous (default: the same); ``progress`` the launcher's shared progress stamps
    (:mod:`course_lib.dist_progress`), which a thread of this rank keeps up to date.
    The report goes out before the teardown, which the peers may notice, so that a rank's own
    error reaches the launcher ahead of the errors its exit causes in the other ranks."""
    _die_with_parent()
    _own_process_group()
    work_ended = lambda: None  # noqa: E731
    if progress is not None:
        from . import dist_progress
        work_ended = dist_progress.start(progress, rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), PYTHONWARNINGS="ignore")
    import warnings
    warnings.simplefilter("ignore")
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(threads)
        timeout = datetime.timedelta(seconds=timeout_s)
        start = datetime.timedelta(seconds=start_timeout_s or timeout_s)
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=start)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        if backend == "gloo":
            # gloo's full-mesh handshake can still be running on a slow peer when this rank's
            # init returns: a worker that returns at once and tears down would close the socket
            # under it ("connectFullMesh ... closed by peer"). No rank leaves the barrier before
            # every rank is connected. (NCCL connects lazily, at the first collective.)
            dist.barrier()
        try:
            result = _resolve(spec)(_make_context(rank, world_size, rank, backend), **kwargs)
            work_ended()   # the progress stamp keeps where the worker was, not this rank's reporting
            report = ("ok", pickle.dumps(result))
        except BaseException:  # everything, including SystemExit from student code
            work_ended()
            report = ("error", traceback.format_exc())
        conn.send(report)
        if dist.is_initialized():   # the worker may have torn it down itself
            dist.destroy_process_group()
    except BaseException:  # the set-up failed (the launcher reads only a rank's first report)
        conn.send(("error", traceback.format_exc()))
