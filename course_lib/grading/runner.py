"""Headless grading of a folder of student notebooks, with the scoring outside the student's reach.

A class folder holds one folder per student and/or flat files (:mod:`course_lib.grading.classroom`
finds them and says why anything else is skipped); the submissions are graded in parallel, on
``Options.jobs`` workers (default: the cores). For each notebook: the assignment (question bank) comes from the command line
(``--chapter``/``--bank``) or the file name (``01_flops.ipynb``, ``alice-ch01_flops.ipynb``), never
from the notebook's text. A temporary copy of the notebook runs in its own bubblewrap sandbox
(:mod:`course_lib.grading.sandbox`) in *graded* mode, where ``check(...)`` only records answers.
After its last cell the grader calls the functions it answered with on inputs it draws now (seeded
per run), through a socket (:mod:`course_lib.grading.remote`). Then the sandbox is killed with every
process in it, and only then are the recorded answers read (strictly: :mod:`~course_lib.grading.wire`)
and scored here, against the bank loaded in this process. The last answer to a question counts;
a question revealed with ``check.reveal`` scores 0; an unanswered one says why ("not implemented",
"not attempted (...)").

The scoring itself (the options, the answers, a question's row or why it has none) is
:mod:`course_lib.grading.scoring`. Writes ``OUTDIR/junit.xml``, ``OUTDIR/summary.md``,
``OUTDIR/grades.json``, ``OUTDIR/gradebook.csv`` (formats in :mod:`course_lib.grading.reports`)
and the executed copies
``OUTDIR/executed/<name>.ipynb`` (``<name>`` is ``alice/01_flops`` in a student's folder; with
the executor's log next to them). Nothing in OUTDIR is reachable from a sandbox.
"""
from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from course_lib.grading import remote, sandbox
from course_lib.grading._notebook import TooLarge, read_capped
from course_lib.grading.checker import available_chapters, load_bank
from course_lib.grading.classroom import Submission, default_jobs, discover, few, grade_all, short_id
from course_lib.grading.copies import copy_note
from course_lib.grading.grades import NotebookGrade, Row
from course_lib.grading.i18n import LANG_ENV, msg, notebook_lang, render
from course_lib.grading.question import Question
from course_lib.grading.reports import skipped_listing, write_reports
from course_lib.grading.sandbox import INSIDE, STARTUP_LIMIT, Sandbox
from course_lib.grading.scoring import Answers, Options, one_line, read_jsonl, reason, score_answer
from course_lib.grading.values import printable

EXECUTED_CAP = 16 << 20  # bytes of an executed copy kept for the report (a notebook's outputs)
GRADER_ERROR = "grader error: "  # a (notebook) row's message when the grader, not the student, failed


# --------------------------------------------------------------------------- the assignment
def chapter_for(name: str, chapters: list[str] | None = None) -> str | None:
    """The chapter a submission file is for: the one chapter id (``01_flops`` or ``ch01_flops``)
    its name contains, else None (none, or more than one)."""
    stem = Path(name).stem.lower()
    found = []
    for ch in chapters if chapters is not None else available_chapters():
        short = short_id(ch)
        if re.search(rf"(?<![a-z0-9]){re.escape(short)}(?![a-z0-9])|{re.escape(ch)}", stem):
            found.append(ch)
    return found[0] if len(found) == 1 else None

# --------------------------------------------------------------------------- running one sandbox
def _events(progress: Path) -> list[dict]:
    return read_jsonl(progress)


