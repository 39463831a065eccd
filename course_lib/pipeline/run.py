"""A real pipeline-parallel executor: the tiny GPT cut into stages over processes, p2p send/recv.

The model is viewed as a list of *layers* — ``embed`` (token + position embeddings), ``blocks.0``
… ``blocks.{L−1}``, ``head`` (final LayerNorm + LM head) — and cut into contiguous stages by
layer counts (``sizes``, see ``partition``). Every rank builds the whole ``GPT(cfg, seed)`` and
keeps its stage(s), so stage parameters are bit-identical to the single-process model's and the
gradients can be compared name by name.

``execute_step`` runs any per-rank op order from ``pipeline_schedules`` (GPipe, 1F1B,
interleaved): a forward waits for its input activation from the previous rank (its ``irecv``
posted one op ahead), runs the stage and posts the output with ``isend``; a backward waits for
the output gradient from the next rank, back-propagates and ``isend``s the input gradient. Sends
never block, so any dependency-respecting order runs without deadlock. Every forward, backward,
wait for a message and optimizer step is timed on the shared monotonic clock and returned as a
``gantt.Timeline``; ``activation_meter.ActivationMeter`` counts the bytes autograd stashes.

``pipeline_worker`` is what ``course_lib.dist.launch`` starts on every rank; ``run_pipeline``
and ``reference_step`` are the one-call experiments the lab and the book use, and
``RunResult`` splits a measured bubble into schedule, op-time and transfer parts by replaying
the measured op times in the exact simulator. ``pipeline_torch`` puts this executor next to
``torch.distributed.pipelining``.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .._validate import choice, positive_int
from ..dist import launch
from .gantt import Event, Timeline
from ..model import GPT, GPTConfig
from . import bubble_fraction, simulate
from ..parallel.activation_meter import ActivationMeter
from .partition import DEMO, StageModule, build_stage, check_sizes, even_partition, make_batch
from .schedules import SCHEDULES, Op, schedule

__all__ = ["TIMING_MB", "execute_step", "default_sizes", "pipeline_worker", "RunResult", "bubble_table",
           "run_pipeline", "reference_step"]

#: Microbatch size (sequences) for timing runs of ``DEMO``: a stage's forward then takes ~25 ms
#: and its backward ~50 ms on one core, so the ~0.3 ms a message and the Python around it cost
#: stay below a percentage point of the bubble. (Correctness runs use the cheaper default, 2.)
TIMING_MB = 8


def _clock(device: torch.device):
    """``time.perf_counter`` (CLOCK_MONOTONIC, the same clock in every process of the machine);
    on a GPU it first waits for the queued kernels, so an op's interval covers its real work."""
    if device.type == "cuda":
        return lambda: (torch.cuda.synchronize(device), time.perf_counter())[1]
    return time.perf_counter


def _tag(kind: str, mb: int, stage: int, m: int) -> int:
    """A unique p2p tag for the activation (kind "F") or gradient ("B") entering ``stage``."""
    return (2 * stage + (kind == "B")) * m + mb


