"""Every chapter's graded exercises: the student version is the generated one, the master scores
100 % under the headless grader, and the untouched student version scores 0 with "not implemented"
(graded with ``--lang zh``: the Chinese feedback keeps the English term in parentheses, so the same
check reads both, and the run proves the language reaches the reports end to end)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MASTERS = sorted((ROOT / "solutions").glob("*.ipynb"))


def test_every_master_has_a_committed_student_version():
    assert MASTERS, "no solutions notebooks found"
    for master in MASTERS:
        assert (ROOT / "exercises" / master.name).exists(), f"exercises/{master.name} missing: run make exercises"


def test_committed_exercises_equal_the_generated_ones():
    out = subprocess.run([sys.executable, "-m", "course_lib.grading", "generate", "--check",
                          "solutions", "exercises"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _grade(folder: Path, out: Path, pass_mark: float, *extra: str):
    proc = subprocess.run([sys.executable, "-m", "course_lib.grading", "grade", str(folder),
                           "--out", str(out), "--pass-mark", str(pass_mark),
                           "--timeout-cell", "120", "--timeout-notebook", "300", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    report = out / "grades.json"
    # no report means the grader itself failed (exit 3, e.g. no bubblewrap): show what it said
    assert report.exists(), f"grader exit {proc.returncode}, no grades.json:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc, json.loads(report.read_text())


def _rows(report):
    nbs = report["notebooks"] if isinstance(report, dict) else report
    for nb in nbs:
        for row in nb["questions"]:
            yield nb, row


def _english(folder: Path, into: Path) -> Path:
    """The folder's English notebooks alone, copied: solutions/zh and exercises/zh hold the Chinese
    twins, which a class-folder grade would take for a student named "zh" and grade a second time
    (tests/test_grading_twin.py grades a twin; tests/test_twins.py holds every twin to its English)."""
    into.mkdir()
    for nb in sorted(folder.glob("*.ipynb")):
        shutil.copy2(nb, into / nb.name)
    return into


@pytest.fixture(scope="module")
def graded_masters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("masters")
    return _grade(_english(ROOT / "solutions", tmp / "solutions"), tmp / "out", 100)


def test_masters_score_full_marks(graded_masters):
    proc, report = graded_masters
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(_rows(report))
    assert len({nb["notebook"] for nb, _ in rows}) == len(MASTERS)
    bad = [(nb["notebook"], r["qid"], r["message"]) for nb, r in rows if r["score"] != r["points"]]
    assert not bad
