"""Chapter 12's lab drivers for sharded checkpoints with ``torch.distributed.checkpoint`` (DCP):
the code the lab and the tests run on real ranks, apart from the library they measure
(``course_lib.faults.checkpointer``, ``integrity``, ``digests``).

With FSDP every rank holds only its shard of the weights and of the optimizer state, so every rank
writes its own shard, in parallel, and no rank ever holds the whole model: ``dcp.save`` plans who
writes what, each rank writes its files, and a coordinator writes the ``.metadata`` that maps
tensors to files. ``dcp.load`` reads that map back for *any* sharding: a checkpoint saved by 4
ranks loads into 2 (resharding).

DCP alone does not tell a resuming job which checkpoint finished, nor whether its files are
intact. :class:`~course_lib.faults.checkpointer.ShardedCheckpointer` adds chapter 6's recipe
on top: after DCP's save has returned on every rank (and its files were fsynced), rank 0 writes a
``COMPLETE`` marker, atomically and last, with every file's SHA-256; a directory without the
marker is a save killed part-way and is never loaded, and one whose files do not match it is
refused by name and the job resumes from the checkpoint before (``course_lib.faults.integrity``).

``dcp.async_save`` copies the state to CPU memory (staging), returns, and writes in a background
thread, so training overlaps the write; its collectives run on their own process group, so they
never interleave with the training's. The demos: :func:`async_vs_sync` measures the blocking time
of both, :func:`reshard_check` saves with 4 ranks and loads with 2; ``course_lib.faults.digests``
has the SHA-256 fingerprints by which "bit-identical" is checked.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist

from .checkpointer import ShardedCheckpointer, checkpoint_dir
from .digests import digest, full_digests

__all__ = ["async_vs_sync", "reshard_check"]

# ---------------------------------------------------------------------------------- the demos
SAVE_DEMO_MODEL = {"vocab_size": 256, "seq_len": 32, "n_layers": 4, "n_heads": 4, "d_model": 192}


def _local_digest(state) -> str:
    """Digest of this rank's own shards of the weights (no collective)."""
    return digest({k: v.to_local() for k, v in state.model.state_dict().items()})


def _save_timing_worker(ctx, root: str, model: dict, repeats: int, overlap_steps: int, seed: int) -> dict:
    """Time sync saves, then async saves with ``overlap_steps`` training steps during each write;
    check that each async checkpoint holds the weights of the moment it was taken."""
    import statistics
    from .elastic import JobConfig, build_state, train_step
    torch.set_num_threads(1)
    state = build_state(JobConfig(model=model, seed=seed, global_batch=2 * ctx.world_size), ctx.group)
    ckpt_group = dist.new_group(backend="gloo")
    train_step(state, ctx.group)                       # AdamW's moments exist from here on
    sync = ShardedCheckpointer(Path(root) / "sync", ckpt_group)
    sync_s = [sync.save({"train": state}, state.step) for _ in range(repeats)]
    asy = ShardedCheckpointer(Path(root) / "async", ckpt_group, use_async=True)
    blocking, total, taken = [], [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        blocking.append(asy.save({"train": state}, state.step))
        taken[state.step] = _local_digest(state)
        for _ in range(overlap_steps):                 # training goes on while the write runs
            train_step(state, ctx.group)
        asy.wait()
        total.append(time.perf_counter() - t0)
    intact = True
    for step, expected in taken.items():               # load each async checkpoint back
        fresh = build_state(JobConfig(model=model, seed=seed + 1, global_batch=2 * ctx.world_size), ctx.group)
        asy.load({"train": fresh}, step)
        intact &= _local_digest(fresh) == expected and fresh.step == step
    nbytes = sum(f.stat().st_size for f in (Path(root) / "sync").rglob("*.distcp")) // repeats
    med = statistics.median
    return {"sync_s": med(sync_s), "async_blocking_s": med(blocking), "async_total_s": med(total),
            "overlap_steps": overlap_steps, "checkpoint_bytes": nbytes, "async_intact": intact}


def async_vs_sync(directory: str | Path, *, world_size: int = 2, model: dict | None = None,
                  repeats: int = 3, overlap_steps: int = 2, seed: int = 0, timeout: float = 120.0) -> dict:
    """Lab demo: median seconds a synchronous ``dcp.save`` blocks training, against the blocking
    part of ``dcp.async_save`` (staging to memory) while ``overlap_steps`` steps run during the
    write; also the checkpoint's bytes on disk and whether every async checkpoint loads back to
    the weights it was taken from. Rank 0's figures."""
    from ..dist import launch
    res = launch(_save_timing_worker, world_size, backend="gloo", timeout=timeout, threads_per_rank=1,
                 root=str(directory), model=dict(model or SAVE_DEMO_MODEL), repeats=repeats,
                 overlap_steps=overlap_steps, seed=seed)
    return {**res[0], "async_intact": all(r["async_intact"] for r in res)}


def _reshard_worker(ctx, root: str, job, steps: int, save: bool) -> dict:
    """Train ``steps`` steps and save (``save``) or load the latest checkpoint; then score the next
    batch, whole, on every rank: the same loss bits on any number of ranks."""
    from .elastic import build_state, train_step
    torch.set_num_threads(1)
    state = build_state(job, ctx.group)
    ckpt = ShardedCheckpointer(root, ctx.group, run_id="reshard-demo")   # two launches, one job
    if save:
        for _ in range(steps):
            train_step(state, ctx.group)
        ckpt.save({"train": state}, state.step)
    else:
        ckpt.load({"train": state}, ckpt.latest())
    files = len(list(checkpoint_dir(root, state.step).glob("*.distcp")))
    batch = state.loader.next()
    with torch.no_grad():
        loss = state.model(batch[:, :-1], batch[:, 1:])[1].item()
    return {**full_digests(state), "next_loss": loss, "world_size": ctx.world_size, "shard_files": files}


def reshard_check(directory: str | Path, *, save_ranks: int = 4, load_ranks: int = 2, steps: int = 3,
                  seed: int = 0, timeout: float = 120.0) -> dict:
    """Lab demo: train and save with ``save_ranks`` ranks (one shard file each), load that
    checkpoint with ``load_ranks`` ranks; return both sides' next-step loss and whether the
    weights, the AdamW state and the next loss are bit-identical after resharding."""
    from ..dist import launch
    from .elastic import JobConfig
    job = JobConfig(seed=seed, global_batch=save_ranks * load_ranks)
    kw = dict(backend="gloo", timeout=timeout, threads_per_rank=1, root=str(directory), job=job, steps=steps)
    saved = launch(_reshard_worker, save_ranks, save=True, **kw)[0]
    loaded = launch(_reshard_worker, load_ranks, save=False, **kw)[0]
    same = all(saved[k] == loaded[k] for k in ("weights_sha256", "optim_sha256", "steps"))
    return {"saved_by": save_ranks, "loaded_by": load_ranks, "shard_files": saved["shard_files"],
            "next_loss_saved": saved["next_loss"], "next_loss_loaded": loaded["next_loss"],
            "state_identical": same, "next_loss_identical": saved["next_loss"] == loaded["next_loss"]}
