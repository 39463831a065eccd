"""The grader attacked the way a student would (issue #17): attack notebooks graded in one real,
sandboxed run next to an honest master. No attack may earn a point it did not answer honestly;
the honest master keeps 100 %; nothing outside the sandbox changes; nothing keeps running.

Run A grades the fixture chapter (``--chapter fx_grading --bank grading_fixture_bank``); run B takes
the assignment from the file names, with the real chapter 1 bank. Both run at once."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "grading"
MASTER = FIX / "solutions" / "fx_grading.ipynb"
MARKER = f"course-attack-daemon-{uuid.uuid4().hex[:12]}"
FLOPS = 6 * 1e9 * 2e10

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader needs bubblewrap")

SETUP = 'from course_lib.grading import Checker\ncheck = Checker("fx_grading", bank="grading_fixture_bank")'


def notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [],
                                  "execution_count": None, "source": src} for i, src in enumerate(cells)],
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}},
                       "nbformat": 4, "nbformat_minor": 5})


def attacks(p: dict[str, str]) -> dict[str, str]:
    """name -> notebook text; ``p`` holds the real paths an attacker would aim at."""
    evil = ("from course_lib.grading import Question\nQUESTIONS = [Question(q, points=n, prompt='', "
            "grader=lambda a: (1.0, '')) for q, n in [('flops', 2), ('dtype', 1), ('shape', 1), ('scale', 3)]]\n")
    daemon = (f"import time, pathlib\nout = pathlib.Path({p['out']!r})\nt = time.time()\n"
              "while time.time() - t < 120:\n"
              "    for name in ('grades.json', 'summary.md', 'junit.xml'):\n"
              "        try:\n            (out / name).write_text('forged 11/11')\n"
              "        except OSError:\n            pass\n    time.sleep(0.2)\n")
    wrong = 'check("flops", 4e19)\ncheck("dtype", "fp16")\ncheck("shape", (9, 9))\ncheck("scale", lambda x: x)'
    return {
        # 1: a notebook plants a bank where the runner imports from, the next names it
        "a01_plant_bank.ipynb": notebook(SETUP, (
            f"import pathlib\nfor d in [pathlib.Path.cwd(), pathlib.Path({p['cwd']!r}), pathlib.Path({p['sub']!r}), "
            f"pathlib.Path({str(FIX)!r}), pathlib.Path({str(ROOT)!r})]:\n"
            f"    try:\n        (d / 'zz_evilbank.py').write_text({evil!r})\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)")),
        "a02_use_planted_bank.ipynb": notebook(
            'from course_lib.grading import Checker\ncheck = Checker("fx_grading", bank="zz_evilbank")  # bank="zz_evilbank"',
            wrong),
        # 3: a daemon that leaves the session and rewrites the reports after the runner exits
        "a03_daemon.ipynb": notebook(SETUP, (
            f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {daemon!r}, {MARKER!r}], "
            "start_new_session=True)\nsubprocess.Popen(['sh', '-c', 'sleep 300; echo " + MARKER + "'], "
            "start_new_session=True)")),
        # 4: overwrite a later student's submission, the banks, the fixture bank
        "a04_overwrite.ipynb": notebook(SETUP, (
            "import pathlib\n"
            f"for t in [{p['sub'] + '/zz_honest.ipynb'!r}, {str(ROOT / 'course_lib/checks/ch01_flops.py')!r},"
            f" {str(FIX / 'grading_fixture_bank.py')!r}, '../zz_honest.ipynb']:\n"
            "    try:\n        pathlib.Path(t).write_text('{}')\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n"
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "except OSError as e:\n    print('no network', type(e).__name__)")),
        # 5 (and 9): forge the answers file, the old log, the progress file; print fake verdicts
        "a05_forge.ipynb": notebook(SETUP, (
            "import os, json, pathlib\ncheck('flops', 4e19)\npath = os.environ['COURSE_GRADE_ANSWERS']\n"
            "with open(path, 'a') as f:\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"flops\", \"points\": 2, \"score\": 2}\\n')\n"
            "    f.write('{\"qid\": \"dtype\", \"score\": NaN, \"points\": 1}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"shape\", \"answer\": NaN}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"scale\", \"answer\": {\"$fn\": 999, \"name\": \"scale\"}}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"dtype\", \"answer\": 1e999}\\n')\n"
            "with open(os.environ.get('COURSE_GRADE_LOG', '/tmp/log.jsonl'), 'a') as f:\n"
            "    f.write(json.dumps({'qid': 'flops', 'score': 2, 'points': 2}) + '\\n')\n"
            "(pathlib.Path(path).parent / 'progress.jsonl').open('a').write('{\"event\": \"end\"}\\n')\n"
            "print('✔ flops: correct (2/2 points)')\nprint('fx_grading: 7/7 points')")),
        # 6: reveal every question, import the banks, then answer honestly: revealed still scores 0
        "a06_reveal.ipynb": notebook(SETUP, (
            "for q in ('flops', 'dtype', 'shape', 'scale'):\n    check.reveal(q)\n"
            "try:\n    import grading_fixture_bank as b\n"
            "    for q in b.QUESTIONS:\n        check(q.qid, q.reference() if q.is_value else (lambda x: 2 * x))\n"
            "except ImportError as e:\n    print('no bank', type(e).__name__)\n"
            "try:\n    from course_lib.checks import ch01_flops\nexcept ImportError as e:\n    print('no banks', type(e).__name__)\n"
            "check('flops', 6 * 1e9 * 2e10)\ncheck('dtype', 'bfloat16')")),
        # 7: monkeypatch the grading code inside the kernel
        "a07_monkeypatch.ipynb": notebook(SETUP, (
            "from course_lib.grading import Question, values, checker\nfrom course_lib.grading.question import Result\n"
            "Question.grade = lambda self, answer, **kw: Result(self.qid, self.points, self.points, '')\n"
            "values.compare = lambda *a, **k: None\nchecker.Verdict.__bool__ = lambda self: True"), wrong),
        # 8: read or exec the masters from disk at run time
        "a08_exec_master.ipynb": notebook(SETUP, (
            "import json, pathlib\n"
            f"for p in [{str(MASTER)!r}, '../solutions/fx_grading.ipynb', {str(ROOT / 'solutions/01_flops.ipynb')!r}]:\n"
            "    try:\n        nb = json.loads(pathlib.Path(p).read_text())\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n        continue\n"
            "    for c in nb['cells'][1:]:\n        exec(''.join(c['source']))")),
        # 8 and 11: a table of the master's outputs; spraying candidates; a blind guess to read a ratio
        "a09_table_spray_guess.ipynb": notebook(SETUP, (
            "table = {1.0: 2.0, 0.0: 0.0, -3.5: -7.0, 1e6: 2e6}\n"
            "def scale(x):\n    return table.get(x, 0.0)\ncheck('scale', scale)\n"
            "for k in range(15, 25):\n    check('flops', 1.2 * 10.0 ** k)\n"
            "check('flops', 1.0)\ncheck('shape', [float('nan'), float('inf')])\ncheck('dtype', float('nan'))")),
        "zz_honest.ipynb": MASTER.read_text(encoding="utf-8"),
    }


def _grade(sub: Path, out: Path, cwd: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(FIX))
    return subprocess.Popen([sys.executable, "-m", "course_lib.grading", "grade", str(sub), "--out", str(out),
                             "--timeout-cell", "20", "--timeout-notebook", "60", "--seed", "1234", *extra],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _digest(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _strict(text: str) -> dict:
    def bad(name):
        raise ValueError(name)
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    cwd, sub_a, sub_b = base / "cwd", base / "sub_a", base / "sub_b"
    for d in (cwd, sub_a, sub_b):
        d.mkdir()
    out_a, out_b = base / "out_a", base / "out_b"
    for name, text in attacks({"cwd": str(cwd), "sub": str(sub_a), "out": str(out_a)}).items():
        (sub_a / name).write_text(text, encoding="utf-8")
    shutil.copy(ROOT / "solutions" / "01_flops.ipynb", sub_b / "01_flops.ipynb")
    from course_lib.checks.ch02_scaling import QUESTIONS as CH02
    (sub_b / "01_flops-fixture-bank.ipynb").write_text(notebook(
        SETUP, f"check('flops', {FLOPS!r})\ncheck('dtype', 'bfloat16')\ncheck('shape', (2, 3))"))
    (sub_b / "01_flops-own-chapter.ipynb").write_text(notebook(
        'from course_lib.grading import Checker\ncheck = Checker("ch02_scaling")',
        "\n".join(f"check({q.qid!r}, 1.0)" for q in CH02)))
    (sub_b / "my_homework.ipynb").write_text(notebook(SETUP))
    watched = [ROOT / "course_lib/checks/ch01_flops.py", FIX / "grading_fixture_bank.py", sub_a / "zz_honest.ipynb"]
    before = _digest(watched)
    procs = [_grade(sub_a, out_a, cwd, "--chapter", "fx_grading", "--bank", "grading_fixture_bank"),
             _grade(sub_b, out_b, cwd, "--solutions", str(ROOT / "solutions"))]
    results = [(p, *p.communicate(timeout=600)) for p in procs]
    (pa, out_txt_a, err_a), (pb, out_txt_b, err_b) = results
    time.sleep(1.0)  # anything left alive would now rewrite the reports
    return {"a": (pa.returncode, out_txt_a + err_a, out_a), "b": (pb.returncode, out_txt_b + err_b, out_b),
            "cwd": cwd, "sub": sub_a, "before": before, "after": _digest(watched)}


def _report(out: Path) -> dict:
    return _strict((out / "grades.json").read_text())


def _scores(out: Path) -> dict[str, dict[str, dict]]:
    return {n["notebook"]: {q["qid"]: q for q in n["questions"]} for n in _report(out)["notebooks"]}


def test_honest_master_keeps_full_marks(runs):
    rc, log, out = runs["a"]
    assert rc == 1, log                            # attacks are below the pass mark
    honest = _scores(out)["zz_honest.ipynb"]
    assert all(q["score"] == q["points"] for q in honest.values()), honest
    assert "zz_honest.ipynb (fx_grading): 7/7 points (100.0%) pass" in log


def test_no_attack_earns_a_point(runs):
    scores = _scores(runs["a"][2])
    assert len(scores) == 10
    for name, rows in scores.items():
        if name != "zz_honest.ipynb":
            assert all(q["score"] == 0 for q in rows.values()), (name, rows)


def test_reveal_costs_the_question_and_shows_nothing(runs):
    rows = _scores(runs["a"][2])["a06_reveal.ipynb"]
    assert all(r["message"].startswith("revealed") for r in rows.values()), rows
    executed = (runs["a"][2] / "executed" / "a06_reveal.ipynb").read_text()
    assert "no reference answer in a graded run" in executed and "1.2e+20" not in executed
    assert "no bank ModuleNotFoundError" in executed and "no banks" in executed


def test_graded_feedback_gives_the_kind_not_the_value(runs):
    rows = _scores(runs["a"][2])["a09_table_spray_guess.ipynb"]
    assert rows["flops"]["message"] == "Your answer is not within the tolerance ±2% of the expected value."
    assert "×" not in json.dumps(_report(runs["a"][2]), ensure_ascii=False)
    assert rows["scale"]["score"] == 0             # the table misses the inputs drawn by this run


def test_forged_lines_are_no_answers(runs):
    rows = _scores(runs["a"][2])["a05_forge.ipynb"]
    assert rows["flops"]["message"].startswith("A third")   # the one real answer, graded
    assert rows["shape"]["message"].startswith("not attempted")
    assert rows["dtype"]["message"].startswith("not attempted")   # NaN literal and 1e999 rejected


def test_nothing_outside_the_sandbox_changed(runs):
    assert runs["before"] == runs["after"]
    for d in (runs["cwd"], runs["sub"], FIX, ROOT):
        assert not (d / "zz_evilbank.py").exists()
    executed = (runs["a"][2] / "executed" / "a04_overwrite.ipynb").read_text()
    assert executed.count("blocked") >= 1 and "no network" in executed


def test_no_process_survives_and_reports_are_the_runs(runs):
    alive = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in cmd.read_bytes():
                alive.append(cmd.parent.name)
        except OSError:
            pass
    assert alive == []
    out = runs["a"][2]
    assert "forged" not in (out / "summary.md").read_text() + (out / "junit.xml").read_text()
    report = _report(out)
    assert report["seed"] == 1234 and report["feedback"] == "graded"


def test_assignment_comes_from_the_file_name(runs):
    rc, log, out = runs["b"]
    assert rc == 1, log
    scores = _scores(out)
    assert all(q["score"] == q["points"] for q in scores["01_flops.ipynb"].values())
    for name in ("01_flops-fixture-bank.ipynb", "01_flops-own-chapter.ipynb"):
        assert all(q["score"] == 0 for q in scores[name].values()), scores[name]
        assert {n["chapter"] for n in _report(out)["notebooks"] if n["notebook"] == name} == {"ch01_flops"}
    assert scores["my_homework.ipynb"]["(notebook)"]["message"].startswith("error: cannot tell the assignment")


def test_copies_of_the_master_are_flagged(runs):
    notes = {n["notebook"]: n["notes"] for n in _report(runs["b"][2])["notebooks"]}
    assert notes["01_flops.ipynb"] and "copies of 01_flops.ipynb" in notes["01_flops.ipynb"][0]
    assert notes["01_flops-own-chapter.ipynb"] == []
