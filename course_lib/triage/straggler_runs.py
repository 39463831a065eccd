"""Lab driver: a throttled rank among real gloo ranks, found by name from all ranks' telemetry.

Each rank runs ``steps`` data-parallel steps: a compute span (a matmul of fixed size), then an
all-reduce of its gradient. Rank ``slow_rank`` is throttled: its compute span lasts ``factor`` times
as long (the work, then the rest of the span idle, as a clock-throttled GPU takes longer for the
same work). Every rank records compute and waiting (:class:`~course_lib.triage.telemetry.StepTelemetry`);
the records are gathered, the straggler named, and the measured step set against the step model.
"""
from __future__ import annotations

__all__ = ["straggler_run"]


def _straggler_worker(ctx, steps: int, slow_rank: int, factor: float, size: int, base_s: float) -> dict:
    import time

    import torch
    import torch.distributed as dist

    from course_lib.triage.telemetry import StepTelemetry
    tel = StepTelemetry()
    a = torch.randn(size, size)
    g = torch.zeros(size)
    walls = []
    for _ in range(steps):
        dist.barrier(group=ctx.group)             # every step starts together: a step's wall is its own
        t0 = time.perf_counter()
        with tel.compute():
            end = time.perf_counter() + base_s * (factor if ctx.rank == slow_rank else 1.0)
            g = (a @ a[:, :1]).squeeze(1)
            while time.perf_counter() < end:      # the rest of the span: a throttled clock, or a fixed-length kernel
                time.sleep(0.0005)
        with tel.waiting():
            dist.all_reduce(g, group=ctx.group)
        tel.end_step()
        walls.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(5):
        dist.all_reduce(g, group=ctx.group)
    return {"telemetry": tel.steps, "walls": walls, "collective_s": (time.perf_counter() - t0) / 5}


def straggler_run(*, world_size: int = 4, steps: int = 8, slow_rank: int = 1, factor: float = 3.0,
                  size: int = 64, base_s: float = 0.02, threshold: float = 1.5) -> dict:
    """Throttle ``slow_rank`` by ``factor`` (1 = nobody), name the straggler, and compare the
    measured step with :func:`~course_lib.triage.telemetry.step_model`."""
    import statistics

    from course_lib.dist import launch
    from course_lib.triage.telemetry import find_straggler, step_model
    res = launch(_straggler_worker, world_size, timeout=60.0, steps=steps, slow_rank=slow_rank, factor=factor,
                 size=size, base_s=base_s)
    found = find_straggler([r["telemetry"] for r in res], threshold=threshold)
    collective = min(r["collective_s"] for r in res)
    model = step_model(found["compute_s"], collective)
    measured = statistics.median(max(r["walls"][s] for r in res) for s in range(1, steps))
    return {**found, "model_s": model, "measured_s": measured, "collective_s": collective,
            "factor": factor, "slow_rank": slow_rank, "base_s": base_s}
