"""The rank side of the real pipeline-parallel executor: what every process runs, p2p send/recv.

The model is viewed as a list of *layers* — ``embed`` (token + position embeddings), ``blocks.0``
… ``blocks.{L−1}``, ``head`` (final LayerNorm + LM head) — and cut into contiguous stages by
layer counts (``sizes``, see ``partition``). Every rank builds the whole ``GPT(cfg, seed)`` and
keeps its stage(s), so stage parameters are bit-identical to the single-process model's and the
gradients can be compared name by name.

``execute_step`` runs any per-rank op order from ``pipeline.schedules`` (GPipe, 1F1B,
interleaved, and with the backward split by ``split_backward`` ZB-H1, ZB-V and DualPipeV, whose
two chunks sit in a V: the turn on the last rank hands the activation over in memory): a forward waits for its input activation from the previous rank (its ``irecv``
posted one op ahead), runs the stage and posts the output with ``isend``; a backward waits for
the output gradient from the next rank, back-propagates and ``isend``s the input gradient. Sends
never block, so any dependency-respecting order runs without deadlock. Every forward, backward,
wait for a message and optimizer step is timed on the shared monotonic clock and recorded as a
``gantt.Event``; ``activation_meter.ActivationMeter`` counts the bytes autograd stashes.

``pipeline_worker`` is what ``course_lib.dist.launch`` starts on every rank. The parent side —
launching the ranks and reading what they measured (``run_pipeline``, ``RunResult``) — is
``pipeline.run``; ``pipeline.torch_pipelining`` puts this executor next to
``torch.distributed.pipelining``.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..model import GPTConfig
from ..tensor_context.activation_meter import ActivationMeter
from .gantt import Event
from .partition import StageModule, build_stage, even_partition, make_batch
from .schedules import Op, schedule, stage_of
from .split_backward import backward_input, backward_weight

__all__ = ["execute_step", "default_sizes", "pipeline_worker"]


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
                 lookahead: int = 1, placement: str = "loop",
                 in_flight: list[float] | None = None,
                 pace: dict[str, float] | None = None, link: float = 0.0) -> tuple[list[Event], float]:
    """Run one pipeline step's forwards and backwards on this rank in the order ``ops``.

    ``chunks[c]`` is global stage ``c·p + rank``; ``x``/``y`` are the whole batch (only the first
    stage reads ``x``, only the last reads ``y``). The loss of each microbatch is divided by
    ``m`` so the accumulated gradients equal the full batch's mean-loss gradients. The receive
    an op needs is posted (``irecv``) ``lookahead`` ops before it runs, as production pipelines
    post the next receive beside the current send: gloo moves a message only once its receive is
    posted, so a receive posted at the last moment adds a round trip to the critical path
    (``lookahead=0`` shows it). Where ``ops`` hold W ops the backward is split: B computes and
    sends the input gradient only (``split_backward.backward_input``), W later the weights'.
    ``placement`` "v" puts chunk 1 of rank r at stage 2p−1−r (``schedules.stage_of``). A list
    passed as ``in_flight`` receives the most microbatches whose autograd graph this rank held at
    once (stashed after F until B, or W when split; a chunk counts 1/len(chunks)). ``pace``
    {"F": s, "B": s, "W": s} emulates compute: an op that finishes sooner sleeps until it has
    lasted that long, a late wake-up shortening the next op's sleep (the messages, the order and
    the arithmetic stay real). ``link`` > 0
    emulates a slow link: each message carries its send time and is handed over no earlier than
    ``link`` seconds later; its flight is recorded as a "link" event on the receiver and the
    part of it the receiver sat waiting for as "exposed" (the rest was hidden under compute). Returns
    the recorded events and the summed loss (0 on ranks without the last stage).
    """
    p, r, group = ctx.world_size, ctx.rank, ctx.group
    if any(op.kind not in ("F", "B", "W") for op in ops):
        raise ValueError(f"ops must hold F, B and W operations only, got {sorted({o.kind for o in ops})}")
    split = any(op.kind == "W" for op in ops)
    n_stages = p * len(chunks)
    rank_of = {stage_of(q, c, p, placement): q for q in range(p) for c in range(len(chunks))}
    local: dict[tuple[str, int, int], torch.Tensor] = {}     # hand-overs between two stages of this rank
    pending: dict[tuple[int, int], object] = {}
    # each microbatch in its own storage, as if it came separately from the data loader
    xs, ys = [t.clone() for t in x.chunk(m)], [t.clone() for t in y.chunk(m)]
    shape = (xs[0].shape[0], x.shape[1], chunks[0].d_model)
    stash: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    posted: dict[int, tuple] = {}     # op index → (irecv handle, buffer[, stamp handle, stamp buffer])
    sends, events, loss_sum, held = [], [], 0.0, 0
    clock = _clock(x.device)

    late = [0.0]         # how far the last paced op overran its pace (a late wake-up)

    def paced(t0: float, kind: str) -> float:
        """End of an op begun at ``t0``: now, or with ``pace`` once it has lasted pace[kind]; a
        wake-up that came late is paid back by the next op (by at most half its pace), so the
        rank's paced compute keeps to its nominal total on a busy machine."""
        if not pace:
            return clock()
        want = pace[kind] - min(late[0], pace[kind] / 2)
        time.sleep(max(0.0, t0 + want - clock()))
        end = clock()
        late[0] = max(0.0, end - t0 - want)
        return end

    def post(i: int) -> None:
        """Post the receive that op ``i`` needs, if it needs one and it is not posted yet."""
        if i >= len(ops) or i in posted:
            return
        op = ops[i]
        g = stage_of(r, op.chunk, p, placement)
        if op.kind == "W" or (op.kind == "F" and g == 0) or (op.kind == "B" and g == n_stages - 1):
            return
        src = rank_of[g - 1] if op.kind == "F" else rank_of[g + 1]
        if src == r:
            return
        buf, tag = torch.empty(shape, device=x.device), _tag(op.kind, op.mb, g, m)
        posted[i] = (dist.irecv(buf, src=src, group=group, tag=tag), buf)
        if link:
            stamp = torch.zeros(1, dtype=torch.float64)
            posted[i] += (dist.irecv(stamp, src=src, group=group, tag=tag + 4 * n_stages * m), stamp)

    def send(payload: torch.Tensor, dst: int, tag: int) -> None:
        sends.append((dist.isend(payload, dst=dst, group=group, tag=tag), payload))
        if link:
            stamp = torch.tensor([clock()], dtype=torch.float64)
            sends.append((dist.isend(stamp, dst=dst, group=group, tag=tag + 4 * n_stages * m), stamp))

    def take(i: int) -> torch.Tensor:
        """Wait for op ``i``'s input; the wait is recorded as a "recv" event."""
        op = ops[i]
        key = (op.kind, op.mb, stage_of(r, op.chunk, p, placement))
        if key in local:
            return local.pop(key)
        handle, buf, *stamp = posted.pop(i)
        t0 = clock()
        handle.wait()
        if link:
            stamp[0].wait()
            sent = float(stamp[1])
            time.sleep(max(0.0, sent + link - clock()))
            a, b = max(t0, sent), min(clock(), sent + link)
            events.append(Event(r, "link", op.mb, sent, sent + link, op.chunk, step))
            if b > a:
                events.append(Event(r, "exposed", op.mb, a, b, op.chunk, step))
        events.append(Event(r, "recv", op.mb, t0, clock(), op.chunk, step))
        return buf

    for i, op in enumerate(ops):
        for j in range(i, i + lookahead + 1):
            post(j)
        c, g = op.chunk, stage_of(r, op.chunk, p, placement)
        if op.kind == "W":
            t0, c0 = clock(), time.thread_time()
            backward_weight(pending.pop((op.mb, c)), list(chunks[c].parameters()))
            events.append(Event(r, "W", op.mb, t0, paced(t0, "W"), c, step, time.thread_time() - c0))
        elif op.kind == "F":
            inp = xs[op.mb] if g == 0 else take(i).requires_grad_()
            t0, c0 = clock(), time.thread_time()
            with meter.track() if meter else contextlib.nullcontext():
                out = chunks[c](inp)
                if g == n_stages - 1:
                    out = F.cross_entropy(out.flatten(0, 1), ys[op.mb].flatten()) / m
            events.append(Event(r, "F", op.mb, t0, paced(t0, "F"), c, step, time.thread_time() - c0))
            stash[(op.mb, c)] = (inp, out)
            if g < n_stages - 1 and rank_of[g + 1] == r:
                local[("F", op.mb, g + 1)] = out.detach()
            elif g < n_stages - 1:
                send(out.detach(), rank_of[g + 1], _tag("F", op.mb, g + 1, m))
            else:
                loss_sum += out.item()
        else:
            inp, out = stash.pop((op.mb, c))
            grad = None if g == n_stages - 1 else take(i)
            t0, c0 = clock(), time.thread_time()
            if split:
                pending[(op.mb, c)] = backward_input(out, grad, inp, list(chunks[c].parameters()))
            else:
                torch.autograd.backward(out, grad)
            events.append(Event(r, "B", op.mb, t0, paced(t0, "B"), c, step, time.thread_time() - c0))
            if g > 0 and rank_of[g - 1] == r:
                local[("B", op.mb, g - 1)] = inp.grad
            elif g > 0:
                send(inp.grad, rank_of[g - 1], _tag("B", op.mb, g - 1, m))
        held = max(held, len(stash) + len(pending))
    for handle, _ in sends:
        handle.wait()
    if in_flight is not None:
        in_flight.append(held / len(chunks))
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
    ``grads``, and the receive ``lookahead``, compute ``pace`` and ``link`` of ``execute_step``. Runs happen one
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
        # the meter's saved-tensor hooks tie some saved outputs to their own nodes, a cycle that
        # only a whole backward (retain_graph=False) breaks: under a split backward its count
        # would grow step by step, so split schedules report the graphs held (``in_flight``)
        rcfg, rclip = run.get("cfg", cfg), run.get("clip", clip)
        p, warmup = ctx.world_size, int(run.get("warmup", 0))
        look, mbs = int(run.get("lookahead", 1)), int(run.get("mb_size", mb_size))
        pace, link = run.get("pace"), float(run.get("link", 0.0))
        orders = schedule(name, p, m, v)
        place, v = orders.placement, max(v, 1 + max(o.chunk for o in orders[ctx.rank]))
        stage_sizes = default_sizes(rcfg, p * v, run.get("sizes", sizes))
        chunks = [build_stage(rcfg, stage_sizes, stage_of(ctx.rank, c, p, place), seed).to(ctx.device)
                  for c in range(v)]
        params = [q for ch in chunks for q in ch.parameters()]
        ops = orders[ctx.rank]
        use_meter = use_meter and not any(o.kind == "W" for o in ops)
        res: dict = {"events": [], "loss": [], "wall": [], "peak_bytes": 0, "mb_bytes": 0, "in_flight": []}
        for _ in range(warmup):
            x, y = make_batch(rcfg, m * mbs, seed)
            execute_step(ctx, chunks, ops, x.to(ctx.device), y.to(ctx.device), m=m, lookahead=look,
                         placement=place, pace=pace, link=link)
            _optimizer_step(ctx, params, lr, rclip)
        for step in range(steps):
            x, y = (t.to(ctx.device) for t in make_batch(rcfg, m * mbs, seed + step))
            meter = ActivationMeter(params) if use_meter else None
            if step == 0 or run.get("barrier_each_step", barrier_each_step):
                dist.barrier(group=ctx.group)
            t0 = clock()
            if meter is not None and step == 0:   # one microbatch alone: the unit of stashing
                ev, _ = execute_step(ctx, chunks, [o for o in ops if o.mb == 0], x[:mbs],
                                     y[:mbs], m=1, meter=meter, placement=place)
                res["mb_bytes"], meter.peak = meter.peak, 0
                for q in params:
                    q.grad = None
                dist.barrier(group=ctx.group)
                t0 = clock()
            ev, loss = execute_step(ctx, chunks, ops, x, y, m=m, step=step, meter=meter, lookahead=look,
                                    placement=place, in_flight=res["in_flight"], pace=pace,
                                    link=link)
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
