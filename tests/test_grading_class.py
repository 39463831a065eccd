"""Grading a class, not a folder of files: student folders and flat notebooks, skipped entries with
their reason, parallel workers with a progress bar on a terminal only, per-student totals and the
gradebook CSV (issue #29, item 6). One real run grades a class of three students (fixture bank,
tests/fixtures/grading) on two workers; the rest are unit tests of the pieces."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from course_lib.grading import classroom
from course_lib.grading.classroom import discover, flat_student, grade_all
from course_lib.grading.gradebook import gradebook_csv, number
from course_lib.grading.grades import NotebookGrade, Row

FIX = Path(__file__).parent / "fixtures" / "grading"
MASTER = FIX / "solutions" / "fx_grading.ipynb"
EXERCISE = FIX / "exercises" / "fx_grading.ipynb"
WRONG = FIX / "submissions" / "wrong.ipynb"


def _chapter(name: str) -> str | None:
    return "ch01_flops" if "01_flops" in name else None


def test_discover_student_folders_flat_files_and_every_skip_with_its_reason(tmp_path):
    cls = tmp_path / "class"
    (cls / "alice" / ".ipynb_checkpoints").mkdir(parents=True)
    (cls / "alice" / "01_flops.ipynb").write_text("{}")
    (cls / "alice" / "notes.txt").write_text("x")
    (cls / "alice" / "old").mkdir()
    (cls / "alice" / "peek.ipynb").symlink_to(cls / "alice" / "01_flops.ipynb")
    (cls / "bob").mkdir()                                   # a student folder with nothing in it
    (cls / "carol-01_flops.ipynb").write_text("{}")
    (cls / "01_flops.ipynb").write_text("{}")              # the class folder's own student
    (cls / "dave.ipynb").symlink_to(cls / "carol-01_flops.ipynb")
    (cls / "erin").symlink_to(cls / "alice", target_is_directory=True)
    (cls / "README.md").write_text("x")
    os.mkfifo(cls / "pipe.ipynb")
    subs, skipped = discover(cls, _chapter)
    assert [(s.student, s.name) for s in subs] == [
        ("class", "01_flops.ipynb"), ("alice", "alice/01_flops.ipynb"), ("carol", "carol-01_flops.ipynb")]
    assert subs[1].path == cls / "alice" / "01_flops.ipynb"
    reasons = {s.entry: s.reason for s in skipped}
    assert reasons == {
        "alice/.ipynb_checkpoints/": classroom.HIDDEN,
        "alice/notes.txt": classroom.NOT_NOTEBOOK,
        "alice/old/": classroom.NESTED,
        "alice/peek.ipynb": classroom.SYMLINK,
        "bob/": classroom.EMPTY,
        "dave.ipynb": classroom.SYMLINK,
        "erin": classroom.SYMLINK,
        "README.md": classroom.NOT_NOTEBOOK,
        "pipe.ipynb": classroom.SPECIAL,
    }


def test_one_notebook_per_student_and_chapter_is_graded(tmp_path):
    """Extra notebooks of a chapter are skipped, naming the one graded: else a student could hand in
    several answers and keep the best, or a hundred notebooks that each run to the time limit."""
    cls = tmp_path / "class"
    (cls / "alice").mkdir(parents=True)
    (cls / "mallory").mkdir()
    for name in ("01_flops-draft.ipynb", "01_flops.ipynb", "02_scaling.ipynb"):   # the draft sorts first
        (cls / "alice" / name).write_text("{}")
    for i in range(5):
        (cls / "mallory" / f"try{i}-01_flops.ipynb").write_text("{}")
    (cls / "mallory" / "homework.ipynb").write_text("{}")    # no chapter: kept, the runner fails it at once
    (cls / "carol-01_flops.ipynb").write_text("{}")

    def chapter(name):
        return next((c for c in ("ch01_flops", "ch02_scaling") if c[2:] in name), None)
    subs, skipped = discover(cls, chapter)
    assert [s.name for s in subs] == ["alice/01_flops.ipynb", "alice/02_scaling.ipynb", "carol-01_flops.ipynb",
                                      "mallory/homework.ipynb", "mallory/try0-01_flops.ipynb + 4 more"]
    tries = [f"mallory/try{i}-01_flops.ipynb" for i in range(5)]
    assert subs[-1].collision == tuple(tries) and not any(s.collision for s in subs[:-1])
    reasons = {s.entry: s.reason for s in skipped}
    assert reasons["alice/01_flops-draft.ipynb"] == classroom.ANOTHER.format(
        student="alice", chapter="ch01_flops", graded="alice/01_flops.ipynb")
    assert sorted(reasons) == ["alice/01_flops-draft.ipynb", *tries]   # none of mallory's five is graded
    assert reasons[tries[0]].startswith("collides with mallory/try1-01_flops.ipynb, mallory/try2-01_flops.ipynb, "
                                        "mallory/try3-01_flops.ipynb and 1 more: 5 notebooks of mallory's for ch01_flops")


def test_two_flat_files_of_one_student_and_chapter_collide_and_neither_is_graded(tmp_path):
    """Issue #43 item 23: `bob 01_flops.ipynb` (blank) and `bob-01_flops.ipynb` (real) were resolved
    by sort order, the blank one graded and the real one skipped. Neither is named like the chapter,
    so which counts cannot be told: one flag stands for both, each is skipped naming the other."""
    cls = tmp_path / "class"
    cls.mkdir()
    for name in ("bob 01_flops.ipynb", "bob-01_flops.ipynb", "carol-01_flops.ipynb"):
        (cls / name).write_text("{}")
    for i in range(4):                                      # junk without a chapter: one row, not four
        (cls / "dave" / f"junk{i}.ipynb").parent.mkdir(exist_ok=True)
        (cls / "dave" / f"junk{i}.ipynb").write_text("{}")
    subs, skipped = discover(cls, _chapter)
    assert [(s.student, s.name, s.collision) for s in subs] == [
        ("bob", "bob 01_flops.ipynb + bob-01_flops.ipynb", ("bob 01_flops.ipynb", "bob-01_flops.ipynb")),
        ("carol", "carol-01_flops.ipynb", ()), ("dave", "dave/junk0.ipynb", ())]
    reasons = {s.entry: s.reason for s in skipped}
    assert reasons["bob 01_flops.ipynb"].startswith("collides with bob-01_flops.ipynb: 2 notebooks of bob's")
    assert reasons["bob-01_flops.ipynb"].startswith("collides with bob 01_flops.ipynb: 2 notebooks of bob's")
    assert reasons["dave/junk3.ipynb"] == classroom.NO_CHAPTER.format(student="dave", reported="dave/junk0.ipynb")


def test_flat_file_student_is_its_name_without_the_chapter():
    assert flat_student("alice-ch01_flops.ipynb", "ch01_flops", "cls") == "alice"
    assert flat_student("Bob Smith_01_flops (2).ipynb", "ch01_flops", "cls") == "Bob-Smith-(2)"
    assert flat_student("01_flops.ipynb", "ch01_flops", "cls") == "cls"
    assert flat_student("homework.ipynb", None, "cls") == "homework"


def test_grade_all_runs_jobs_at_once_in_order_with_a_bar_only_on_a_terminal(monkeypatch, capsys):
    barrier = threading.Barrier(3, timeout=30)   # passes only if three items run at the same time

    def work(x):
        barrier.wait()
        return x * 10

    assert grade_all([3, 1, 2], work, jobs=3) == [30, 10, 20]
    assert capsys.readouterr().err == ""          # not a terminal: quiet

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert grade_all([1, 2], lambda x: x, jobs=1) == [1, 2]
    assert "grading:" in tty.getvalue() and "/2 " in tty.getvalue()   # tqdm drew its bar

    def boom(x):
        if x == 2:
            raise RuntimeError("grader bug")
        return x
    with pytest.raises(RuntimeError, match="grader bug"):
        grade_all([1, 2, 3], boom, jobs=2)


def _grade(student, name, chapter, score, points=7.0):
    g = NotebookGrade(name, chapter, [Row("q", points, score, "")])
    g.student = student
    return g


def test_gradebook_csv_one_row_per_student_numeric_cells_blank_when_missing():
    grades = [_grade("bob", "bob/01_flops.ipynb", "ch01_flops", 3.5),
              _grade("alice", "alice/01_flops.ipynb", "ch01_flops", 7),
              _grade("alice", "alice/02_scaling.ipynb", "ch02_scaling", 1 / 3, 4),
              _grade("bob", "bob/01_flops (1).ipynb", "ch01_flops", 5),          # the better of two
              _grade("=cmd|x", "=cmd|x/01_flops.ipynb", "ch01_flops", 0),
              _grade("zoë\x1b[2J", "z/01_flops.ipynb", "ch01_flops", 1)]
    text = gradebook_csv(grades)
    assert text.encode("utf-8").decode("utf-8") == text and not text.startswith("\ufeff")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["student", "ch01_flops", "ch02_scaling", "total"]
    body = {r[0]: r[1:] for r in rows[1:]}
    assert body == {"'=cmd|x": ["0", "", "0"], "alice": ["7", "0.3333", "7.3333"], "bob": ["5", "", "5"],
                    "zoë\\x1b[2J": ["1", "", "1"]}
    for cells in body.values():
        for c in cells:
            assert c == "" or float(c) >= 0
    assert number(1e-7) == "0" and number(123456.5) == "123456.5"


@pytest.fixture(scope="module")
def class_run(tmp_path_factory):
    """One grading run over a class of three students on two workers: alice (a folder, the master),
    bob (a folder, the exercise), carol (a flat file, wrong answers), plus entries to skip."""
    if shutil.which("bwrap") is None:
        pytest.skip("the grader needs bubblewrap")
    cls = tmp_path_factory.mktemp("class") / "term 1"
    (cls / "alice").mkdir(parents=True)
    (cls / "bob").mkdir()
    shutil.copy(MASTER, cls / "alice" / "fx_grading.ipynb")
    shutil.copy(EXERCISE, cls / "bob" / "fx_grading.ipynb")
    shutil.copy(WRONG, cls / "carol-fx_grading.ipynb")
    (cls / "bob" / "notes.txt").write_text("todo")
    (cls / "mallory.ipynb").symlink_to(cls / "alice" / "fx_grading.ipynb")
    out = tmp_path_factory.mktemp("grades")
    env = dict(os.environ, PYTHONPATH=str(FIX))
    proc = subprocess.run([sys.executable, "-m", "course_lib.grading", "grade", str(cls), "--out", str(out),
                           "--chapter", "fx_grading", "--bank", "grading_fixture_bank", "--seed", "7",
                           "--jobs", "2", "--timeout-cell", "20"],
                          env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_class_run_grades_every_student_and_says_what_it_skipped(class_run):
    proc, out = class_run
    assert proc.returncode == 1, proc.stdout + proc.stderr              # bob and carol are below 60 %
    assert "grading 3 notebook(s) of 3 student(s) on 2 worker(s)" in proc.stderr
    assert "skipped mallory.ipynb: a symbolic link" in proc.stderr
    assert "skipped bob/notes.txt: not a notebook" in proc.stderr
    assert "\r" not in proc.stderr                                        # no progress bar on a pipe
    data = json.loads((out / "grades.json").read_text())
    assert data["jobs"] == 2
    assert {s["entry"]: s["reason"].split(":")[0] for s in data["skipped"]} == \
        {"bob/notes.txt": "not a notebook (only *.ipynb files are graded)", "mallory.ipynb": "a symbolic link"}
    assert [(n["student"], n["notebook"]) for n in data["notebooks"]] == [
        ("alice", "alice/fx_grading.ipynb"), ("bob", "bob/fx_grading.ipynb"), ("carol", "carol-fx_grading.ipynb")]
    totals = {s["student"]: (s["total"], s["total_points"]) for s in data["students"]}
    assert totals == {"alice": (7, 7), "bob": (0, 7), "carol": (4, 7)}     # wrong.ipynb: 4 of 7 (test_grading.py)
    assert (out / "executed" / "alice" / "fx_grading.ipynb").is_file()
    assert (out / "executed" / "bob" / "fx_grading.ipynb").is_file()


def test_class_run_writes_the_gradebook_and_per_student_totals(class_run):
    proc, out = class_run
    raw = (out / "gradebook.csv").read_bytes()
    assert list(csv.reader(io.StringIO(raw.decode("utf-8")))) == [
        ["student", "fx_grading", "total"], ["alice", "7", "7"], ["bob", "0", "0"], ["carol", "4", "4"]]
    assert "per student:" in proc.stdout and "alice    7/7         7/7 (100.0%)" in proc.stdout
    summary = (out / "summary.md").read_text()
    assert "| alice | 7 | 7 | 7 | 100.0 |" in summary and "| mallory.ipynb | a symbolic link" in summary
    suites = {s.get("name"): s for s in ET.parse(out / "junit.xml").getroot().iter("testsuite")}
    assert sorted(suites) == ["alice/fx_grading.ipynb", "bob/fx_grading.ipynb", "carol-fx_grading.ipynb"]
    assert {tc.get("classname") for tc in suites["bob/fx_grading.ipynb"].iter("testcase")} == \
        {"bob/fx_grading.fx_grading"}


def test_jobs_must_not_be_negative(tmp_path, capsys):
    from course_lib.grading.__main__ import main as cli

    with pytest.raises(SystemExit) as e:
        cli(["grade", str(tmp_path), "--jobs", "-1"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_skipped_names_cannot_drive_the_terminal(tmp_path, capsys):
    """A class folder with nothing to grade: usage error, and the skipped entry's name is printed
    with its control characters escaped."""
    from course_lib.grading.runner import grade_dir

    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "evil\x1b[2J.txt").write_text("x")
    assert grade_dir(tmp_path / "class", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "skipped evil\\x1b[2J.txt: not a notebook" in err and "\x1b" not in err


def _fx_grade(cls: Path, out: Path, *extra: str, cwd: Path | None = None, python: str = sys.executable,
              timeout: int = 300) -> subprocess.CompletedProcess:
    """A real grading run of ``cls`` with the fixture bank (every notebook is chapter fx_grading)."""
    env = dict(os.environ, PYTHONPATH=str(FIX))
    return subprocess.run([python, "-m", "course_lib.grading", "grade", str(cls), "--out", str(out),
                           "--chapter", "fx_grading", "--bank", "grading_fixture_bank", "--seed", "7",
                           "--jobs", "2", "--timeout-cell", "20", *extra],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_names_that_are_not_utf8_reach_every_report_escaped(tmp_path):
    """Issue #43 item 16: one file or folder name that is not valid UTF-8 anywhere in the class
    folder crashed write_reports after the table (UnicodeEncodeError: surrogates not allowed), so
    nobody got grades.json, junit.xml, gradebook.csv or summary.md and the run exited 1. Now every
    report is written, each undecodable byte shown as \\xNN, and the run's status is the class's."""
    if shutil.which("bwrap") is None:
        pytest.skip("the grader needs bubblewrap")
    cls = tmp_path / "class"
    (cls / "alice").mkdir(parents=True)
    shutil.copy(MASTER, cls / "alice" / "fx_grading.ipynb")
    (cls / os.fsdecode(b"alice/notes\xff.txt")).write_text("x")                  # a stray file
    (cls / os.fsdecode(b"m\xffallory")).mkdir()                                  # a student folder
    shutil.copy(MASTER, cls / os.fsdecode(b"m\xffallory/fx_grading.ipynb"))
    shutil.copy(MASTER, cls / os.fsdecode(b"d\xffave-fx_grading.ipynb"))         # a flat notebook
    out = tmp_path / "out"
    proc = _fx_grade(cls, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr                       # all three pass
    assert "Traceback" not in proc.stderr and "\\udc" not in proc.stdout + proc.stderr
    assert "skipped alice/notes\\xff.txt: not a notebook" in proc.stderr
    assert "m\\xffallory  7/7" in proc.stdout and "d\\xffave     7/7" in proc.stdout
    data = json.loads((out / "grades.json").read_bytes().decode("utf-8"))
    assert sorted(n["notebook"] for n in data["notebooks"]) == [
        "alice/fx_grading.ipynb", "d\\xffave-fx_grading.ipynb", "m\\xffallory/fx_grading.ipynb"]
    assert sorted(s["student"] for s in data["students"]) == ["alice", "d\\xffave", "m\\xffallory"]
    assert data["skipped"] == [{"entry": "alice/notes\\xff.txt", "reason": classroom.NOT_NOTEBOOK}]
    assert list(csv.reader(io.StringIO((out / "gradebook.csv").read_bytes().decode("utf-8")))) == [
        ["student", "fx_grading", "total"], ["alice", "7", "7"], ["d\\xffave", "7", "7"], ["m\\xffallory", "7", "7"]]
    summary = (out / "summary.md").read_bytes().decode("utf-8")
    assert "| alice/notes\\xff.txt | not a notebook" in summary and "| m\\xffallory | 7 |" in summary
    suites = {s.get("name") for s in ET.parse(out / "junit.xml").getroot().iter("testsuite")}
    assert suites == {"alice/fx_grading.ipynb", "d\\xffave-fx_grading.ipynb", "m\\xffallory/fx_grading.ipynb"}
    assert (out / "executed" / os.fsdecode(b"m\xffallory/fx_grading.ipynb")).is_file()  # named as handed in


def test_every_report_writer_takes_any_name():
    """The writers themselves (not only the run) take a name with undecodable bytes (os.fsdecode's
    surrogates) anywhere: notebook, student, skipped entry, reason, note, message."""
    from course_lib.grading.classroom import Skipped
    from course_lib.grading.reports import grades_json, junit_xml, summary_markdown, table

    bad = os.fsdecode(b"m\xffallory")
    g = _grade(bad, f"{bad}/01_flops.ipynb", "ch01_flops", 3)
    g.notes.append(f"note on {bad}")
    g.rows.append(Row("q2", 1, 0, f"its cell raised OSError: {bad}"))
    skipped = [Skipped(f"{bad}/notes.txt", classroom.ANOTHER.format(student=bad, chapter="c", graded=bad))]
    texts = [table([g], 60, skipped), summary_markdown([g], 60, skipped), gradebook_csv([g]),
             grades_json([g], 60, skipped, seed=1), junit_xml([g]).decode("utf-8")]
    for text in texts:
        text.encode("utf-8")                     # strict: no surrogate is left
        assert "m\\xffallory" in text.replace("\\\\", "\\") and "\\udc" not in text
    assert json.loads(texts[3])["skipped"][0]["entry"] == "m\\xffallory/notes.txt"


@pytest.fixture(scope="module")
def messy_run(tmp_path_factory):
    """A real run over a class with two flat notebooks of bob's for one chapter (a blank one and the
    real one) and a student folder holding 3,000 junk files beside a real notebook."""
    if shutil.which("bwrap") is None:
        pytest.skip("the grader needs bubblewrap")
    cls = tmp_path_factory.mktemp("messy") / "class"
    (cls / "alice").mkdir(parents=True)
    (cls / "carol").mkdir()
    shutil.copy(MASTER, cls / "alice" / "fx_grading.ipynb")
    shutil.copy(EXERCISE, cls / "bob fx_grading.ipynb")         # blank, sorts first
    shutil.copy(MASTER, cls / "bob-fx_grading.ipynb")           # the real one
    shutil.copy(MASTER, cls / "carol" / "fx_grading.ipynb")
    for i in range(3000):
        (cls / "carol" / f"junk{i:05d}.txt").write_bytes(b"")
    out = tmp_path_factory.mktemp("grades")
    return _fx_grade(cls, out), out


def test_colliding_notebooks_are_flagged_for_the_instructor_not_resolved_by_name(messy_run):
    """Issue #43 item 23a: neither of bob's two is graded; stderr, summary.md and grades.json say
    which two collide, and bob's row for the chapter is an error that costs the run exit 1 (a
    student's fault), never 3."""
    proc, out = messy_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "skipped bob fx_grading.ipynb: collides with bob-fx_grading.ipynb: 2 notebooks of bob's" in proc.stderr
    assert "skipped bob-fx_grading.ipynb: collides with bob fx_grading.ipynb" in proc.stderr
    data = json.loads((out / "grades.json").read_text())
    bob = next(n for n in data["notebooks"] if n["student"] == "bob")
    assert bob["notebook"] == "bob fx_grading.ipynb + bob-fx_grading.ipynb" and bob["score"] == 0
    assert bob["questions"][0]["message"].startswith(
        "error: 2 notebooks for fx_grading (bob fx_grading.ipynb, bob-fx_grading.ipynb) and none named like the chapter")
    assert bob["notes"] == ["2 notebooks of bob's for fx_grading collide (bob fx_grading.ipynb, bob-fx_grading.ipynb): "
                            "none was graded; decide which one counts and grade it"]
    assert not (out / "executed" / "bob fx_grading.ipynb").exists()       # neither ran
    assert {s["entry"] for s in data["skipped"]} >= {"bob fx_grading.ipynb", "bob-fx_grading.ipynb"}
    summary = (out / "summary.md").read_text()
    assert "| bob fx_grading.ipynb | collides with bob-fx_grading.ipynb" in summary
    assert "- bob fx_grading.ipynb + bob-fx_grading.ipynb: 2 notebooks of bob's for fx_grading collide" in summary
    totals = {s["student"]: s["total"] for s in data["students"]}
    assert totals == {"alice": 7, "bob": 0, "carol": 7}


