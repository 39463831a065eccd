"""Lab driver: hangs injected on real gloo ranks, found from the flight recorder's dumps.

``hang_case(folder, case)`` launches ``world_size`` ranks that run a few training-like steps (a
compute span, then an all-reduce of the "gradients" and an all-gather of the loss, each through the
:class:`~course_lib.triage.recorder.FlightRecorder`); on step ``at_step`` rank ``faulty`` misbehaves:

* ``skip`` — it skips the gradient all-reduce and goes on to the loss all-gather;
* ``other`` — it calls a broadcast where the others all-reduce;
* ``compute`` — it stays in its compute span (a loop that never ends by itself);
* ``size`` — it all-reduces twice as many elements (run with the recorder's ``check``: on gloo an
  unchecked size mismatch aborts the receiving rank with SIGABRT at once, or passes silently);
* ``none`` — nobody misbehaves.

The run ends by the collective timeout (never by waiting for a hang): the launcher raises, every
rank is stopped, and the dumps in ``folder`` are analysed. ``torch_fr_compare`` runs the same
collectives with PyTorch's own flight recorder on and returns both records side by side.
"""
from __future__ import annotations

import time
from pathlib import Path

__all__ = ["CASES", "hang_case", "torch_fr_compare", "main"]

CASES = ("skip", "other", "compute", "size", "none")


def _hang_worker(ctx, folder: str, case: str, faulty: int, at_step: int, steps: int, dump_after_s: float,
                 elements: int, check: bool) -> dict:
    import torch

    from course_lib.triage.recorder import FlightRecorder
    rec = FlightRecorder(folder, ctx.rank, ctx.group, dump_after_s=dump_after_s, check=check)
    torch.manual_seed(ctx.rank)
    w = torch.randn(elements, 16)
    try:
        for step in range(steps):
            bad = ctx.rank == faulty and step == at_step
            with rec.compute(f"step {step} forward/backward"):
                g = (w @ torch.randn(16, 4)).sum(1)
                while bad and case == "compute":    # a rank that never leaves its compute: only a timeout ends it
                    time.sleep(0.05)
            if bad and case == "other":
                rec.broadcast(g, 0, name=f"step {step} grads")
            elif bad and case == "size":
                rec.all_reduce(torch.cat([g, g]), name=f"step {step} grads")
            elif not (bad and case == "skip"):
                rec.all_reduce(g, name=f"step {step} grads")
            out = [torch.zeros(1) for _ in range(ctx.world_size)]
            rec.all_gather(out, g[:1].clone(), name=f"step {step} loss")
        return {"rank": ctx.rank, "seq": rec.seq}
    finally:
        rec.close()


def hang_case(folder: str | Path, case: str, *, world_size: int = 4, faulty: int = 2, at_step: int = 2,
              steps: int = 4, collective_timeout: float = 2.0, dump_after_s: float = 0.5,
              elements: int = 64, check: bool | None = None) -> dict:
    """Run one injected case; return the launcher's error (its type and first line) and the ranks
    it names as hung (``error_ranks``), the seconds the run took, and the analyser's verdict on ``folder``. ``check`` turns the recorder's
    fingerprint check on (default: for ``size`` only)."""
    from course_lib._validate import choice
    from course_lib.dist import launch
    from course_lib.triage.analyze import analyze
    case = choice("case", case, CASES)
    t0 = time.perf_counter()
    error, error_ranks = None, []
    try:
        launch(_hang_worker, world_size, timeout=collective_timeout + 3.0, collective_timeout=collective_timeout,
               folder=str(folder), case=case, faulty=faulty, at_step=at_step, steps=steps,
               dump_after_s=dump_after_s, elements=elements, check=(case == "size") if check is None else bool(check))
    except Exception as e:   # the run is meant to fail: its error is part of the result
        error = (type(e).__name__, str(e).splitlines()[0])
        error_ranks = sorted(getattr(e, "ranks", []) or [])
    seconds = time.perf_counter() - t0
    verdict = analyze(folder, world_size) if case != "none" else None
    return {"case": case, "error": error, "error_ranks": error_ranks, "seconds": seconds, "verdict": verdict}


def _fr_worker(ctx, folder: str) -> dict:
    import json
    import os

    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace_json

    from course_lib.triage.recorder import FlightRecorder
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
    group = dist.new_group(backend="gloo")       # a group made after the buffer size is set
    rec = FlightRecorder(folder, ctx.rank, group)
    x = torch.ones(8)
    rec.all_reduce(x, name="grads")
    rec.broadcast(x, 0, name="weights")
    rec.all_gather([torch.zeros(8) for _ in range(ctx.world_size)], x, name="loss")
    rec.close()
    theirs = json.loads(_dump_fr_trace_json())
    pg = [e for e in theirs.get("entries", []) if e["process_group"][0] != "0"]
    return {"course": [{k: e[k] for k in ("seq", "op", "sizes", "dtype", "state")} for e in rec.ring],
            "torch": [{"seq": e["collective_seq_id"], "op": e["profiling_name"], "sizes": e["input_sizes"],
                       "dtype": e["input_dtypes"], "state": e["state"],
                       "started_ns": e["time_discovered_started_ns"],
                       "completed_ns": e["time_discovered_completed_ns"]} for e in pg],
            "version": theirs.get("version")}


def torch_fr_compare(folder: str | Path, world_size: int = 2) -> list[dict]:
    """PyTorch's flight recorder (``TORCH_FR_BUFFER_SIZE``, ``_dump_fr_trace_json``) beside the
    course's, on the same three gloo collectives; one dict per rank."""
    from course_lib.dist import launch
    return launch(_fr_worker, world_size, timeout=30.0, folder=str(folder))


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.triage.hang_runs OUT.json``: one real run's dumps (rank 1 skips the
    all-reduce of step 3, four ranks), stored for the exercises to read."""
    import json
    import sys
    import tempfile

    from course_lib.triage import hang_runs   # by name: the ranks import the worker from it
    from course_lib.triage.analyze import read_dumps
    out = (sys.argv[1:] if argv is None else argv)[0]
    with tempfile.TemporaryDirectory() as folder:
        res = hang_runs.hang_case(folder, "skip", world_size=4, faulty=1, at_step=3, steps=5)
        dumps, missing = read_dumps(folder, 4)
    body = {"command": "python -m course_lib.triage.hang_runs data/triage_dumps.json", "world_size": 4,
            "missing": missing, "dumps": {str(r): d for r, d in dumps.items()}}
    with open(out, "w") as f:
        json.dump(body, f, indent=1)
        f.write("\n")
    print(res["verdict"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
