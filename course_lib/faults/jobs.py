"""Launch the elastic job under real ``torchrun`` from Python, and read back what happened.

:func:`run_job` starts ``python -m torch.distributed.run --standalone ... -m
course_lib.faults.elastic`` in a subprocess, with a time limit, captures its output and leaves no
process behind (the agent is asked to stop its ranks, then killed; the ranks die with it). It
returns an :class:`ElasticResult` read from the job's event log: how many times the agent
restarted the group, which checkpoint each attempt resumed from, the steps redone per failure
(the lost work that the goodput formulas charge for) and the seconds from the last step before a
failure to the first step after it. :func:`reference_run` trains the same job with no failure
(``course_lib.dist.launch``, no torchrun needed), for the bit-identical comparison, and
:func:`elastic_demo` does both for the lab.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .._validate import positive, positive_int
from .elastic import Fault, JobConfig

__all__ = ["ElasticResult", "run_job", "read_log", "reference_run", "random_faults", "elastic_demo"]


@dataclass(frozen=True)
class ElasticResult:
    """One elastic run, as the agent's exit status and rank 0's event log tell it.

    Lists indexed by attempt: ``resumed_from`` (0 = fresh start), ``last_step`` (the last step
    rank 0 finished), ``incomplete_seen`` (checkpoints without marker found at start),
    ``refused`` (why each newer checkpoint found at start failed verification). Lists
    indexed by failure: ``steps_redone`` (last step finished before it minus the step resumed
    from after it; a step cut short by the failure is not counted), ``lost_seconds`` (the
    training time those steps took: from finishing the resumed step to the last step finished
    before the failure) and ``restart_seconds`` (last step before it to first step after it:
    detection, restart, imports, loading the checkpoint)."""

    returncode: int
    resumed_from: list[int]
    last_step: list[int]
    incomplete_seen: list[list[int]]
    steps_redone: list[int]
    restart_seconds: list[float]
    lost_seconds: list[float]
    final: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    output: str = ""
    refused: list[list[str]] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        return len(self.resumed_from) - 1


def read_log(out: str | Path) -> dict:
    """Parse ``out/log.jsonl`` into per-attempt lists (a line cut short by a kill is skipped)."""
    events = []
    for line in (Path(out) / "log.jsonl").read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    attempts = sorted({e["attempt"] for e in events})
    starts = {e["attempt"]: e for e in events if e["event"] == "start"}
    steps = {a: [e for e in events if e["event"] == "step" and e["attempt"] == a] for a in attempts}
    resumed = [starts[a]["resumed_from"] for a in attempts]
    last = [steps[a][-1]["step"] if steps[a] else resumed[i] for i, a in enumerate(attempts)]
    gaps, lost = [], []
    for i, a in enumerate(attempts[:-1]):
        resumed_at = resumed[i + 1]              # when that checkpoint's step had been finished
        done_then = [e["t"] for b in attempts[:i + 1] for e in steps[b] if e["step"] == resumed_at]
        since = done_then[-1] if done_then else starts[attempts[0]]["t"]
        lost.append(round((steps[a][-1]["t"] if steps[a] else since) - since, 3))
        before = steps[a][-1]["t"] if steps[a] else starts[a]["t"]
        after = steps[attempts[i + 1]][0]["t"] if steps[attempts[i + 1]] else starts[attempts[i + 1]]["t"]
        gaps.append(round(after - before, 3))
    done = [e for e in events if e["event"] == "done"]
    return {"resumed_from": resumed, "last_step": last,
            "incomplete_seen": [starts[a]["incomplete"] for a in attempts],
            "refused": [starts[a].get("refused", []) for a in attempts],
            "steps_redone": [last[i] - resumed[i + 1] for i in range(len(attempts) - 1)],
            "restart_seconds": gaps, "lost_seconds": lost,
            "final": {k: v for k, v in done[-1].items() if k.endswith("sha256") or k == "steps"} if done else {},
            "losses": {e["step"]: e["loss"] for e in events if e["event"] == "step"}}


def _stop(proc: subprocess.Popen) -> None:
    """Ask the agent to stop its ranks (SIGTERM), then kill its whole process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_job(out: str | Path, job: JobConfig = JobConfig(), *, nproc: int = 2, max_restarts: int = 3,
            timeout: float = 120.0) -> ElasticResult:
    """Run ``job`` under ``torchrun --nproc-per-node nproc --max-restarts max_restarts`` into the
    empty-or-new directory ``out``; raise TimeoutError (after stopping everything) if it takes
    longer than ``timeout`` seconds. A job that fails for good returns its non-zero returncode."""
    nproc = positive_int("nproc", nproc)
    max_restarts = positive_int("max_restarts", max_restarts, minimum=0)
    timeout = positive("timeout", timeout)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "LOGLEVEL": "WARNING"}
    t0 = time.monotonic()
    # torchrun writes each attempt's per-rank logs under --log-dir, by default a folder of its own in
    # the temp folder that nothing removes (one per job: lab 12 and the tests left eight a run)
    with tempfile.TemporaryDirectory(prefix="course-torchrun-", ignore_cleanup_errors=True) as logs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
               "--log-dir", logs, "-m", "course_lib.faults.elastic", *job.argv(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            text = proc.stdout.read() if proc.stdout else ""
            raise TimeoutError(f"the elastic job did not finish within {timeout:g} s; its output ends:\n"
                               f"{text[-3000:]}") from None
        finally:
            _stop(proc)
    log = read_log(out) if (out / "log.jsonl").exists() else {}
    return ElasticResult(proc.returncode, log.get("resumed_from", []), log.get("last_step", []),
                         log.get("incomplete_seen", []), log.get("steps_redone", []),
                         log.get("restart_seconds", []), log.get("lost_seconds", []), log.get("final", {}),
                         round(time.monotonic() - t0, 3), text, log.get("refused", []))


def _reference_worker(ctx, job: JobConfig, out: str) -> dict:
    """One rank of the uninterrupted run, under ``course_lib.dist.launch``."""
    import torch
    import torch.distributed as dist
    from .elastic import train
    torch.set_num_threads(1)     # as under torchrun: the same kernels, the same bits
    ckpt_group = dist.new_group(backend="gloo")
    return train(job, out, ctx.group, ckpt_group, attempt=0)


def reference_run(out: str | Path, job: JobConfig = JobConfig(), *, nproc: int = 2,
                  timeout: float = 120.0) -> dict:
    """Train ``job`` without faults on ``nproc`` ranks; return rank 0's final digests."""
    from ..dist import launch
    return launch(_reference_worker, nproc, backend="gloo", timeout=timeout, threads_per_rank=1,
                  job=replace(job, faults=()), out=str(out))[0]


def random_faults(n: int, steps: int, seed: int, nproc: int = 2) -> tuple[Fault, ...]:
    """``n`` kills at distinct random steps (in ``1..steps``, increasing) on random ranks, from
    ``seed``: attempt ``i`` dies at the ``i``-th step, after resuming from before it."""
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(1, steps + 1), positive_int("n", n, maximum=steps)))
    return tuple(Fault("kill", s, rng.randrange(nproc)) for s in picks)


