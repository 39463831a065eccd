"""One actor process of an RL run, and the two channels it shares with the learner.

Rank 0 is the learner, ranks 1…n are actors; each channel is on its own process group:

* **weights**, learner → actors: ``dist.broadcast`` of one flat float32 buffer
  ``[version, publish time, *parameters]`` on ``weights_group`` (the time in seconds since the
  learner's first publication: a float32 holds that to microseconds, a raw clock reading of
  10⁴–10⁶ s only to milliseconds or worse). Every actor always has one
  asynchronous broadcast posted into its buffer (``async_op=True``) and *polls* it; version −1
  means stop. Swapping in new weights is ``swap_weights`` (the graded exercise rewrites it).
* **sequences**, actors → learner: one ``isend`` per finished sequence of a fixed-size float64
  message (header, response tokens, the policy version of every token, the actor's
  log-probabilities), received by the learner with ``recv`` (from any actor in PipelineRL).

``publish`` is the learner's end of the weights channel; ``post_receive`` and ``swap_weights`` are
the actor's. ``_Actor`` decodes ``slots`` sequences together with a KV cache, polls for new weights
between two decode steps and sends each finished sequence. ``course_lib.rl.actors`` holds the
learner and ``run``, which launches both and returns the measured ``Trace``.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from . import task

__all__ = ["STOP", "swap_weights", "post_receive", "publish"]

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
