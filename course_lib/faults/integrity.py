"""Checkpoints that cannot lie: file digests in the completion marker, a folder owned by one job,
and a retention policy.

A ``COMPLETE`` marker that only says "the save returned" cannot tell a resuming job that a shard
was flipped by a bad disk, cut short by a full one, deleted, or replaced by another save's file:
``torch.distributed.checkpoint`` (DCP) carries no checksum, so a flipped byte loads as a wrong
weight and training goes on from it in silence. Here the marker lists every file DCP wrote
(shards and ``.metadata``) with its size and SHA-256, the job's run id and the step, plus a
digest of the marker itself; :func:`verify` recomputes them before anything is loaded and raises
:class:`CheckpointError` naming the first file that does not match. A file the marker does not
list (a desktop's ``.DS_Store``, an NFS ``.nfsNNNN``) is not one DCP reads, since DCP reads the files
the verified ``.metadata`` names: it is reported, not taken for corruption. A file that cannot be
read at all (an ``OSError``) proves nothing about its bytes: :class:`UnreadableError` names it, and
the job stops rather than fall back to an older checkpoint.

Two jobs writing into one folder delete and mix each other's files. :class:`FolderLock` makes
the folder one job's: its owner's run id is recorded in ``RUN`` on first use (a later job with
another id is refused: :class:`ForeignFolderError`), and ``LOCK`` is held with ``fcntl.flock``
for the life of the process that owns it (a job already using the folder refuses the second:
:class:`FolderInUseError`). A flock dies with its process, which is right for a crash but opens
a gap while torchrun's elastic agent restarts the ranks; so the holder also records its agent's
process id, and a newcomer whose agent is another one, while that agent still runs, is refused
too. The lock is per host: on a filesystem shared by several hosts, only the host of the
folder's rank 0 takes it. A ``RUN`` that is not a JSON object with a run id (unreadable, empty,
garbage, a directory) is refused by name (:class:`OwnerFileError`): the folder's owner is unknown.

Every :class:`FolderError` is one that no restart can fix (another job's or a busy folder, an
unreadable file, a folder whose complete checkpoints all fail verification): the job stops, and
``course_lib.faults.elastic`` asks torchrun's agent not to restart it.

:func:`to_delete` is the retention policy: keep the ``keep_last`` newest checkpoints and every
one whose step is a multiple of ``keep_every`` (default 3 and none, so that a long run's disk
use stays bounded while one corrupt checkpoint still leaves two to fall back to).
:func:`damage` breaks a checkpoint the ways disks and people do, for drills and tests.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from ..atomic import atomic_file, fsync_dir, temp_path

__all__ = ["MARKER", "OWNER", "LOCK", "CheckpointError", "FolderError", "ForeignFolderError", "FolderInUseError",
           "OwnerFileError", "UnreadableError", "NoVerifiedCheckpointError", "checkpoint_files", "unlisted_files", "file_sha256", "write_marker", "read_marker", "verify", "FolderLock",
           "to_delete", "remove_checkpoint", "damage", "DAMAGES"]

MARKER, OWNER, LOCK = "COMPLETE", "RUN", "LOCK"


class CheckpointError(RuntimeError):
    """A checkpoint that must not be loaded: corrupt, partial, or written by another job."""


class FolderError(CheckpointError):
    """The checkpoint folder cannot be resumed as it is and no restart will change that: stop."""


class ForeignFolderError(FolderError):
    """The checkpoint folder belongs to another job (another run id)."""


class FolderInUseError(FolderError):
    """Another job is using the checkpoint folder right now."""


class OwnerFileError(FolderError):
    """The folder's ``RUN`` file does not say which job owns it."""


class UnreadableError(FolderError):
    """A file of the folder could not be read (an OSError): not evidence that it is corrupt."""


class NoVerifiedCheckpointError(FolderError):
    """The folder holds complete checkpoints and not one of them verifies."""


def checkpoint_files(path: str | Path) -> list[str]:
    """Names of the files of a checkpoint directory that its marker covers, sorted (every rank
    derives the same list): regular files but the marker, temporary files and hidden files other
    than DCP's ``.metadata`` (a ``.DS_Store`` a desktop drops in is not the save's)."""
    return sorted(p.name for p in Path(path).iterdir() if p.is_file() and p.name != MARKER
                  and not p.name.endswith(".tmp") and (p.name == ".metadata" or not p.name.startswith(".")))