def execute_step(ctx, chunks: Sequence[StageModule], ops: Sequence[Op], x: torch.Tensor,
                 y: torch.Tensor, *, m: int, step: int = 0, meter: ActivationMeter | None = None,
                 lookahead: int = 1) -> tuple[list[Event], float]:
    """Run one pipeline step's forwards and backwards on this rank in the order ``ops``.

    ``chunks[c]`` is global stage ``c·p + rank``; ``x``/``y`` are the whole batch (only the first
    stage reads ``x``, only the last reads ``y``). The loss of each microbatch is divided by
    ``m`` so the accumulated gradients equal the full batch's mean-loss gradients. The receive
    an op needs is posted (``irecv``) ``lookahead`` ops before it runs, as production pipelines
    post the next receive beside the current send: gloo moves a message only once its receive is
    posted, so a receive posted at the last moment adds a round trip to the critical path
    (``lookahead=0`` shows it). Returns the recorded events and the summed loss (0 on ranks
    without the last stage).
    """
    p, r, group = ctx.world_size, ctx.rank, ctx.group
    n_stages = p * len(chunks)
    # each microbatch in its own storage, as if it came separately from the data loader
    xs, ys = [t.clone() for t in x.chunk(m)], [t.clone() for t in y.chunk(m)]
    shape = (xs[0].shape[0], x.shape[1], chunks[0].d_model)
    stash: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    posted: dict[int, tuple[object, torch.Tensor]] = {}     # op index → (irecv handle, buffer)
    sends, events, loss_sum = [], [], 0.0
    clock = _clock(x.device)

    def post(i: int) -> None:
        """Post the receive that op ``i`` needs, if it needs one and it is not posted yet."""
        if i >= len(ops) or i in posted:
            return
        op = ops[i]
        g = op.chunk * p + r
        if (op.kind == "F" and g == 0) or (op.kind == "B" and g == n_stages - 1):
            return
        buf = torch.empty(shape, device=x.device)
        src = (r - 1) % p if op.kind == "F" else (r + 1) % p
        posted[i] = (dist.irecv(buf, src=src, group=group, tag=_tag(op.kind, op.mb, g, m)), buf)

    def take(i: int) -> torch.Tensor:
        """Wait for op ``i``'s input; the wait is recorded as a "recv" event."""
        handle, buf = posted.pop(i)
        t0 = clock()
        handle.wait()
        events.append(Event(r, "recv", ops[i].mb, t0, clock(), ops[i].chunk, step))
        return buf

    for i, op in enumerate(ops):
        for j in range(i, i + lookahead + 1):
            post(j)
        c, g = op.chunk, op.chunk * p + r
        if op.kind == "F":
            inp = xs[op.mb] if g == 0 else take(i).requires_grad_()
            t0, c0 = clock(), time.thread_time()
            with meter.track() if meter else contextlib.nullcontext():
                out = chunks[c](inp)
                if g == n_stages - 1:
                    out = F.cross_entropy(out.flatten(0, 1), ys[op.mb].flatten()) / m
            events.append(Event(r, "F", op.mb, t0, clock(), c, step, time.thread_time() - c0))
            stash[(op.mb, c)] = (inp, out)
            if g < n_stages - 1:
                payload = out.detach()
                sends.append((dist.isend(payload, dst=(r + 1) % p, group=group,
                                         tag=_tag("F", op.mb, g + 1, m)), payload))
            else:
                loss_sum += out.item()
        else:
            inp, out = stash.pop((op.mb, c))
            grad = None if g == n_stages - 1 else take(i)
            t0, c0 = clock(), time.thread_time()
            torch.autograd.backward(out, grad)
            events.append(Event(r, "B", op.mb, t0, clock(), c, step, time.thread_time() - c0))
            if g > 0:
                sends.append((dist.isend(inp.grad, dst=(r - 1) % p, group=group,
                                         tag=_tag("B", op.mb, g - 1, m)), inp.grad))
    for handle, _ in sends:
        handle.wait()
    return events, loss_sum


def _optimizer_step(ctx, params: list[nn.Parameter], lr: float, clip: float | None) -> None:
    """SGD update of this rank's parameters; with ``clip`` the global gradient norm over all
    stages is needed first — an all-reduce, i.e. a barrier across the whole pipeline."""
    with torch.no_grad():
        if clip is not None:
            sq = torch.stack([p.grad.pow(2).sum() for p in params]).sum().reshape(1)
            dist.all_reduce(sq, group=ctx.group)
            scale = min(1.0, clip / (float(sq.sqrt()) + 1e-6))
            for p in params:
                p.grad.mul_(scale)
        for p in params:
            p.add_(p.grad, alpha=-lr)
            p.grad = None


def default_sizes(cfg: GPTConfig, n_stages: int, sizes: Sequence[int] | None = None) -> list[int]:
    """``sizes`` if given, else the naive split: equal numbers of blocks per stage, with the
    embedding riding on the first stage and the head on the last."""
    if sizes is not None:
        return list(sizes)
    out = even_partition(cfg.n_layers, n_stages)
    out[0] += 1
    out[-1] += 1
    return out


