"""The untouched student version of every chapter scores 0 with "not implemented" under the headless
grader (graded with ``--lang zh``: the Chinese feedback keeps the English term in parentheses, so the
same check reads both, and the run proves the language reaches the reports end to end). A file apart
from test_exercises.py so that pytest-xdist, which gives each file to one worker, grades the masters
and the students' notebooks at the same time."""

import pytest
from test_exercises import ROOT, _english, _grade, _rows


@pytest.fixture(scope="module")
def graded_students(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("students")
    return _grade(_english(ROOT / "exercises", tmp / "exercises"), tmp / "out", 1, "--lang", "zh")


def test_untouched_exercises_score_zero_with_not_implemented(graded_students):
    proc, report = graded_students
    assert proc.returncode == 1          # below any positive pass mark
    rows = list(_rows(report))
    assert rows and all(r["score"] == 0 for _, r in rows)
    assert all("not implemented" in r["message"] for _, r in rows), \
        [(nb["notebook"], r["qid"], r["message"]) for nb, r in rows if "not implemented" not in r["message"]]
    assert all(r["message"].startswith("未实现") for _, r in rows) and report["lang"] == "zh"