def run_submission(path: Path, outdir: Path, questions: list[Question], opts: Options, name: str | None = None,
                   data: bytes | None = None) -> tuple[dict[str, Row], Answers, list[dict], bool, str | None]:
    """Run ``path`` in a sandbox; grade its function answers while it is alive; return the rows
    scored so far, the answers, the executor's progress events, whether it finished in time and,
    when the sandbox itself failed (not the student), why. ``name`` (default the file name)
    places the executed copy under ``outdir/executed``; ``data``, the notebook's bytes when the
    caller has read them already (else read here, within ``SUBMISSION_CAP``)."""
    executed = outdir / "executed" / (name or path.name)
    executed.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[str, Row] = {}
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        root = Path(tmp)
        (root / "work").mkdir()
        (root / "out").mkdir()
        (root / "work" / path.name).write_bytes(read_capped(path) if data is None else data)
        argv = [sys.executable, "-m", "course_lib.grading._execute", str(INSIDE / "work" / path.name),
                str(INSIDE / "out" / "progress.jsonl"), str(INSIDE / "out" / "executed.ipynb"),
                "--timeout-cell", str(opts.timeout_cell),
                "--harness-timeout", str(opts.timeout_cell + opts.timeout_notebook), *sandbox.limit_args()]
        env = {remote.MODE_ENV: "graded", remote.ANSWERS_ENV: str(INSIDE / "out" / "answers.jsonl"),
               remote.SOCKET_ENV: str(INSIDE / "out" / "grader.sock"), LANG_ENV: opts.lang or "en"}
        box = Sandbox(root, argv, env, listen=True)
        started, kernel_at, finished, graded_fns = time.monotonic(), None, True, False
        try:
            while box.proc.poll() is None:
                now = time.monotonic()
                events = box.events()  # the status pipe: the student's kernel cannot write it
                if kernel_at is None and any(e.get("event") == "kernel" for e in events):
                    kernel_at = now
                deadline = (kernel_at + opts.timeout_notebook) if kernel_at else \
                    started + STARTUP_LIMIT + opts.timeout_notebook
                if not graded_fns and any(e.get("event") == "cells_done" for e in events):
                    graded_fns = True
                    rows, answered = _grade_functions(box, questions, Answers.read(root / "out" / "answers.jsonl"),
                                                      opts, deadline, Path(tmp))
                    box.listener.close()  # a harness still queued behind a squatter's connection ends now
                    try:  # the harness returns, the executor saves and ends (unless it stopped answering)
                        box.proc.wait(timeout=10 if answered else 1)
                    except subprocess.TimeoutExpired:
                        pass
                    break
                if now > deadline:
                    finished = False
                    break
                time.sleep(0.1)
        finally:
            box.kill()
        status = box.events()
        trusted = {e.get("event") for e in status}
        failure = None
        if not box.ended and not trusted & {"kernel", "unreadable"}:  # no student code ran: the sandbox failed
            failure = sandbox.explain(box.log.text(), box.proc.returncode)
        elif "failed_before_cells" in trusted:
            failure = str(next(e.get("error") for e in status if e.get("event") == "failed_before_cells"))
        events = _events(root / "out" / "progress.jsonl")
        answers = Answers.read(root / "out" / "answers.jsonl")
        _keep(root / "out" / "executed.ipynb", executed, EXECUTED_CAP)
        _write_capped(executed.with_suffix(".log"), box.log.text()
                      + (f"\nended by the grader: {box.ended}\n" if box.ended else ""))
    if box.ended:
        events.append({"event": "fail", "error": box.ended})
    return rows, answers, events, finished, failure


def _keep(src: Path, dst: Path, cap: int) -> None:
    """Copy ``src`` to ``dst`` if it is a regular file of at most ``cap`` bytes (a sparse or huge
    file, a link or a FIFO left by a submission is not copied)."""
    try:
        data = read_capped(src, cap)
    except FileNotFoundError:
        return
    except (OSError, TooLarge) as e:
        _write_capped(dst.with_suffix(".skipped"), f"executed copy not kept: {e}\n")   # TooLarge names the limit
        return
    _write_capped(dst, data)


def _write_capped(dst: Path, data: str | bytes) -> None:
    dst.write_bytes(data.encode("utf-8", "replace") if isinstance(data, str) else data)


def _grade_functions(box: Sandbox, questions: list[Question], answers: Answers, opts: Options,
                     deadline: float, tmp: Path) -> tuple[dict[str, Row], bool]:
    """The rows of the function answers, and whether the sandbox's end kept answering."""
    todo = [q for q in questions if not q.is_value and q.qid in answers.answers and q.qid not in answers.revealed]
    # always take the harness's connection, if only to say "bye": it then ends at once
    conn = box.connect(wait=min(30.0 if todo else 5.0, max(1.0, deadline - time.monotonic())))
    launches = iter(range(1, 1 << 30))
    launcher = functools.partial(_launch_fresh, tmp=tmp, counter=launches)
    channel = remote.Channel(conn, max(deadline, time.monotonic() + opts.timeout_cell), opts.timeout_cell,
                             launcher=launcher)
    try:
        return {q.qid: score_answer(q, answers.answers[q.qid], channel, opts) for q in todo}, not channel.broken
    finally:
        channel.close()


