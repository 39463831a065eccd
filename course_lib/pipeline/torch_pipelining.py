"""Our pipeline executor next to ``torch.distributed.pipelining`` on the same stages and data.

``torch_pipelining_worker`` builds one stage twice per rank — once for PyTorch's
``PipelineStage`` driven by ``ScheduleGPipe`` / ``Schedule1F1B``, once for
``pipeline.executor.execute_step`` — and times them alternately, step by step, so both see the same
machine. ``compare_with_torch`` launches it and reports the step-time ratio and the largest
gradient difference between the two implementations. With two stages per rank the same holds
for PyTorch's zero-bubble schedules (``TORCH_TWO_STAGE``): ``ScheduleZBVZeroBubble`` and
``ScheduleDualPipeV`` next to this executor's "zb-v" and "dualpipev" (their V placement), and
``ScheduleInterleavedZeroBubble`` next to "interleaved" (Megatron's loop placement).
``torch_order`` reads the order a V class of ``TORCH_TWO_STAGE`` gives every rank (its
``pipeline_order``, built from placeholder stages, no process group) as this package's op lists,
so the simulator can replay PyTorch's order beside ours (tests/test_zb_torch_order.py).
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .._validate import choice, positive_int
from ..dist import launch
from ..model import GPTConfig
from .partition import DEMO, build_stage, make_batch
from ..report import max_abs_diff
from .executor import _clock, default_sizes, execute_step
from .schedules import Op, Orders, schedule, stage_of

__all__ = ["TORCH_TWO_STAGE", "torch_order", "torch_pipelining_worker", "compare_with_torch"]

#: PyTorch's two-stages-per-rank schedule classes → this executor's schedule of the same placement
TORCH_TWO_STAGE = {"ScheduleZBVZeroBubble": "zb-v", "ScheduleDualPipeV": "dualpipev",
                   "ScheduleInterleavedZeroBubble": "interleaved"}


def torch_order(name: str, p: int, m: int) -> Orders:
    """PyTorch's own order for the V schedule class ``name`` ("ScheduleZBVZeroBubble" or
    "ScheduleDualPipeV") on ``p`` ranks and ``m`` microbatches, as ``Orders`` (placement "v"):
    its input-gradient action (I) is our B, a whole backward (B) our B then W, an overlapped
    forward-backward pair its forward then its backward; empty time slots (None) are dropped.
    The class is built on placeholder stages (it computes every rank's order in its constructor)."""
    import torch.distributed.pipelining as tp
    choice("name", name, [k for k, ours in TORCH_TWO_STAGE.items() if ours in ("zb-v", "dualpipev")])
    p, m = positive_int("p", p), positive_int("m", m)
    stages = [SimpleNamespace(group_size=p, group_rank=0, num_stages=2 * p, submod=None) for _ in range(2)]
    order = getattr(tp, name)(stages, m).pipeline_order
    out = Orders()
    out.placement = "v"
    for r in range(p):
        ops: list[Op] = []

        def add(action, rank: int = r, ops: list[Op] = ops) -> None:
            kind, chunk = action.computation_type.value, 0 if action.stage_index == rank else 1
            if kind == "OVERLAP_F_B":
                for sub in action.sub_actions:
                    add(sub)
            elif kind in ("F", "I", "W", "B"):
                ops.append(Op({"I": "B"}.get(kind, kind), action.microbatch_index, chunk))
                if kind == "B":                      # a whole backward: its weight half at once
                    ops.append(Op("W", action.microbatch_index, chunk))
            else:
                raise ValueError(f"{name}: rank {rank} holds a {kind} action, which has no op here")

        for action in order[r]:
            if action is not None:
                add(action)
        out.append(ops)
    return out


def torch_pipelining_worker(ctx, cfg: GPTConfig, name: str = "1f1b", m: int = 4, mb_size: int = 2,
                            repeats: int = 5, sizes: Sequence[int] | None = None, seed: int = 0) -> dict:
    """Time ``torch.distributed.pipelining`` (ScheduleGPipe / Schedule1F1B, or a class of
    ``TORCH_TWO_STAGE``) and this module's executor on the same stage(s), alternating step by
    step, and return both step times and both sets of first-step gradients (PyTorch's
    ``scale_grads`` divides by m, as our loss/m does)."""
    import torch.distributed.pipelining as tp
    p, r = ctx.world_size, ctx.rank
    loss = lambda out, tgt: F.cross_entropy(out.flatten(0, 1), tgt.flatten())  # noqa: E731
    if name in TORCH_TWO_STAGE:
        ours_name = TORCH_TWO_STAGE[name]
        orders = schedule(ours_name, p, m, 2)
        idx = [stage_of(r, c, p, orders.placement) for c in (0, 1)]
        stage_sizes = default_sizes(cfg, 2 * p, sizes)
        ours_m = [build_stage(cfg, stage_sizes, g, seed).to(ctx.device) for g in idx]
        theirs_m = [build_stage(cfg, stage_sizes, g, seed).to(ctx.device) for g in idx]
        pstages = [tp.PipelineStage(mod, g, 2 * p, ctx.device, group=ctx.group) for mod, g in zip(theirs_m, idx)]
        sched = getattr(tp, name)(pstages, m, loss_fn=loss)
        ops, place, first, last = orders[r], orders.placement, 0 in idx, 2 * p - 1 in idx
    else:
        stage_sizes = default_sizes(cfg, p, sizes)
        ours_m, theirs_m = ([build_stage(cfg, stage_sizes, r, seed).to(ctx.device)] for _ in range(2))
        pstage = tp.PipelineStage(theirs_m[0], r, p, ctx.device, group=ctx.group)
        sched = {"gpipe": tp.ScheduleGPipe, "1f1b": tp.Schedule1F1B}[name](pstage, m, loss_fn=loss)
        ops, place, first, last = schedule(name, p, m)[r], "loop", r == 0, r == p - 1
    x, y = (t.to(ctx.device) for t in make_batch(cfg, m * mb_size, seed))
    times: dict[str, list[float]] = {"scratch": [], "torch": []}
    clock = _clock(ctx.device)
    grads: dict[str, dict] = {}
    for rep in range(repeats + 1):           # repetition 0 warms up (PyTorch infers shapes there)
        for impl, mods in (("torch", theirs_m), ("scratch", ours_m)):
            for mod in mods:
                mod.zero_grad(set_to_none=True)
            dist.barrier(group=ctx.group)
            t0 = clock()
            if impl == "scratch":
                execute_step(ctx, ours_m, ops, x, y, m=m, placement=place)
            else:
                sched.step(*([x] if first else []), **({"target": y, "losses": []} if last else {}))
            dist.barrier(group=ctx.group)
            if rep:
                times[impl].append(clock() - t0)
            else:
                grads[impl] = {n: q.grad.clone() for mod in mods for n, q in mod.named_full_parameters().items()}
    return {"times": times, "grads": grads}


def compare_with_torch(cfg: GPTConfig = DEMO, p: int = 2, schedule_name: str = "1f1b", m: int = 4,
                       mb_size: int = 2, repeats: int = 5, seed: int = 0, sizes: Sequence[int] | None = None,
                       timeout: float = 180.0) -> dict:
    """Our executor vs ``torch.distributed.pipelining`` on the same split, same ranks, same data.

    ``schedule_name``: "gpipe", "1f1b" or a PyTorch class name of ``TORCH_TWO_STAGE``. A rank
    that hangs (gloo's ``batch_isend_irecv`` can) is stopped after ``timeout`` s with a
    ``RankError``. Returns median step times (s), their ratio (ours / PyTorch's), the largest
    gradient difference and whether the gradients are bitwise equal."""
    choice("schedule_name", schedule_name, ("gpipe", "1f1b", *TORCH_TWO_STAGE))
    res = launch(torch_pipelining_worker, positive_int("p", p), threads_per_rank=1, timeout=timeout,
                 cfg=cfg, name=schedule_name, m=m, mb_size=mb_size, sizes=sizes,
                 repeats=positive_int("repeats", repeats), seed=seed)
    t_ours = statistics.median(max(r["times"]["scratch"][i] for r in res) for i in range(repeats))
    t_torch = statistics.median(max(r["times"]["torch"][i] for r in res) for i in range(repeats))
    g = [{k: t for r in res for k, t in r["grads"][impl].items()} for impl in ("scratch", "torch")]
    return {"ours_s": t_ours, "torch_s": t_torch, "ratio": t_ours / t_torch,
            "max_grad_diff": max_abs_diff(*g), "bitwise": all(torch.equal(g[0][k], g[1][k]) for k in g[0])}
