"""Answers and function calls between a submission's sandbox and the trusted grader.

Sandbox side (graded runs only, when ``COURSE_GRADE_MODE=graded``): :class:`Recorder` appends each
``check(qid, answer)`` to the answers file as :mod:`~course_lib.grading.wire` data and keeps the
functions among the answers in memory. After the last cell the executor runs :func:`serve_from_env`
in the same kernel: it connects to the grader's socket and answers requests until told to stop.

Trusted side: :class:`Channel` sends those requests; a function answer arrives as a
:class:`RemoteFunction` which the bank's grader calls like the student's function, on inputs it
chose after the notebook finished. Graders that run a function in real worker processes use
:func:`launch_with` and :func:`source_of`: for a remote function the launch runs in a *fresh*
sandbox started by the grader (:func:`run_request` there), never in the student's kernel, which
could replace ``course_lib.dist.launch`` and forge the evidence.
"""
from __future__ import annotations

import builtins
import inspect
import os
import socket
import textwrap
import time
from collections.abc import Callable
from typing import Any

from course_lib.grading import wire
from course_lib.grading.i18n import msg

MODE_ENV, ANSWERS_ENV, SOCKET_ENV = "COURSE_GRADE_MODE", "COURSE_GRADE_ANSWERS", "COURSE_GRADE_SOCKET"


# --------------------------------------------------------------------------- sandbox side
class Recorder:
    """Records answers of a graded run (one per process: the harness cell must reach the
    functions that earlier cells passed to ``check``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.functions: dict[int, Callable] = {}

    def ref(self, fn: Callable) -> dict:
        key = len(self.functions) + 1
        self.functions[key] = fn
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            source = None
        return {"$fn": key, "name": str(getattr(fn, "__name__", "function")), "source": source}

    def write(self, row: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(wire.dumps(row) + "\n")

    def answer(self, chapter: str, qid: str, answer: Any) -> None:
        try:
            data = wire.encode(answer, self.ref)
        except (wire.WireError, RecursionError, ValueError, TypeError) as e:
            data = {"$opaque": f"{type(answer).__name__} ({type(e).__name__})"}
        self.write({"event": "answer", "chapter": chapter, "qid": qid, "answer": data})


_recorder: Recorder | None = None


def recorder() -> Recorder | None:
    """This process's recorder in a graded run, else None (practice: grade in the notebook)."""
    global _recorder
    if os.environ.get(MODE_ENV) != "graded" or not os.environ.get(ANSWERS_ENV):
        return None
    if _recorder is None:
        _recorder = Recorder(os.environ[ANSWERS_ENV])
    return _recorder


def _error(e: BaseException) -> dict:
    import traceback

    out = {"type": type(e).__name__, "message": " ".join(str(e).split())[:500],
           "traceback": "".join(traceback.format_exception(e))[-4000:]}
    for k in ("rank", "remote_traceback"):
        if hasattr(e, k):
            out[k] = getattr(e, k)
    return out


def run_request(req: dict) -> Any:
    """Run one launch request (``worker`` "course_lib.module:function" outside the banks,
    ``world_size``, ``timeout``, wire ``kwargs``) with ``course_lib.dist.launch``; in a graded run
    this happens in a fresh sandbox (:mod:`course_lib.grading._launch`), never in the student's kernel."""
    import importlib

    from course_lib.dist import launch
    mod, _, name = str(req["worker"]).partition(":")
    if not mod.startswith("course_lib.") or mod.startswith("course_lib.checks"):
        raise ValueError("workers come from course_lib, outside the banks")
    worker = getattr(importlib.import_module(mod), name)
    return launch(worker, int(req["world_size"]), timeout=float(req["timeout"]),
                  **wire.decode(req.get("kwargs", {"$dict": []})))


def _handle(req: dict, rec: Recorder) -> dict:
    op = req.get("op")
    try:
        if op == "call":
            fn = rec.functions[int(req["ref"])]
            out = fn(*wire.decode(req.get("args", [])), **wire.decode(req.get("kwargs", {"$dict": []})))
        else:
            raise ValueError(f"unknown op {op!r}")
        return {"ok": wire.encode(out, rec.ref)}
    except BaseException as e:  # noqa: BLE001 - report everything to the grader
        return {"error": _error(e)}


def serve_from_env() -> None:
    """Answer the grader's requests (run by the executor after the notebook's last cell)."""
    rec, path = recorder(), os.environ.get(SOCKET_ENV)
    if rec is None or not path:
        return
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    f = s.makefile("rwb")
    while True:
        line = f.readline(wire.MAX_TEXT + 1)
        if not line:
            return
        req = wire.loads(line)
        if req.get("op") == "bye":
            return
        f.write((wire.dumps(_handle(req, rec)) + "\n").encode())
        f.flush()


# --------------------------------------------------------------------------- trusted side
class CallTimeout(TimeoutError):
    """The student's function did not return within the grader's budget."""


class StudentError(Exception):
    """An exception raised by student code whose type is not a builtin one."""


def _raise(err: dict) -> None:
    name, msg = str(err.get("type", "Error"))[:80], str(err.get("message", ""))
    if name == "RankError":
        from course_lib.dist import RankError

        raise RankError(int(err.get("rank", -1)), str(err.get("remote_traceback", msg)))
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)) or name == "StopIteration":
        cls = type(name, (StudentError,), {})
    raise cls(msg)


