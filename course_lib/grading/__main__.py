"""Command line of the grader.

    python -m course_lib.grading generate SRC DST [--check]
    python -m course_lib.grading handout DEST [--repo .]
    python -m course_lib.grading check [NOTEBOOK|DIR ...] [--timeout-cell 120] [--lang en|zh]
    python -m course_lib.grading grade CLASS --out OUTDIR [--pass-mark 60] [--timeout-cell 60]
        [--timeout-notebook 300] [--chapter ID [--bank MODULE]] [--feedback graded|practice]
        [--seed N] [--solutions DIR] [--jobs N] [--lang en|zh]

``grade`` takes a class folder: one folder per student (``CLASS/alice/01_flops.ipynb``) and/or
flat notebooks (``CLASS/alice-01_flops.ipynb``); it says which entries it skipped and why, grades
``--jobs`` notebooks at once (default: one per core) and writes ``gradebook.csv`` (one row per
student) beside ``grades.json``, ``summary.md`` and ``junit.xml``. ``--lang zh`` writes the
feedback messages in Chinese (the same scores and recognised mistakes as in English); without
``--lang`` each notebook gets its own language (a Chinese twin, ``zh/NAME.ipynb`` or metadata
``course.lang = "zh"``, is graded against the same bank with Chinese feedback).

Exit status of ``grade``: 0 all notebooks pass, 1 one is below the pass mark, 2 usage error, 3 the
grader or its sandbox failed (never a student's 0: such a submission is marked as a grader error).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from course_lib.grading.i18n import LANGS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.grading",
                                description="Generate exercises from solutions; grade notebooks.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="solutions/ -> exercises/ (student versions)")
    g.add_argument("src", type=Path, help="master notebook or folder of them")
    g.add_argument("dst", type=Path, help="output notebook or folder")
    g.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 listing the files that differ from what would be generated")
    r = sub.add_parser("grade", help="execute and grade a class: student folders and/or notebooks")
    r.add_argument("dir", type=Path, metavar="CLASS",
                   help="class folder: CLASS/STUDENT/NN_topic.ipynb and/or CLASS/[name-]NN_topic.ipynb")
    r.add_argument("--out", type=Path, default=Path("build/grades"), help="report folder (default build/grades)")
    r.add_argument("--pass-mark", type=float, default=60.0, help="percent needed to pass (default 60)")
    r.add_argument("--timeout-cell", type=float, default=60.0, help="seconds per cell (default 60)")
    r.add_argument("--timeout-notebook", type=float, default=300.0, help="seconds per notebook, counted from its kernel's start (default 300)")
    r.add_argument("--chapter", help="grade every notebook as this chapter (default: from each file name, e.g. 01_flops.ipynb)")
    r.add_argument("--bank", help="question bank module to grade with (instructors; needs --chapter)")
    r.add_argument("--feedback", choices=("graded", "practice"), default="graded",
                   help="graded (default): the kind of error only; practice: ratios to the reference too")
    r.add_argument("--seed", type=int, default=None, help="seed of the inputs drawn for function questions (default: random, stored in grades.json)")
    r.add_argument("--solutions", type=Path, default=None,
                   help="folder of master notebooks: flag submissions whose solution cells copy them")
    r.add_argument("--jobs", "-j", type=int, default=0,
                   help="notebooks graded at once (default: one per core of this machine)")
    r.add_argument("--lang", choices=LANGS, default=None,
                   help="language of the feedback messages: en or zh (Chinese); default: each notebook's own "
                   "(zh for a Chinese twin: metadata course.lang, or a zh/ folder), else en; scores do not change")
    c = sub.add_parser("check", help="students: run exercise notebooks in practice mode and print each question's state")
    c.add_argument("paths", type=Path, nargs="*", default=[Path("exercises")], help="notebooks or folders (default exercises)")
    c.add_argument("--timeout-cell", type=float, default=120.0, help="seconds per cell (default 120)")
    c.add_argument("--lang", choices=LANGS, default=None,
                   help="language of the checks' feedback: en or zh (default: COURSE_LANG, else each "
                   "notebook's own: zh for a Chinese twin)")
    h = sub.add_parser("handout", help="the students' course: no solutions/, tests/ or instructor docs; "
                       "README, grading notes, Makefile and book TOC written for students")
    h.add_argument("dest", type=Path, help="new folder to write")
    h.add_argument("--repo", type=Path, default=Path("."), help="course repository (default .)")
    a = p.parse_args(argv)

    if a.command == "check":
        from course_lib.grading import selfcheck

        if a.timeout_cell <= 0:
            p.error("--timeout-cell must be positive")
        import os

        from course_lib.grading.i18n import LANG_ENV, check_lang

        try:
            lang = a.lang or os.environ.get(LANG_ENV) or None
            lang = check_lang(lang) if lang else None
        except ValueError as e:
            p.error(f"{LANG_ENV}: {e}")
        return selfcheck.main(a.paths, a.timeout_cell, lang)

    if a.command == "handout":
        from course_lib.grading.handout import HandoutError, handout

        try:
            files = handout(a.repo, a.dest)
        except (FileExistsError, OSError, subprocess.CalledProcessError, HandoutError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {len(files)} files to {a.dest}: the students' course (no solutions/, tests/ or "
              f"instructor docs); build its site with `make book` there")
        return 0

    if a.command == "generate":
        from course_lib.grading.generate import MarkerError, generate

        try:
            changed = generate(a.src, a.dst, check=a.check)
        except (MarkerError, FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if a.check:
            if changed:
                print("out of date (run `make exercises`):")
                for path in changed:
                    print(f"  {path}")
                return 1
            print(f"exercises in {a.dst} are up to date")
            return 0
        for path in changed:
            print(f"wrote {path}")
        if not changed:
            print(f"exercises in {a.dst} already up to date")
        return 0

    _trusted_sys_path(a.dir)
    from course_lib.grading.runner import Options, grade_dir
    from course_lib.grading.values import shown

    if a.timeout_cell <= 0 or a.timeout_notebook <= 0:
        p.error("timeouts must be positive")
    if not a.dir.is_dir():
        p.error(f"not a folder: {shown(a.dir)}")
    if a.jobs < 0:
        p.error("--jobs must be a positive number of workers (or 0: one per core)")
    if a.bank and not a.chapter:
        p.error("--bank needs --chapter")
    if a.solutions is not None and not a.solutions.is_dir():
        p.error(f"--solutions: not a folder: {shown(a.solutions)}")
    import secrets

    seed = a.seed if a.seed is not None else secrets.randbits(31)
    opts = Options(timeout_cell=a.timeout_cell, timeout_notebook=a.timeout_notebook, feedback=a.feedback,
                   seed=seed, chapter=a.chapter, bank=a.bank, jobs=a.jobs, lang=a.lang)
    try:
        return grade_dir(a.dir, a.out, pass_mark=a.pass_mark, opts=opts, solutions=a.solutions)
    except Exception:  # noqa: BLE001 - a crash of the grader is its failure (3), never a failing class (1)
        import traceback

        traceback.print_exc()
        print("error: the grader failed (above), not a student: exit status 3", file=sys.stderr)
        return 3


def _trusted_sys_path(submissions: Path) -> None:
    """Drop the working directory and the submissions folder from ``sys.path``: the grader imports
    nothing that a submission (or a file it wrote) could have put there."""
    bad = {Path.cwd().resolve(), submissions.resolve()}
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() not in bad]


if __name__ == "__main__":
    sys.exit(main())
