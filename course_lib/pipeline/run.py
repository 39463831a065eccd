"""Real pipeline-parallel runs in one call: launch the ranks, gather what they measured.

``run_pipeline`` launches ``p`` ranks (``course_lib.dist.launch``) that each run the rank side,
``pipeline.executor`` (``pipeline_worker``, ``execute_step``: the tiny GPT cut into stages over
processes, p2p send/recv), and returns one ``RunResult`` per run: every rank's timed events as a
``gantt.Timeline``, the losses, the activation bytes and optionally gradients and parameters.
``RunResult`` splits a measured bubble into schedule, op-time and transfer parts by replaying
the measured op times in the exact simulator; ``reference_step`` is the unsplit model in one
process, the reference the pipeline's gradients are compared with. ``pipeline.torch_pipelining``
puts the executor next to ``torch.distributed.pipelining``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._validate import choice, positive_int
from ..dist import launch
from .gantt import Event, Timeline
from ..model import GPT, GPTConfig
from . import bubble_fraction, simulate
from .executor import default_sizes, execute_step, pipeline_worker
from .partition import DEMO, check_sizes, make_batch
from .schedules import EXECUTABLE, schedule, stage_of

__all__ = ["TIMING_MB", "execute_step", "default_sizes", "pipeline_worker", "RunResult", "bubble_table",
           "run_pipeline", "reference_step"]

#: Microbatch size (sequences) for timing runs of ``DEMO``: a stage's forward then takes ~25 ms
#: and its backward ~50 ms on one core, so the ~0.3 ms a message and the Python around it cost
#: stay below a percentage point of the bubble. (Correctness runs use the cheaper default, 2.)
TIMING_MB = 8


# ---------------------------------------------------------------- one-call experiments (parent side)

@dataclass
class RunResult:
    """What one pipeline run measured, gathered from all ranks."""

    schedule: str
    p: int
    m: int
    v: int
    sizes: list[int]
    timeline: Timeline          # every rank's events of every step
    loss: list[float]           # per step (from the last stage)
    peak_bytes: list[int]       # per rank: most activation bytes stashed at once
    mb_bytes: list[int]         # per rank: bytes one microbatch stashes on its own
    grads: dict | None = None   # first-step gradients by GPT parameter name
    params: dict | None = None  # parameters after the last step
    in_flight: list[float] | None = None   # per rank: most microbatch graphs held at once (stage units)

    @property
    def steps(self) -> int:
        return 1 + max(e.step for e in self.timeline.events)

    def bubbles(self) -> list[float]:
        """Measured bubble fraction of each step."""
        return [self.timeline.bubble_fraction(s) for s in range(self.steps)]

    def steadiest_step(self) -> int:
        """The step whose forward and backward passes ran most evenly: replayed with its own
        measured op times and instant messages, its bubble is closest to (p−1)/(vm+p−1). Other
        programs and a noisy (virtual) machine make op times uneven, so this is the step least
        disturbed by them, as a benchmark keeps its least disturbed repetition."""
        formula = self.expected()
        return min(range(self.steps), key=lambda s: (abs(self.replay(s).bubble_fraction() - formula), s))

    def expected(self) -> float:
        """The bubble the schedule should have: (p−1)/(vm+p−1) for GPipe, 1F1B and interleaved;
        for the split-backward schedules the simulator's, at this run's mean measured T_F, T_B, T_W
        (averaged over every step and rank: their bubble depends on the ratio)."""
        if self.schedule in ("gpipe", "1f1b", "interleaved"):
            return bubble_fraction(self.p, self.m, self.v)
        mean = {k: sum(e.duration for e in self.timeline.of(kinds=(k,))) / len(self.timeline.of(kinds=(k,)))
                for k in "FBW"}
        chunks = 2 if self.schedule in ("zb-v", "dualpipev") else 1
        return simulate(schedule(self.schedule, self.p, self.m, self.v), t_forward=mean["F"] * chunks,
                        t_backward=(mean["B"] + mean["W"]) * chunks,
                        w_share=mean["W"] / (mean["B"] + mean["W"])).bubble_fraction()

    def bubble(self) -> float:
        """Measured bubble fraction of the steadiest step (``steadiest_step``)."""
        return self.timeline.bubble_fraction(self.steadiest_step())

    def median_bubble(self) -> float:
        """Measured bubble fraction of the median step (the upper middle one for an even count)."""
        return sorted(self.bubbles())[self.steps // 2]

    def step_timeline(self, step: int | None = None) -> Timeline:
        """The events of one step (default: the steadiest), clock starting at 0."""
        step = self.steadiest_step() if step is None else step
        return Timeline(self.p, [e for e in self.timeline.events if e.step == step]).shifted()

    def replay(self, step: int) -> Timeline:
        """Step ``step`` replayed by the exact simulator with every forward and backward taking
        the time it took on the real ranks, and messages arriving instantly: what the schedule
        alone would have done with these measured op times."""
        orders = schedule(self.schedule, self.p, self.m, self.v)
        times = {(e.kind, e.mb, stage_of(e.rank, e.chunk, self.p, orders.placement)): e.duration
                 for e in self.timeline.of(kinds=("F", "B", "W"), step=step)}
        return simulate(orders, t_forward=1.0, t_backward=1.0, op_times=times)

    def bubble_parts(self, step: int | None = None) -> dict[str, float]:
        """Split the measured bubble of a step (default: the steadiest) into three parts:
        ``schedule`` — ``expected()``, the idle time of steady stages; ``op_times`` —
        what unequal or jittery forward/backward times added (the replay minus the formula);
        ``transfer`` — what sending, receiving and the Python between ops added (the measured
        bubble minus the replay). The three sum to ``measured``."""
        step = self.steadiest_step() if step is None else step
        measured = self.timeline.bubble_fraction(step)
        replayed = self.replay(step).bubble_fraction()
        formula = self.expected()
        return {"schedule": formula, "op_times": replayed - formula, "transfer": measured - replayed,
                "measured": measured}


def bubble_table(runs: Sequence[RunResult]) -> str:
    """One line per run: the formula, the measured bubble (steadiest step), the median step, and
    the steadiest step's op-time and transfer parts in percentage points (``bubble_parts``)."""
    lines = [f"p = {runs[0].p} processes      formula  measured  (median)   op times  transfer   (parts in points)"]
    for r in runs:
        q = r.bubble_parts()
        lines.append(f"{r.schedule:11s} m={r.m} v={r.v}  {q['schedule']:7.1%}  {q['measured']:8.1%}  "
                     f"({r.median_bubble():6.1%})  {100 * q['op_times']:+8.1f}  {100 * q['transfer']:+8.1f}")
    return "\n".join(lines)


