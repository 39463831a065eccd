"""A collective flight recorder: each rank's last collectives in a bounded ring, dumped on a timeout.

Training code calls its collectives through :class:`FlightRecorder` (``rec.all_reduce(t, name=...)``)
and wraps its compute in ``with rec.compute("forward"):``. Every call becomes an entry in a ring of
``capacity`` entries (the oldest dropped): the rank's own sequence number, the op, the group, the
tensor sizes and dtype, a caller's label (what PyTorch's recorder keeps as a stack trace), the state
(``scheduled`` → ``started`` → ``completed``, or ``failed``) and the time of each.

A hung collective says nothing, so a daemon thread watches the entry in progress: once it has been in
progress for ``dump_after_s`` (a collective its peers do not join, a compute span that does not end)
the rank writes its ring to ``folder/rank_NNNNN.json`` atomically (temp file, fsync, rename); a later dump replaces it.
A collective that raises (gloo's timeout) dumps too. :mod:`course_lib.triage.analyze` reads the
folder and names the rank that never entered the collective its peers wait in.

Cost: one dict and a few ``time.time()`` calls per collective; nothing is sent anywhere.
"""
from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import threading
import time
import zlib
from pathlib import Path

import torch
import torch.distributed as dist

from ..atomic import atomic_file, temp_path

__all__ = ["FlightRecorder", "CollectiveMismatch", "dump_path", "OPS"]

OPS = ("all_reduce", "broadcast", "all_gather", "barrier")


class CollectiveMismatch(RuntimeError):
    """``check=True`` found ranks calling different collectives at the same sequence number."""


