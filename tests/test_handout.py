"""The students' course that ``python -m course_lib.grading handout`` writes (issue #29, item 7): a
README, grading notes, Makefile and book TOC written for students, a check command that runs, and a
site that builds with warnings as errors with its Exercises part (one real build: minutes)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from course_lib.grading.__main__ import main as cli
from course_lib.grading.handout import HandoutError, student_config, student_index, student_toc

ROOT = Path(__file__).resolve().parents[1]
BOOK_JOB_ENV = "COURSE_BOOK_JOB"   # conftest.py: where make test's background book build reports
CHAPTERS = sorted(p.stem for p in (ROOT / "exercises").glob("*.ipynb"))


@pytest.fixture(scope="module")
def ho(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("handout") / "course"
    assert cli(["handout", str(dest), "--repo", str(ROOT)]) == 0
    return dest


def _targets(makefile: Path) -> set[str]:
    return {m.group(1) for m in re.finditer(r"(?m)^([a-z][\w-]*):", makefile.read_text())}


def test_only_what_students_use_is_in_it(ho):
    for gone in ("solutions", "tests", ".ci", "CONTRIBUTING.md", "docs/grading-ci-example.yml"):
        assert not (ho / gone).exists(), gone
    for name in CHAPTERS:
        assert (ho / "exercises" / f"{name}.ipynb").read_bytes() == (ROOT / "exercises" / f"{name}.ipynb").read_bytes()
    assert cli(["handout", str(ho), "--repo", str(ROOT)]) == 2         # never over an existing folder


def test_readme_and_grading_notes_are_written_for_students(ho):
    readme = (ho / "README.md").read_text()
    assert readme != (ROOT / "README.md").read_text()
    assert "solution" not in readme.lower() and "make test" not in readme and "make grade" not in readme
    assert len(re.findall(r"(?m)^\| `exercises/` \|", readme)) == 1       # the folder table lists it once
    assert "make check" in readme and "docs/GRADING.md" in readme
    grading = (ho / "docs" / "GRADING.md").read_text()
    assert grading.startswith("# How your exercises are graded")
    assert "solution" not in grading.lower() and "bwrap" not in grading and "--solutions" not in grading


def test_every_make_command_it_mentions_exists_and_needs_nothing_left_out(ho):
    targets = _targets(ho / "Makefile")
    texts = [(ho / p).read_text() for p in ("README.md", "docs/GRADING.md", "book/index.md", "book/04_dp_fsdp.md")]
    mentioned = {m for t in texts for m in re.findall(r"`make ([a-z][\w-]*)", t)}
    assert mentioned and mentioned <= targets, mentioned - targets
    assert {"book", "lab", "check"} <= targets and not {"test", "grade", "exercises"} & targets
    make = (ho / "Makefile").read_text()
    assert "tests" not in make and "solutions" not in make


def test_book_config_and_toc_have_the_exercises_part(ho):
    config = yaml.safe_load((ho / "book" / "_config.yml").read_text())
    assert "exercises" not in config["exclude_patterns"] and "tests" in config["exclude_patterns"]
    toc_text = (ho / "book" / "_toc.yml").read_text()
    assert "solution" not in toc_text.lower()
    parts = [[c["file"] for c in p["chapters"]] for p in yaml.safe_load(toc_text)["parts"]]
    assert [p for p in parts if len(p) == 3] == [[f"book/{n}", f"notebooks/{n}_lab", f"exercises/{n}"]
                                                 for n in CHAPTERS]   # each chapter: page, lab, exercises
    index = (ho / "book" / "index.md").read_text()
    assert "solution" not in index.lower() and "SOLUTIONS=0" not in index
    assert "[exercises](../exercises/01_flops.ipynb)" in index and "`make check`" in index
    for page in [*(ho / "book").glob("*.md"), *(ho / "notebooks").glob("*.ipynb")]:
        assert "solutions/" not in page.read_text(), page.name


def test_a_changed_page_fails_the_handout_instead_of_leaking_solutions_text():
    index = (ROOT / "book" / "index.md").read_text()
    with pytest.raises(HandoutError, match="index.md"):
        student_index(index.replace("| publish the site without answers |", "| publish it |"))
    with pytest.raises(HandoutError, match="solutions"):
        student_index(index + "\nSee the solutions.\n")
    with pytest.raises(HandoutError, match="_toc.yml"):
        student_toc("format: jb-book\nroot: book/index\nparts: []\n")
    with pytest.raises(HandoutError, match="_config.yml"):
        student_config("exclude_patterns:\n  - tests\n")


def test_students_check_command_runs_their_exercises(ho, tmp_path):
    """`make check` in the handout runs the in-notebook feedback: the untouched exercise has every
    question "not checked yet" (exit 1), the master (standing in for a finished notebook) all ✔."""
    make = subprocess.run(["make", "check", "NB=exercises/01_flops.ipynb", f"PY={sys.executable}", "VENV_OK="],
                          cwd=ho, capture_output=True, text=True, timeout=300)
    assert make.returncode != 0, make.stdout + make.stderr
    assert "0 of 1 notebook(s) fully correct" in make.stdout
    assert "· days_34b_8t: not checked yet" in make.stdout and "ch01_flops: 0/" in make.stdout
    done = tmp_path / "01_flops.ipynb"
    done.write_bytes((ROOT / "solutions" / "01_flops.ipynb").read_bytes())
    ok = subprocess.run([sys.executable, "-m", "course_lib.grading", "check", str(done)], cwd=ho,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "✔ days_34b_8t" in ok.stdout and "1 of 1 notebook(s) fully correct" in ok.stdout


def _reuse_the_courses_jupyter_cache(ho: Path) -> bool:
    """Copy the instructor build's jupyter cache into the handout, once that build is over (under
    `make test` it runs in the background: wait for its exit status). The cache is keyed by each
    page's code cells, which the handout does not change, so its pages are not executed again; the
    build still reads and writes every page, so every warning is still seen."""
    job = os.environ.get(BOOK_JOB_ENV)
    if job:
        deadline = time.monotonic() + 1200
        while not Path(job + ".rc").is_file() and time.monotonic() < deadline:
            time.sleep(2)
    cache = ROOT / "_build" / ".jupyter_cache"
    if not cache.is_dir():
        return False
    shutil.copytree(cache, ho / "_build" / ".jupyter_cache")
    return True


def test_the_handout_computes_the_same_page_cache_key_as_the_course(ho):
    """book/_ext/course_cache.py keys the pages' cached outputs by course_lib and data/: the
    handout holds the same files, so its build reuses the course's outputs instead of executing
    every page again (12 min on 2 cores)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("course_cache", ROOT / "book" / "_ext" / "course_cache.py")
    cache = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cache)
    assert cache.digest(ho) == cache.digest(ROOT)


