"""Every process a :func:`course_lib.dist.launch` run started, found and stopped.

Each rank leads its own process group (``dist_rank._own_process_group``), so what it starts is in
that group, killed whole when the run ends. A process can leave the group, though: a child started
in a session of its own (``setsid``, ``start_new_session=True``), or a daemon that forks twice
and whose parent exits, which Linux would hand to init. Three things catch those:

* Every rank is a *child subreaper* (Linux's ``prctl(PR_SET_CHILD_SUBREAPER)``): an orphan of any
  process it started is handed to the rank, not to init, so while a rank lives, everything it
  started is in its process tree. When its worker is done, the rank kills that tree and reaps it.
* The launcher stops a rank still running (hung, timed out, or in a run that failed) with its
  tree: it freezes them (SIGSTOP) until no new process appears, so none can fork or be orphaned
  meanwhile, then kills them all (:func:`stop_trees`).
* A rank that dies on its own (a segfault, ``os._exit``, a kill from outside) leaves its tree to
  init. So the launcher keeps a record of each rank's tree while the run lasts, every ``POLL_S``,
  and kills what it recorded (:class:`Tracker`); only a process started less than ``POLL_S``
  before its rank died this way can escape.

The launching process itself is never made a subreaper: it is often a Jupyter kernel, and a
subreaper adopts the orphans of every program it runs (a ``!cmd &`` in a cell), which Python never
reaps; they would pile up as zombies. The ranks are the launcher's own processes, and they reap
what they adopted when they end (until then, an adopted orphan that exits waits as a zombie).

SIGTERM to the launching process (a batch scheduler, ``kill``, a kernel shut down) stops the run
as Ctrl-C does, then ends the process as it would have ended (:class:`SigtermStopsTheRun`).

Without prctl (not Linux) the ranks are not subreapers, and without /proc no tree is read: there, a
process that leaves its rank's group and outlives its rank can outlive the run.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

POLL_S = 0.25
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the one its descendants' orphans are handed to (Linux 3.4+)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):   # no prctl: orphans go to init, as without the launcher
        return False


def _table() -> dict[int, tuple[int, int, int]]:
    """pid → (parent pid, process group, start time) of every running (not zombie) process."""
    table = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return table
    for e in entries:
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()   # after "(command name)": field 3 on
        except OSError:
            continue   # it ended meanwhile
        if fields[0] not in (b"Z", b"X"):
            table[int(e)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def _descendants(roots: set[int], table: dict) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _live(known: dict[int, int], table: dict) -> set[int]:
    """The processes of ``known`` (pid → start time) still running: a pid with another start time
    is a new process that was given the number again, not ours."""
    return {pid for pid, start in known.items() if pid in table and table[pid][2] == start}


def identify(pids) -> dict[int, int]:
    """pid → start time of those of ``pids`` that are running, and of all their descendants."""
    table = _table()
    roots = {p for p in pids if p in table}
    return {p: table[p][2] for p in roots | _descendants(roots, table)}


def stop_trees(known: dict[int, int]) -> None:
    """SIGKILL the processes of ``known`` (pid → start time) still running and all their
    descendants, leaving out this process; wait, up to 5 s, until none of them is running.

    They are first all stopped (SIGSTOP), again and again until no new one appears: a stopped
    process cannot fork, and the descendants of a subreaper that is stopped, not dead, stay in
    its tree, so the kill that follows leaves none behind."""
    me, stopped = os.getpid(), set()
    for _ in range(100):
        table = _table()
        live = _live(known, table)
        new = (live | _descendants(live, table)) - stopped - {me}
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while stopped & set(_table()) and time.monotonic() < deadline:
        time.sleep(0.01)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass   # it ended meanwhile (or is not ours to stop)


def stop_own_tree() -> None:
    """In a rank: kill every process this one started (and the orphans it adopted), and reap them."""
    stop_trees(identify([os.getpid()]))
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


class Tracker:
    """The launcher's record of the ranks' process trees: ``poll`` while the run lasts, ``stop``
    when it ends."""

    def __init__(self) -> None:
        self.known: dict[int, int] = {}
        self.ranks: dict[int, int] = {}
        self._last = 0.0

    def add_rank(self, pid: int) -> None:
        self.ranks |= {p: t for p, t in identify([pid]).items() if p == pid}

    def poll(self) -> None:
        """Record what the ranks still running have started (at most every ``POLL_S``)."""
        if time.monotonic() - self._last < POLL_S:
            return
        self._last = time.monotonic()
        table = _table()
        live = _live(self.ranks, table)
        self.known |= {p: table[p][2] for p in live | _descendants(live, table)}

    def stop(self) -> None:
        stop_trees(self.ranks | self.known)


class _Terminated(BaseException):
    """SIGTERM, raised in the launching thread so that the run is stopped before the process ends."""


class SigtermStopsTheRun:
    """``with SigtermStopsTheRun(stop) as run:`` around a run whose ``finally`` calls ``run.stop()``
    (which calls ``stop``): a SIGTERM raises in the block, so the run is stopped on the way out, as
    on Ctrl-C; then the process's own disposition is restored and the SIGTERM delivered again, and
    the default one ends the process, killed by SIGTERM. A SIGTERM while stopping waits for the stop
    to finish; one that cut the ``finally`` short (it came first thing in it) leaves ``stop`` to be
    called on leaving the block, as is any stop that an exception cut short.

    A program with its own SIGTERM handler has it called at once: if it raises (``sys.exit``), the
    run is stopped on the way out; if it returns, the program carries on, and so does the run.
    Nothing is installed where SIGTERM is ignored, outside the main thread (Python runs signal
    handlers there only), or where the disposition was set outside Python."""

    def __init__(self, stop) -> None:
        self._stop, self.old = stop, None
        self.received = self._stopping = self._stopped = False

    def __enter__(self) -> SigtermStopsTheRun:
        if threading.current_thread() is threading.main_thread():
            old = signal.getsignal(signal.SIGTERM)
            if old is not None and old != signal.SIG_IGN:
                self.old = old
                signal.signal(signal.SIGTERM, self._handler)
        return self

    def _handler(self, signum, frame) -> None:
        if self._stopping or self.received:
            self.received = True        # delivered again once the run is stopped
        elif self.old == signal.SIG_DFL:
            self.received = True
            raise _Terminated("SIGTERM")
        else:
            self.old(signum, frame)

    def stop(self) -> None:
        self._stopping = True
        self._stop()
        self._stopped = True

    def __exit__(self, *exc) -> bool:
        try:
            if not self._stopped:
                self.stop()
        finally:
            if self.old is not None:
                signal.signal(signal.SIGTERM, self.old)
                if self.received:
                    signal.raise_signal(signal.SIGTERM)
        return False


def kill_groups(pgids: list[int]) -> None:
    """SIGKILL every process in these process groups (each rank leads its own, see
    ``dist_rank._own_process_group``) and wait, up to 5 s, until none of them is running.

    A group exists only while a process in it lives, and Linux gives no new process the id of a
    live group, so a group id taken from a rank never names someone else's processes."""
    for g in pgids:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            pass   # the group is empty already (or not POSIX)
    deadline = time.monotonic() + 5.0
    while group_members(set(pgids)) and time.monotonic() < deadline:
        time.sleep(0.01)


def group_members(pgids: set[int]) -> list[int]:
    """Pids of the running (not zombie) processes in these process groups, from /proc (Linux)."""
    return [pid for pid, (_, pgid, _) in _table().items() if pgid in pgids]