def elastic_demo(directory: str | Path, *, kill_step: int | None = None, seed: int = 0, steps: int = 12,
                 ckpt_every: int = 3, nproc: int = 2, reference: dict | None = None,
                 timeout: float = 120.0) -> dict:
    """Lab demo: one uninterrupted run and one with a rank SIGKILLed at ``kill_step`` (random from
    ``seed`` if None); return the restarts, the steps redone, the lost and restart seconds and
    whether the killed job's final weights and optimizer state are bit-identical to the
    uninterrupted run's. Pass ``reference`` (what :func:`reference_run` returned for the same
    ``seed``, ``steps`` and ``nproc``) to skip the uninterrupted run."""
    directory = Path(directory)
    job = JobConfig(steps=steps, ckpt_every=ckpt_every, seed=seed)
    ref = reference or reference_run(directory / "reference", job, nproc=nproc, timeout=timeout)
    fault = (Fault("kill", positive_int("kill_step", kill_step, maximum=steps), 1 % nproc) if kill_step
             else random_faults(1, steps, seed, nproc)[0])
    res = run_job(directory / "killed", replace(job, faults=(fault,)), nproc=nproc, timeout=timeout)
    return {"fault": str(fault), "returncode": res.returncode, "restarts": res.restarts,
            "resumed_from": res.resumed_from, "steps_redone": res.steps_redone,
            "lost_seconds": res.lost_seconds, "restart_seconds": res.restart_seconds, "ckpt_every": ckpt_every,
            "bit_identical": res.final.get("weights_sha256") == ref["weights_sha256"]
            and res.final.get("optim_sha256") == ref["optim_sha256"]}
