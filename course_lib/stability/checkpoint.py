"""Checkpoints that survive a crash in the middle of writing them.

A rollback is only as good as the checkpoint it rolls back to. Two failure modes are common and
silent: the job is killed (preemption, OOM killer, node failure) while it overwrites its last
checkpoint, leaving a truncated file and *no* good one; or a file is corrupted on disk and loads
as garbage. The remedy is old and simple, and this module implements it:

1. serialise the whole state to bytes and compute its SHA-256;
2. write header + bytes to a **temporary file in the same directory**, ``flush`` and ``fsync``;
3. ``os.replace`` it onto the final name — an atomic rename on POSIX: a reader sees either the
   old file or the new one, never a mix — then ``fsync`` the directory so the rename is durable;
4. on load, check the length and the checksum before trusting a single byte.

A writer killed mid-write leaves its ``<path>.<pid>.tmp`` behind; the next :func:`save_atomic`
into that directory deletes the leftovers of writers that are no longer running (and only those:
a live writer's temp file, or a ``.tmp`` file that is not a checkpoint, is never touched).

File format: the line ``COURSECKPT1``, then ``<sha256 hex> <payload length>``, then the payload
(``torch.save`` of the state dict). ``save_naive`` writes in place, without any of this, so the
lab and the tests can show what it costs.

``python -m course_lib.stability.checkpoint write PATH --mode atomic --ready FILE`` is a writer
process for the crash demo: it saves a real model + AdamW checkpoint in chunks, creates ``FILE``
once part of the data is on disk, and keeps writing slowly, so a SIGKILL sent after ``FILE``
appears lands in the middle of the write.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..atomic import atomic_file, remove_stale_temp_files, temp_path
from .._validate import choice, positive, positive_int

__all__ = ["CheckpointError", "CheckpointInfo", "save_atomic", "save_naive", "load", "verify",
           "rng_state", "set_rng_state", "temp_files", "clean_temp_files", "CrashResult", "crash_demo"]

MAGIC = b"COURSECKPT1\n"
TMP_SUFFIX = ".tmp"


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, has bytes appended or fails its checksum."""


@dataclass(frozen=True)
class CheckpointInfo:
    """Where a checkpoint is, how many payload bytes it holds and their SHA-256."""

    path: Path
    nbytes: int
    sha256: str


def _serialise(state: dict) -> bytes:
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict, got {type(state).__name__}")
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _header(payload: bytes) -> tuple[bytes, str]:
    digest = hashlib.sha256(payload).hexdigest()
    return MAGIC + f"{digest} {len(payload)}\n".encode(), digest


def _write_chunks(f, data: bytes, chunk_bytes: int, on_chunk: Callable[[int, int], None] | None) -> None:
    """Write ``data`` in chunks, calling ``on_chunk(bytes_written, total)`` after each one."""
    for start in range(0, len(data), chunk_bytes):
        f.write(data[start:start + chunk_bytes])
        if on_chunk is not None:
            f.flush()
            on_chunk(min(start + chunk_bytes, len(data)), len(data))


def save_atomic(state: dict, path: str | Path, *, chunk_bytes: int = 1 << 20,
                on_chunk: Callable[[int, int], None] | None = None, fsync: bool = True) -> CheckpointInfo:
    """Write ``state`` to ``path`` so that a crash at any moment leaves the previous file intact.

    The bytes go to ``<path>.<pid>.tmp`` in the same directory (a rename is only atomic within one
    filesystem), are flushed and fsynced, and only then renamed onto ``path``. Before writing, the
    temp files that dead writers left in that directory are deleted (:func:`clean_temp_files`).
    ``on_chunk`` is a hook called after each ``chunk_bytes`` written (the crash demo uses it to
    signal and slow down).
    """
    path = Path(path)
    chunk_bytes = positive_int("chunk_bytes", chunk_bytes)
    payload = _serialise(state)
    header, digest = _header(payload)
    clean_temp_files(path.parent)
    with atomic_file(path, temp_path(path), fsync=fsync) as f:
        f.write(header)
        _write_chunks(f, payload, chunk_bytes, on_chunk)
    return CheckpointInfo(path, len(payload), digest)


