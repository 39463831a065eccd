"""Stage 5: pack token streams into fixed-length rows and write them as sharded binary files.

Layout of a shard directory::

    shard_00000.bin  shard_00001.bin  ...   raw little-endian token ids, rows of ``seq_len + 1``
    index.json                              dtype, seq_len, EOS id, and per shard: file, rows,
                                            bytes, SHA-256 — written last

Packing: documents are concatenated, each followed by EOS, and the stream is cut into rows of
``seq_len + 1`` tokens (a row gives ``seq_len`` inputs and their ``seq_len`` next-token targets).
No padding is wasted; a document may continue into the next row, and the EOS tells the model
where one document ends. Only the final partial row is not written; the index counts it.

Every file is written atomically: to a temporary name in the same directory, flushed, fsync'ed,
then renamed over the final name (a rename within a file system is atomic on POSIX), and the
directory is fsync'ed. A crash mid-write leaves a ``*.tmp`` file and no index, never a
half-written shard under a real name. ``validate`` checks sizes and hashes against the index and
names the shard that is missing, truncated or corrupted.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import atomic_file
from .._validate import positive, positive_int
from .tokenize import token_dtype

__all__ = ["INDEX", "ShardError", "ShardPlan", "plan_shards", "atomic_write", "ShardWriter",
           "read_index", "validate", "open_shards"]

INDEX = "index.json"
FORMAT = "course-packed-v1"


class ShardError(RuntimeError):
    """A shard directory that cannot be trusted: missing index, missing/truncated/corrupt shard."""


@dataclass(frozen=True)
class ShardPlan:
    """How a token budget splits into shards of at most ``max_shard_bytes``."""

    dtype: str
    bytes_per_token: int
    tokens_per_shard: int
    n_shards: int
    total_bytes: int


def plan_shards(n_tokens: float, vocab_size: int, max_shard_bytes: float, seq_len: int | None = None) -> ShardPlan:
    """Shards needed for ``n_tokens`` tokens with ids below ``vocab_size``, each file at most
    ``max_shard_bytes`` bytes (whole rows of ``seq_len + 1`` tokens when ``seq_len`` is given)."""
    n_tokens = positive("n_tokens", n_tokens)
    dtype = token_dtype(vocab_size)
    max_shard_bytes = positive("max_shard_bytes", max_shard_bytes)
    per_shard = int(max_shard_bytes // dtype.itemsize)
    if seq_len is not None:
        row = positive_int("seq_len", seq_len) + 1
        per_shard -= per_shard % row
    if per_shard < 1:
        raise ValueError(f"max_shard_bytes={max_shard_bytes:g} is too small for one row of tokens")
    n_shards = math.ceil(n_tokens / per_shard)
    return ShardPlan(dtype.name, dtype.itemsize, per_shard, n_shards, int(math.ceil(n_tokens)) * dtype.itemsize)


def atomic_write(path: str | Path, data: bytes | np.ndarray) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old file or the complete new one
    (``course_lib.atomic``: temp file in the same directory, fsync, rename, fsync the directory)."""
    path = Path(path)
    with atomic_file(path, path.with_name(f".{path.name}.{os.getpid()}.tmp")) as f:
        f.write(data.tobytes() if isinstance(data, np.ndarray) else data)
    return path


