"""The sharded checkpointer: ``torch.distributed.checkpoint`` (DCP) saves under
``root/step_NNNNNN``, each marked complete last, and the helpers that read a checkpoint folder.

DCP alone does not tell a resuming job which checkpoint finished. :class:`ShardedCheckpointer`
adds chapter 6's recipe on top: after DCP's save has returned on every rank (and its files were
fsynced), rank 0 writes a small ``COMPLETE`` marker with ``course_lib.atomic.atomic_file`` (temp
file, fsync, rename). A directory without the marker is a save that was killed part-way: it is
never loaded, and the next save of that step replaces it.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from ..atomic import atomic_file, temp_path

__all__ = ["MARKER", "ShardedCheckpointer", "checkpoint_dir", "complete_steps", "incomplete_steps",
           "latest_complete"]

MARKER = "COMPLETE"


def checkpoint_dir(root: str | Path, step: int) -> Path:
    """The directory that holds the checkpoint taken after ``step`` optimizer steps."""
    return Path(root) / f"step_{step:06d}"


def _step_of(path: Path) -> int | None:
    name = path.name
    return int(name[5:]) if name.startswith("step_") and name[5:].isdigit() and path.is_dir() else None


def complete_steps(root: str | Path) -> list[int]:
    """Steps whose checkpoint carries the ``COMPLETE`` marker, oldest first."""
    root = Path(root)
    steps = [_step_of(p) for p in root.glob("step_*")] if root.is_dir() else []
    return sorted(s for s in steps if s is not None and (checkpoint_dir(root, s) / MARKER).is_file())


def incomplete_steps(root: str | Path) -> list[int]:
    """Steps with a checkpoint directory but no marker: saves that were killed part-way."""
    root = Path(root)
    steps = [_step_of(p) for p in root.glob("step_*")] if root.is_dir() else []
    return sorted(s for s in steps if s is not None and not (checkpoint_dir(root, s) / MARKER).is_file())


def latest_complete(root: str | Path) -> int | None:
    """The newest complete checkpoint's step, or None when there is none (a fresh start)."""
    steps = complete_steps(root)
    return steps[-1] if steps else None


class ShardedCheckpointer:
    """Save and load a DCP state dict under ``root/step_NNNNNN``, each save marked complete last.

    Every rank calls every method (they are collective over ``group``). ``use_async=True`` makes
    :meth:`save` return once the state is staged in memory; the write finishes in the background
    and :meth:`wait` (called by the next save, or by you) marks it complete. For async saves give
    a ``group`` used by nothing else, e.g. ``dist.new_group(backend="gloo")``: the background
    thread's collectives must not interleave with the training's. ``storage_writer`` builds a
    ``FileSystemWriter`` for a directory (tests use one that dies mid-write).
    """

    def __init__(self, root: str | Path, group: dist.ProcessGroup, *, use_async: bool = False,
                 storage_writer=None) -> None:
        self.root, self.group, self.use_async = Path(root), group, use_async
        self.rank = dist.get_rank(group)
        self._writer = storage_writer or dcp.FileSystemWriter
        self._pending: tuple[int, Any] | None = None
        self.root.mkdir(parents=True, exist_ok=True)

    def save(self, state: dict[str, Any], step: int) -> float:
        """Checkpoint ``state`` as ``step``; return the seconds this call blocked training."""
        t0 = time.perf_counter()
        self.wait()
        path = checkpoint_dir(self.root, step)
        if self.rank == 0 and path.exists():      # a killed save of this step: start it afresh
            shutil.rmtree(path)
        dist.barrier(group=self.group)
        writer = self._writer(str(path))
        if self.use_async:
            self._pending = (step, dcp.async_save(state, storage_writer=writer, process_group=self.group))
        else:
            dcp.save(state, storage_writer=writer, process_group=self.group)
            self._mark(step)
        return time.perf_counter() - t0

    def wait(self) -> None:
        """Finish the pending async save, if any, and mark it complete."""
        if self._pending is not None:
            step, future = self._pending
            self._pending = None
            future.result()
            self._mark(step)

    def _mark(self, step: int) -> None:
        """Rank 0 writes the marker atomically, after DCP's save returned on every rank."""
        dist.barrier(group=self.group)
        if self.rank == 0:
            marker = checkpoint_dir(self.root, step) / MARKER
            with atomic_file(marker, temp_path(marker)) as f:
                f.write(json.dumps({"step": step, "world_size": dist.get_world_size(self.group)}).encode())

    def latest(self) -> int | None:
        """The newest complete step, as rank 0 sees it (so that every rank agrees)."""
        box = [latest_complete(self.root) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0), group=self.group)
        return box[0]

    def load(self, state: dict[str, Any], step: int) -> None:
        """Load complete checkpoint ``step`` into ``state`` in place (any number of ranks)."""
        path = checkpoint_dir(self.root, step)
        if not (path / MARKER).is_file():
            raise FileNotFoundError(f"no complete checkpoint for step {step} in {self.root.name}")
        dcp.load(state, checkpoint_id=str(path), process_group=self.group)