def save_naive(state: dict, path: str | Path, *, chunk_bytes: int = 1 << 20,
               on_chunk: Callable[[int, int], None] | None = None) -> CheckpointInfo:
    """Overwrite ``path`` in place (what NOT to do): the old file is truncated first, so a crash
    during the write leaves neither the old nor the new checkpoint."""
    path = Path(path)
    chunk_bytes = positive_int("chunk_bytes", chunk_bytes)
    payload = _serialise(state)
    header, digest = _header(payload)
    with open(path, "wb") as f:
        f.write(header)
        _write_chunks(f, payload, chunk_bytes, on_chunk)
    return CheckpointInfo(path, len(payload), digest)


def _read_verified(path: Path) -> tuple[bytes, CheckpointInfo]:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path.name}")
    raw = path.read_bytes()
    if not raw.startswith(MAGIC):
        raise CheckpointError(f"{path.name}: not a course checkpoint (bad magic; {len(raw)} bytes)")
    end = raw.find(b"\n", len(MAGIC))
    try:
        digest, length = raw[len(MAGIC):end].decode().split()
        length = int(length)
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{path.name}: unreadable header") from None
    payload = raw[end + 1:]
    if len(payload) < length:
        raise CheckpointError(f"{path.name}: truncated: {len(payload)} of {length} payload bytes")
    if len(payload) > length:
        raise CheckpointError(f"{path.name}: corrupt: {len(payload) - length} extra bytes after the "
                              f"{length} payload bytes the header declares (data appended to the file?)")
    actual = hashlib.sha256(payload).hexdigest()
    if actual != digest:
        raise CheckpointError(f"{path.name}: checksum mismatch (header {digest[:12]}…, data {actual[:12]}…)")
    return payload, CheckpointInfo(path, length, digest)


def verify(path: str | Path) -> CheckpointInfo:
    """Check a checkpoint's length and SHA-256 without unpickling it; raise CheckpointError if bad."""
    return _read_verified(Path(path))[1]


def load(path: str | Path) -> dict:
    """Load a checkpoint after verifying it; raise CheckpointError if it is truncated or corrupt.

    Uses ``torch.load(weights_only=True)``: tensors, numbers, strings, lists, tuples and dicts only,
    so a tampered file cannot run code."""
    payload, _ = _read_verified(Path(path))
    return torch.load(io.BytesIO(payload), weights_only=True)


def _is_checkpoint_temp(tmp: Path) -> bool:
    """A temp file holds a checkpoint if its first bytes are (a prefix of) the magic line: a
    writer killed before its first write leaves an empty one."""
    try:
        with open(tmp, "rb") as f:
            return MAGIC.startswith(f.read(len(MAGIC)))
    except OSError:
        return False


def temp_files(directory: str | Path) -> list[Path]:
    """Temporary checkpoint files in ``directory``: saves in progress, or left by killed writers."""
    return [p for p in sorted(Path(directory).glob(f"*{TMP_SUFFIX}")) if _is_checkpoint_temp(p)]


def clean_temp_files(directory: str | Path) -> list[Path]:
    """Delete the temp checkpoint files of writers that are no longer running (the process id in
    ``<name>.<pid>.tmp`` is dead) and return them; :func:`save_atomic` calls this on its directory."""
    return remove_stale_temp_files(directory, f"*{TMP_SUFFIX}", accept=_is_checkpoint_temp)


