"""The students' handout carries both editions (issue #49): the Chinese lab and exercise twins
(``notebooks/zh``, ``exercises/zh``) come along, the solution twins stay behind, a twin's links to
its worked answers point at its exercises, and the student TOC turns the Chinese section's
solution twins into exercise twins. ``make lab`` serves the repository root, zh folders included.
One handout written (about a second); no book build.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from course_lib.grading.handout import handout, student_index_zh, student_toc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ho(tmp_path_factory) -> tuple[Path, list[str]]:
    dest = tmp_path_factory.mktemp("handout") / "course"
    return dest, handout(ROOT, dest)


def _tracked(prefix: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split() if p.endswith(".ipynb")]


def test_the_chinese_labs_and_exercises_come_along_and_no_solution_twin(ho) -> None:
    dest, files = ho
    for rel in _tracked("notebooks/zh") + _tracked("exercises/zh"):
        assert rel in files and (dest / rel).is_file(), rel
    assert _tracked("exercises/zh"), "no exercise twins tracked"
    assert not (dest / "solutions").exists()
    for rel in _tracked("exercises/zh"):
        assert (dest / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


def test_a_lab_twin_links_its_exercises_instead_of_the_answers(ho) -> None:
    dest, _ = ho
    for rel in _tracked("notebooks/zh"):
        nb = json.loads((dest / rel).read_text(encoding="utf-8"))
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "solutions/" not in text, rel
        if "exercises/zh/" in (ROOT / rel).read_text(encoding="utf-8"):
            assert "../../exercises/zh/" in text, rel


def test_student_toc_turns_the_chinese_solution_twins_into_exercise_twins(ho) -> None:
    dest, _ = ho
    toc = yaml.safe_load((dest / "book" / "_toc.yml").read_text(encoding="utf-8"))
    zh = next(p for p in toc["parts"] if any(c.get("file") == "book/zh/index" for c in p["chapters"]))
    files = [s["file"] for c in zh["chapters"] for s in c.get("sections", [])]
    ours = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    twins = [s["file"] for p in ours["parts"] for c in p["chapters"] for s in c.get("sections", [])
             if s["file"].startswith("solutions/zh/")]
    assert twins and all("exercises/zh/" + t.split("/", 2)[2] in files for t in twins)
    nested = ("parts:\n- caption: x\n  chapters:\n  - file: book/zh/index\n    sections:\n"
              "    - file: solutions/zh/01_flops\n")
    assert "exercises/zh/01_flops" in student_toc(nested) and "solutions/" not in student_toc(nested)


def test_the_chinese_home_page_rewrite_takes_links_to_solution_twins() -> None:
    page = (ROOT / "book" / "zh" / "index.md").read_text(encoding="utf-8")
    twin_links = page.replace("](../../solutions/01_flops.ipynb)", "](../../solutions/zh/01_flops.ipynb)")
    out = student_index_zh(twin_links)
    assert "[练习](../../exercises/zh/01_flops.ipynb)" in out and "solutions" not in out


def test_the_students_readme_says_how_to_check_the_chinese_exercises() -> None:
    readme = (ROOT / "course_lib" / "grading" / "handout_files" / "README.md").read_text(encoding="utf-8")
    assert "make check NB=exercises/zh" in readme
    lab = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True).stdout
    assert f'--ServerApp.root_dir="{ROOT}"' in lab    # the whole course, notebooks/zh and exercises/zh too
