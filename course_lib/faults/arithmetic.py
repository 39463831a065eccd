"""Failure arithmetic: how often a cluster fails, how often to checkpoint, what is left for training.

Failures are modelled as independent events at a constant rate (a Poisson process), the model
behind Young (1974) and Daly (2006) and the one Llama 3's interruption count can be read with:

* ``cluster_mtbf`` — ``n`` independent GPUs of mean time between failures ``M_gpu`` fail, as a
  job, every ``M = M_gpu / n`` seconds on average (any one failure stops a synchronous job).
* ``optimal_checkpoint_interval`` — Young's first-order optimum ``τ = √(2δM)`` for a save that
  blocks training for ``δ`` seconds; ``daly_checkpoint_interval`` is Daly's higher-order refinement
  of the same optimum (it matters once ``δ`` is not small against ``M``).
* ``goodput`` — the expected share of wall time that is useful training, first order;
  ``goodput_exponential`` is the exact expectation under the same Poisson model (Daly's).

All times are SI seconds; sizes are bytes; bandwidths are bytes per second.
"""
from __future__ import annotations

import math

from .._validate import calculator, positive, positive_int

__all__ = ["LLAMA3", "LLAMA3_GPU_MTBF_S", "cluster_mtbf", "implied_gpu_mtbf", "optimal_checkpoint_interval",
           "daly_checkpoint_interval", "goodput", "goodput_exponential", "expected_lost_seconds",
           "checkpoint_bytes_per_rank", "save_seconds", "async_blocking_seconds", "async_goodput",
           "storage_rate_needed", "simulate_goodput"]

# Llama 3 405B pre-training (Grattafiori et al. 2024, arXiv 2407.21783, §3.3.4 and Table 5): a
# 54-day snapshot on 16,384 H100 GPUs had 466 job interruptions, 47 planned and 419 unexpected.
LLAMA3 = {"days": 54, "n_gpus": 16_384, "interruptions": 466, "unexpected": 419, "n_params": 405e9}


@calculator
def cluster_mtbf(gpu_mtbf_seconds: float, n_gpus: int) -> float:
    """Mean time between failures of a job on ``n_gpus`` GPUs that each fail independently every
    ``gpu_mtbf_seconds`` on average: the rates add, so M = M_gpu / n. A quotient that underflows
    to 0 (5e-324 s over 2 GPUs) is refused naming both inputs: an MTBF of 0 would otherwise be
    refused later under a name the caller never typed (``mtbf_seconds`` of the interval)."""
    m = positive("gpu_mtbf_seconds", gpu_mtbf_seconds)
    job = m / positive_int("n_gpus", n_gpus)
    if job == 0.0:
        raise ValueError(f"gpu_mtbf_seconds={gpu_mtbf_seconds!r}, n_gpus={n_gpus!r}: the job's MTBF "
                         f"gpu_mtbf_seconds / n_gpus underflows a float (inputs too small)")
    return job


@calculator
def implied_gpu_mtbf(n_failures: int, duration_seconds: float, n_gpus: int) -> float:
    """Per-GPU MTBF implied by ``n_failures`` job failures in ``duration_seconds`` on ``n_gpus``
    GPUs, attributing every failure to one GPU: M_gpu = n · T / failures (GPU-seconds per failure)."""
    f = positive_int("n_failures", n_failures)
    t = positive("duration_seconds", duration_seconds)
    return positive_int("n_gpus", n_gpus) * t / f


# Per-GPU MTBF implied by Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100s: about
# 5.8 years per GPU, the failure rate chapters 12 and 13 plan with.
LLAMA3_GPU_MTBF_S = implied_gpu_mtbf(LLAMA3["unexpected"], LLAMA3["days"] * 86_400.0, LLAMA3["n_gpus"])