def rng_state() -> dict:
    """The random-number state a resumed run needs: PyTorch's CPU generator (and CUDA's if any),
    and Python's ``random``."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------ crash-demo writer process
def demo_state(target_bytes: int, seed: int = 0) -> dict:
    """A checkpoint shaped like the trainer's: tiny-GPT weights, Adam first and second moments for
    each of them, step, data position and RNG state, padded with a seeded random tensor up to about
    ``target_bytes`` so that writing it takes long enough to be interrupted. (The moments are
    random tensors of the right shapes: constructing ``torch.optim.AdamW`` costs the writer process
    more than a second of imports, which the crash demo does not need.)"""
    from ..model import GPT, GPTConfig

    target_bytes = positive_int("target_bytes", target_bytes)
    gen = torch.Generator().manual_seed(seed)
    model = GPT(GPTConfig(seq_len=32, n_layers=2, n_heads=2, d_model=32), seed=seed)
    weights = model.state_dict()
    moments = {k: {"exp_avg": torch.randn(v.shape, generator=gen) * 1e-3,
                   "exp_avg_sq": torch.rand(v.shape, generator=gen) * 1e-6} for k, v in weights.items()}
    n_pad = max(0, (target_bytes - 12 * model.n_params()) // 4)
    return {"model": weights, "optimizer": moments, "step": 1, "data_position": 1, "seed": seed,
            "rng": torch.Generator().manual_seed(seed).get_state(),
            "padding": torch.randn(n_pad, generator=gen)}


@dataclass(frozen=True)
class CrashResult:
    """What survived a writer process killed with SIGKILL in the middle of a save."""

    mode: str
    previous_sha256: str      # checksum of the good checkpoint that was on disk before
    killed_after_bytes: int   # payload bytes the writer had reported written when killed
    total_bytes: int          # payload bytes of the checkpoint it was writing
    exit_signal: int          # the signal that ended the writer (9 = SIGKILL)
    loads: bool               # the checkpoint path still loads and verifies
    loaded_sha256: str        # its checksum ("" if it does not load)
    error: str                # CheckpointError text if it does not load
    leftover_temp_files: int  # partial temp files left by the killed writer
    temp_files_after_next_save: int  # left after the next save into the directory cleaned up

    @property
    def previous_intact(self) -> bool:
        return self.loads and self.loaded_sha256 == self.previous_sha256


def crash_demo(directory: str | Path, mode: str = "atomic", mb: float = 16.0,
               throttle: float = 0.05, timeout: float = 120.0) -> CrashResult:
    """Save a good checkpoint, start a real writer process overwriting it (``mode`` "atomic" or
    "naive"), SIGKILL the writer once it reports being part-way through, then try to load.

    The writer sleeps ``throttle`` seconds per 1 MiB chunk — a stand-in for a slow filesystem —
    so the kill lands mid-write on any machine. The writer is always reaped, never left behind.
    """
    mode = choice("mode", mode, ("atomic", "naive"))
    mb = positive("mb", mb)
    directory = Path(directory) / mode
    directory.mkdir(parents=True, exist_ok=True)
    path, ready = directory / f"{mode}.ckpt", directory / f"{mode}.ready"
    ready.unlink(missing_ok=True)
    good = save_atomic(demo_state(int(mb * 1e6), seed=0), path)
    cmd = [sys.executable, "-m", "course_lib.stability.checkpoint", "write", str(path), "--mode", mode,
           "--mb", str(mb), "--seed", "1", "--ready", str(ready), "--throttle", str(throttle)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"writer exited early ({proc.returncode}): "
                                   f"{proc.stderr.read().decode()[-500:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"writer did not start writing within {timeout} s")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    done, total = (int(v) for v in ready.read_text().split())
    try:
        info, error = verify(path), ""
        load(path)
    except CheckpointError as e:
        info, error = None, str(e)
    leftovers = temp_files(directory)
    save_atomic({"step": 2}, directory / f"{mode}.next.ckpt", fsync=False)   # cleans the dead writer's file
    return CrashResult(mode, good.sha256, done, total, -proc.returncode, info is not None,
                       info.sha256 if info else "", error, len(leftovers), len(temp_files(directory)))


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.stability.checkpoint")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write a demo checkpoint slowly, for the crash demo")
    w.add_argument("path", type=Path)
    w.add_argument("--mode", default="atomic")
    w.add_argument("--mb", type=float, default=16.0, help="checkpoint size in MB (default 16)")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--ready", type=Path, help="file to create once --ready-after chunks are written")
    w.add_argument("--ready-after", type=int, default=2)
    w.add_argument("--throttle", type=float, default=0.05, help="seconds to sleep after each chunk")
    a = p.parse_args(argv)
    mode = choice("mode", a.mode, ("atomic", "naive"))
    throttle = positive("throttle", a.throttle, allow_zero=True)
    state = demo_state(int(a.mb * 1e6), seed=a.seed)
    chunks = [0]

    def on_chunk(done: int, total: int) -> None:
        chunks[0] += 1
        if a.ready is not None and chunks[0] == a.ready_after:
            # atomically: the parent kills this process as soon as the file exists, and must
            # never find it empty
            with atomic_file(a.ready, a.ready.with_name(a.ready.name + ".part"), fsync=False) as f:
                f.write(f"{done} {total}\n".encode())
        time.sleep(throttle)

    save = save_atomic if mode == "atomic" else save_naive
    info = save(state, a.path, on_chunk=on_chunk)
    print(f"wrote {info.nbytes} bytes, sha256 {info.sha256}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