def dump_path(folder: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its dump in ``folder``."""
    return Path(folder) / f"rank_{rank:05d}.json"


class FlightRecorder:
    """A rank's ring buffer of collectives (and compute spans), with the wrappers to call them by.

    ``folder`` is where the dump goes (the caller names it; every rank of a run the same folder);
    ``group`` the process group the collectives run on (passed explicitly, never a global).
    """

    def __init__(self, folder: str | Path, rank: int, group=None, *, capacity: int = 64,
                 dump_after_s: float = 1.0, poll_s: float = 0.05, check: bool = False) -> None:
        from .._validate import positive, positive_int
        self.capacity = positive_int("capacity", capacity)
        self.dump_after_s = positive("dump_after_s", dump_after_s)
        self.folder, self.rank, self.group, self.check = Path(folder), int(rank), group, bool(check)
        self.ring: collections.deque = collections.deque(maxlen=self.capacity)
        self.seq = 0                 # the next collective's sequence number on this rank
        self.current: dict | None = None   # the entry in progress (a collective or compute span)
        self.dumped: Path | None = None
        self._dumped_entry: dict | None = None   # the entry in progress at the watchdog's last dump
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(poll_s,), daemon=True,
                                        name=f"flight-recorder-{rank}")
        self._thread.start()

    # -- recording ---------------------------------------------------------------------------
    def _enter(self, entry: dict) -> dict:
        with self._lock:
            self.ring.append(entry)
            self.current = entry
        return entry

    def _collective(self, op: str, tensors: list, name: str, call):
        t = tensors[0] if tensors else None
        entry = self._enter({"seq": self.seq, "kind": "collective", "op": op, "name": name,
                             "group": "world" if self.group is None else str(dist.get_process_group_ranks(self.group)),
                             "sizes": [list(x.shape) for x in tensors], "dtype": str(t.dtype) if t is not None else None,
                             "state": "scheduled", "t_scheduled": time.time(), "t_started": None,
                             "t_completed": None})
        self.seq += 1
        entry["state"], entry["t_started"] = "started", time.time()
        try:
            if self.check:
                self._check(entry)
            out = call()
        except CollectiveMismatch:
            raise
        except Exception as exc:
            entry["state"], entry["error"] = "failed", str(exc).splitlines()[0][:300]
            self.dump(f"{op} {name!r} raised")
            raise
        entry["state"], entry["t_completed"] = "completed", time.time()
        with self._lock:
            self.current = None
        return out

    def _check(self, entry: dict) -> None:
        """``check=True``: before the collective, every rank all-gathers a fingerprint of it (op,
        label, element count, dtype; four integers) and compares, as PyTorch's
        ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does. A mismatch is named here, before gloo acts on it (a
        size mismatch makes gloo abort the receiving rank, or pass silently), at the price of one
        more small collective per collective."""
        numel = sum(math.prod(s) for s in entry["sizes"])
        fp = torch.tensor([OPS.index(entry["op"]), zlib.crc32(entry["name"].encode()) & 0x7FFFFFFF, numel,
                           zlib.crc32(str(entry["dtype"]).encode()) & 0x7FFFFFFF], dtype=torch.int64)
        world = dist.get_world_size(self.group)
        got = [torch.zeros_like(fp) for _ in range(world)]
        dist.all_gather(got, fp, group=self.group)
        rows = [g.tolist() for g in got]
        if any(row != rows[0] for row in rows):
            common = collections.Counter(map(tuple, rows)).most_common(1)[0][0]
            odd = [r for r, row in enumerate(rows) if tuple(row) != common]
            entry["state"], entry["peers"] = "mismatch", rows
            self.dump(f"{entry['op']} {entry['name']!r} (seq {entry['seq']}): fingerprints differ on rank(s) {odd}")
            raise CollectiveMismatch(
                f"collective seq {entry['seq']} differs across ranks: rank(s) {', '.join(map(str, odd))} called "
                f"another op, label, size or dtype than the others (op, label, elements, dtype: {rows}); "
                f"the flight recorder dumped to {self.folder}")

    def all_reduce(self, tensor: torch.Tensor, *, name: str = "") -> None:
        self._collective("all_reduce", [tensor], name, lambda: dist.all_reduce(tensor, group=self.group))

    def broadcast(self, tensor: torch.Tensor, src: int, *, name: str = "") -> None:
        self._collective("broadcast", [tensor], name, lambda: dist.broadcast(tensor, src, group=self.group))

    def all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor, *, name: str = "") -> None:
        self._collective("all_gather", [tensor], name, lambda: dist.all_gather(outputs, tensor, group=self.group))

    def barrier(self, *, name: str = "") -> None:
        self._collective("barrier", [], name, lambda: dist.barrier(group=self.group))

    @contextlib.contextmanager
    def compute(self, name: str):
        """Mark a span of work that is not a collective: a dump taken inside it says what the
        rank was doing instead of joining its peers."""
        entry = self._enter({"seq": None, "kind": "compute", "op": "compute", "name": name, "state": "started",
                             "t_started": time.time(), "t_completed": None, "next_seq": self.seq})
        try:
            yield entry
        finally:
            entry["state"], entry["t_completed"] = "completed", time.time()
            with self._lock:
                if self.current is entry:
                    self.current = None

    # -- dumping -----------------------------------------------------------------------------
    def snapshot(self, reason: str = "") -> dict:
        with self._lock:
            entries = [dict(e) for e in self.ring]
            current = dict(self.current) if self.current is not None else None
        return {"rank": self.rank, "pid": os.getpid(), "reason": reason, "dumped_at": time.time(),
                "next_seq": self.seq, "capacity": self.capacity, "current": current, "entries": entries}

    def dump(self, reason: str) -> Path:
        """Write the ring to ``folder/rank_NNNNN.json`` atomically and return its path. A later dump
        replaces an earlier one: a collective that was only slow (and dumped) and then completed
        must not hide the hang that comes after it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = dump_path(self.folder, self.rank)
        body = json.dumps(self.snapshot(reason), indent=1).encode()
        with atomic_file(path, temp_path(path)) as f:
            f.write(body)
        self.dumped = path
        return path

    def _watch(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            cur = self.current
            if cur is None or cur is self._dumped_entry:
                continue
            since = time.time() - (cur.get("t_started") or cur.get("t_scheduled") or time.time())
            if since > self.dump_after_s:
                what = f"{cur['op']} {cur['name']!r}" + (f" (seq {cur['seq']})" if cur["seq"] is not None else "")
                self._dumped_entry = cur
                self.dump(f"{what} in progress for more than {self.dump_after_s:g} s")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1.0)