def _launch_fresh(worker: str, world_size: int, timeout: float, kwargs: object, *, tmp: Path, counter) -> object:
    return sandbox.run_worker(worker, world_size, timeout, kwargs, tmp / f"launch-{next(counter)}")

def _fail(name: str, chapter: str, message: str) -> NotebookGrade:
    g = NotebookGrade(printable(name), chapter)
    g.rows.append(Row("(notebook)", 1.0, 0.0, one_line(message, 300)))
    return g


def grade_notebook(path: Path, outdir: Path, opts: Options, name: str | None = None,
                   student: str = "") -> NotebookGrade:
    """Execute one notebook in its sandbox and grade it; ``name`` is its name in the reports
    (default the file name), ``student`` whose it is. A crash of the grader's own code marks this
    submission as a grader error (never a failing score)."""
    t0 = time.monotonic()
    try:
        g = _grade_notebook(path, outdir, opts, name or path.name)
    except Exception as e:  # noqa: BLE001 - the grader's bug: this submission is an error, the run goes on
        g = _fail(name or path.name, opts.chapter or "?", f"{GRADER_ERROR}{type(e).__name__}: {e}")
    g.student, g.seconds = student, time.monotonic() - t0
    return g


def _grade_notebook(path: Path, outdir: Path, opts: Options, name: str) -> NotebookGrade:
    auto = opts.lang is None   # each notebook's own language: a Chinese twin gets Chinese feedback
    opts = replace(opts, lang=opts.lang or notebook_lang(path=path) or "en")
    chapter = opts.chapter or chapter_for(path.name)
    if chapter is None:
        return _fail(name, "?", render(msg("error: cannot tell the assignment from the file name: name it "
                                           "after its chapter (e.g. 01_flops.ipynb) or pass --chapter"), opts.lang))
    try:
        data = read_capped(path)
        nb = json.loads(data.decode("utf-8"))
        if not isinstance(nb, dict):
            raise ValueError("not a JSON object")
    except TooLarge as e:
        return _fail(name, chapter, render(msg("error: the notebook is {size} MB, over the grader's limit of {limit} "
                                               "MB: clear its outputs and submit it again",
                                               size=f"{e.size / 2**20:.0f}", limit=f"{e.cap / 2**20:.0f}"), opts.lang))
    except RecursionError:  # a hostile file's brackets, nested deeper than json's parser recurses: the student's fault
        return _fail(name, chapter, render(msg("error: not a readable notebook: {error}",
                                               error="its JSON is nested too deeply"), opts.lang))
    except (OSError, ValueError) as e:
        return _fail(name, chapter, render(msg("error: not a readable notebook: {error}", error=str(e)), opts.lang))
    if auto:
        opts = replace(opts, lang=notebook_lang(nb, path) or "en")
    try:
        questions = load_bank(chapter, opts.bank)
    except Exception as e:  # noqa: BLE001 - a broken bank costs this notebook, not the run
        return _fail(name, chapter, f"error: cannot load the question bank: {type(e).__name__}: {e}")
    rows, answers, events, finished, failure = run_submission(path, outdir, questions, opts, name, data)
    if failure is not None:
        return _fail(name, chapter, GRADER_ERROR + failure)
    g = NotebookGrade(printable(name), chapter)
    for q in questions:
        if q.qid in answers.revealed:
            row = Row(q.qid, q.points, 0.0, render(msg("revealed with check.reveal in a graded run: 0 points"),
                                                   opts.lang))
        elif q.qid in rows:
            row = rows[q.qid]
        elif q.is_value and q.qid in answers.answers:
            row = score_answer(q, answers.answers[q.qid], None, opts)
        else:
            row = Row(q.qid, q.points, 0.0, reason(nb, q, q.qid in answers.answers, events, finished, opts))
        g.rows.append(row)
    return g


