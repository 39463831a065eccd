"""Every process a :func:`course_lib.dist.launch` run started, found and stopped.

Each rank leads its own process group (``dist_rank._own_process_group``), so what it starts is
in that group; the launcher kills the groups whole when the run ends.
"""
from __future__ import annotations

import os
import signal
import time


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
    found = []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return found
    for e in entries:
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()   # after "(command name)"
        except OSError:
            continue   # it ended meanwhile
        if fields[0] not in (b"Z", b"X") and int(fields[2]) in pgids:
            found.append(int(e))
    return found