class Channel:
    """The grader's end of the socket to one sandbox. Every request has a deadline that covers the
    whole exchange (a reply trickled a byte at a time cannot outlast it); ``launcher`` runs launch
    requests in a fresh sandbox (:func:`course_lib.grading.sandbox.run_worker`)."""

    def __init__(self, conn: socket.socket | None, deadline: float, call_limit: float,
                 launcher: Callable[..., Any] | None = None) -> None:
        self.conn, self.deadline, self.call_limit, self.launcher = conn, deadline, call_limit, launcher
        self.broken = None if conn is not None else "the notebook did not reach its end"
        self._buf = b""

    def _readline(self, end: float) -> bytes:
        """One reply line, read before ``end`` (monotonic), at most MAX_TEXT bytes."""
        while b"\n" not in self._buf:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if len(self._buf) > wire.MAX_TEXT:
                raise wire.WireError("reply over the size limit")
            self.conn.settimeout(left)
            chunk = self.conn.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the kernel closed the connection")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def request(self, req: dict, limit: float | None = None) -> Any:
        if self.broken:
            raise CallTimeout(f"cannot call your function: {self.broken}")
        budget = min(limit or self.call_limit, self.deadline - time.monotonic())
        if budget <= 0:
            self.broken = "the notebook's time limit is used up"
            raise CallTimeout(self.broken)
        end = time.monotonic() + budget
        try:
            self.conn.settimeout(budget)
            self.conn.sendall((wire.dumps(req) + "\n").encode())
            reply = wire.loads(self._readline(end))
        except (TimeoutError, OSError, wire.WireError) as e:
            self.broken = f"it did not answer within {budget:.0f} s" if isinstance(e, TimeoutError) \
                else f"the connection failed ({type(e).__name__})"
            raise CallTimeout(self.broken) from None
        return self._reply(reply)

    def _reply(self, reply: Any) -> Any:
        if not isinstance(reply, dict):
            raise wire.WireError("malformed reply")
        if "error" in reply and isinstance(reply["error"], dict):
            _raise(reply["error"])
        return wire.decode(reply.get("ok"), self.function)

    def launch(self, worker: str, world_size: int, timeout: float, kwargs: dict) -> Any:
        """Launch ``worker`` on data ``kwargs`` in a fresh sandbox (never in the student's kernel)."""
        if self.launcher is None:
            raise CallTimeout("this grading run cannot launch workers")
        budget = min(timeout, self.deadline - time.monotonic())
        if budget <= 0:
            raise CallTimeout("the notebook's time limit is used up")
        return self._reply(self.launcher(worker, world_size, budget, wire.encode(dict(kwargs))))

    def function(self, ref: dict) -> RemoteFunction:
        return RemoteFunction(self, ref)

    def close(self) -> None:
        if self.conn is not None and not self.broken:
            try:
                self.conn.settimeout(1.0)
                self.conn.sendall(b'{"op":"bye"}\n')
            except OSError:
                pass
        if self.conn is not None:
            self.conn.close()


class RemoteFunction:
    """A student's function that lives in the sandbox; calling it sends the arguments there."""

    def __init__(self, channel: Channel, ref: dict) -> None:
        self._channel, self._ref = channel, ref.get("$fn")
        self.__name__ = str(ref.get("name") or "function")[:100]
        src = ref.get("source")
        self.source = src if isinstance(src, str) else None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.request({"op": "call", "ref": self._ref, "args": wire.encode(list(args)),
                                      "kwargs": wire.encode(dict(kwargs))})

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


def source_of(fn: Any) -> str:
    """The source of a student's function, in the notebook (practice) or from the sandbox."""
    if isinstance(fn, RemoteFunction):
        if fn.source is None:
            raise OSError("source not available")
        return fn.source
    return textwrap.dedent(inspect.getsource(fn))


class NotAFunction(ValueError):
    """A function answer the grader cannot run; its message is what the student is told."""

    @property
    def message(self) -> str:
        """What the student is told (a translatable :class:`~course_lib.grading.i18n.Message`)."""
        return self.args[0] if self.args else ""


def function_source(fn: Any, usage: str) -> str:
    """The source of a function answer, after the checks every function question makes first: it is
    a function (``usage`` shows the right call), its source can be read, and it is not the stub.
    Raises :class:`NotAFunction` (score 0 with that message) or ``NotImplementedError``."""
    if not callable(fn):
        raise NotAFunction(msg("Pass the function itself ({usage}), not its result.", usage=usage))
    try:
        source = source_of(fn)
    except (OSError, TypeError):
        raise NotAFunction(msg("Cannot read the function's source: define it with `def` in a notebook cell.")) from None
    if "NotImplementedError" in source and "YOUR CODE HERE" in source:
        raise NotImplementedError("the function body is still the stub")
    return source


def launch_with(fn: Any, worker: Callable, world_size: int, *, timeout: float, **kwargs: Any) -> list:
    """``course_lib.dist.launch(worker, world_size, timeout=..., **kwargs)``, run where ``fn``
    lives: in this process for a real function, in the sandbox for a remote one (``worker`` must be
    a module-level function of course_lib, and ``kwargs`` data, e.g. ``source=source_of(fn)``)."""
    if isinstance(fn, RemoteFunction):
        return fn._channel.launch(f"{worker.__module__}:{worker.__qualname__}", world_size, timeout, kwargs)
    from course_lib.dist import launch

    return launch(worker, world_size, timeout=timeout, **kwargs)
