"""Progress stamps: what each rank of a :func:`course_lib.dist.launch` run is doing, and since when.

A rank that hangs says nothing; its peers only say that *they* timed out waiting. To name the rank
that stopped, every rank runs a small daemon thread that, every ``PERIOD_S``, looks at where the
rank's main thread is (``sys._current_frames``: the innermost Python frame, or the outermost
``torch.distributed`` frame when it is inside a collective) and writes a stamp into a slot of
shared memory the launcher created: the heartbeat time, what it is doing, since when it has been
doing exactly that, and whether that is waiting in a collective. The launcher reads the slots
when a run fails or runs out of time (:func:`read`), even after a rank has died.

Cost: one frame lookup and a few hundred bytes copied per rank per period, nothing per
collective. A worker blocked in native code that holds the GIL stops the thread too: its
heartbeat then goes stale, which the launcher reports as such.

Each slot is a seqlock (an even counter means a complete stamp), so a stamp is never read torn and
a rank killed mid-write cannot block the reader.

A rank whose worker raised goes on running for a while (it formats its traceback, sends its report,
tears its process group down), and the thread goes on stamping that; but the launcher, reading the
slot after the report, must say where the *worker* was. So the stamp also keeps ``work``: where the
rank was at the last stamp before its worker ended (``start`` returns the function that says so).
"""
from __future__ import annotations

import ctypes
import json
import linecache
import os
import struct
import sys
import threading
import time
from collections.abc import Callable

PERIOD_S = 0.2
SLOT = 2048          # bytes per rank: an 8-byte counter, then the stamp as JSON, NUL-padded
_TEXTS = ("doing", "work")                             # a stamp's fields that are free text
_SEQ = struct.Struct("<Q")
_WRAPPERS = ("wrapper", "inner", "decorator", "_fn")   # names of decorators' inner functions


def make(ctx, world_size: int):
    """Shared memory for ``world_size`` stamps, from the multiprocessing context the ranks use."""
    return ctx.RawArray(ctypes.c_char, SLOT * world_size)


def _short(path: str) -> str:
    """A file named as a reader finds it: from ``site-packages/`` on, else its last two parts."""
    if "site-packages" + os.sep in path:
        return path.split("site-packages" + os.sep, 1)[1]
    return os.sep.join(path.split(os.sep)[-2:])


def _where(frame) -> tuple[tuple, dict]:
    """Where the main thread is: a key that changes whenever it moves, and the stamp's fields."""
    inside, caller = [], None   # the torch.distributed frames, innermost first; who called them
    f = frame
    while f is not None:
        if f"torch{os.sep}distributed{os.sep}" in f.f_code.co_filename:
            inside.append(f)
            caller = f.f_back
        f = f.f_back
    if inside:
        # the outermost one the caller called, unless it is a decorator's wrapper around it
        named = [f for f in reversed(inside) if f.f_code.co_name not in _WRAPPERS]
        dist_frame = named[0] if named else inside[-1]
        at = (f" (called from {caller.f_code.co_name} at {_short(caller.f_code.co_filename)}:{caller.f_lineno})"
              if caller is not None else "")
        return (id(dist_frame), dist_frame.f_code), {
            "doing": f"in torch.distributed.{dist_frame.f_code.co_name}{at}", "collective": True}
    code, line = frame.f_code, frame.f_lineno
    # f_lineno is None for a frame caught between instructions (Python 3.11, read from another thread)
    text = linecache.getline(code.co_filename, line).strip() if line is not None else ""
    # an asynchronous collective is waited on from the caller's own line (work.wait())
    waiting = text.endswith(".wait()") or ".wait(" in text
    doing = f"in {code.co_name} at {_short(code.co_filename)}:{line}" + (f": {text}" if text else "")
    return (id(frame), code, line), {"doing": doing, "collective": waiting}


def _encode(stamp: dict) -> bytes:
    """The stamp as JSON that fits its slot: free text cut shorter until it does (cutting the JSON
    itself would leave the launcher a stamp it cannot parse)."""
    for limit in (600, 250, 80, 0):
        data = json.dumps({k: v[:limit] if k in _TEXTS and isinstance(v, str) else v
                           for k, v in stamp.items()}).encode()
        if len(data) < SLOT - _SEQ.size:
            return data
    raise ValueError("a progress stamp without its texts is over its slot")


def _write(buf, rank: int, stamp: dict) -> None:
    data = _encode(stamp)
    base = rank * SLOT
    seq = _SEQ.unpack(buf[base:base + _SEQ.size])[0]
    buf[base:base + _SEQ.size] = _SEQ.pack(seq + 1)          # odd: being written
    buf[base + _SEQ.size:base + SLOT] = data.ljust(SLOT - _SEQ.size, b"\0")
    buf[base:base + _SEQ.size] = _SEQ.pack(seq + 2)          # even: complete


def start(buf, rank: int) -> Callable[[], None]:
    """In a rank: stamp this process's main thread every ``PERIOD_S`` from a daemon thread.

    Returns ``work_ended``, for the rank to call the moment its worker has returned or raised:
    from then on every stamp keeps, as ``work``, what the last one before said. A stamp taken while
    the main thread is in the caller's own frame (the rank's entry point, between the worker and
    ``work_ended``) does not change ``work``; with the lock, no stamp is half taken meanwhile."""
    main = threading.main_thread().ident
    harness = sys._getframe(1).f_code
    lock = threading.Lock()
    state: dict = {"work": None, "ended": False}

    def stamp_forever() -> None:
        key, since = None, time.time()
        while True:
            with lock:
                frame = sys._current_frames().get(main)
                if frame is None:
                    return
                now = time.time()
                new_key, fields = _where(frame)
                in_harness = frame.f_code is harness
                del frame
                if new_key != key:
                    key, since = new_key, now
                if not state["ended"] and not in_harness:
                    state["work"] = fields["doing"]
                _write(buf, rank, {"t": now, "since": since, "pid": os.getpid(), **fields, "work": state["work"]})
            time.sleep(PERIOD_S)

    def work_ended() -> None:
        with lock:
            state["ended"] = True

    threading.Thread(target=stamp_forever, name="course-progress", daemon=True).start()
    return work_ended


def read(buf, world_size: int) -> dict[int, dict]:
    """The last complete stamp of every rank that wrote one (a rank that never started has none)."""
    out: dict[int, dict] = {}
    for r in range(world_size):
        base = r * SLOT
        for _ in range(100):
            seq = _SEQ.unpack(buf[base:base + _SEQ.size])[0]
            data = bytes(buf[base + _SEQ.size:base + SLOT])
            if seq % 2 == 0 and _SEQ.unpack(buf[base:base + _SEQ.size])[0] == seq:
                break
            time.sleep(0.001)
        else:
            continue
        if seq:
            try:
                out[r] = json.loads(data.rstrip(b"\0"))
            except ValueError:   # a slot a dying rank's memory garbled: no stamp rather than no report
                continue
    return out


def describe(stamp: dict | None, now: float | None = None) -> str:
    """One line for a message: what the rank was doing, for how long, and whether it was alive."""
    if not stamp:
        return "no progress stamp: it never got as far as starting its worker's process"
    now = time.time() if now is None else now
    text = f"{stamp['doing']} for the last {now - stamp['since']:.1f} s"
    stale = now - stamp["t"]
    if stale > max(1.0, 10 * PERIOD_S):
        text += (f"; its heartbeat stopped {stale:.1f} s ago (blocked in native code that holds "
                 f"the GIL, or stopped by a signal)")
    return text