@calculator
def optimal_checkpoint_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Young's (1974) optimal compute time between checkpoints, √(2·δ·M), for a save that blocks
    training ``save_seconds`` (δ) and a job MTBF ``mtbf_seconds`` (M). First order in δ/M."""
    d = positive("save_seconds", save_seconds)
    m = positive("mtbf_seconds", mtbf_seconds)
    return math.sqrt(2 * d) * math.sqrt(m)


@calculator
def daly_checkpoint_interval(save_seconds: float, mtbf_seconds: float) -> float:
    """Daly's (2006) higher-order optimum of the same problem, for δ < 2M:
    √(2δM)·[1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ, and M once δ ≥ 2M (checkpointing cannot win then)."""
    d = positive("save_seconds", save_seconds)
    m = positive("mtbf_seconds", mtbf_seconds)
    if d >= 2 * m:
        return m
    x = d / (2 * m)
    return math.sqrt(2 * d) * math.sqrt(m) * (1 + math.sqrt(x) / 3 + x / 9) - d


def _times(interval_seconds: object, save_seconds: object, restart_seconds: object,
           mtbf_seconds: object) -> tuple[float, float, float, float]:
    return (positive("interval_seconds", interval_seconds), positive("save_seconds", save_seconds),
            positive("restart_seconds", restart_seconds, allow_zero=True), positive("mtbf_seconds", mtbf_seconds))


@calculator
def goodput(interval_seconds: float, save_seconds: float, restart_seconds: float, mtbf_seconds: float) -> float:
    """Expected fraction of wall time spent on useful training, first order in the failure rate.

    Lost-work model: training runs in periods of ``interval_seconds`` (τ) of compute followed by a
    blocking save of ``save_seconds`` (δ). Failures arrive at random, 1/M per second. Each failure
    costs ``restart_seconds`` (R: detect, reschedule, reload) plus the work since the last
    completed checkpoint, on average half a period, (τ + δ)/2. So a share (R + (τ + δ)/2)/M of
    wall time is lost to failures, and of the rest a share τ/(τ + δ) trains:

        goodput = τ/(τ + δ) · max(0, 1 − (R + (τ + δ)/2)/M).

    Maximising it over τ for small δ/M gives Young's √(2δM). Failures during a save or a restart
    are ignored (``goodput_exponential`` counts them).
    """
    tau, d, r, m = _times(interval_seconds, save_seconds, restart_seconds, mtbf_seconds)
    period = tau + d
    lost = (r + period / 2) / m
    return tau / period * max(0.0, 1.0 - lost)


@calculator
def goodput_exponential(interval_seconds: float, save_seconds: float, restart_seconds: float,
                        mtbf_seconds: float) -> float:
    """Exact expected goodput under Poisson failures (Daly 2006): a period of τ + δ completes only
    if no failure hits it, a failed try costs its elapsed time plus a restart R (which can fail
    too), so the expected wall time per τ of work is M·e^(R/M)·(e^((τ+δ)/M) − 1) and

        goodput = τ / (M · e^(R/M) · (e^((τ+δ)/M) − 1)).

    Computed in log space: a period far longer than M gives a goodput that underflows to 0.
    """
    tau, d, r, m = _times(interval_seconds, save_seconds, restart_seconds, mtbf_seconds)
    x = (tau + d) / m
    if x < 1e-8:   # log(e^x − 1) = log x + x/2 + O(x²); x itself may underflow to 0
        log_expm1 = math.log(tau + d) - math.log(m) + x / 2
    else:          # log(e^x − 1) = x + log(1 − e^−x), which never overflows
        log_expm1 = x + math.log(-math.expm1(-x))
    return math.exp(math.log(tau) - math.log(m) - r / m - log_expm1)


@calculator
def expected_lost_seconds(interval_seconds: float, save_seconds: float) -> float:
    """Work lost per failure in the first-order model: half a period, (τ + δ)/2 — the time since
    the last completed checkpoint when a failure strikes at a uniformly random moment."""
    return (positive("interval_seconds", interval_seconds) + positive("save_seconds", save_seconds)) / 2


@calculator
def checkpoint_bytes_per_rank(n_params: float, n_ranks: int, bytes_per_param: float = 16) -> float:
    """Bytes each rank writes for a checkpoint of a model fully sharded over ``n_ranks`` (ZeRO-3 /
    FSDP): every rank owns 1/n of the weights and optimizer state, so it saves
    ``bytes_per_param · n_params / n_ranks`` (16 = mixed-precision Adam's 2 + 2 + 12 convention;
    14 leaves out the gradients, which a checkpoint need not hold)."""
    psi = positive("n_params", n_params)
    n = positive_int("n_ranks", n_ranks)
    return psi * positive("bytes_per_param", bytes_per_param) / n   # memory.zero_memory_per_gpu, stage 3


@calculator
def save_seconds(checkpoint_bytes: float, n_writers: int, writer_bandwidth: float,
                 storage_bandwidth: float) -> float:
    """Wall time of a blocking save of ``checkpoint_bytes`` written in parallel by ``n_writers``
    ranks of ``writer_bandwidth`` each (bytes/s), capped by the filesystem's aggregate
    ``storage_bandwidth``: bytes / min(n · b_writer, b_storage). One writer is the gather-to-rank-0
    save; n writers is a sharded save (torch.distributed.checkpoint)."""
    total = positive("checkpoint_bytes", checkpoint_bytes)
    n = positive_int("n_writers", n_writers)
    bw = positive("writer_bandwidth", writer_bandwidth)
    agg = positive("storage_bandwidth", storage_bandwidth)
    return total / min(n * bw, agg)


@calculator
def async_blocking_seconds(checkpoint_bytes: float, n_ranks: int, copy_bandwidth: float) -> float:
    """Time training stalls for an asynchronous sharded save: each rank only copies its shard,
    ``checkpoint_bytes / n_ranks``, into host memory at ``copy_bandwidth`` (bytes/s, e.g. the PCIe
    device-to-host rate); the write to storage then overlaps with training, provided it finishes
    within one checkpoint interval."""
    total = positive("checkpoint_bytes", checkpoint_bytes)
    return total / positive_int("n_ranks", n_ranks) / positive("copy_bandwidth", copy_bandwidth)


@calculator
def async_goodput(interval_seconds: float, stall_seconds: float, write_seconds: float,
                  restart_seconds: float, mtbf_seconds: float) -> float:
    """``goodput`` for an asynchronous save that stalls training ``stall_seconds`` (δ, the staging
    copy) and then writes in the background for ``write_seconds`` (w). A checkpoint counts only once
    its write has completed, so a failure at a uniformly random moment of a period P = τ + δ falls
    back to the previous checkpoint whenever the latest has not finished, a chance (δ + w)/P: the
    work lost per failure is P/2 + δ + w (τ/2 plus the write, for a short stall), not P/2:

        goodput = τ/(τ + δ) · max(0, 1 − (R + (τ + δ)/2 + δ + w)/M).

    The write must finish before the next save starts (w ≤ τ), else saves queue behind each other:
    ``write_seconds`` longer than ``interval_seconds`` is refused, naming both."""
    positive("stall_seconds", stall_seconds)              # named as the user typed it, before _times reads it
    tau, d, r, m = _times(interval_seconds, stall_seconds, restart_seconds, mtbf_seconds)
    w = positive("write_seconds", write_seconds, allow_zero=True)
    if w > tau:
        raise ValueError(f"write_seconds ({write_seconds!r}) is longer than interval_seconds "
                         f"({interval_seconds!r}): the background write would not finish before the next save")
    period = tau + d
    return tau / period * max(0.0, 1.0 - (r + period / 2 + d + w) / m)


@calculator
def storage_rate_needed(checkpoint_bytes: float, interval_seconds: float) -> float:
    """Bytes/s the filesystem must sustain, for this job alone, to write a checkpoint of
    ``checkpoint_bytes`` every ``interval_seconds`` (each write done before the next starts). Set it
    beside the share of the filesystem the job really gets: a cluster's aggregate rate is shared."""
    return positive("checkpoint_bytes", checkpoint_bytes) / positive("interval_seconds", interval_seconds)


@calculator
def simulate_goodput(interval_seconds: float, save_seconds: float, restart_seconds: float,
                     mtbf_seconds: float, *, n_failures: int = 2000, seed: int = 0) -> dict:
    """Monte Carlo check of the models above: run the checkpoint/restart policy against
    exponentially distributed failure times until ``n_failures`` failures have happened.

    Returns ``goodput`` (useful compute / wall time), ``lost_mean`` (seconds of work lost per
    failure that struck a training period) and ``failures``.

    One exponential draw per failure, not per period: a stretch of training that starts after a
    restart runs until the next failure, ``E·M`` seconds later (E a standard exponential), so it
    completes ``⌊E·M/(τ+δ)⌋`` whole periods and loses the remainder. That is the same process as
    drawing a fresh time to failure for every period (memorylessness), but its cost is set by
    ``n_failures`` alone, whatever M is against a period (M = 1e308 s used to run for ever).
    Times are kept in units of M, so no sum overflows. A restart (R) is drawn as before: it
    fails, and counts as a failure, when the next failure comes within R.
    """
    import numpy as np

    tau, d, r, m = _times(interval_seconds, save_seconds, restart_seconds, mtbf_seconds)
    n = positive_int("n_failures", n_failures, maximum=10 ** 5)   # ±0.3 % already; a call stays < 0.1 s
    rng = np.random.default_rng(positive_int("seed", seed, minimum=0))
    period = tau + d
    q, rho, useful = period / m, r / m, tau / period     # a period and a restart in units of M
    wall = work = 0.0                                     # in units of M
    lost: list[float] = []
    failures, draws, i = 0, [], 0
    in_restart = False
    while failures < n:
        if i == len(draws):
            draws, i = rng.standard_exponential(min(2 * n, 1 << 16)).tolist(), 0
        e = draws[i]
        i += 1
        if in_restart:
            if e >= rho:              # the restart completes
                wall += rho
                in_restart = False
                continue
            wall += e
            failures += 1
            continue
        rem = math.fmod(e, q) if q > 0 else 0.0      # the part of the last period lost
        wall += e
        work += (e - rem) * useful
        lost.append(rem * m)
        failures += 1
        in_restart = r > 0           # R = 0: training resumes at once
    return {"goodput": work / wall if wall > 0 else 0.0, "lost_mean": float(np.mean(lost)) if lost else 0.0,
            "failures": failures}
