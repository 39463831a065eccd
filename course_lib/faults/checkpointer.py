"""The sharded checkpointer: ``torch.distributed.checkpoint`` (DCP) saves under
``root/step_NNNNNN``, each verified before it is loaded, and the helpers that read the folder.

DCP alone does not tell a resuming job which checkpoint finished, nor whether its files are
still the ones it wrote. :class:`ShardedCheckpointer` adds both (``course_lib.faults.integrity``):
after DCP's save has returned on every rank (its files fsynced), the ranks hash the files
between them and rank 0 writes a ``COMPLETE`` marker with every file's size and SHA-256, the
job's run id and the step, atomically (chapter 6's temp file, fsync, rename) and last. A
directory without the marker is a save killed part-way: never loaded, replaced by the next save
of that step. On resume, :meth:`~ShardedCheckpointer.latest` verifies the newest marked
checkpoint, the ranks splitting the hashing, and falls back to the one before it, and so on,
until one verifies: a flipped byte, a truncated, deleted or swapped shard, a broken
``.metadata`` or another job's checkpoint is refused once, by name, instead of being loaded in
silence or crashing every restart. A file the marker does not list (a ``.DS_Store``) is
reported and left alone. If complete checkpoints exist and *none* verifies, or a file cannot be
read at all, the job does not start from step 0 over them: every rank raises the same
:class:`~course_lib.faults.integrity.FolderError` naming them. The folder is the job's alone (a
run id and a lock), and old checkpoints are deleted by a retention policy so that a long run
does not fill its disk.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from .integrity import (MARKER, CheckpointError, FolderLock, NoVerifiedCheckpointError, UnreadableError,
                        checkpoint_files, file_sha256, remove_checkpoint, to_delete, verify, write_marker)

__all__ = ["MARKER", "ShardedCheckpointer", "checkpoint_dir", "complete_steps", "incomplete_steps",
           "latest_complete"]

_log = logging.getLogger(__name__)


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
    """Save and load a DCP state dict under ``root/step_NNNNNN``; each save is marked complete
    last, with its files' digests, and verified before it is loaded.

    Every rank calls every method (they are collective over ``group``), the constructor too:
    rank 0 takes the folder for job ``run_id`` (default: torchrun's ``TORCHELASTIC_RUN_ID``, the
    same for every restart of one ``torchrun``, else a fresh id) and every rank raises the same
    :class:`~course_lib.faults.integrity.ForeignFolderError` or ``FolderInUseError`` if it cannot.
    A later launch resumes the folder by passing the same ``run_id``. :meth:`latest` returns the
    newest checkpoint that verifies and lists the refused ones, with the reason, in ``refused``
    (files its marker does not list, ignored, in ``ignored``); if there are complete checkpoints
    and none verifies it raises :class:`~course_lib.faults.integrity.NoVerifiedCheckpointError`
    naming each and why, rather than let the job start afresh and save over them.

    After each save, checkpoints beyond the ``keep_last`` newest (default 3; None keeps all) are
    deleted, except those whose step is a multiple of ``keep_every`` (default None: none).
    ``use_async=True`` makes :meth:`save` return once the state is staged in memory; the write
    finishes in the background and :meth:`wait` (called by the next save, or by you) marks it
    complete. For async saves give a ``group`` used by nothing else, e.g.
    ``dist.new_group(backend="gloo")``: the background thread's collectives must not interleave
    with the training's. ``storage_writer`` builds a ``FileSystemWriter`` for a directory (tests
    use one that dies mid-write). :meth:`close` (or leaving a ``with`` block) unlocks the folder.
    """

    def __init__(self, root: str | Path, group: dist.ProcessGroup, *, run_id: str | None = None,
                 keep_last: int | None = 3, keep_every: int | None = None, use_async: bool = False,
                 storage_writer=None) -> None:
        from .._validate import positive_int
        self.keep_last = None if keep_last is None else positive_int("keep_last", keep_last)
        self.keep_every = None if keep_every is None else positive_int("keep_every", keep_every)
        self.root, self.group, self.use_async = Path(root), group, use_async
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self._writer = storage_writer or dcp.FileSystemWriter
        self._pending: tuple[int, Any] | None = None
        self._verified: set[int] = set()
        self.refused: list[str] = []
        self.ignored: list[str] = []
        self._lock, outcome = None, None
        if self.rank == 0:
            run_id = str(run_id or os.environ.get("TORCHELASTIC_RUN_ID") or uuid.uuid4().hex)
            agent = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else None
            try:
                self._lock = FolderLock(self.root, run_id, agent_pid=agent)
            except CheckpointError as e:
                outcome = (type(e), str(e))
        self.run_id, outcome = self._from_rank0((run_id, outcome))
        if outcome is not None:
            raise outcome[0](outcome[1])

    def _from_rank0(self, obj):
        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0), group=self.group)
        return box[0]

    def save(self, state: dict[str, Any], step: int) -> float:
        """Checkpoint ``state`` as ``step``; return the seconds this call blocked training."""
        t0 = time.perf_counter()
        self.wait()
        path = checkpoint_dir(self.root, step)
        if self.rank == 0 and path.exists():      # a killed or refused save of this step: start afresh
            remove_checkpoint(path)
        self._verified.discard(step)
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
        """Once DCP's save returned on every rank: each rank hashes its share of the files, rank 0
        writes the marker and applies the retention policy, and every rank waits for that."""
        dist.barrier(group=self.group)
        path = checkpoint_dir(self.root, step)
        names = self._from_rank0(checkpoint_files(path) if self.rank == 0 else None)
        mine = {n: [file_sha256(path / n), (path / n).stat().st_size] for n in names[self.rank::self.world]}
        shares = [None] * self.world if self.rank == 0 else None
        dist.gather_object(mine, shares, dst=dist.get_global_rank(self.group, 0), group=self.group)
        if self.rank == 0:
            write_marker(path, step, self.run_id, self.world, {k: v for s in shares for k, v in s.items()})
            for old in to_delete(complete_steps(self.root), step, self.keep_last, self.keep_every):
                remove_checkpoint(checkpoint_dir(self.root, old))
            for dead in incomplete_steps(self.root):
                if dead < step:                   # saves killed part-way, now superseded
                    remove_checkpoint(checkpoint_dir(self.root, dead))
        dist.barrier(group=self.group)

    def _check(self, step: int) -> str | None:
        """Verify checkpoint ``step``, the ranks splitting the hashing; the first rank's reason
        for refusing it, the same on every rank, or None if it verifies. A file that a rank
        could not read raises UnreadableError on every rank: that is no reason to skip it."""
        path = checkpoint_dir(self.root, step)
        try:
            unlisted, why = verify(path, self.run_id, share=(self.rank, self.world))["unlisted"], None
        except UnreadableError as e:
            unlisted, why = [], ("unreadable", str(e))
        except CheckpointError as e:
            unlisted, why = [], ("refused", str(e))
        reasons = [None] * self.world
        dist.all_gather_object(reasons, why, group=self.group)
        stop = next((r[1] for r in reasons if r is not None and r[0] == "unreadable"), None)
        if stop is not None:
            raise UnreadableError(stop)
        if unlisted and not any(reasons):
            self.ignored += [f"{path / n}" for n in unlisted]
            if self.rank == 0:
                _log.warning("%s: files %s not listed in %s, ignored (DCP reads only the files of the verified "
                             ".metadata)", path, ", ".join(unlisted), MARKER)
        return next((r[1] for r in reasons if r is not None), None)

    def latest(self) -> int | None:
        """The newest complete checkpoint that verifies (None: no complete checkpoint, a fresh
        start); every rank gets the same answer. The ones refused on the way are in ``refused``,
        and logged by rank 0; if every complete checkpoint is refused, NoVerifiedCheckpointError."""
        self.refused, self.ignored = [], []
        steps = self._from_rank0(complete_steps(self.root) if self.rank == 0 else None)
        for step in reversed(steps):
            why = self._check(step)
            if why is None:
                self._verified.add(step)
                return step
            self.refused.append(why)
            if self.rank == 0:
                _log.warning("refusing checkpoint step %d: %s", step, why)
        if steps:
            raise NoVerifiedCheckpointError(
                f"checkpoint folder {self.root} holds {len(steps)} complete checkpoint(s) and none verifies, so "
                f"this job stops instead of training from step 0 and saving over them: " + "; ".join(self.refused)
                + ". Restore or repair them, or move them aside to start afresh")
        return None

    def load(self, state: dict[str, Any], step: int) -> None:
        """Load complete checkpoint ``step`` into ``state`` in place (any number of ranks);
        raise CheckpointError naming the file if it does not verify."""
        path = checkpoint_dir(self.root, step)
        if not (path / MARKER).is_file():
            raise FileNotFoundError(f"no complete checkpoint for step {step} in {self.root.name}")
        if step not in self._verified:
            why = self._check(step)
            if why is not None:
                raise CheckpointError(why)
            self._verified.add(step)
        dcp.load(state, checkpoint_id=str(path), process_group=self.group)

    def close(self) -> None:
        """Finish a pending save and give the folder's lock back (rank 0)."""
        self.wait()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> ShardedCheckpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
