"""In-memory checkpoints: each rank's shard kept in host memory, and a copy in a peer's, sent over gloo.

A restart from disk reads every shard back through the file system. Gemini (SOSP 2023) keeps
checkpoints in the CPU memory of the training hosts instead, each shard also on another host, so
that a failed host's shard is fetched from its peer's memory. :class:`PeerCheckpoint` does this on
real ranks: ``save`` keeps the rank's shard in its node's memory and sends it over the process group
to rank ``(r + 1) % W``, which keeps it in its own; both with a SHA-256 digest.

"Host memory" is a folder per node under ``memory_root`` on a RAM file system (``/dev/shm``): it
outlives the training process, as a host agent's memory outlives a crashed trainer, and it is lost
with its node (the caller deletes ``node_<r>`` to kill a node, not only its process).

``restore`` (every rank calls it) loads each rank's shard from its own node, else from its peer
(received over gloo), checks the digest, and says where each shard came from. When a shard has no
good copy in memory (its node and its peer's both gone, or the peer's copy fails its digest), every
rank falls back to the disk checkpoint (``fallback``: a callable that loads it and returns its
step), and the message names the rank, its peer and why.
"""
from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = ["PeerCheckpoint", "PeerCopyError", "node_dir"]


class PeerCopyError(RuntimeError):
    """No usable in-memory copy of a rank's shard, and no disk checkpoint to fall back to."""


def node_dir(memory_root: str | Path, rank: int) -> Path:
    """The folder standing for rank ``rank``'s node's host memory."""
    return Path(memory_root) / f"node_{rank}"


def _pack(state: dict, step: int) -> bytes:
    buf = io.BytesIO()
    torch.save({"step": step, "state": state}, buf)
    return buf.getvalue()


def _write(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    tmp.rename(path)
    path.with_name(path.name + ".sha256").write_text(hashlib.sha256(blob).hexdigest())


def _read(path: Path) -> tuple[bytes | None, str]:
    """The blob at ``path`` and "" if present and its digest holds; else None and why not."""
    if not path.is_file():
        return None, "gone"
    blob, want = path.read_bytes(), path.with_name(path.name + ".sha256").read_text().strip()
    got = hashlib.sha256(blob).hexdigest()
    if got != want:
        return None, f"corrupt: its SHA-256 is {got[:12]}..., {want[:12]}... was recorded when it was saved"
    return blob, ""


class PeerCheckpoint:
    """Checkpoints in host memory, each shard also on peer ``(r + 1) % W``. Collective over ``group``."""

    def __init__(self, memory_root: str | Path, group) -> None:
        self.root, self.group = Path(memory_root), group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if self.world < 2:
            raise ValueError("PeerCheckpoint needs at least two ranks: a shard's copy must live on another node")
        self.peer, self.left = (self.rank + 1) % self.world, (self.rank - 1) % self.world

    def _own(self, r: int) -> Path:
        return node_dir(self.root, r) / f"own_{r}.pt"

    def _held(self, holder: int, r: int) -> Path:
        return node_dir(self.root, holder) / f"copy_of_{r}.pt"

    def _exchange(self, blob: bytes | None, to: int, frm: int) -> bytes | None:
        """Send ``blob`` to rank ``to`` and receive one from rank ``frm`` (lengths first; -1: none)."""
        g = lambda r: dist.get_global_rank(self.group, r)   # noqa: E731
        n_out = torch.tensor([-1 if blob is None else len(blob)], dtype=torch.int64)
        n_in = torch.zeros(1, dtype=torch.int64)
        ops = [dist.P2POp(dist.isend, n_out, g(to), self.group), dist.P2POp(dist.irecv, n_in, g(frm), self.group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ops = []
        if blob is not None:
            ops.append(dist.P2POp(dist.isend, torch.frombuffer(bytearray(blob), dtype=torch.uint8), g(to), self.group))
        buf = torch.empty(max(int(n_in), 0), dtype=torch.uint8)
        if int(n_in) >= 0:
            ops.append(dist.P2POp(dist.irecv, buf, g(frm), self.group))
        for w in dist.batch_isend_irecv(ops) if ops else []:
            w.wait()
        return None if int(n_in) < 0 else buf.numpy().tobytes()

    def save(self, state: dict, step: int) -> float:
        """Keep ``state`` (this rank's shard) in this node's memory and in the peer's; seconds taken."""
        t0 = time.perf_counter()
        blob = _pack(state, step)
        _write(self._own(self.rank), blob)
        got = self._exchange(blob, self.peer, self.left)
        _write(self._held(self.rank, self.left), got)
        dist.barrier(group=self.group)
        return time.perf_counter() - t0

    def restore(self, fallback=None) -> dict:
        """Every rank's shard back from memory (own node, else the peer's copy over gloo), or every
        rank from disk through ``fallback()`` when some shard has no good copy. Returns ``state``,
        ``step``, ``source`` ("own memory" / "peer rank P's memory" / "disk"), ``seconds`` and ``message``."""
        t0 = time.perf_counter()
        own, why_own = _read(self._own(self.rank))
        held, why_held = _read(self._held(self.rank, self.left))      # the copy this node holds for its left rank
        needs = [None] * self.world
        dist.all_gather_object(needs, own is None, group=self.group)
        blob = self._exchange(held if needs[self.left] else None, self.left, self.peer)
        fates = [None] * self.world
        mine = (why_own, None if blob is None else _read_ok(blob)) if own is None else None
        dist.all_gather_object(fates, (mine, why_held if needs[self.left] else None), group=self.group)
        lost = []
        for r in range(self.world):
            if fates[r][0] is not None and fates[r][0][1] is None:
                peer = (r + 1) % self.world
                lost.append(f"rank {r}'s shard: its own node's copy is {fates[r][0][0]} and the copy held by its "
                            f"peer rank {peer} is {fates[peer][1] or 'gone'}")
        if lost:
            if fallback is None:
                raise PeerCopyError("no usable in-memory copy of " + "; ".join(lost) + ", and no disk checkpoint "
                                    "to fall back to")
            step = fallback()
            return {"state": None, "step": step, "source": "disk", "seconds": time.perf_counter() - t0,
                    "message": "fell back to the disk checkpoint (step " + str(step) + ") for every rank: "
                               + "; ".join(lost)}
        data = torch.load(io.BytesIO(own if own is not None else blob), weights_only=True)
        source = "own memory" if own is not None else f"peer rank {self.peer}'s memory"
        return {"state": data["state"], "step": data["step"], "source": source,
                "seconds": time.perf_counter() - t0, "message": f"rank {self.rank} restored from {source}"}


def _read_ok(blob: bytes) -> str | None:
    """A received blob is usable (its digest was checked by the holder before sending)."""
    return "received" if blob else None
