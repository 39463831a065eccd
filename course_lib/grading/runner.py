"""Headless grading of a folder of student notebooks.

For each ``*.ipynb`` (sorted): find the chapter from its ``Checker("...")`` call, execute it in its
own process (:mod:`course_lib.grading._execute`) with a per-cell and a per-notebook time limit, and
read the scores that ``check(...)`` recorded in ``COURSE_GRADE_LOG``. Every question of the
chapter's bank gets a row; an unscored one says why: "not implemented", "timed out",
"error: <ExcName>: <msg>" or "not attempted". A crash, an infinite loop or a missing answer costs
only the questions it touches.

Writes ``OUTDIR/junit.xml``, ``OUTDIR/summary.md``, ``OUTDIR/grades.json`` (formats in
:mod:`course_lib.grading.reports`) and the executed copies ``OUTDIR/executed/<name>.ipynb`` (with
the executor's log next to them).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_lib.grading._notebook import source_text
from course_lib.grading.checker import LOG_ENV, load_bank
from course_lib.grading.reports import NotebookGrade, Row, grades_json, junit_xml, summary_markdown, table
from course_lib.grading.values import fmt_points

_CHECKER = re.compile(r"""\bChecker\(\s*(["'])(?P<chapter>[^"']+)\1(?P<rest>[^)]*)\)""")
STARTUP_LIMIT = 120.0  # seconds allowed for starting the executor and its kernel
_BANK = re.compile(r"""\bbank\s*=\s*(["'])(?P<bank>[^"']+)\1""")


# --------------------------------------------------------------------------- reading a notebook
def _cells(nb: dict) -> list[dict]:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [c if isinstance(c, dict) else {} for c in cells] if isinstance(cells, list) else []


def _find_checker(nb: dict) -> tuple[int, str, str | None] | None:
    for i, cell in enumerate(_cells(nb)):
        if cell.get("cell_type") != "code":
            continue
        m = _CHECKER.search(source_text(cell.get("source")))
        if m:
            b = _BANK.search(m.group("rest"))
            return i, m.group("chapter"), (b.group("bank") if b else None)
    return None


def find_chapter(nb: dict) -> tuple[str, str | None] | None:
    """(chapter_id, bank or None) from the first ``Checker("...")`` call in the code cells."""
    found = _find_checker(nb)
    return None if found is None else found[1:]


def _check_cell(nb: dict, qid: str) -> int | None:
    pat = re.compile(r"(?<![.\w])check\(\s*([\"'])" + re.escape(qid) + r"\1")
    for i, cell in enumerate(_cells(nb)):
        if cell.get("cell_type") == "code" and pat.search(source_text(cell.get("source"))):
            return i
    return None


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- running one notebook
def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kernel_pid(progress: Path) -> int | None:
    for row in _read_jsonl(progress):
        if row.get("event") == "kernel" and isinstance(row.get("pid"), int):
            return row["pid"]
    return None


def execute(path: Path, log: Path, progress: Path, executed: Path, *, timeout_cell: float,
            timeout_notebook: float) -> bool:
    """Run ``path`` in its own process group; False if it ran ``timeout_notebook`` seconds past
    the kernel's start (starting a kernel may take up to STARTUP_LIMIT more). The kernel (its own
    process group) and everything it started are killed afterwards in every case."""
    env = dict(os.environ)
    env[LOG_ENV] = str(log)
    if env.get("PYTHONPATH"):  # the kernel runs in the notebook's folder: make entries absolute
        env["PYTHONPATH"] = os.pathsep.join(str(Path(x).resolve()) if x else x
                                            for x in env["PYTHONPATH"].split(os.pathsep))
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, "-m", "course_lib.grading._execute", str(path), str(progress), str(executed),
           "--timeout-cell", str(timeout_cell)]
    executed.parent.mkdir(parents=True, exist_ok=True)
    with open(executed.with_suffix(".log"), "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                                start_new_session=True)
        finished, started, kernel_at = True, time.monotonic(), None
        while proc.poll() is None:
            now = time.monotonic()
            if kernel_at is None and _kernel_pid(progress) is not None:
                kernel_at = now
            deadline = kernel_at + timeout_notebook if kernel_at else started + STARTUP_LIMIT + timeout_notebook
            if now > deadline:
                finished = False
                break
            try:
                proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
        pid = _kernel_pid(progress)
        if pid is not None:
            _kill_group(pid)
        _kill_group(proc.pid)
        proc.wait()
    return finished


def _cell_states(progress: list[dict]) -> tuple[dict[int, dict], str | None, int | None]:
    """Per code cell: the 'done' row (or {'status': 'running'}); plus how the run stopped early
    ('dead', 'fail: ...') and at which cell."""
    states: dict[int, dict] = {}
    stop, stop_cell = None, None
    for row in progress:
        ev = row.get("event")
        if ev == "start":
            states[row["cell"]] = {"status": "running"}
        elif ev == "done":
            states[row["cell"]] = row
        elif ev == "dead":
            stop, stop_cell = "dead", row.get("cell")
        elif ev == "fail":
            stop = "fail: " + str(row.get("error", ""))
    return states, stop, stop_cell


def _reason(nb: dict, qid: str, states: dict[int, dict], finished: bool, stop: str | None,
            stop_cell: int | None, timeout_notebook: float) -> str:
    """Why question ``qid`` has no recorded score."""
    c = _check_cell(nb, qid)
    last = len(_cells(nb)) - 1
    found = _find_checker(nb)
    setup = states.get(found[0], {}) if found else {}
    if setup.get("status") == "error" and not setup.get("timeout"):
        return _one_line(f"error: {setup.get('ename')}: {setup.get('evalue')} (in the Checker(...) cell)")
    window = [states[i] for i in sorted(states) if i <= (last if c is None else c)]
    if any(s.get("ename") == "NotImplementedError" for s in window):
        return "not implemented"
    if any(s.get("timeout") for s in window):
        return "timed out (a cell ran past the per-cell limit and was interrupted)"
    never_ran = c is not None and c not in states
    if not finished and (never_ran or any(s.get("status") == "running" for s in window)):
        return f"timed out (the notebook ran past its {fmt_points(timeout_notebook)} s limit)"
    own = states.get(c) if c is not None else None
    if own is not None and own.get("status") == "error":
        return _one_line(f"error: {own.get('ename')}: {own.get('evalue')}")
    if stop == "dead" and (c is None or stop_cell is None or c >= stop_cell):
        where = f" while running cell {stop_cell + 1}" if isinstance(stop_cell, int) and stop_cell >= 0 else ""
        return f"error: the kernel died{where} (DeadKernelError)"
    if stop and stop.startswith("fail") and (c is None or never_ran or (own or {}).get("status") == "running"):
        return _one_line(f"error: the notebook could not be run ({stop[6:]})")
    if never_ran:
        return "not attempted (its cell did not run)"
    return "not attempted"


def grade_notebook(path: Path, outdir: Path, *, timeout_cell: float = 60,
                   timeout_notebook: float = 300) -> NotebookGrade:
    """Execute and grade one notebook."""
    t0 = time.monotonic()
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        g = NotebookGrade(path.name, "?")
        g.rows.append(Row("(notebook)", 1.0, 0.0, _one_line(f"error: not a readable notebook: {e}")))
        return g
    found = find_chapter(nb)
    if found is None:
        g = NotebookGrade(path.name, "?")
        g.rows.append(Row("(notebook)", 1.0, 0.0, 'error: no Checker("...") call found in the notebook'))
        return g
    chapter, bank = found
    g = NotebookGrade(path.name, chapter)
    try:
        questions = load_bank(chapter, bank)
    except Exception as e:  # noqa: BLE001 - report it as the notebook's grade
        g.rows.append(Row("(notebook)", 1.0, 0.0, _one_line(f"error: {type(e).__name__}: {e}")))
        return g
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        log, progress = Path(tmp) / "log.jsonl", Path(tmp) / "progress.jsonl"
        finished = execute(path, log, progress, outdir / "executed" / path.name,
                           timeout_cell=timeout_cell, timeout_notebook=timeout_notebook)
        records, prog = _read_jsonl(log), _read_jsonl(progress)
    best: dict[str, dict] = {}
    for r in records:
        qid, score = r.get("qid"), r.get("score")
        if isinstance(qid, str) and isinstance(score, (int, float)) and (
                qid not in best or score > best[qid]["score"]):
            best[qid] = r
    states, stop, stop_cell = _cell_states(prog)
    if finished and stop is None and not any(r.get("event") == "end" for r in prog):
        stop = f"fail: the executor stopped unexpectedly; see executed/{path.stem}.log"
    for q in questions:
        if q.qid in best:
            score = min(max(float(best[q.qid]["score"]), 0.0), q.points)
            msg = "correct" if score >= q.points else _one_line(best[q.qid].get("message", ""), 300)
        else:
            score = 0.0
            msg = _reason(nb, q.qid, states, finished, stop, stop_cell, timeout_notebook)
        g.rows.append(Row(q.qid, q.points, round(score, 4), msg))
    g.seconds = time.monotonic() - t0
    return g


def grade_dir(directory: Path, outdir: Path, *, pass_mark: float = 60, timeout_cell: float = 60,
              timeout_notebook: float = 300) -> int:
    """Grade every notebook in ``directory``; print the table, write the reports; 0 if all pass."""
    directory, outdir = Path(directory), Path(outdir)
    paths = sorted(p for p in directory.glob("*.ipynb") if p.is_file())
    if not paths:
        print(f"no notebooks (*.ipynb) in {directory}", file=sys.stderr)
        return 2
    outdir.mkdir(parents=True, exist_ok=True)
    grades = []
    for p in paths:
        print(f"grading {p.name} ...", file=sys.stderr, flush=True)
        grades.append(grade_notebook(p, outdir, timeout_cell=timeout_cell, timeout_notebook=timeout_notebook))
    print(table(grades, pass_mark))
    (outdir / "summary.md").write_text(summary_markdown(grades, pass_mark), encoding="utf-8")
    (outdir / "junit.xml").write_bytes(junit_xml(grades))
    (outdir / "grades.json").write_text(grades_json(grades, pass_mark), encoding="utf-8")
    return 1 if any(g.percent < pass_mark for g in grades) else 0
