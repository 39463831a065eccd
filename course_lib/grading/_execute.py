"""Execute one notebook for the grader; run as its own process by :mod:`course_lib.grading.runner`.

    python -m course_lib.grading._execute NOTEBOOK PROGRESS.jsonl OUT.ipynb --timeout-cell 60 \
        [--harness-timeout 300] [--limits nproc=..,as=..,fsize=..] [--status-fd N]

Runs inside the sandbox (:mod:`course_lib.grading.sandbox`). Runs every cell (errors allowed) with
the kernel's working directory set to the notebook's folder. A cell running longer than
``--timeout-cell`` seconds is interrupted and the next cell runs. With ``--harness-timeout``, after
the last cell the same kernel runs :func:`course_lib.grading.remote.serve_from_env` (for at most
that long), which answers the grader's calls of the functions the notebook passed to ``check``.
OUT.ipynb is rewritten after every cell, so a run killed by the time limit keeps what it showed.
Progress is appended to PROGRESS.jsonl as it happens, so the parent can tell how far a killed run got:

    {"event": "kernel", "pid": 1234}                     kernel started (own process group)
    {"event": "start", "cell": 3}                        cell 3 started
    {"event": "done", "cell": 3, "status": "ok"}         ... or "error" with "ename", "evalue"
    {"event": "cells_done"}                              the notebook's cells ran; the harness starts
    {"event": "dead", "cell": 5}                         the kernel died while running cell 5
    {"event": "fail", "error": "..."}                    the run could not continue
    {"event": "end"}

The kernel inherits this process's environment (``COURSE_GRADE_MODE`` and friends) and its resource
limits (``--limits``). The events the grader *relies on* (``kernel``, ``cells_done``, ``unreadable``,
``failed_before_cells``, ``end``) also go to the status pipe ``--status-fd``, which the kernel cannot reach
(:func:`course_lib.grading._inside.secure_status`); the progress file is only for messages. Code
cells whose ``source`` is not text run as empty cells.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TIMEOUT_ENAME = "CellTimeout"
HARNESS = "import course_lib.grading.remote as _course_grading_remote\n_course_grading_remote.serve_from_env()"


class _Progress:
    def __init__(self, path: Path):
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in main

    def __call__(self, **row: object) -> None:
        self._f.write(json.dumps(row, sort_keys=True) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.grading._execute")
    p.add_argument("notebook", type=Path)
    p.add_argument("progress", type=Path)
    p.add_argument("output", type=Path)
    p.add_argument("--timeout-cell", type=float, default=60)
    p.add_argument("--harness-timeout", type=float, default=0)
    p.add_argument("--limits", default="")
    p.add_argument("--status-fd", type=int, default=None)
    a = p.parse_args(argv)
    from course_lib.grading._inside import apply_limits, secure_status

    status = secure_status(a.status_fd) if a.status_fd is not None else None

    def trusted(**row: object) -> None:
        if status is not None:
            status.write(json.dumps(row, sort_keys=True) + "\n")
    apply_limits(a.limits)

    from course_lib.quick_imports import skip_iri_grammar
    skip_iri_grammar()
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    from course_lib.grading._notebook import kernel_manager_class

    progress = _Progress(a.progress)
    try:
        nb = nbformat.read(a.notebook, as_version=4)
    except Exception as e:  # noqa: BLE001 - a broken file: tell the parent why
        progress(event="fail", error=f"cannot read the notebook: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        trusted(event="unreadable")
        trusted(event="end")
        progress(event="end")
        progress.close()
        return 1
    for cell in nb.cells:
        src = cell.get("source")
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        cell["source"] = src if isinstance(src, str) else ""
    timeout = max(1, int(round(a.timeout_cell)))
    current = {"cell": -1}
    n_cells = len(nb.cells)
    if a.harness_timeout > 0:
        nb.cells.append(nbformat.v4.new_code_cell(HARNESS))

    def save() -> None:
        """Write the executed copy (without the harness cell) atomically."""
        try:
            a.output.parent.mkdir(parents=True, exist_ok=True)
            shown = nbformat.from_dict(dict(nb, cells=nb.cells[:n_cells]))
            tmp = a.output.with_suffix(".tmp")
            nbformat.write(shown, tmp)
            os.replace(tmp, a.output)
        except Exception as e:  # noqa: BLE001
            print(f"could not write {a.output}: {e}", file=sys.stderr)

    def cell_timeout(cell: dict) -> int:
        return max(1, int(a.harness_timeout)) if cell is nb.cells[-1] and a.harness_timeout > 0 else timeout

    def on_notebook_start(notebook: object) -> None:
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        trusted(event="kernel")
        if pid is not None:
            progress(event="kernel", pid=int(pid))

    def on_cell_start(cell: dict, cell_index: int) -> None:
        current["cell"] = cell_index
        if cell_index >= n_cells:
            save()
            trusted(event="cells_done")
            progress(event="cells_done")
        elif cell.get("cell_type") == "code":
            progress(event="start", cell=cell_index)

    def on_cell_executed(cell: dict, cell_index: int, execute_reply: dict) -> None:
        if cell_index >= n_cells:
            return
        content = (execute_reply or {}).get("content", {})
        status = content.get("status", "ok")
        if status == "ok":
            save()
            progress(event="done", cell=cell_index, status="ok")
            return
        ename, evalue = content.get("ename", "Error"), content.get("evalue", "")
        progress(event="done", cell=cell_index, status="error", ename=ename, evalue=evalue,
                 timeout=ename == TIMEOUT_ENAME)
        if ename == TIMEOUT_ENAME:  # leave a visible trace in the executed copy
            cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]))
        save()

    client = NotebookClient(
        nb, kernel_manager_class=kernel_manager_class(), kernel_name="python3",
        timeout=timeout, timeout_func=cell_timeout, allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": TIMEOUT_ENAME,
                          "evalue": f"the cell did not finish within {timeout} s and was interrupted",
                          "traceback": []},
        record_timing=False, startup_timeout=120,
        resources={"metadata": {"path": str(a.notebook.resolve().parent)}},
        on_notebook_start=on_notebook_start, on_cell_start=on_cell_start,
        on_cell_executed=on_cell_executed,
    )
    rc = 0
    try:
        client.execute()
    except DeadKernelError:
        progress(event="dead", cell=current["cell"])
        if current["cell"] < 0:  # before the first cell: no student code ran, the grader failed
            trusted(event="failed_before_cells", error="the kernel died before the first cell")
    except Exception as e:  # noqa: BLE001 - report anything else to the parent, then stop
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        progress(event="fail", error=why)
        if current["cell"] < 0:
            trusted(event="failed_before_cells", error=f"the kernel did not start: {why}")
        rc = 1
    save()
    trusted(event="end")
    progress(event="end")
    progress.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
