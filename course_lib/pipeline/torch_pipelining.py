"""Our pipeline executor next to ``torch.distributed.pipelining`` on the same stages and data.

``torch_pipelining_worker`` builds one stage twice per rank — once for PyTorch's
``PipelineStage`` driven by ``ScheduleGPipe`` / ``Schedule1F1B``, once for
``pipeline.executor.execute_step`` — and times them alternately, step by step, so both see the same
machine. ``compare_with_torch`` launches it and reports the step-time ratio and the largest
gradient difference between the two implementations.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch.distributed as dist
import torch.nn.functional as F

from .._validate import positive_int
from ..dist import launch
from ..model import GPTConfig
from .partition import DEMO, build_stage, make_batch
from ..report import max_abs_diff
from .executor import _clock, default_sizes, execute_step
from .schedules import schedule

__all__ = ["torch_pipelining_worker", "compare_with_torch"]


def torch_pipelining_worker(ctx, cfg: GPTConfig, name: str = "1f1b", m: int = 4, mb_size: int = 2,
                            repeats: int = 5, sizes: Sequence[int] | None = None, seed: int = 0) -> dict:
    """Time ``torch.distributed.pipelining`` (ScheduleGPipe / Schedule1F1B) and this module's
    executor on the same stage, alternating step by step, and return both step times and both
    sets of first-step gradients (PyTorch's ``scale_grads`` divides by m, as our loss/m does)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    p, r = ctx.world_size, ctx.rank
    stage_sizes = default_sizes(cfg, p, sizes)
    ours, theirs = (build_stage(cfg, stage_sizes, r, seed).to(ctx.device) for _ in range(2))
    pstage = PipelineStage(theirs, r, p, ctx.device, group=ctx.group)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[name]
    sched = cls(pstage, m, loss_fn=lambda out, tgt: F.cross_entropy(out.flatten(0, 1), tgt.flatten()))
    ops = schedule(name, p, m)[r]
    x, y = (t.to(ctx.device) for t in make_batch(cfg, m * mb_size, seed))
    times: dict[str, list[float]] = {"scratch": [], "torch": []}
    clock = _clock(ctx.device)
    grads: dict[str, dict] = {}
    for rep in range(repeats + 1):           # repetition 0 warms up (PyTorch infers shapes there)
        for impl, mod in (("torch", theirs), ("scratch", ours)):
            mod.zero_grad(set_to_none=True)
            dist.barrier(group=ctx.group)
            t0 = clock()
            if impl == "scratch":
                execute_step(ctx, [ours], ops, x, y, m=m)
            elif r == 0:
                sched.step(x)
            elif r == p - 1:
                sched.step(target=y, losses=[])
            else:
                sched.step()
            dist.barrier(group=ctx.group)
            if rep:
                times[impl].append(clock() - t0)
            else:
                grads[impl] = {n: q.grad.clone() for n, q in mod.named_full_parameters().items()}
    return {"times": times, "grads": grads}


def compare_with_torch(cfg: GPTConfig = DEMO, p: int = 2, schedule_name: str = "1f1b", m: int = 4,
                       mb_size: int = 2, repeats: int = 5, seed: int = 0) -> dict:
    """Our executor vs ``torch.distributed.pipelining`` on the same split, same ranks, same data.

    Returns median step times (s), their ratio (ours / PyTorch's) and the largest gradient
    difference between the two implementations."""
    res = launch(torch_pipelining_worker, positive_int("p", p), threads_per_rank=1, timeout=180.0,
                 cfg=cfg, name=schedule_name, m=m, mb_size=mb_size,
                 repeats=positive_int("repeats", repeats), seed=seed)
    t_ours = statistics.median(max(r["times"]["scratch"][i] for r in res) for i in range(repeats))
    t_torch = statistics.median(max(r["times"]["torch"][i] for r in res) for i in range(repeats))
    g = [{k: t for r in res for k, t in r["grads"][impl].items()} for impl in ("scratch", "torch")]
    return {"ours_s": t_ours, "torch_s": t_torch, "ratio": t_ours / t_torch,
            "max_grad_diff": max_abs_diff(*g)}
