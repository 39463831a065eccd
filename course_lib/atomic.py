"""Write a file so that a crash at any moment leaves either the old file or the complete new one.

The one recipe every durable writer in the course uses (packed data shards in chapter 3, training
checkpoints in chapter 6): write to a temporary file in the *same directory* (a rename is atomic
only within one filesystem), flush and fsync it, ``os.replace`` it onto the final name, then fsync
the directory so that the rename itself survives a power cut.

A writer that is killed mid-write leaves its temporary file behind. Naming it after the writer's
process id (``<name>.<pid>.tmp``) lets the next writer tell a dead writer's leftover from a live
writer's work in progress: :func:`remove_stale_temp_files` deletes only the former.
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["fsync_dir", "atomic_file", "temp_path", "writer_pid", "stale_temp_files", "remove_stale_temp_files"]

_PID_TMP = re.compile(r"\.(\d+)\.tmp$")


def fsync_dir(path: str | Path) -> None:
    """Flush a directory's entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | Path, tmp: str | Path, *, fsync: bool = True) -> Iterator[BinaryIO]:
    """Open ``tmp`` (a name in ``path``'s directory) for binary writing; when the block ends
    normally, make the bytes durable and rename them onto ``path``. If the block raises, the
    temporary file is removed; a killed process leaves it behind, for its owner to recognise.
    ``fsync=False`` skips both fsyncs (faster, still atomic for readers, not for power cuts)."""
    path, tmp = Path(path), Path(tmp)
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if fsync:
        fsync_dir(path.parent)


def temp_path(path: str | Path, pid: int | None = None) -> Path:
    """The temporary name a writer with process id ``pid`` (default: this process) uses for
    ``path``: ``<path>.<pid>.tmp``, in the same directory."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid() if pid is None else pid}.tmp")


def writer_pid(tmp: str | Path) -> int | None:
    """The process id in a ``<name>.<pid>.tmp`` file name, or None for any other name."""
    m = _PID_TMP.search(Path(tmp).name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # it exists, it just belongs to someone else
        return True
    return True


def stale_temp_files(directory: str | Path, pattern: str = "*.tmp",
                     accept: Callable[[Path], bool] | None = None) -> list[Path]:
    """Temporary files in ``directory`` (matching ``pattern`` and, if given, ``accept``) left by
    writers that are dead: the process id in the name is not a running process. Files of live
    writers, of this process and names without a process id are never listed. Process ids are per
    machine, so on a filesystem that several hosts share, give each host its own directory."""
    out = []
    for tmp in sorted(Path(directory).glob(pattern)):
        pid = writer_pid(tmp)
        if pid is not None and pid != os.getpid() and not _alive(pid) and (accept is None or accept(tmp)):
            out.append(tmp)
    return out


def remove_stale_temp_files(directory: str | Path, pattern: str = "*.tmp",
                            accept: Callable[[Path], bool] | None = None) -> list[Path]:
    """Delete :func:`stale_temp_files` and return the ones removed (a file another cleaner removed
    first, or one we may not delete, is skipped: cleaning must never fail a save)."""
    removed = []
    for tmp in stale_temp_files(directory, pattern, accept):
        try:
            tmp.unlink()
        except OSError:
            continue
        removed.append(tmp)
    return removed