def test_thousands_of_junk_files_are_counted_not_listed(messy_run):
    """Issue #43 item 23d: 50,000 junk files made a 3.6 MB summary.md, past a CI job summary's
    limit (1 MiB on GitHub), and as many lines on stderr. Each student's skipped entries are
    listed a few at a time, with how many more; grades.json keeps every one."""
    proc, out = messy_run
    summary = (out / "summary.md").read_bytes()
    assert len(summary) < 20_000, len(summary)
    text = summary.decode("utf-8")
    assert "## Skipped (3,002)" in text and "| carol/junk00000.txt | not a notebook" in text
    assert "| … | 2,995 more of carol's 3,000 skipped entries (grades.json lists every one) |" in text
    assert "carol/junk00005.txt" not in text
    assert len(proc.stderr.splitlines()) < 30 and "skipped 2,995 more of carol's 3,000" in proc.stderr
    assert "skipped 3,002 entries of the class folder:" in proc.stdout and len(proc.stdout) < 20_000
    assert len(json.loads((out / "grades.json").read_text())["skipped"]) == 3002


def test_make_grade_flags_a_copy_of_the_masters(tmp_path):
    """Issue #43 item 23b: `make grade`, the documented command, did not pass the masters' folder, so
    it never flagged a submission that copies a master's solution blocks. It passes solutions/ now."""
    if shutil.which("bwrap") is None or shutil.which("make") is None:
        pytest.skip("needs bubblewrap and make")
    root = Path(__file__).resolve().parents[1]
    cls = tmp_path / "class one"
    (cls / "alice").mkdir(parents=True)
    shutil.copy(root / "solutions" / "01_flops.ipynb", cls / "alice" / "01_flops.ipynb")
    out = tmp_path / "grades out"
    proc = subprocess.run(["make", "--no-print-directory", "grade", f"SUBMISSIONS={cls}", f"GRADES={out}",
                           "JOBS_GRADE=1"], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nb = json.loads((out / "grades.json").read_text())["notebooks"][0]
    assert nb["percent"] == 100.0 and len(nb["notes"]) == 1, nb
    assert re.fullmatch(r"\d+ of \d+ solution blocks are copies of 01_flops\.ipynb", nb["notes"][0]), nb["notes"]
