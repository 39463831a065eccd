"""The grader grades either twin of a notebook, in the twin's language (issue #49).

A Chinese twin (``solutions/zh/NAME.ipynb``, ``exercises/zh/NAME.ipynb``: metadata ``course.lang =
"zh"``) is graded against the same bank as its English name and gets Chinese feedback by default:
in practice mode the checker reads the language of the notebook its kernel runs (Jupyter's
``JPY_SESSION_NAME``), in a graded run the grader gives a zh notebook's kernel ``COURSE_LANG=zh``
unless ``--lang`` says otherwise. One graded run on the fixture bank's masters (the English
grading tests keep their English messages without ``--lang``): a few seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib import nbtwin
from course_lib.grading import Checker, remote
from course_lib.grading import i18n
from course_lib.grading.generate import generate
from course_lib.grading.i18n import notebook_lang

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "grading"


def test_a_notebook_says_its_language_by_metadata_or_folder() -> None:
    assert notebook_lang({"metadata": {"course": {"lang": "zh"}}}) == "zh"
    assert notebook_lang({"metadata": {"course": {"lang": "en"}}}, "x/zh/a.ipynb") == "en"   # metadata first
    assert notebook_lang({"metadata": {}}, "exercises/zh/01_flops.ipynb") == "zh"
    assert notebook_lang({"metadata": {"course": {"lang": "klingon"}}}, "exercises/01_flops.ipynb") is None
    assert notebook_lang(None, None) is None and notebook_lang([], "a.ipynb") is None


def test_practice_checker_speaks_the_language_of_its_notebook(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(remote.MODE_ENV, raising=False)
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    zh = tmp_path / "renamed.ipynb"   # a Chinese twin a student moved: its metadata still says zh
    zh.write_text(json.dumps({"cells": [], "metadata": {"course": {"lang": "zh"}}}), encoding="utf-8")
    en = tmp_path / "01_flops.ipynb"
    en.write_text(json.dumps({"cells": [], "metadata": {}}), encoding="utf-8")
    monkeypatch.setenv(i18n.SESSION_ENV, str(zh))
    assert Checker("ch01_flops").lang == "zh"
    monkeypatch.setenv(i18n.LANG_ENV, "en")             # an explicit COURSE_LANG wins
    assert Checker("ch01_flops").lang == "en"
    monkeypatch.delenv(i18n.LANG_ENV)
    monkeypatch.setenv(i18n.SESSION_ENV, str(en))
    assert Checker("ch01_flops").lang == "en"
    monkeypatch.setenv(i18n.SESSION_ENV, str(tmp_path / "zh" / "gone.ipynb"))   # unreadable: its folder
    assert Checker("ch01_flops").lang == "zh"


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[Path, Path]:
    """The fixture bank's master, its Chinese twin (nbtwin sync) and the generated exercise twin."""
    course = tmp_path_factory.mktemp("course")
    master = course / "solutions" / "fx_grading.ipynb"
    master.parent.mkdir(parents=True)
    shutil.copy(FIX / "solutions" / "fx_grading.ipynb", master)
    twin = course / "solutions" / "zh" / master.name
    nbtwin.sync(master, twin)
    nb = json.loads(twin.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = "中文说明。"
    twin.write_text(json.dumps(nb), encoding="utf-8")
    generate(twin.parent, course / "exercises" / "zh")
    return twin, course / "exercises" / "zh" / master.name


def test_self_check_of_a_chinese_exercise_speaks_chinese(twins, monkeypatch) -> None:
    from course_lib.grading import selfcheck

    monkeypatch.setenv("PYTHONPATH", str(FIX))
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    ok, report = selfcheck.check_notebook(twins[1], timeout_cell=60, lang=None)
    assert not ok and "fx_grading：0/7" in report, report


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader needs bubblewrap")
def test_graded_run_scores_the_chinese_twins_against_the_same_bank_in_chinese(twins, tmp_path) -> None:
    sub = tmp_path / "class"   # flat notebooks, named by the student: only the metadata says zh
    sub.mkdir()
    shutil.copy(twins[0], sub / "ann-master.ipynb")
    shutil.copy(twins[1], sub / "bob-exercise.ipynb")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "course_lib.grading", "grade", str(sub), "--out", str(out),
                           "--chapter", "fx_grading", "--bank", "grading_fixture_bank", "--seed", "7",
                           "--timeout-cell", "5"],
                          env=dict(os.environ, PYTHONPATH=str(FIX)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr      # the exercise fails the pass mark
    notebooks = {n["notebook"]: n for n in json.loads((out / "grades.json").read_text())["notebooks"]}
    full = notebooks["ann-master.ipynb"]
    assert all(q["score"] == q["points"] for q in full["questions"]) and len(full["questions"]) == 4
    assert {q["message"] for q in full["questions"]} == {"正确"}
    empty = notebooks["bob-exercise.ipynb"]["questions"]
    assert len(empty) == 4 and all(q["score"] == 0 for q in empty)
    assert all(q["message"].startswith("未实现") for q in empty), [q["message"] for q in empty]
