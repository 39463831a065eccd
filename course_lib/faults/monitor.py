"""Slow and silent ranks: a per-rank step-time straggler monitor, and a hang turned into a restart.

In synchronous training one slow rank slows every rank: the others wait for it inside the next
collective, so every rank's *step* time is the same and says nothing about who is slow. MegaScale
(Jiang et al. 2024, arXiv 2402.15627, §5) finds stragglers by timing each rank's own compute,
apart from communication, and comparing ranks: the machine whose compute is consistently longer
than its peers' is the one to evict. :class:`StragglerMonitor` does that in a user's own loop:
time the local work with :meth:`~StragglerMonitor.timed`, call :meth:`~StragglerMonitor.step`
once per step (one small all-gather), and get the ranks that were slower than ``threshold`` times
the other ranks' median over the last ``patience`` steps.

A rank that stops responding altogether is worse: its peers block inside a collective forever.
The process group's timeout turns that wait into an error, the rank exits, and torchrun's agent
restarts the group from the last checkpoint. :func:`hang_demo` shows it on the real elastic job.
"""
from __future__ import annotations

import contextlib
import re
import statistics
import time
from collections import deque
from pathlib import Path

import torch
import torch.distributed as dist

from .._validate import positive, positive_int

__all__ = ["StragglerMonitor", "straggler_demo", "hang_demo"]


class StragglerMonitor:
    """Flag ranks whose own compute time, as a median over the last ``patience`` steps, is above
    ``threshold`` × the median of the other ranks' (one noisy step flags nobody). Every rank
    calls :meth:`step`, a collective over ``group``, and gets the same answer."""

    def __init__(self, group: dist.ProcessGroup, *, threshold: float = 1.5, patience: int = 3) -> None:
        self.group = group
        self.threshold = positive("threshold", threshold)
        self.patience = positive_int("patience", patience)
        self.world = dist.get_world_size(group)
        self.history: list[list[float]] = []      # per step, every rank's compute seconds
        self._recent: deque[list[float]] = deque(maxlen=self.patience)
        self._local = 0.0

    @contextlib.contextmanager
    def timed(self):
        """Time a block of this rank's local work (forward, backward, optimizer, data)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._local += time.perf_counter() - t0

    def record(self, seconds: float) -> None:
        """Add compute time measured elsewhere (on a GPU: CUDA events' elapsed time)."""
        self._local += positive("seconds", seconds, allow_zero=True)

    def step(self) -> list[int]:
        """Share this step's timings with every rank; return the ranks flagged as stragglers."""
        mine = torch.tensor([self._local], dtype=torch.float64)
        times = [torch.zeros(1, dtype=torch.float64) for _ in range(self.world)]
        dist.all_gather(times, mine, group=self.group)
        row = [t.item() for t in times]
        self._local = 0.0
        self.history.append(row)
        self._recent.append(row)
        if len(self._recent) < self.patience:
            return []
        typical = [statistics.median(col) for col in zip(*self._recent)]   # per rank, over the window
        return [r for r in range(self.world)
                if typical[r] > self.threshold * statistics.median(typical[:r] + typical[r + 1:])]


def _straggler_worker(ctx, steps: int, slow_rank: int, slow_s: float, threshold: float,
                      patience: int, seed: int) -> dict:
    """Data-parallel training of the tiny GPT (backward, then one all-reduce of the gradients),
    with ``slow_rank`` sleeping ``slow_s`` in its compute: what each rank sees."""
    from torch.nn.utils import parameters_to_vector, vector_to_parameters
    from ..model import GPT, GPTConfig
    from .elastic import DEMO_CONFIG, WindowLoader, demo_tokens
    torch.set_num_threads(1)
    cfg = GPTConfig(**DEMO_CONFIG)
    model = GPT(cfg, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = WindowLoader(demo_tokens(cfg.vocab_size, 4096, seed), 4, cfg.seq_len, seed + 1 + ctx.rank)
    monitor = StragglerMonitor(ctx.group, threshold=threshold, patience=patience)
    flagged, step_s = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        with monitor.timed():
            batch = loader.next()
            model(batch[:, :-1], batch[:, 1:])[1].backward()
            if ctx.rank == slow_rank:
                time.sleep(slow_s)               # a slow GPU, a throttled CPU, a noisy neighbour
        grads = parameters_to_vector([p.grad for p in model.parameters()])
        dist.all_reduce(grads, group=ctx.group)  # everyone waits here for the slowest rank
        vector_to_parameters(grads / ctx.world_size, [p.grad for p in model.parameters()])
        with monitor.timed():
            opt.step()
            opt.zero_grad()
        flagged.append(monitor.step())
        step_s.append(time.perf_counter() - t0)
    med = statistics.median
    return {"flagged": flagged, "compute_s": [med(col) for col in zip(*monitor.history)],
            "step_s": med(step_s)}


def straggler_demo(*, world_size: int = 2, steps: int = 8, slow_rank: int = 1, slow_s: float = 0.1,
                   threshold: float = 1.5, patience: int = 3, seed: int = 0, timeout: float = 120.0) -> dict:
    """Lab demo: train with one rank slowed by ``slow_s`` seconds a step; return the ranks the
    monitor flagged (at the last step and the first step with a flag), each rank's median
    compute time, and each rank's median *step* time (the same for all: why step time alone
    cannot find the straggler)."""
    from ..dist import launch
    world_size = positive_int("world_size", world_size, minimum=2)
    slow_rank = positive_int("slow_rank", slow_rank, minimum=0, maximum=world_size - 1)
    res = launch(_straggler_worker, world_size, backend="gloo", timeout=timeout, threads_per_rank=1,
                 steps=positive_int("steps", steps), slow_rank=slow_rank, slow_s=positive("slow_s", slow_s, allow_zero=True),
                 threshold=threshold, patience=patience, seed=seed)
    flags = res[0]["flagged"]
    first = next((i + 1 for i, f in enumerate(flags) if f), None)
    return {"slow_rank": slow_rank, "flagged": flags[-1], "first_flagged_step": first,
            "compute_s": res[0]["compute_s"], "step_s": [r["step_s"] for r in res]}


def hang_demo(directory: str | Path, *, pg_timeout_s: float = 3.0, hang_step: int = 5, steps: int = 8,
              ckpt_every: int = 3, timeout: float = 120.0) -> dict:
    """Lab demo: rank 1 of the elastic job stops responding before ``hang_step``; rank 0's next
    collective fails after ``pg_timeout_s``, the agent restarts the group, and the job finishes.
    Returns the restarts, the checkpoint resumed from, the seconds from the last good step to
    the first step after the restart (at least the timeout) and the timeout error's text."""
    from .elastic import Fault, JobConfig
    from .jobs import run_job
    job = JobConfig(steps=steps, ckpt_every=ckpt_every, timeout_s=positive("pg_timeout_s", pg_timeout_s),
                    faults=(Fault("hang", positive_int("hang_step", hang_step, maximum=steps), 1),))
    res = run_job(directory, job, timeout=timeout)
    errors = [ln.strip() for ln in res.output.splitlines() if re.search(r"timed out|timeout", ln, re.I)]
    return {"returncode": res.returncode, "restarts": res.restarts, "resumed_from": res.resumed_from,
            "pg_timeout_s": pg_timeout_s, "detected_and_restarted_s": res.restart_seconds,
            "error": errors[0][-200:] if errors else "", "finished_steps": res.final.get("steps")}
