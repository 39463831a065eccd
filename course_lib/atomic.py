"""Write a file so that a crash at any moment leaves either the old file or the complete new one.

The one recipe every durable writer in the course uses (packed data shards in chapter 3, training
checkpoints in chapter 6): write to a temporary file in the *same directory* (a rename is atomic
only within one filesystem), flush and fsync it, ``os.replace`` it onto the final name, then fsync
the directory so that the rename itself survives a power cut.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["fsync_dir", "atomic_file"]


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
