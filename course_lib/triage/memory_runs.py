"""Lab driver: a rank killed, its shard restored from a peer's memory, timed against a DCP restore.

``kill_and_restore(disk_dir, memory_root)`` runs two launches of ``world_size`` gloo ranks, each
holding a distinct shard of ``elements`` float32 parameters and Adam-like moments:

1. train ``steps`` steps; after each step an in-memory checkpoint
   (:class:`~course_lib.triage.memory.PeerCheckpoint`), and at step ``disk_step`` a disk checkpoint
   (chapter 12's :class:`~course_lib.faults.checkpointer.ShardedCheckpointer`); each rank logs its
   shard's digest per step. Then rank ``victim`` kills itself (SIGKILL): the launcher names it.
2. The victim's node is lost with it (its ``node_<r>`` folder deleted; with ``peer_dead`` its peer's
   too; with ``corrupt_peer`` a byte of the peer's copy flipped). A fresh launch restores every rank
   from memory, or from disk where memory cannot serve, times it, then times a DCP restore of the
   same ranks from disk, and checks the restored shards' digests against those logged in launch 1.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

__all__ = ["kill_and_restore"]


def _state(rank: int, elements: int):
    import torch
    gen = torch.Generator().manual_seed(rank)
    return {f"r{rank}.w": torch.randn(elements, generator=gen), f"r{rank}.m": torch.zeros(elements)}


def _step(state: dict, step: int) -> None:
    for k, v in state.items():
        if k.endswith(".m"):
            v.mul_(0.9).add_(0.1 * step)
        else:
            v.mul_(0.999).add_(1e-3)


def _train_worker(ctx, disk_dir: str, memory_root: str, steps: int, disk_step: int, victim: int,
                  elements: int, log_dir: str) -> None:
    import os
    import signal

    import torch.distributed as dist

    from course_lib.faults.checkpointer import ShardedCheckpointer
    from course_lib.faults.digests import digest
    from course_lib.triage.memory import PeerCheckpoint
    state = _state(ctx.rank, elements)
    mem = PeerCheckpoint(memory_root, ctx.group)
    log = Path(log_dir) / f"digests_{ctx.rank}.json"
    seen = {}
    with ShardedCheckpointer(disk_dir, ctx.group, run_id="triage") as ck:
        for step in range(1, steps + 1):
            _step(state, step)
            mem.save(state, step)
            seen[step] = digest(state)
            log.write_text(json.dumps(seen))
            if step == disk_step:
                ck.save({"shard": state}, step)
        dist.barrier(group=ctx.group)
    if ctx.rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier(group=ctx.group)    # the survivors wait here; the launcher names the dead rank


def _restore_worker(ctx, disk_dir: str, memory_root: str, elements: int) -> dict:
    import time

    from course_lib.faults.checkpointer import ShardedCheckpointer
    from course_lib.faults.digests import digest
    from course_lib.triage.memory import PeerCheckpoint
    blank = _state(ctx.rank, elements)
    with ShardedCheckpointer(disk_dir, ctx.group, run_id="triage") as ck:
        def from_disk() -> int:
            step = ck.latest()
            ck.load({"shard": blank}, step)
            return step
        res = PeerCheckpoint(memory_root, ctx.group).restore(fallback=from_disk)
        state = res["state"] if res["state"] is not None else blank
        t0 = time.perf_counter()            # the same ranks restored from disk, for the comparison
        disk_state = _state(ctx.rank, elements)
        disk_step = ck.latest()
        ck.load({"shard": disk_state}, disk_step)
        disk_s = time.perf_counter() - t0
    return {"rank": ctx.rank, "source": res["source"], "step": res["step"], "message": res["message"],
            "memory_s": res["seconds"], "disk_s": disk_s, "digest": digest(state), "disk_step": disk_step}


def kill_and_restore(disk_dir: str | Path, memory_root: str | Path, *, world_size: int = 4, victim: int = 1,
                     steps: int = 4, disk_step: int = 2, elements: int = 1 << 18, peer_dead: bool = False,
                     corrupt_peer: bool = False) -> dict:
    """Kill ``victim`` after ``steps`` steps, lose its node (and its peer's with ``peer_dead``, or
    flip a byte of the peer's copy with ``corrupt_peer``), restore; per rank where from, how fast,
    and whether its shard equals, bit for bit, what it was at the step restored."""
    from course_lib.dist import RankError, launch
    from course_lib.triage.memory import node_dir
    log_dir = Path(disk_dir) / "digests"
    log_dir.mkdir(parents=True, exist_ok=True)
    kill = None
    try:
        launch(_train_worker, world_size, timeout=60.0, collective_timeout=20.0, disk_dir=str(Path(disk_dir) / "ckpt"),
               memory_root=str(memory_root), steps=steps, disk_step=disk_step, victim=victim, elements=elements,
               log_dir=str(log_dir))
    except RankError as e:
        kill = str(e).splitlines()[0]
    peer = (victim + 1) % world_size
    shutil.rmtree(node_dir(memory_root, victim), ignore_errors=True)
    if peer_dead:
        shutil.rmtree(node_dir(memory_root, peer), ignore_errors=True)
    if corrupt_peer:
        held = node_dir(memory_root, peer) / f"copy_of_{victim}.pt"
        blob = bytearray(held.read_bytes())
        blob[len(blob) // 2] ^= 0x01
        held.write_bytes(bytes(blob))
    rows = launch(_restore_worker, world_size, timeout=60.0, collective_timeout=20.0,
                  disk_dir=str(Path(disk_dir) / "ckpt"), memory_root=str(memory_root), elements=elements)
    logged = [json.loads((log_dir / f"digests_{r}.json").read_text()) for r in range(world_size)]
    for row in rows:
        row["bit_identical"] = row["digest"] == logged[row["rank"]][str(row["step"])]
    return {"kill": kill, "rows": rows, "victim": victim, "peer": peer}