def unlisted_files(path: str | Path, listed) -> list[str]:
    """Entries of checkpoint directory ``path`` that are neither its marker nor in ``listed``."""
    return sorted(p.name for p in Path(path).iterdir() if p.name != MARKER and p.name not in listed)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _sealed(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_marker(path: str | Path, step: int, run_id: str, world_size: int, files: dict) -> None:
    """Write ``path/COMPLETE`` atomically: ``files`` maps each name to ``[sha256, bytes]``."""
    body = {"step": step, "run_id": run_id, "world_size": world_size, "files": files}
    marker = Path(path) / MARKER
    with atomic_file(marker, temp_path(marker)) as f:
        f.write(json.dumps({**body, "marker_sha256": _sealed(body)}).encode())


def read_marker(path: str | Path) -> dict:
    """The marker of checkpoint ``path``, checked against its own digest."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        raise CheckpointError(f"{path} has no {MARKER} marker: a save that never finished")
    try:
        body = json.loads(marker.read_bytes())
        seal = body.pop("marker_sha256")
        ok = seal == _sealed(body) and isinstance(body["files"], dict)
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise CheckpointError(f"{marker} is corrupt or carries no file digests: its contents do not "
                              f"match its own SHA-256, or it was written without one")
    return body


def verify(path: str | Path, run_id: str | None = None, *, share: tuple[int, int] = (0, 1)) -> dict:
    """Check checkpoint ``path`` against its marker; return the marker or raise CheckpointError
    naming the file at fault. Every check but the hashing is done in full; the hashing covers
    the files ``share = (i, n)`` picks (every n-th from the i-th), so that n ranks can split it.
    ``run_id``, if given, must be the id recorded in the marker (a checkpoint of another job).
    Files the marker does not list are not checked (DCP does not read them): their names are in
    the returned marker's ``"unlisted"``. An OSError raises :class:`UnreadableError` naming the file."""
    path = Path(path)
    at = [path / MARKER]                          # the file being read, for an OSError's message
    try:
        return _verify(path, run_id, share, at)
    except OSError as e:
        raise UnreadableError(f"{e.filename or at[0]} cannot be read ({type(e).__name__}: {e.strerror or e}): an "
                              f"I/O or permission error is not proof that checkpoint {path.name} is corrupt, so it "
                              f"is not skipped for an older one; make the file readable and start again") from e


def _verify(path: Path, run_id: str | None, share: tuple[int, int], at: list) -> dict:
    body = read_marker(path)
    if run_id is not None and body.get("run_id") != run_id:
        raise CheckpointError(f"{path / MARKER} was written by job {body.get('run_id')!r}, not by this "
                              f"job {run_id!r}: a checkpoint of another job")
    if path.name.startswith("step_") and body.get("step") != int(path.name[5:]):
        raise CheckpointError(f"{path / MARKER} is the marker of step {body.get('step')}, not of {path.name}")
    i, n = share
    for k, (name, (sha, size)) in enumerate(sorted(body["files"].items())):
        f = at[0] = path / name
        if not f.is_file():
            raise CheckpointError(f"{f} is missing (listed in {MARKER})")
        if f.stat().st_size != size:
            raise CheckpointError(f"{f} has {f.stat().st_size} bytes, {MARKER} says {size}: truncated or replaced")
        if k % n == i and file_sha256(f) != sha:
            raise CheckpointError(f"{f} does not match its SHA-256 in {MARKER}: corrupt or replaced")
    at[0] = path
    return {**body, "unlisted": unlisted_files(path, body["files"])}


def _start_time(pid: int) -> str | None:
    """A process's start time (Linux ``/proc``), which tells a live process from a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class FolderLock:
    """Make checkpoint folder ``root`` job ``run_id``'s for as long as this object lives (or
    until :meth:`release`); raise ForeignFolderError or FolderInUseError naming the folder and
    the other job. ``agent_pid`` is the process that restarts this one (torchrun's elastic
    agent, the parent of a rank): a restarted process of the same agent takes the lock over."""

    def __init__(self, root: str | Path, run_id: str, *, agent_pid: int | None = None) -> None:
        self.root, self.run_id, self.agent_pid = Path(root), run_id, agent_pid
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise FolderError(f"checkpoint folder {self.root} cannot be used: {e.filename or self.root}: "
                              f"{type(e).__name__}: {e.strerror or e}") from e
        try:
            self._acquire()
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise

    def _holder(self) -> dict:
        try:
            h = json.loads(os.pread(self._fd, 4096, 0) or b"{}")
        except ValueError:
            return {}
        return h if isinstance(h, dict) else {}

    def _owner(self) -> str | None:
        """The run id ``RUN`` records (None: no ``RUN``, a new folder); OwnerFileError if it says none."""
        f = self.root / OWNER
        if not f.exists() and not f.is_symlink():
            return None
        try:
            text = f.read_bytes()
            body = json.loads(text)
            what = f"{text[:60]!r}, not a JSON object with a run id"
        except OSError as e:
            body, what = None, f"unreadable ({type(e).__name__}: {e.strerror or e})"
        except ValueError:
            body, what = None, f"not JSON text: {text[:60]!r}" if text.strip() else "empty"
        if isinstance(body, dict) and isinstance(body.get("run_id"), str) and body["run_id"]:
            return body["run_id"]
        raise OwnerFileError(f"{f} is {what}: it should name the job that owns checkpoint folder {self.root}, so "
                             f"no job may resume it. If the folder is this job's, write {{\"run_id\": "
                             f"{json.dumps(self.run_id)}}} into {OWNER}; no restart can fix it")

    def _acquire(self, patience_s: float = 2.0) -> None:
        deadline = time.monotonic() + patience_s     # a newcomer being refused holds it for milliseconds
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                h = self._holder()
                raise FolderInUseError(f"checkpoint folder {self.root} is in use by job {h.get('run_id', '?')!r} "
                                       f"(pid {h.get('pid', '?')} on {h.get('host', '?')}); a folder belongs to "
                                       f"one job: give this job a folder of its own") from None
        h, host = self._holder(), socket.gethostname()
        agent = h.get("agent_pid")
        if (agent and agent != self.agent_pid and h.get("host") == host
                and _start_time(agent) is not None and _start_time(agent) == h.get("agent_start")):
            raise FolderInUseError(f"checkpoint folder {self.root} belongs to job {h.get('run_id')!r}, whose "
                                   f"elastic agent (pid {agent} on {host}) is restarting it; a folder belongs "
                                   f"to one job: give this job a folder of its own")
        owner_file, owner = self.root / OWNER, self._owner()
        if owner is not None:
            if owner != self.run_id:
                raise ForeignFolderError(f"checkpoint folder {self.root} belongs to job {owner!r}, not to this job "
                                         f"{self.run_id!r}: use another folder, or pass run_id={owner!r} to "
                                         f"resume that job")
        else:
            with atomic_file(owner_file, temp_path(owner_file)) as f:
                f.write(json.dumps({"run_id": self.run_id}).encode())
        me = {"run_id": self.run_id, "pid": os.getpid(), "host": host, "agent_pid": self.agent_pid,
              "agent_start": _start_time(self.agent_pid) if self.agent_pid else None}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(me).encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        """Clear the holder's record and unlock (a process that dies unlocks by itself)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def to_delete(steps: list[int], saved: int, keep_last: int | None = 3, keep_every: int | None = None) -> list[int]:
    """Steps to delete after checkpoint ``saved`` completed: of the complete ``steps`` at or
    before it, all but the ``keep_last`` newest (None: keep all) and the multiples of
    ``keep_every`` (None: none kept for ever). Newer steps are left: they are checkpoints a
    resumed job refused, and replaces when it gets there."""
    if keep_last is None:
        return []
    older = sorted(s for s in steps if s <= saved)[:-keep_last]
    return [s for s in older if not (keep_every and s % keep_every == 0)]