def test_the_handout_site_builds_with_warnings_as_errors(ho):
    """The students' site, built as `make book` builds it but with warnings as errors: zero
    warnings, the Exercises part rendered, no solutions page and no "(worked answers)" link.
    Measured on the shared 2-core machine: 12 min from nothing (every chapter page executes),
    30-80 s with the course's own jupyter cache, which `make test` has built by the time this runs
    (conftest.BOOK_TEST_FILES)."""
    _reuse_the_courses_jupyter_cache(ho)
    jb = Path(sys.executable).with_name("jupyter-book")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    env.pop("SOLUTIONS", None)
    t0 = time.monotonic()
    proc = subprocess.run([str(jb), "build", ".", "--config", "book/_config.yml", "--toc", "book/_toc.yml",
                           "-W", "-n", "--keep-going"], cwd=ho, env=env, capture_output=True, text=True,
                          timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"handout site build failed after {time.monotonic() - t0:.0f} s:\n{log[-6000:]}"
    html = ho / "_build" / "html"
    for name in CHAPTERS:
        assert (html / "exercises" / f"{name}.html").is_file(), name
    assert not (html / "solutions").exists()
    pages = list(html.rglob("*.html"))
    assert not [p for p in pages if "worked answers" in p.read_text(encoding="utf-8")]
    index = (html / "book" / "index.html").read_text(encoding="utf-8")
    assert "Exercises" in index and "solution" not in index.lower()
