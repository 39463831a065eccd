"""What readers of the site see in the labs' code and outputs (issue #21).

nbval also reads a `# NBVAL_IGNORE_OUTPUT` first line, but readers see that comment on the site;
the course marks such cells with the `nbval-ignore-output` metadata tag instead. A widget cell's
stored output must be its static fallback, never the ``VBox(children=...`` repr.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from myst_nb.core.read import read_myst_markdown_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))
NBVAL_COMMENT = re.compile(r"^\s*#\s*NBVAL_", re.IGNORECASE)
WIDGET_REPR = re.compile(r"\b[HV]Box\(children=")


def _code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_no_nbval_comment_in_code(path: Path) -> None:
    bad = [_source(c).splitlines()[0] for c in _code_cells(path)
           if _source(c).strip() and NBVAL_COMMENT.match(_source(c))]
    assert not bad, f"{path.name}: use the cell tag nbval-ignore-output, not a comment readers see: {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_no_widget_repr_in_stored_outputs(path: Path) -> None:
    bad = [_source(c)[:60] for c in _code_cells(path)
           if WIDGET_REPR.search(json.dumps(c.get("outputs", [])))]
    assert not bad, f"{path.name}: a widget's repr is stored instead of its static fallback: {bad}"


def test_ignored_cells_are_tagged_somewhere() -> None:
    """The conversion kept the marks: the labs still have output-ignored cells (timings)."""
    tagged = sum("nbval-ignore-output" in c.get("metadata", {}).get("tags", [])
                 for p in NOTEBOOKS for c in _code_cells(p))
    assert tagged >= 10


TITLE = re.compile(r"^# (Lab|Exercises) (\d+) — [A-Z0-9]")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_one_title_style(path: Path) -> None:
    """Issue #34: every lab is titled "# Lab N — Title" and every exercise set "# Exercises N — Title"
    (the site's navigation lists them side by side; "Lab 4:" beside "Lab 5 —" read as two styles),
    with N the chapter's number."""
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    title = _source(first).splitlines()[0]
    m = TITLE.match(title)
    assert m, f"{path.name}: title {title!r} is not '# Lab N — Title' / '# Exercises N — Title'"
    assert m.group(1) == ("Lab" if path.parent.name == "notebooks" else "Exercises"), path.name
    assert int(m.group(2)) == int(path.name[:2]), f"{path.name}: numbered {m.group(2)}"


LABS = sorted((ROOT / "notebooks").glob("*_lab.ipynb"))
# a duration: "15 s", "about 30 s", "32 CPU-seconds", "38 minutes", "2 h", "half a minute"
DURATION = re.compile(r"\d[\d.,]*\s*(?:-|–)?\s*(?:CPU[- ])?(?:s|sec|secs|seconds?|min|mins|minutes?|h|hours?)\b"
                      r"|\b(?:half an? |a few |several )?(?:minute|hour)\b(?! or)", re.IGNORECASE)
TIMES_LINK = "](../data/lab_times.json)"


@pytest.mark.parametrize("path", LABS, ids=[p.name for p in LABS])
def test_a_labs_header_states_no_time_of_its_own(path: Path) -> None:
    """Issue #43: lab 1's header said "about 15 s", the course map 28 s, a run 8.3 s. One source: the
    time `make bench` measured (data/lab_times.json, shown on the course map). A header links it (the
    site shows the measured time there, book/_ext/course_labtimes.py) and types no duration itself."""
    header = _source(json.loads(path.read_text(encoding="utf-8"))["cells"][0])
    assert TIMES_LINK in header, f"{path.name}: the header should say its time with a link to ../data/lab_times.json"
    typed = [m.group(0) for m in DURATION.finditer(header)]
    assert not typed, f"{path.name}: the header types a time by hand ({typed}); link the measured one instead"


# A folder made with tempfile.mkdtemp outlives the kernel: nothing removes it but the code that made
# it. Lab 12 left its jobs' checkpoints (94 MB) in the temp folder on every run, lab 3 and chapter 3's
# page their shards; lab 17 removed its folders from the start.
MKDTEMP = re.compile(r"^[ \t]*(\w+)\s*=\s*\[?\s*(?:Path\()?(?:tempfile\.)?mkdtemp\(", re.MULTILINE)
MKDTEMP_CALL = re.compile(r"\bmkdtemp\(")
PAGES = sorted((ROOT / "book").glob("*.md"))   # the Chinese twins run the same code cells (test_editions)


def _code_sources(path: Path) -> list[str]:
    """The code cells of a notebook, or of a MyST page read as the book reads it."""
    if path.suffix == ".md":
        nb = read_myst_markdown_notebook(path.read_text(encoding="utf-8"))
        return [c.source for c in nb.cells if c.cell_type == "code"]
    return [_source(c) for c in _code_cells(path)]


def _removes(text: str, name: str) -> bool:
    """``text`` calls rmtree on ``name``, directly or as one item of a ``for f in (...)`` loop."""
    if re.search(rf"rmtree\(\s*{name}\b", text):
        return True
    loops = re.finditer(r"for (\w+) in \(([^)]*)\):\s*\n\s*(?:shutil\.)?rmtree\(\s*\1\b", text)
    return any(re.search(rf"\b{name}\b", m.group(2)) for m in loops)


def test_a_made_folder_is_found_by_its_name_wherever_it_is_made() -> None:
    text = ("import tempfile\nwork = Path(tempfile.mkdtemp(prefix='x'))\n"
            "def f():\n    d = mkdtemp()\n"
            "shm = [Path(tempfile.mkdtemp()) for _ in range(2)]")
    assert [m.group(1) for m in MKDTEMP.finditer(text)] == ["work", "d", "shm"]
    assert len(MKDTEMP_CALL.findall(text + "\nprint(Path(tempfile.mkdtemp()))")) == 4


def test_removal_is_recognised_direct_or_in_a_loop() -> None:
    assert _removes("shutil.rmtree(work, ignore_errors=True)", "work")
    assert _removes("for folder in (*shm, work):\n    shutil.rmtree(folder)", "shm")
    assert not _removes("shutil.rmtree(other)", "work") and not _removes("print(work)", "work")


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS + PAGES])
def test_a_temp_folder_it_makes_is_removed_once_used(path: Path) -> None:
    sources = _code_sources(path)
    unnamed = sum(len(MKDTEMP_CALL.findall(src)) - len(MKDTEMP.findall(src)) for src in sources)
    assert not unnamed, f"{path.name}: a tempfile.mkdtemp folder not given a name, so nothing can remove it"
    kept = [m.group(1) for i, src in enumerate(sources) for m in MKDTEMP.finditer(src)
            if not _removes("\n".join([src[m.end():], *sources[i + 1:]]), m.group(1))]
    assert not kept, (f"{path.name}: tempfile.mkdtemp folders {kept} are never removed; end their last use with "
                      "shutil.rmtree(folder, ignore_errors=True) so each run does not leave them in the temp folder")