def collision_grade(s: Submission, opts: Options) -> NotebookGrade:
    """The flag for a student's notebooks of one chapter of which none is named like it
    (:attr:`~course_lib.grading.classroom.Submission.collision`): one error row, none of them run,
    and a note for the instructor naming them."""
    chapter = opts.chapter or chapter_for(s.path.name) or "?"
    names = few(list(s.collision))
    g = _fail(s.name, chapter, render(msg("error: {count} notebooks for {chapter} ({names}) and none named like the "
                                          "chapter: none is graded, since which one counts cannot be told; keep one "
                                          "and grade again", count=len(s.collision), chapter=chapter, names=names),
                                      opts.lang or "en"))
    g.student = s.student
    g.notes.append(printable(f"{len(s.collision)} notebooks of {s.student}'s for {chapter} collide ({names}): "
                             "none was graded; decide which one counts and grade it"))
    return g


def grader_errors(grades: list[NotebookGrade]) -> list[NotebookGrade]:
    """The submissions the grader could not run through no fault of theirs."""
    return [g for g in grades if any(r.qid == "(notebook)" and r.message.startswith(GRADER_ERROR) for r in g.rows)]


def grade_dir(directory: Path, outdir: Path, *, pass_mark: float = 60, opts: Options | None = None,
              solutions: Path | None = None) -> int:
    """Grade the class folder ``directory`` (student folders and/or flat notebooks), in parallel;
    print the table, write the reports; 0 if all pass, 1 if any is below the pass mark, 2 for a
    usage error, 3 when the grader or its sandbox failed (a sandbox that cannot start stops the run
    before any submission; a submission the grader could not run is marked as a grader error, not
    scored). With ``solutions`` (the masters' folder), note submissions that copy a master's
    solution blocks."""
    opts = opts or Options()
    directory, outdir = Path(directory).resolve(), Path(outdir).resolve()
    if not directory.is_dir():
        print(f"error: not a folder: {printable(directory, None)}", file=sys.stderr)
        return 2
    subs, skipped = discover(directory, lambda name: opts.chapter or chapter_for(name))
    for x in skipped_listing(skipped):   # at most a few per student: a folder of junk is one line
        print(f"skipped {x[0]}: {x[1]}" if isinstance(x, tuple) else f"skipped {x}", file=sys.stderr)
    if not subs:
        print(f"no notebooks (*.ipynb) in {printable(directory, None)} or its student folders", file=sys.stderr)
        return 2
    try:
        sandbox.bwrap_path()
        if opts.chapter or opts.bank:
            load_bank(opts.chapter or "custom", opts.bank)
    except (sandbox.SandboxUnavailable, ValueError) as e:
        print(f"error: {printable(e, None)}", file=sys.stderr)
        return 2
    if outdir == directory or directory in outdir.parents:
        print("error: --out must not be inside the submissions folder", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="course-grade-check-") as tmp:
            sandbox.preflight(Path(tmp))
    except (sandbox.SandboxFailure, OSError) as e:
        print(f"error: cannot grade on this machine: {printable(e, None)}", file=sys.stderr)
        return 3
    outdir.mkdir(parents=True, exist_ok=True)
    jobs = opts.jobs or default_jobs()
    n_students = len({s.student for s in subs})
    print(f"grading {len(subs)} notebook(s) of {n_students} student(s) on {jobs} worker(s)",
          file=sys.stderr, flush=True)

    def one(s: Submission) -> NotebookGrade:
        if s.collision:
            return collision_grade(s, opts)
        g = grade_notebook(s.path, outdir, opts, s.name, s.student)
        try:
            note = copy_note(s.path, Path(solutions), g.chapter) if solutions is not None and g.chapter != "?" else None
        except Exception:  # noqa: BLE001 - a flag for the instructor; never the run's end
            note = None
        if note:
            g.notes.append(printable(note))
        return g

    grades = grade_all(subs, one, jobs)
    try:
        rc = write_reports(grades, outdir, pass_mark, skipped=skipped, seed=opts.seed, feedback=opts.feedback,
                           jobs=jobs, lang=opts.lang or "en")
    except Exception as e:  # noqa: BLE001 - the grader's failure, never a failing class (exit 1)
        print(f"error: the grader could not write its reports to {printable(outdir, None)}: "
              f"{type(e).__name__}: {printable(e, None)}", file=sys.stderr)
        return 3
    failed = grader_errors(grades)
    if failed:
        print(f"error: the grader could not run {len(failed)} submission(s) ({', '.join(g.name for g in failed)}): "
              f"{failed[0].rows[-1].message}", file=sys.stderr)
        return 3
    return rc
