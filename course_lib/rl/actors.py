"""Real actor and learner processes: synchronous RL, asynchronous RL with stale weights, and
PipelineRL's in-flight weight updates, on ``torch.distributed`` (gloo on CPU, NCCL on GPUs).

Rank 0 is the learner, ranks 1…n are actors. Two channels, each on its own process group:

* **weights**, learner → actors: ``dist.broadcast`` of one flat float32 buffer
  ``[version, publish time, *parameters]`` on ``weights_group`` (the time in seconds since the
  learner's first publication: a float32 holds that to microseconds, a raw clock reading of
  10⁴–10⁶ s only to milliseconds or worse). Every actor always has one
  asynchronous broadcast posted into its buffer (``async_op=True``) and *polls* it; version −1
  means stop. Swapping in new weights is ``swap_weights`` (the graded exercise rewrites it).
* **sequences**, actors → learner: one ``isend`` per finished sequence of a fixed-size float64
  message (header, response tokens, the policy version of every token, the actor's
  log-probabilities), received by the learner with ``recv`` (from any actor in PipelineRL).

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
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from .._validate import choice, positive, positive_int
from ..dist import launch
from . import task
from .trace import MODES, Trace

__all__ = ["STOP", "swap_weights", "post_receive", "publish", "rl_worker", "run"]

STOP = -1        # the version number that tells actors to stop
HEAD = 4         # sequence message header: kind (1 = sequence, 0 = end), actor, start digit, length


def post_receive(buf: torch.Tensor, group: Any) -> Any:
    """Post the asynchronous receive of the next weights broadcast into ``buf``."""
    return dist.broadcast(buf, src=0, group=group, async_op=True)


def publish(model: torch.nn.Module, version: int, group: Any, clock: float = 0.0) -> tuple[Any, torch.Tensor]:
    """Learner side: broadcast ``[version, clock, *parameters]`` without waiting (``clock``: the
    learner's time of publication, seconds since its first one); keep the returned buffer alive
    until the handle completes."""
    flat = parameters_to_vector(model.parameters()).detach().float()
    buf = torch.cat([torch.tensor([float(version), clock]), flat])
    return dist.broadcast(buf, src=0, group=group, async_op=True), buf


def swap_weights(model: torch.nn.Module, pending: Any, buf: torch.Tensor, group: Any):
    """The in-flight weight swap, called by an actor between two decode steps.

    If the posted broadcast has not completed, return ``(pending, None)`` at once: generation
    must never wait for the learner. Otherwise copy ``buf[2:]`` into the parameters (a copy:
    the next broadcast will overwrite ``buf`` while the model keeps generating), post the next
    receive and return ``(new_handle, version)``. On the stop message return ``(None, STOP)``
    without posting another receive (nobody would ever send it).
    """
    if not pending.is_completed():
        return pending, None
    pending.wait()
    version = int(buf[0])
    if version == STOP:
        return None, STOP
    with torch.no_grad():
        offset = 2
        for p in model.parameters():
            p.copy_(buf[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    return post_receive(buf, group), version


class _Actor:
    """One generator: ``slots`` sequences decoded together with a KV cache."""

    def __init__(self, ctx, wg, mode: str, slots: int, batch: int, lengths: task.LengthDist,
                 max_len: int, seed: int, max_lag: int | None, shape: dict) -> None:
        self.ctx, self.wg, self.mode, self.S = ctx, wg, mode, slots
        self.quota = batch / (ctx.world_size - 1)        # sequences per actor per optimizer step
        self.max_lag, self.max_len = max_lag, max_len
        self.model = task.make_policy(max_len, seed=1, **shape)    # replaced by version 0
        self.cache = task.new_cache(self.model, slots)
        self.problems = task.Problems(lengths, task.stream_seed(seed, ctx.rank))
        self.gen = torch.Generator().manual_seed(task.stream_seed(seed, ctx.rank) + 7)
        self.tokens = torch.zeros(slots, max_len + 1, dtype=torch.long)
        self.vers = torch.zeros(slots, max_len, dtype=torch.long)
        self.logp = torch.zeros(slots, max_len)
        self.pos, self.length = torch.zeros(slots, dtype=torch.long), torch.zeros(slots, dtype=torch.long)
        self.active = torch.zeros(slots, dtype=torch.bool)
        self.buf = torch.zeros(2 + sum(p.numel() for p in self.model.parameters()))
        self.pending = post_receive(self.buf, wg)
        self.version, self.started, self.batches = -2, 0, 0
        self.steps: list[tuple] = []    # (t0, t1, busy slots, 1) per decode step
        self.swaps: list[tuple] = []    # (t picked up, version, seconds to load)
        self.sends: list = []
        self.stale: list[float] = []    # stale-KV-cache gaps measured after in-flight swaps

    def poll(self, block: bool = False) -> bool:
        """Take new weights if they arrived (waiting for them if ``block``); False on stop."""
        if block and self.pending is not None:
            self.pending.wait()
        t0 = time.monotonic()
        self.pending, v = swap_weights(self.model, self.pending, self.buf, self.wg)
        if v is None:
            return True
        if v == STOP:
            return False
        self.version = v
        self.swaps.append((t0, v, time.monotonic() - t0))
        if self.mode == "pipeline":
            self.probe_stale_cache()
        return True

    @torch.no_grad()
    def probe_stale_cache(self) -> None:
        """Right after a swap: max |Δ log π| over the vocabulary between the next-token
        distribution decoded through the KV cache (keys and values written by older weights) and
        a fresh forward pass of the new weights over the same prefix. The decode step writes
        exactly what the next real step writes, so it changes nothing."""
        busy = torch.nonzero(self.active & (self.pos > 0))[:, 0]
        if len(busy):
            i, p = int(busy[0]), int(self.pos[busy[0]])
            cached = task.decode_step(self.model, self.cache, self.tokens[torch.arange(self.S), self.pos], self.pos)[i]
            fresh = self.model(self.tokens[i:i + 1, :p + 1])[0, -1]
            self.stale.append(float((torch.log_softmax(cached, -1) - torch.log_softmax(fresh, -1)).abs().max()))

    def start(self, i: int) -> None:
        d, L = self.problems.next()
        self.tokens[i, 0], self.pos[i], self.length[i] = d, 0, L
        self.active[i] = True
        self.started += 1

    def step(self) -> None:
        """One decode step: every slot feeds one token; busy slots sample their next token."""
        t0 = time.monotonic()
        rows = torch.arange(self.S)
        logits = task.decode_step(self.model, self.cache, self.tokens[rows, self.pos], self.pos)
        logp = torch.log_softmax(logits, -1)
        nxt = torch.multinomial(logp.exp(), 1, generator=self.gen)[:, 0]
        busy = torch.nonzero(self.active)[:, 0]
        p = self.pos[busy]
        self.tokens[busy, p + 1] = nxt[busy]
        self.vers[busy, p] = self.version
        self.logp[busy, p] = logp[busy, nxt[busy]]
        self.pos[busy] += 1
        for i in busy[self.pos[busy] == self.length[busy]].tolist():
            self.finish(i)
        self.steps.append((t0, time.monotonic(), len(busy), 1))

    def finish(self, i: int) -> None:
        L, M = int(self.length[i]), self.max_len
        msg = torch.zeros(HEAD + 3 * M, dtype=torch.float64)
        msg[:HEAD] = torch.tensor([1.0, self.ctx.rank, float(self.tokens[i, 0]), L], dtype=torch.float64)
        msg[HEAD:HEAD + L] = self.tokens[i, 1:L + 1].double()
        msg[HEAD + M:HEAD + M + L] = self.vers[i, :L].double()
        msg[HEAD + 2 * M:HEAD + 2 * M + L] = self.logp[i, :L].double()
        self.sends = [(w, m) for w, m in self.sends if not w.is_completed()]
        self.sends.append((dist.isend(msg, dst=0, group=self.ctx.group), msg))
        self.active[i] = False

    def run(self) -> dict:
        alive = self.poll(block=True)                    # version 0
        while alive:
            if self.mode == "pipeline":
                alive = self.poll()
                if not alive:
                    break
                for i in torch.nonzero(~self.active)[:, 0].tolist():
                    if self.max_lag is not None and self.started >= (self.version + 1 + self.max_lag) * self.quota:
                        break
                    self.start(i)
                if self.active.any():
                    self.step()
                else:                                    # too far ahead: wait for the learner
                    alive = self.poll(block=True)
            else:
                need = self.batches - (self.mode == "async")   # sync: fresh; async: one step stale
                while alive and self.version < need:
                    alive = self.poll(block=True)        # versions arrive one by one, in order
                if not alive:
                    break
                todo = int(self.quota)                   # one round: batch / n_actors problems
                while todo or self.active.any():
                    for i in torch.nonzero(~self.active)[:, 0].tolist()[:todo]:
                        self.start(i)
                        todo -= 1
                    self.step()
                self.batches += 1
        end = torch.zeros(HEAD + 3 * self.max_len, dtype=torch.float64)
        dist.send(end, dst=0, group=self.ctx.group)      # kind 0: nothing more from this actor
        for w, _ in self.sends:
            w.wait()
        return {"steps": np.asarray(self.steps, float).reshape(-1, 4), "cpu_s": time.process_time(),
                "stale_kv": np.asarray(self.stale),
                "swaps": np.asarray(self.swaps, float).reshape(-1, 3)}


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
    lengths = lengths or task.LengthDist.power_law(4, max_len, 1.2)
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
    lengths = lengths or task.LengthDist.power_law(4, max_len, 1.2)
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
