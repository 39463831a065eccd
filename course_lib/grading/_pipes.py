"""Plumbing of :mod:`course_lib.grading.sandbox`, on the trusted side: a pipe drained on a thread
with a cap (the sandbox's log, the executor's status), the number of processes in a PID
namespace (the fork-storm watchdog), the bytes in its folder (the disk watchdog) and the sandbox init's PID from bwrap's ``--info-fd``."""
from __future__ import annotations

import json
import os
import select
import threading
import time
from pathlib import Path

STARTUP_LIMIT = 120.0  # seconds allowed for starting the sandbox, the executor and its kernel


class Pipe:
    """A pipe read on a thread: keeps at most ``cap`` bytes, drains (and drops) the rest."""

    def __init__(self, cap: int) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.cap, self.data, self.dropped = cap, bytearray(), 0
        self.thread = threading.Thread(target=self._drain, daemon=True)

    def start(self) -> None:
        os.close(self.write_fd)
        self.thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 1 << 16):
            keep = max(0, self.cap - len(self.data))
            self.data += chunk[:keep]
            self.dropped += len(chunk) - min(keep, len(chunk))
        os.close(self.read_fd)

    def text(self) -> str:
        tail = f"\n[{self.dropped} more bytes not kept]\n" if self.dropped else ""
        return self.data.decode("utf-8", "replace") + tail


def count_procs(ns: str) -> int:
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                n += os.readlink(f"/proc/{p}/ns/pid") == ns
            except OSError:
                pass
    return n


def read_child_pid(fd: int) -> int | None:
    """The PID (here) of the sandbox's init, from the JSON bwrap writes to ``--info-fd`` once set
    up (in several writes: read until it parses, or bwrap dies of SIGPIPE)."""
    text, end = b"", time.monotonic() + STARTUP_LIMIT
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                return None
            text += chunk
            try:
                return int(json.loads(text)["child-pid"])
            except ValueError:
                continue
            except (KeyError, TypeError):
                return None
        return None
    finally:
        os.close(fd)


def disk_use(root: Path, cap: int, max_files: int) -> str | None:
    """Why ``root`` holds too much (more than ``cap`` real bytes, so a sparse file counts what it
    occupies, or more than ``max_files`` entries), or None: the disk-filler watchdog's look."""
    used, entries, stack = 0, 0, [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                if entries > max_files:
                    return f"it wrote more than {max_files} files"
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        used += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
                if used > cap:
                    return f"it wrote more than {cap >> 20} MiB to its folder"
    return None