def pipeline_worker(ctx, cfg: GPTConfig, runs: Sequence[dict], sizes: Sequence[int] | None = None,
                    mb_size: int = 2, seed: int = 0, lr: float = 0.05, clip: float | None = None,
                    barrier_each_step: bool = True, return_grads: bool = False,
                    return_params: bool = False) -> list[dict]:
    """Rank body: train each run ``{"schedule", "m", "v", "steps", "warmup", "memory"}`` in turn.

    A run may override ``cfg``, ``sizes``, ``mb_size``, ``clip``, ``barrier_each_step``,
    ``grads`` and the receive ``lookahead`` of ``execute_step``. Runs happen one
    after another in this process on freshly built stages (same seed), so a sweep costs one
    launch; ``warmup`` steps run first and are not recorded. Per run this rank returns its events
    (as tuples), losses, per-step wall time, activation bytes (peak, and one microbatch alone)
    and optionally its gradients after the first step / parameters after the last, keyed by the
    GPT's parameter names.
    """
    out, clock = [], _clock(ctx.device)
    for run in runs:
        name, m, v = run.get("schedule", "1f1b"), int(run["m"]), int(run.get("v", 1))
        steps, use_meter = int(run.get("steps", 1)), bool(run.get("memory", False))
        rcfg, rclip = run.get("cfg", cfg), run.get("clip", clip)
        p, warmup = ctx.world_size, int(run.get("warmup", 0))
        look, mbs = int(run.get("lookahead", 1)), int(run.get("mb_size", mb_size))
        stage_sizes = default_sizes(rcfg, p * v, run.get("sizes", sizes))
        chunks = [build_stage(rcfg, stage_sizes, c * p + ctx.rank, seed).to(ctx.device) for c in range(v)]
        params = [q for ch in chunks for q in ch.parameters()]
        ops = schedule(name, p, m, v)[ctx.rank]
        res: dict = {"events": [], "loss": [], "wall": [], "peak_bytes": 0, "mb_bytes": 0}
        for _ in range(warmup):
            x, y = make_batch(rcfg, m * mbs, seed)
            execute_step(ctx, chunks, ops, x.to(ctx.device), y.to(ctx.device), m=m, lookahead=look)
            _optimizer_step(ctx, params, lr, rclip)
        for step in range(steps):
            x, y = (t.to(ctx.device) for t in make_batch(rcfg, m * mbs, seed + step))
            meter = ActivationMeter(params) if use_meter else None
            if step == 0 or run.get("barrier_each_step", barrier_each_step):
                dist.barrier(group=ctx.group)
            t0 = clock()
            if meter is not None and step == 0:   # one microbatch alone: the unit of stashing
                ev, _ = execute_step(ctx, chunks, [o for o in ops if o.mb == 0], x[:mbs],
                                     y[:mbs], m=1, meter=meter)
                res["mb_bytes"], meter.peak = meter.peak, 0
                for q in params:
                    q.grad = None
                dist.barrier(group=ctx.group)
                t0 = clock()
            ev, loss = execute_step(ctx, chunks, ops, x, y, m=m, step=step, meter=meter, lookahead=look)
            if run.get("grads", return_grads) and step == 0:
                res["grads"] = {n: q.grad.clone() for ch in chunks
                                for n, q in ch.named_full_parameters().items()}
            t1 = clock()
            _optimizer_step(ctx, params, lr, rclip)
            ev.append(Event(ctx.rank, "opt", -1, t1, clock(), 0, step))
            res["events"] += [(e.rank, e.kind, e.mb, e.start, e.end, e.chunk, e.step, e.cpu) for e in ev]
            res["loss"].append(loss)
            res["wall"].append(clock() - t0)
            if meter is not None:
                res["peak_bytes"] = max(res["peak_bytes"], meter.peak)
        if return_params:
            res["params"] = {n: q.detach().clone() for ch in chunks
                             for n, q in ch.named_full_parameters().items()}
        res["sizes"] = stage_sizes
        out.append(res)
    return out


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
        formula = bubble_fraction(self.p, self.m, self.v)
        return min(range(self.steps), key=lambda s: (abs(self.replay(s).bubble_fraction() - formula), s))

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
        times = {(e.kind, e.mb, e.chunk * self.p + e.rank): e.duration
                 for e in self.timeline.of(kinds=("F", "B"), step=step)}
        return simulate(schedule(self.schedule, self.p, self.m, self.v), t_forward=1.0,
                        t_backward=1.0, op_times=times)

    def bubble_parts(self, step: int | None = None) -> dict[str, float]:
        """Split the measured bubble of a step (default: the steadiest) into three parts:
        ``schedule`` — (p−1)/(vm+p−1), the idle time of equal, steady stages; ``op_times`` —
        what unequal or jittery forward/backward times added (the replay minus the formula);
        ``transfer`` — what sending, receiving and the Python between ops added (the measured
        bubble minus the replay). The three sum to ``measured``."""
        step = self.steadiest_step() if step is None else step
        measured = self.timeline.bubble_fraction(step)
        replayed = self.replay(step).bubble_fraction()
        formula = bubble_fraction(self.p, self.m, self.v)
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

    A run is a dict ``{"schedule": "gpipe" | "1f1b" | "interleaved", "m": 4, "v": 1,
    "steps": 1, "memory": False}``; ``memory=True`` turns on activation accounting. A run may
    also set ``warmup`` steps and override the keyword arguments (see ``pipeline_worker``).
    """
    p = positive_int("p", p)
    positive_int("mb_size", mb_size)
    for run in runs:
        positive_int("mb_size", run.get("mb_size", mb_size))
        rcfg, v = run.get("cfg", cfg), positive_int("v", run.get("v", 1))
        schedule(choice("schedule", run.get("schedule", "1f1b"), SCHEDULES), p, run["m"], v)  # validates m, v
        check_sizes(default_sizes(rcfg, p * v, run.get("sizes", sizes)), rcfg.n_layers + 2, p * v)
    res = launch(pipeline_worker, p, timeout=timeout, threads_per_rank=1, cfg=cfg, runs=list(runs),
                 sizes=sizes, mb_size=mb_size, seed=seed, lr=lr, clip=clip,
                 barrier_each_step=barrier_each_step, return_grads=grads, return_params=params)
    out = []
    for i, run in enumerate(runs):
        per_rank = [r[i] for r in res]
        out.append(RunResult(run.get("schedule", "1f1b"), p, int(run["m"]), int(run.get("v", 1)),
                             per_rank[0]["sizes"],
                             Timeline(p, [Event(*e) for r in per_rank for e in r["events"]]),
                             per_rank[-1]["loss"],   # the last stage always lives on rank p − 1
                             [r["peak_bytes"] for r in per_rank], [r["mb_bytes"] for r in per_rank],
                             _merge(per_rank, "grads"), _merge(per_rank, "params")))
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
