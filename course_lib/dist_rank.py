"""What runs inside each rank that :func:`course_lib.dist.launch` starts: the worker's context,
how a rank finds the worker (by import path, or by the source a notebook shipped), and the set-up,
report and teardown around one call of it.

The launching side (starting the ranks, collecting their reports, naming the one that failed) is
:mod:`course_lib.dist`; this module is the other end of the pipe.
"""
from __future__ import annotations

import builtins
import ctypes
import datetime
import dis
import importlib
import inspect
import os
import pickle
import signal
import sys
import textwrap
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import dist_reap

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
    """How a rank finds ``worker``: by import path, or by source for notebook-defined functions.

    Refused here, before any process starts, with what to do instead: a lambda (its source is the
    whole line it is on, the call to ``launch`` included, which every rank would run), a closure
    (the ranks would not have its variables), a function defined inside another (the ranks cannot
    import it), and a notebook function that uses the notebook's names (its source alone is shipped)."""
    if not callable(worker) or not hasattr(worker, "__qualname__"):
        raise ValueError(f"worker must be a function, got {worker!r}")
    name, code = worker.__qualname__, getattr(worker, "__code__", None)
    if getattr(worker, "__name__", None) == "<lambda>":
        where = f" (at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        raise ValueError(f"worker <lambda>{where} is a lambda: the ranks can neither import it nor run its source, "
                         f"which is the whole line it is written on (the call to launch included); define it with "
                         f"def at module level, in a module the ranks can import or in a notebook cell")
    module = getattr(worker, "__module__", None)
    if module and module != "__main__" and _found(module, name) in (worker, None):
        return ("ref", module, name)   # importable (a decorated function included: found by its name)
    if getattr(worker, "__closure__", None):
        names = ", ".join(code.co_freevars)
        raise ValueError(f"worker {name!r} uses {names} from the function it is defined in, which the ranks "
                         f"do not have: define the worker at module level (in a module the ranks can import, "
                         f"or a notebook cell) and pass {names} as keyword arguments: launch(worker, n, "
                         f"{code.co_freevars[0]}=...)")
    if "<locals>" in name or module not in (None, "__main__"):
        where = ("is defined inside a function" if "<locals>" in name
                 else f"is not what {module}.{name} names, where the ranks would look for it")
        raise ValueError(f"worker {name!r} {where}, so the ranks cannot import it: define it at module level "
                         f"(in a module the ranks can import, or a notebook cell)")
    try:
        source = textwrap.dedent(inspect.getsource(worker))
    except (OSError, TypeError) as exc:
        raise ValueError(f"worker {name!r} is neither importable nor has source "
                         f"that can be shipped to the ranks") from exc
    outside = sorted(_globals_used(code) - set(dir(builtins)) - {worker.__name__, "__name__"}) if code else []
    if outside:
        raise ValueError(f"worker {name!r} uses {', '.join(outside)} from the notebook or script it is defined in: "
                         f"its source alone is shipped to the ranks, which do not have them; import them inside "
                         f"the function (or pass values as keyword arguments), or define the worker in a module")
    return ("src", source, worker.__name__)


def _found(module: str, qualname: str) -> Any:
    """What ``module.qualname`` is in this process (``None`` if the module is not loaded here)."""
    obj: Any = sys.modules.get(module)
    for part in qualname.split(".") if obj is not None else ():
        obj = getattr(obj, part, _MISSING)
    return obj


_MISSING = object()


def _globals_used(code) -> set[str]:
    """The global names a function's code (its nested functions' and comprehensions' included) reads
    and does not itself assign with ``global``."""
    ops = [i for c in _codes(code) for i in dis.get_instructions(c)]
    stored = {i.argval for i in ops if i.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    return {i.argval for i in ops if i.opname == "LOAD_GLOBAL"} - stored


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


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
    asks for a new session): the launcher kills the whole group, so none outlives the run (those in
    new sessions are found as this rank's descendants, :mod:`course_lib.dist_reap`)."""
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
    dist_reap.become_subreaper()   # orphans of what the worker starts stay in this rank's tree
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
    finally:
        dist_reap.stop_own_tree()   # what the worker started (daemons and new sessions included) ends here