def _merge(per_rank: list[dict], key: str) -> dict | None:
    """One name → tensor dict from every rank's part (None if the ranks returned none)."""
    return {k: t for r in per_rank for k, t in r.get(key, {}).items()} or None


def run_pipeline(cfg: GPTConfig = DEMO, p: int = 2, runs: Sequence[dict] = ({"schedule": "1f1b", "m": 4},),
                 *, sizes: Sequence[int] | None = None, mb_size: int = 2, seed: int = 0,
                 lr: float = 0.05, clip: float | None = None, barrier_each_step: bool = True,
                 grads: bool = False, params: bool = False, timeout: float = 180.0) -> list[RunResult]:
    """Launch ``p`` ranks (gloo, one thread each) and train each of ``runs`` on them.

    A run is a dict ``{"schedule": "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-v" |
    "dualpipev", "m": 4, "v": 1,
    "steps": 1, "memory": False}``; ``memory=True`` turns on activation accounting. A run may
    also set ``warmup`` steps and override the keyword arguments (see ``pipeline_worker``).
    """
    p = positive_int("p", p)
    positive_int("mb_size", mb_size)
    for run in runs:
        positive_int("mb_size", run.get("mb_size", mb_size))
        rcfg, v = run.get("cfg", cfg), positive_int("v", run.get("v", 1))
        name = run.get("schedule", "1f1b")
        if schedule(choice("schedule", name, EXECUTABLE), p, run["m"], v).placement == "v":  # validates m, v
            v = 2
        check_sizes(default_sizes(rcfg, p * v, run.get("sizes", sizes)), rcfg.n_layers + 2, p * v)
    res = launch(pipeline_worker, p, timeout=timeout, threads_per_rank=1, cfg=cfg, runs=list(runs),
                 sizes=sizes, mb_size=mb_size, seed=seed, lr=lr, clip=clip,
                 barrier_each_step=barrier_each_step, return_grads=grads, return_params=params)
    out = []
    for i, run in enumerate(runs):
        per_rank = [r[i] for r in res]
        name, v = run.get("schedule", "1f1b"), int(run.get("v", 1))
        in_v = schedule(name, p, int(run["m"]), v).placement == "v"
        out.append(RunResult(name, p, int(run["m"]), v, per_rank[0]["sizes"],
                             Timeline(p, [Event(*e) for r in per_rank for e in r["events"]]),
                             per_rank[0 if in_v else -1]["loss"],   # the last stage: rank p − 1, or 0 in a V
                             [r["peak_bytes"] for r in per_rank], [r["mb_bytes"] for r in per_rank],
                             _merge(per_rank, "grads"), _merge(per_rank, "params"),
                             [max(r["in_flight"]) for r in per_rank]))
    return out


def reference_step(cfg: GPTConfig = DEMO, batch_size: int = 8, steps: int = 1, *, lr: float = 0.05,
                   clip: float | None = None, seed: int = 0) -> tuple[dict, dict, list[float]]:
    """The unsplit model in one process, same data and SGD: (first-step gradients, parameters
    after ``steps`` steps, losses), keyed by GPT parameter names."""
    model = GPT(cfg, seed=seed)
    first, losses = None, []
    for step in range(positive_int("steps", steps)):
        x, y = make_batch(cfg, positive_int("batch_size", batch_size), seed + step)
        _, loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
        if first is None:
            first = {n: q.grad.clone() for n, q in model.named_parameters()}
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for q in model.parameters():
                q.add_(q.grad, alpha=-lr)
                q.grad = None
    return first, {n: q.detach().clone() for n, q in model.named_parameters()}, losses