class ShardWriter:
    """Stream documents in, get shards of ``rows_per_shard`` rows out (the last may be smaller).

    ``with ShardWriter(dir, seq_len=64, eos_id=0, vocab_size=2048) as w: w.add(ids)``; the index
    is written when the block exits normally, so a failed run leaves no index (and readers refuse
    the directory) instead of a silently incomplete data set.
    """

    def __init__(self, out_dir: str | Path, seq_len: int, eos_id: int, vocab_size: int,
                 rows_per_shard: int = 4096) -> None:
        self.dir = Path(out_dir)
        self.seq_len = positive_int("seq_len", seq_len)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        self.eos_id = positive_int("eos_id", eos_id, minimum=0)
        if self.eos_id >= self.vocab_size:
            raise ValueError(f"eos_id={eos_id} must be < vocab_size={vocab_size}")
        self.rows_per_shard = positive_int("rows_per_shard", rows_per_shard)
        self.dtype = token_dtype(vocab_size)
        self.row_len = self.seq_len + 1
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.dir / INDEX).exists():
            raise ValueError(f"out_dir {self.dir} already holds a shard index; use a fresh directory")
        self._parts: list[np.ndarray] = []
        self._buffered = 0
        self.shards: list[dict] = []
        self.n_documents = self.n_tokens = 0
        self.closed = False

    def add(self, ids: np.ndarray) -> None:
        """Append one document's token ids and an EOS; write every shard that is complete."""
        if self.closed:
            raise ValueError("add() after close()")
        ids = np.asarray(ids)
        if ids.ndim != 1:
            raise ValueError(f"ids must be a 1-D array of token ids, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got [{ids.min()}, {ids.max()}]")
        doc = np.empty(ids.size + 1, dtype=self.dtype)
        doc[:-1], doc[-1] = ids, self.eos_id
        self._parts.append(doc)
        self._buffered += doc.size
        self.n_documents += 1
        self.n_tokens += doc.size
        shard_tokens = self.rows_per_shard * self.row_len
        if self._buffered >= shard_tokens:
            stream = np.concatenate(self._parts)
            n_full = stream.size // shard_tokens
            for i in range(n_full):
                self._write(stream[i * shard_tokens:(i + 1) * shard_tokens])
            rest = stream[n_full * shard_tokens:]
            self._parts, self._buffered = [rest], rest.size

    def _write(self, tokens: np.ndarray) -> None:
        name = f"shard_{len(self.shards):05d}.bin"
        atomic_write(self.dir / name, tokens)
        self.shards.append({"file": name, "rows": tokens.size // self.row_len, "bytes": tokens.nbytes,
                            "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()})

    def close(self) -> dict:
        """Write the last whole rows and the index; return the index."""
        if self.closed:
            raise ValueError("close() called twice")
        stream = np.concatenate(self._parts) if self._parts else np.empty(0, self.dtype)
        n_rows = stream.size // self.row_len
        if n_rows:
            self._write(stream[:n_rows * self.row_len])
        index = {"format": FORMAT, "dtype": self.dtype.name, "seq_len": self.seq_len,
                 "row_len": self.row_len, "eos_id": self.eos_id, "vocab_size": self.vocab_size,
                 "n_documents": self.n_documents, "n_tokens": self.n_tokens,
                 "n_rows": sum(s["rows"] for s in self.shards),
                 "tail_tokens_dropped": int(stream.size - n_rows * self.row_len), "shards": self.shards}
        atomic_write(self.dir / INDEX, json.dumps(index, indent=1).encode("utf-8"))
        self.closed = True
        self._parts = []
        return index

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self.closed:
            self.close()


def read_index(shard_dir: str | Path) -> dict:
    """The index of ``shard_dir``; ``ShardError`` if it is missing or unreadable."""
    path = Path(shard_dir) / INDEX
    if not path.is_file():
        raise ShardError(f"{path}: no index (the writer did not finish, or this is not a shard directory)")
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ShardError(f"{path}: unreadable index ({e})") from None
    if index.get("format") != FORMAT:
        raise ShardError(f"{path}: unknown format {index.get('format')!r}, expected {FORMAT!r}")
    return index


def validate(shard_dir: str | Path, check_hashes: bool = True) -> dict:
    """Check every shard against the index: present, exactly the recorded size (a truncated copy
    or an interrupted transfer is caught here), and, with ``check_hashes``, the recorded SHA-256.
    Returns the index plus ``stale_tmp_files`` (leftovers of crashed writes, harmless)."""
    shard_dir = Path(shard_dir)
    index = read_index(shard_dir)
    for s in index["shards"]:
        path = shard_dir / s["file"]
        if not path.is_file():
            raise ShardError(f"{path}: missing (listed in the index)")
        size = path.stat().st_size
        if size != s["bytes"]:
            raise ShardError(f"{path}: {size:,} bytes on disk but {s['bytes']:,} in the index "
                             f"({'truncated' if size < s['bytes'] else 'oversized'})")
        if check_hashes and hashlib.sha256(path.read_bytes()).hexdigest() != s["sha256"]:
            raise ShardError(f"{path}: SHA-256 does not match the index (corrupted)")
    return {**index, "stale_tmp_files": sorted(p.name for p in shard_dir.glob(".*.tmp"))}


def open_shards(shard_dir: str | Path, check_hashes: bool = False) -> tuple[dict, list[np.ndarray]]:
    """Validate, then memory-map every shard as a read-only ``(rows, row_len)`` array."""
    index = validate(shard_dir, check_hashes=check_hashes)
    dtype, row_len = np.dtype(index["dtype"]), index["row_len"]
    maps = [np.memmap(Path(shard_dir) / s["file"], dtype=dtype, mode="r", shape=(s["rows"], row_len))
            for s in index["shards"]]
    return index, maps
