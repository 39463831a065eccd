"""Real actor and learner processes: synchronous RL, asynchronous RL with stale weights, and
PipelineRL's in-flight weight updates, on ``torch.distributed`` (gloo on CPU, NCCL on GPUs).

Rank 0 is the learner (``_learner``, here); ranks 1…n are actors (``course_lib.rl.actor``: the
actor process and the two channels, weights broadcast from the learner and one message per
finished sequence back to it, with ``publish``, ``post_receive``, ``swap_weights`` and ``STOP``
re-exported here).

Modes: ``sync`` — each actor generates its share of the batch (batch / n_actors sequences, in
its ``slots``; with the default batch = n_actors × slots that is one static batch) with the
latest weights, the learner trains, the actors wait for the new weights, repeat; ``async`` — the
same rounds, but round j is generated with weights version j − 1 while the learner trains on
round j − 1 (exactly one step stale: generation overlaps training); ``pipeline`` — a slot that
finishes takes a new problem at once, and weights are swapped between two decode steps, so one
sequence can be written by several versions.
``run`` launches a run and returns a ``trace.Trace`` with everything measured.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from .._validate import choice, positive, positive_int
from ..dist import launch
from . import task
from .actor import HEAD, STOP, _Actor, post_receive, publish, swap_weights
from .trace import MODES, Trace

__all__ = ["STOP", "swap_weights", "post_receive", "publish", "rl_worker", "run"]


def _learner(ctx, wg, mode: str, steps: int, slots: int, batch: int, max_len: int, lr: float,
             clip: float, shape: dict) -> dict:
    """Receive ``batch`` sequences, take one optimizer step, publish the new weights; repeat."""
    n = ctx.world_size - 1
    model = task.make_policy(max_len, seed=0, **shape)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    M = max_len
    msg = torch.zeros(HEAD + 3 * M, dtype=torch.float64)
    t_first = time.monotonic()
    published = [t_first]                    # float64 clock of each version's publication
    works = [publish(model, 0, wg)]
    rows: list[tuple] = []
    lag_tokens = np.zeros(1)
    seq_versions, seq_lengths, seq_lag, mismatch = [], [], [], []
    for k in range(steps):
        t_wait = time.monotonic()
        got = []
        for src in ([None] * batch if mode == "pipeline" else [a for a in range(1, n + 1) for _ in range(batch // n)]):
            dist.recv(msg, src=src, group=ctx.group)
            got.append(msg.clone())
        t0 = time.monotonic()
        m = torch.stack(got)
        lens = m[:, 3].long()
        T = int(lens.max())
        tokens = torch.cat([m[:, 2:3], m[:, HEAD:HEAD + T]], 1).long()
        vers = m[:, HEAD + M:HEAD + M + T].long()
        blogp = m[:, HEAD + 2 * M:HEAD + 2 * M + T].float()
        mask = torch.arange(T)[None, :] < lens[:, None]
        logp = task.sequence_logprobs(model, tokens)
        correct = task.step_correct(tokens)
        loss, st = task.pg_loss(logp, blogp, correct, mask, clip=clip)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # what the batch looked like: rewards, lags, versions per sequence, engine mismatch
        rewards = (correct * mask).sum(1) / lens
        lag = (k - vers)[mask].numpy()
        counts = np.bincount(lag)
        lag_tokens = np.pad(lag_tokens, (0, max(0, len(counts) - len(lag_tokens))))
        lag_tokens[:len(counts)] += counts
        nver = 1 + ((vers[:, 1:] != vers[:, :-1]) & mask[:, 1:]).sum(1)
        seq_versions += nver.tolist()
        seq_lag += (((k - vers) * mask).sum(1) / lens).tolist()
        seq_lengths += lens.tolist()
        single = mask & (vers == k) & (nver == 1)[:, None]     # sampled by these very weights
        mismatch += (logp.detach() - blogp).abs()[single].tolist()
        if k < steps - 1:
            published.append(time.monotonic())
            works.append(publish(model, k + 1, wg, published[-1] - t_first))
            works = [w for w in works if not w[0].is_completed()]
        rows.append((t_wait, t0, time.monotonic(), float(rewards.mean()), st["mean_abs_log_ratio"],
                     st["clipped_fraction"]))
    works.append(publish(model, STOP, wg, time.monotonic() - t_first))
    for a in range(1, n + 1):                # drain what the actors sent after the last step
        while True:
            dist.recv(msg, src=a, group=ctx.group)
            if msg[0] == 0:
                break
    for w, _ in works:
        w.wait()
    return {"rows": np.asarray(rows), "t_first": t_first, "published": np.asarray(published),
            "lag_tokens": lag_tokens,
            "param_checksum": float(sum(p.detach().double().sum() for p in model.parameters())),
            "seq_lag": np.asarray(seq_lag), "cpu_s": time.process_time(),
            "final_weights": parameters_to_vector(model.parameters()).detach().numpy().copy(),
            "seq_versions": np.asarray(seq_versions), "seq_lengths": np.asarray(seq_lengths),
            "mismatch_single": np.asarray(mismatch)}


def rl_worker(ctx, mode: str = "pipeline", steps: int = 60, slots: int = 4, batch: int | None = None,
              lengths: task.LengthDist | None = None, max_len: int = 64, lr: float = 3e-3,
              clip: float = 5.0, seed: int = 0, max_lag: int | None = 4, shape: dict | None = None) -> dict:
    """Rank 0 learns, the other ranks act (``run`` documents the arguments)."""
    torch.manual_seed(seed)
    wg = dist.new_group(list(range(ctx.world_size)), backend="gloo")
    batch = batch or slots * (ctx.world_size - 1)
    shape = shape or {}
    if ctx.rank == 0:
        return _learner(ctx, wg, mode, steps, slots, batch, max_len, lr, clip, shape)
    lengths = lengths or task.LengthDist.lab(max_len)
    return _Actor(ctx, wg, mode, slots, batch, lengths, max_len, seed, max_lag, shape).run()


def run(mode: str, n_actors: int = 2, steps: int = 60, slots: int = 4, batch: int | None = None,
        lengths: task.LengthDist | None = None, max_len: int = 64, lr: float = 3e-3, clip: float = 5.0,
        seed: int = 0, max_lag: int | None = 4, shape: dict | None = None, timeout: float = 120.0) -> Trace:
    """Launch 1 learner + ``n_actors`` actors with ``slots`` each, train ``steps`` optimizer steps
    on batches of ``batch`` sequences (default n_actors × slots) in ``mode``, and return the
    measured ``Trace`` (seconds from the first weight publication).

    ``lengths`` (default: power law 4…``max_len``, α = 1.2) fixes the answer lengths; ``lr`` and
    ``clip`` are Adam's learning rate and the importance-weight truncation; ``max_lag`` bounds how
    many batches a PipelineRL actor may run ahead of the learner; ``shape`` overrides the policy's
    width/depth. ``stats`` holds what the simulator needs (mean decode step, mean optimizer step,
    weight pick-up latency after publication, load time), the importance-ratio statistics per
    step, ``mismatch_single`` (|log π_learner − log π_actor| on tokens trained by the very weights
    that sampled them, in single-version sequences) and ``stale_kv`` (after each in-flight swap,
    the largest |Δ log π| between decoding through the old KV cache and a fresh forward pass).
    """
    mode = choice("mode", mode, MODES)
    n_actors, slots, steps = positive_int("n_actors", n_actors), positive_int("slots", slots), positive_int("steps", steps)
    batch = positive_int("batch", batch) if batch is not None else n_actors * slots
    if batch % n_actors:
        raise ValueError(f"batch must be a multiple of n_actors={n_actors}, got {batch}")
    lengths = lengths or task.LengthDist.lab(max_len)
    if max(lengths.lengths) > positive_int("max_len", max_len):
        raise ValueError(f"lengths go up to {max(lengths.lengths)} > max_len={max_len}")
    res = launch(rl_worker, 1 + n_actors, timeout=positive("timeout", timeout), threads_per_rank=1,
                 mode=mode, steps=steps, slots=slots, batch=batch, lengths=lengths, max_len=max_len,
                 lr=positive("lr", lr), clip=positive("clip", clip), seed=seed, max_lag=max_lag, shape=shape)
    learner, t0 = res[0], res[0]["t_first"]
    rows = learner["rows"]
    gen = [a["steps"] - np.array([t0, t0, 0.0, 0.0]) for a in res[1:]]
    picked = np.concatenate([a["swaps"] for a in res[1:]])      # (picked up, version, load s)
    published = learner["published"][picked[:, 1].astype(int)]
    swaps = np.column_stack([picked[:, 0], picked[:, 1], published, picked[:, 2]])
    stats = {"t_decode": float(np.concatenate([g[:, 1] - g[:, 0] for g in gen]).mean()),
             "t_train": float((rows[:, 2] - rows[:, 1]).mean()),
             "pickup_latency": float((swaps[:, 0] - swaps[:, 2]).mean()), "t_swap": float(swaps[:, 3].mean()),
             "mean_abs_log_ratio": rows[:, 4], "clipped_fraction": rows[:, 5],
             "learner_wait": rows[:, 1] - rows[:, 0], "mismatch_single": learner["mismatch_single"],
             "stale_kv": np.concatenate([a["stale_kv"] for a in res[1:]]), "swaps": swaps,
             "param_checksum": learner["param_checksum"], "final_weights": learner["final_weights"],
             "cpu_s": [r["cpu_s"] for r in res], "simulated": False}
    return Trace(mode, n_actors, slots, batch, (0.0, float(rows[-1, 2] - t0)), gen, rows[:, 1:3] - t0,
                 rows[:, 3], learner["lag_tokens"], learner["seq_versions"], learner["seq_lengths"],
                 learner["seq_lag"], stats)