def remove_checkpoint(path: str | Path) -> None:
    """Delete a checkpoint directory, its marker first: a kill part-way leaves a directory
    without a marker (never loaded, and removed by the next save), never a marked one missing files."""
    path = Path(path)
    if (path / MARKER).exists():
        (path / MARKER).unlink()
        fsync_dir(path)
    shutil.rmtree(path, ignore_errors=True)


DAMAGES = ("flip", "swap", "trunc", "meta", "delete")


def damage(path: str | Path, how: str, rank: int = 0, older: str | Path | None = None) -> Path:
    """Break checkpoint ``path`` and return the file hit: ``flip`` one byte in the middle of
    rank ``rank``'s shard, ``swap`` that shard for the one in checkpoint ``older``, ``trunc`` it
    to half, ``delete`` it, or ``meta``: flip one byte of DCP's ``.metadata``."""
    path = Path(path)
    target = path / (".metadata" if how == "meta" else f"__{rank}_0.distcp")
    if how in ("flip", "meta"):
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif how == "swap":
        shutil.copyfile(Path(older) / target.name, target)
    elif how == "trunc":
        os.truncate(target, target.stat().st_size // 2)
    elif how == "delete":
        target.unlink()
    else:
        raise ValueError(f"how must be one of {DAMAGES}, got {how!r}")
    return target
