"""The grading *run* is robust and trustworthy (issue #29, items 1-5): it works wherever the course
lives (a copy under the system temp folder, in a path with spaces), the grader's own failures exit
3 without scoring a student, one notebook's hostile data costs only itself (unbuildable answers,
a trickling callback socket, huge or odd executed copies, control characters), and graded
feedback names unit slips without showing the reference of a drawn case. The hostile notebooks
themselves run in tests/test_grading_attacks.py."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from course_lib.grading import Question, remote, wire
from course_lib.grading.runner import _keep
from course_lib.grading.values import printable

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader needs bubblewrap")


def _strict(text: str) -> dict:
    def bad(name):
        raise ValueError(name)
    return json.loads(text, parse_constant=bad)


# --------------------------------------------------------------------------- item 1: any place
@needs_bwrap
def test_grades_a_course_copied_under_the_temp_folder():
    """A venv, the course_lib source and the submissions all under the system temp folder, in a
    path with a space: the sandbox's empty /tmp used to hide the venv (every student 0, exit 1)."""
    with tempfile.TemporaryDirectory(prefix="course copy ", dir=tempfile.gettempdir()) as tmp:
        base = Path(tmp)
        course = base / "my course"
        shutil.copytree(ROOT / "course_lib", course / "course_lib",
                        ignore=shutil.ignore_patterns("__pycache__"))
        venv = base / "venv here"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python3*/site-packages"))
        real_site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
        # the copy first, then the packages already installed (torch, nbclient, ...)
        (site / "course.pth").write_text(f"{course}\n{real_site}\n")
        python = venv / "bin" / "python"
        where = subprocess.run([python, "-c", "import sys, course_lib; print(sys.prefix); print(course_lib.__file__)"],
                               capture_output=True, text=True, check=True, cwd=base).stdout.split("\n")
        assert where[0] == str(venv) and where[1].startswith(str(course))   # really runs from /tmp
        sub = base / "sub mitted"
        sub.mkdir()
        shutil.copy(ROOT / "solutions" / "01_flops.ipynb", sub / "01_flops.ipynb")
        proc = subprocess.run([python, "-m", "course_lib.grading", "grade", str(sub), "--out", str(base / "out"),
                               "--seed", "3"], capture_output=True, text=True, timeout=300, cwd=base,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        nb = _strict((base / "out" / "grades.json").read_text())["notebooks"][0]
        assert nb["percent"] == 100.0, nb


@needs_bwrap
def test_grades_from_a_checkout_whose_venv_is_a_link_to_another_checkouts(tmp_path):
    """Issue #43 item 23: a checkout whose .venv is a symbolic link (here to this checkout's venv,
    so a venv shared by two checkouts, whose editable install points at the other one) could not
    grade: the sandbox bound only the venv's real path, so the interpreter the grader names was not
    there (execvp failed, exit 3), and the kernel imported the other checkout's course_lib, which is
    not visible inside. Now the venv is bound at the path the grader knows it by too, and the
    sandbox imports the course_lib the grader runs."""
    fix = ROOT / "tests" / "fixtures" / "grading"
    checkout = tmp_path / "checkout b"
    shutil.copytree(ROOT / "course_lib", checkout / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / ".venv").symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = checkout / ".venv" / "bin" / "python"
    where = subprocess.run([python, "-c", "import sys, course_lib; print(sys.prefix); print(course_lib.__file__)"],
                           capture_output=True, text=True, check=True, cwd=checkout).stdout.split("\n")
    assert where[0] == str(checkout / ".venv") and where[1].startswith(str(checkout))  # the link, the copy
    cls = tmp_path / "class"
    cls.mkdir()
    shutil.copy(fix / "solutions" / "fx_grading.ipynb", cls / "alice-fx_grading.ipynb")
    proc = subprocess.run([python, "-m", "course_lib.grading", "grade", str(cls), "--out", str(tmp_path / "out"),
                           "--chapter", "fx_grading", "--bank", "grading_fixture_bank", "--seed", "3"],
                          capture_output=True, text=True, timeout=300, cwd=checkout,
                          env=dict(os.environ, PYTHONPATH=str(fix)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _strict((tmp_path / "out" / "grades.json").read_text())["notebooks"][0]["percent"] == 100.0


# --------------------------------------------------------------------------- item 2: exit 3
def _fake_bwrap(folder: Path, body: str) -> dict:
    folder.mkdir()
    (folder / "bwrap").write_text("#!/bin/sh\n" + body)
    (folder / "bwrap").chmod(0o755)
    return dict(os.environ, PATH=f"{folder}:{os.environ['PATH']}")


def _cli(sub: Path, out: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course_lib.grading", "grade", str(sub), "--out", str(out),
                           "--seed", "1"], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture
def one_submission(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(ROOT / "solutions" / "01_flops.ipynb", sub / "01_flops.ipynb")
    return sub


def test_no_user_namespaces_stops_the_run_with_exit_3(tmp_path, one_submission):
    """bwrap that cannot create namespaces (as on a runner with AppArmor's restriction): exit 3, one
    line naming the cause and the fix, and no report that scores anybody."""
    env = _fake_bwrap(tmp_path / "bin", "echo 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    proc = _cli(one_submission, tmp_path / "out", env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: cannot grade on this machine: bwrap cannot create the sandbox's namespaces")
    assert "kernel.unprivileged_userns_clone=1" in line and "apparmor_restrict_unprivileged_userns=0" in line
    assert not (tmp_path / "out" / "grades.json").exists()


@needs_bwrap
def test_a_sandbox_that_fails_for_one_submission_is_a_grader_error(tmp_path, one_submission):
    """The executor's sandbox does not start (its interpreter is missing): the submission is marked
    as a grader error with no question scored, and the run exits 3, never 1."""
    real = shutil.which("bwrap")
    env = _fake_bwrap(tmp_path / "bin", (
        'case "$*" in *course_lib.grading._execute*) '
        "echo 'bwrap: execvp /nowhere/python: No such file or directory' >&2; exit 1;; esac\n"
        f'exec {real} "$@"\n'))
    proc = _cli(one_submission, tmp_path / "out", env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    nb = _strict((tmp_path / "out" / "grades.json").read_text())["notebooks"][0]
    assert [q["qid"] for q in nb["questions"]] == ["(notebook)"]
    assert nb["questions"][0]["message"].startswith("grader error: the interpreter")
    assert "error: the grader could not run 1 submission(s) (01_flops.ipynb)" in proc.stderr


@needs_bwrap
def test_a_grader_crash_is_exit_3_not_a_failing_student(tmp_path, one_submission):
    """The grader's own code fails on a submission (here: its report folder cannot hold the
    executed copies): a grader error for that submission and exit 3, never 1."""
    from course_lib.grading.runner import Options, grade_dir
    out = tmp_path / "out"
    out.mkdir()
    (out / "executed").write_text("a file where the grader wants a folder")
    assert grade_dir(one_submission, out, opts=Options(seed=1)) == 3
    nb = _strict((out / "grades.json").read_text())["notebooks"][0]
    assert [q["qid"] for q in nb["questions"]] == ["(notebook)"]
    assert nb["questions"][0]["message"].startswith("grader error: FileExistsError")


def test_a_crash_after_grading_is_exit_3_not_a_failing_class(tmp_path, monkeypatch, capsys):
    """Issue #43 item 16: a writer that crashed after the table (there: a name that is not UTF-8)
    ended the run with Python's exit status 1, which reads as 'a notebook is below the pass mark'.
    A failure of the grader's own reports, or any crash of the grader, is exit 3 and says so."""
    from course_lib.grading import __main__ as cli, runner

    def boom(*args, **kwargs):
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
    monkeypatch.setattr(runner, "grade_all", lambda subs, one, jobs: [])
    monkeypatch.setattr(runner, "write_reports", boom)
    monkeypatch.setattr(runner.sandbox, "preflight", lambda root: None)
    monkeypatch.setattr(runner.sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "01_flops.ipynb").write_text("{}")
    assert runner.grade_dir(tmp_path / "class", tmp_path / "out") == 3
    assert "error: the grader could not write its reports to" in capsys.readouterr().err

    def crash(*args, **kwargs):
        raise RuntimeError("a bug of the grader")
    monkeypatch.setattr(runner, "grade_dir", crash)
    assert cli.main(["grade", str(tmp_path / "class"), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert "RuntimeError: a bug of the grader" in err and "error: the grader failed (above), not a student" in err


# --------------------------------------------------------------------------- item 3: hostile data
@pytest.mark.parametrize("tensor", [
    {"kind": "numpy", "dtype": "int8", "shape": [1], "data": [300]},
    {"kind": "torch", "dtype": "int8", "shape": [1], "data": [300]},
    {"kind": "torch", "dtype": "int64", "shape": [1], "data": [2 ** 70]},
    {"kind": "numpy", "dtype": "float64", "shape": [1] * 65, "data": [1.0]},
    {"kind": "numpy", "dtype": "U999999999", "shape": [150], "data": [1] * 150},   # ~570 GB of str dtype
    {"kind": "numpy", "dtype": "object", "shape": [1], "data": [1]},
    {"kind": "torch", "dtype": "float128", "shape": [1], "data": [1.0]},
    {"kind": "fake", "dtype": "float32", "shape": [1], "data": [1.0]},
    {"kind": "torch", "dtype": "float32", "shape": [1], "data": ["1"]},
])
def test_unbuildable_answers_are_wire_errors(tensor):
    with pytest.raises(wire.WireError):
        wire.decode({"$tensor": tensor})


def test_printable_escapes_control_characters():
    s = printable("a\x1b[2J\x00b\n# title\u2028c\u202e|\x85d")
    assert s == "a\\x1b[2J\\x00b # title\\u2028c\\u202e|\\x85d"
    assert all(ch.isprintable() for ch in s)


def test_executed_copies_are_regular_capped_files(tmp_path):
    (tmp_path / "big").write_bytes(b"")
    os.truncate(tmp_path / "big", 1 << 30)                       # sparse: 1 GiB apparent
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to("/etc/hostname")
    (tmp_path / "ok").write_text("{}")
    for name in ("big", "fifo", "link", "ok"):
        _keep(tmp_path / name, tmp_path / f"{name}.ipynb", 1 << 20)
    assert (tmp_path / "ok.ipynb").read_text() == "{}"
    assert not any((tmp_path / f"{n}.ipynb").exists() for n in ("big", "fifo", "link"))
    assert "not kept" in (tmp_path / "big.skipped").read_text()


@needs_bwrap
def test_a_huge_sparse_notebook_costs_its_author_only(tmp_path):
    """A sparse 3 GiB "notebook" (no disk used) beside an honest one: the grader read it whole,
    twice over (2 GiB measured 4.2 GB of grader memory), so a dozen of them ended the run for the
    whole class. Now its author scores 0 with a message saying why and what to do, the honest
    submission is graded in full, the copy check (--solutions) skips it, and no process of the
    run grows past a fraction of the file's size."""
    from course_lib.grading._notebook import SUBMISSION_CAP
    cls = tmp_path / "class"
    for student in ("alice", "mallory"):
        (cls / student).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "01_flops.ipynb", cls / "alice" / "01_flops.ipynb")
    with open(cls / "mallory" / "01_flops.ipynb", "wb") as f:
        f.truncate(3 << 30)
    assert os.stat(cls / "mallory" / "01_flops.ipynb").st_blocks == 0          # really sparse
    # a parent of its own, whose children's peak memory is the grader's and its sandboxes'
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    proc = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "course_lib.grading", "grade",
                           str(cls), "--out", str(tmp_path / "out"), "--seed", "1",
                           "--solutions", str(ROOT / "solutions")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr                    # mallory fails, nobody errs
    peak_kb = int(proc.stdout.strip().splitlines()[-1])
    assert peak_kb * 1024 < 1 << 30, f"a process of the run held {peak_kb / 2**20:.1f} GiB"
    grades = {nb["student"]: nb for nb in _strict((tmp_path / "out" / "grades.json").read_text())["notebooks"]}
    assert grades["alice"]["percent"] == 100.0, grades["alice"]
    [row] = grades["mallory"]["questions"]
    assert row["qid"] == "(notebook)" and grades["mallory"]["percent"] == 0
    limit = SUBMISSION_CAP >> 20
    assert row["message"] == (f"error: the notebook is 3072 MB, over the grader's limit of {limit} MB: "
                              "clear its outputs and submit it again")


def test_a_trickled_reply_cannot_outlast_the_call_limit():
    """The sandbox's end of the callback socket answers a byte every 0.1 s, forever: each read
    arrives in time, but the request's whole-exchange deadline (1 s) ends it."""
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def trickle():
        theirs.recv(1 << 16)
        while not stop.is_set():
            try:
                theirs.send(b" ")
            except OSError:
                return
            time.sleep(0.1)
    threading.Thread(target=trickle, daemon=True).start()
    channel = remote.Channel(ours, time.monotonic() + 60, 1.0)
    t0 = time.monotonic()
    with pytest.raises(remote.CallTimeout):
        channel.request({"op": "call", "ref": 1, "args": [], "kwargs": {"$dict": []}})
    assert time.monotonic() - t0 < 3.0        # 1 s limit, plus scheduling on a busy machine
    with pytest.raises(remote.CallTimeout):   # the channel is broken: later calls fail at once
        channel.request({"op": "call", "ref": 1})
    stop.set()
    channel.close()
    theirs.close()


# --------------------------------------------------------------------------- item 5: feedback
def test_unit_slips_are_recognised_in_both_modes():
    from course_lib.checks.ch01_flops import QUESTIONS
    q = {x.qid: x for x in QUESTIONS}["days_pcie"]
    for feedback in ("practice", "graded"):
        assert q.grade(q.reference() * 86400, feedback=feedback).message == "That is seconds, not days."
        assert q.grade(q.reference() * 24, feedback=feedback).message == "That is hours, not days."
    gib = Question("mem", 1, "?", expected=lambda: 80.0, rtol=0.001, unit="GiB")
    assert gib.grade(80.0 * 2 ** 30 / 1e9).message == "That is GB (10^9 bytes), not GiB (2^30 bytes)."
    assert Question("m", 1, "?", expected=lambda: 3600.0, unit="s").grade(1.0).message == \
        "That is hours, not seconds."


def test_drawn_cases_never_show_their_reference():
    """Function graders that draw inputs say what is wrong, not the right value of a drawn case."""
    from course_lib.checks import ch02_scaling, ch06_stability, ch09_distill

    def question(bank, grader):
        return next(q for q in bank.QUESTIONS if q.grader is grader)
    cases = [(question(ch09_distill, ch09_distill._grade_kl_fn), lambda p, q: 0.1296, "expected"),
             (question(ch02_scaling, ch02_scaling._grade_power_law_fn), lambda x, y: (1.0, 0.5), " vs "),
             (question(ch06_stability, ch06_stability._grade_scaler),
              lambda flags, s, n: [1.0] * len(flags), "should leave")]
    for q, wrong, leak in cases:
        r = q.grade(wrong, feedback="graded", seed=5)
        assert r.score < q.points and r.message and leak not in r.message, (q.qid, r.message)
