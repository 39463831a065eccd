"""Back to the planner: goodput with fast diagnosis and in-memory restarts.

Chapter 12's first-order model (:func:`course_lib.faults.goodput`) takes a checkpoint interval τ, a
blocking save δ, a restart R and the job's MTBF M. This chapter splits R into what it is made of —
finding the fault (``diagnose_seconds``: which rank, which node to drain) and bringing the job back
(``restart_seconds``: reschedule, reload) — and lets an in-memory checkpoint change two inputs: a
save to a peer's memory blocks for far less than a save to storage, so the interval can shrink
(Young's τ = √(2δM)), and so does the work lost per failure, (τ + δ)/2.
"""
from __future__ import annotations

from .._validate import calculator, positive
from ..faults.arithmetic import LLAMA3, expected_lost_seconds, goodput, optimal_checkpoint_interval

__all__ = ["triage_goodput", "detection_rate_needed", "llama3_interruptions_per_day"]


@calculator
def triage_goodput(mtbf_seconds: float, save_seconds: float, diagnose_seconds: float,
                   restart_seconds: float, interval_seconds: float | None = None) -> dict:
    """Goodput of a job whose failures cost ``diagnose_seconds`` + ``restart_seconds`` each and
    whose checkpoints block for ``save_seconds`` every ``interval_seconds`` (default: Young's optimum
    for that save). Returns the goodput, the interval, and the seconds lost per failure (diagnosis,
    restart, and the work since the last checkpoint)."""
    m = positive("mtbf_seconds", mtbf_seconds)
    d = positive("save_seconds", save_seconds)
    diag = positive("diagnose_seconds", diagnose_seconds, allow_zero=True)
    r = positive("restart_seconds", restart_seconds, allow_zero=True)
    tau = optimal_checkpoint_interval(d, m) if interval_seconds is None else positive("interval_seconds",
                                                                                      interval_seconds)
    lost = expected_lost_seconds(tau, d)
    return {"goodput": goodput(tau, d, diag + r, m), "interval_seconds": tau,
            "lost_per_failure_seconds": diag + r + lost, "lost_work_seconds": lost}


@calculator
def detection_rate_needed(flips_per_gpu_hour: float, n_gpus: int, run_hours: float, max_undetected: float) -> float:
    """The share of silent corruptions a detector must catch so that a run of ``run_hours`` on
    ``n_gpus`` GPUs, each corrupting silently ``flips_per_gpu_hour`` times an hour, expects at most
    ``max_undetected`` undetected ones: the run expects λ = rate · n · hours, and (1 − d) · λ ≤ max,
    so d = 1 − max/λ (0 when the run expects fewer than ``max_undetected`` in all)."""
    from .._validate import positive_int
    lam = (positive("flips_per_gpu_hour", flips_per_gpu_hour) * positive_int("n_gpus", n_gpus)
           * positive("run_hours", run_hours))
    return max(0.0, 1.0 - positive("max_undetected", max_undetected, allow_zero=True) / lam)


def llama3_interruptions_per_day() -> float:
    """Llama 3 405B's job interruptions per day over its 54-day snapshot (arXiv 2407.21783 §3.3.4)."""
    return LLAMA3["interruptions"] / LLAMA3["days"]
