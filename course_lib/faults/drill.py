"""A small job to practise resume-from-checkpoint on, and the harness that kills it for real.

:func:`make_job` builds a tiny model with dropout, an AdamW optimizer and a :class:`DrillLoader`
whose batches depend on its position: a correct resume must restore the weights, the optimizer's
moments, the step, the loader's position *and* torch's random state (dropout draws from it).
:func:`train_step` does one step and reports the loader position to the harness.

:func:`kill_and_resume` runs a user's ``train(ckpt_dir, total_steps, every)`` function in a fresh
Python process, SIGKILLs that process from outside right after a chosen step, starts it again on
the same checkpoint folder, and compares the final weights with an uninterrupted reference run,
bit for bit. It is the grader of chapter 12's resume exercise and works on any such function.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

__all__ = ["DrillLoader", "make_job", "train_step", "reference_weights", "kill_and_resume", "resume_worker"]

_PROGRESS, _KILL_AT = "COURSE_DRILL_PROGRESS", "COURSE_DRILL_KILL_AT"
WIDTH = 16


class DrillLoader:
    """Batches of random inputs and targets; batch ``i`` is a pure function of (seed, i), so the
    position is all the state a resumed loader needs."""

    def __init__(self, seed: int = 0, batch: int = 8):
        self.seed, self.batch, self.position = seed, batch, 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.position)
        self.position += 1
        x = torch.randn(self.batch, WIDTH, generator=g)
        return x, torch.roll(x, 1, dims=1).tanh()

    def state_dict(self) -> dict:
        return {"seed": self.seed, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.position = int(state["seed"]), int(state["position"])


def make_job(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, DrillLoader]:
    """A fresh job: the same model, optimizer and loader every time (it also seeds torch's RNG)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 64), torch.nn.GELU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(64, WIDTH))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2), DrillLoader(seed)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DrillLoader) -> float:
    """One AdamW step on the next batch; returns the loss. Under the harness it also reports the
    loader position, and waits to be killed after the step the harness chose."""
    x, y = loader.next_batch()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    report = os.environ.get(_PROGRESS)
    if report:
        with open(report, "a") as f:
            f.write(f"{loader.position}\n")
        if loader.position == int(os.environ.get(_KILL_AT, "-1")):
            time.sleep(60)   # the harness SIGKILLs the process here
    return loss.item()


def reference_weights(total_steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Final weights of an uninterrupted run of ``total_steps`` steps."""
    model, opt, loader = make_job(seed)
    model.train()
    for _ in range(total_steps):
        train_step(model, opt, loader)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _child(source_file: Path, name: str, ckpt: Path, steps: int, every: int, out: Path, env: dict) -> None:
    """Body of the job process: run the user's function, save the model it returns to ``out``."""
    import traceback

    from course_lib.stability import checkpoint
    os.environ.update(env)
    try:
        namespace = {"os": os, "torch": torch, "Path": Path, "checkpoint": checkpoint,
                     "drill": sys.modules[__name__], "__name__": "__drill__"}
        exec(compile(Path(source_file).read_text(), "<your function>", "exec"), namespace)   # noqa: S102
        model = namespace[name](str(ckpt), steps, every)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"the function returned {type(model).__name__}, not the model")
        torch.save(model.state_dict(), out)
    except BaseException as exc:   # noqa: BLE001 - reported to the harness, which is another process
        lines = traceback.format_exception_only(type(exc), exc)
        Path(str(out) + ".error").write_text(lines[-1].strip() if lines else type(exc).__name__)
        os._exit(1)


def _run_child(source_file: Path, name: str, ckpt: Path, steps: int, every: int, out: Path,
               progress: Path, kill_at: int | None, timeout: float) -> dict:
    """Run the user's function in a new (forked) process; SIGKILL it once it reports step ``kill_at``.

    Forking, as a DataLoader's workers do, spares each job a fresh interpreter and torch import."""
    import multiprocessing

    env = {_PROGRESS: str(progress), _KILL_AT: str(kill_at if kill_at is not None else -1)}
    progress.write_text("")
    err_file = Path(str(out) + ".error")
    err_file.unlink(missing_ok=True)
    proc = multiprocessing.get_context("fork").Process(
        target=_child, args=(source_file, name, ckpt, steps, every, out, env), daemon=True)
    proc.start()
    deadline, killed, error = time.monotonic() + timeout, False, None
    try:
        while proc.is_alive():
            if kill_at is not None and str(kill_at) in progress.read_text().split():
                proc.kill()   # SIGKILL: no handler, no cleanup, like a node that dies
                killed = True
                break
            if time.monotonic() > deadline:
                error = f"the job ran past {timeout:.0f} s"
                break
            time.sleep(0.005)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
    if error is None and not killed and proc.exitcode != 0:
        error = err_file.read_text() if err_file.exists() else f"the job exited with status {proc.exitcode}"
    return {"killed": killed, "positions": [int(s) for s in progress.read_text().split()], "error": error}


def kill_and_resume(source: str, name: str, kill_at: int, total_steps: int = 12, every: int = 4,
                    timeout: float = 30.0) -> dict:
    """Run ``name`` (defined in ``source``) as a job, SIGKILL it after step ``kill_at``, run it again
    on the same checkpoint folder and compare its final weights with an uninterrupted run.

    Returns ``bit_identical``, ``resumed_from`` (the step the second run started after),
    ``steps_redone`` (``kill_at − resumed_from``) and ``error`` (None, or what went wrong).
    """
    from course_lib.stability import checkpoint  # noqa: F401 - imported once here, not in every job
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "ckpt").mkdir()
        (d / "fn.py").write_text(source)
        args = (d / "fn.py", name, d / "ckpt", total_steps, every, d / "final.pt", d / "progress")
        ref = reference_weights(total_steps)   # the parent's torch state is untouched by the jobs
        first = _run_child(*args, kill_at=kill_at, timeout=timeout)
        if first["error"] or not first["killed"]:
            why = first["error"] or f"the job finished without reaching step {kill_at}"
            return {"bit_identical": False, "resumed_from": None, "steps_redone": None, "error": why}
        second = _run_child(*args, kill_at=None, timeout=timeout)
        if second["error"]:
            return {"bit_identical": False, "resumed_from": None, "steps_redone": None,
                    "error": f"after the kill: {second['error']}"}
        start = total_steps - len(second["positions"])   # steps the restarted job did not redo
        final = torch.load(d / "final.pt", weights_only=True)
        same = set(final) == set(ref) and all(torch.equal(final[k], ref[k]) for k in ref)
        return {"bit_identical": same, "resumed_from": start, "steps_redone": kill_at - start, "error": None,
                "positions_after_restart": second["positions"]}


def resume_worker(ctx, source: str, fn_name: str, kill_at: int, total_steps: int, every: int) -> dict:
    """``course_lib.dist.launch`` worker (rank 0 only) that runs :func:`kill_and_resume`: in a graded
    run it executes inside the submission's sandbox."""
    return json.loads(json.dumps(kill_and_resume(source, fn_name, kill_at, total_steps, every)))

