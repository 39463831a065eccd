"""The Chinese twins of the notebooks cannot drift from the English ones (issue #49).

A twin (``notebooks|solutions|exercises/zh/NAME.ipynb``) is never executed: nbval checks the English
notebook, whose code cells and outputs the twin holds byte for byte. What holds it to the English is
this file: every twin's code cells equal the English, the sequences of cell kinds match, no Markdown
cell is untranslated or stale (``course_lib.nbtwin``), an exercise twin is what the generator makes of
its solution twin, its Chinese is in the bundled font, its links stay in the Chinese edition, and
its Markdown reads as Chinese: Latin-script prose outside code, math, link targets, acronyms and
the allowlisted terms and cited titles (book/zh/latin_allowlist.txt) stays under a small threshold.
The tool's own behaviour is tested on small notebooks written here. No kernel: a few seconds.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest

from course_lib import nbtwin
from course_lib.grading._notebook import source_text
from course_lib.grading.generate import MD_STUB, MD_STUBS, exercise_notebook

ROOT = Path(__file__).resolve().parents[1]
TWINS = nbtwin.twins(ROOT)
LAB_TWINS = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
ALLOW = nbtwin.load_allowlist(ROOT / "book" / "zh" / "latin_allowlist.txt")
# Latin-script prose words a twin notebook may keep beyond the allowlist (a stray word, not a sentence)
MAX_LATIN_PER_NOTEBOOK = 3
# The Chinese pages (book/zh/*.md) are reported, not failed, while their translation is in progress:
# a page fails only past this many Latin-script prose words (26 at most on 2026-12-05 at 09:35, chapter 5,
# whose translation is in progress; 183 on all 23 pages; the glossary's column of English headwords is not
# prose). What a reader sees on the BUILT pages, generated text included, is tests/test_site_zh_prose.py's
MAX_LATIN_PER_PAGE = 26


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_every_lab_has_a_chinese_twin() -> None:
    labs = {p.name for p in (ROOT / "notebooks").glob("*_lab.ipynb")}
    assert labs, "no labs found"
    missing = sorted(labs - {p.name for p in LAB_TWINS})
    assert not missing, (f"labs without a Chinese twin: {missing}; create one with python -m course_lib.nbtwin "
                         "sync notebooks/NAME.ipynb notebooks/zh/NAME.ipynb, translate its Markdown, stamp it")


@pytest.mark.parametrize("twin", TWINS, ids=_id)
def test_twin_equals_its_english_notebook_in_code_and_is_translated(twin: Path) -> None:
    problems = nbtwin.problems(twin)
    assert not problems, "\n".join(problems)


def test_exercise_twins_are_the_generated_solution_twins() -> None:
    ex = {p.name for p in (ROOT / "exercises" / "zh").glob("*.ipynb")}
    sol = {p.name for p in (ROOT / "solutions" / "zh").glob("*.ipynb")}
    assert ex == sol, ("run python -m course_lib.grading generate solutions/zh exercises/zh: "
                       f"missing {sorted(sol - ex)}, without a master {sorted(ex - sol)}")


@pytest.mark.parametrize("twin", TWINS, ids=_id)
def test_twin_markdown_reads_as_chinese(twin: Path) -> None:
    found = nbtwin.notebook_latin(twin, ALLOW)
    n = sum(len(w) for w in found.values())
    assert n <= MAX_LATIN_PER_NOTEBOOK, (
        f"{n} Latin-script prose words in {_id(twin)} (at most {MAX_LATIN_PER_NOTEBOOK}): "
        + "; ".join(f"cell {i}: {' '.join(w)}" for i, w in found.items())
        + " -- translate them, or add a term or cited title to book/zh/latin_allowlist.txt")


def _page_prose(page: Path) -> str:
    """A Chinese page's text; the glossary without its English column (its headwords, by design)."""
    text = page.read_text(encoding="utf-8")
    return re.sub(r"(?m)^(\|[^|\n]*\|)[^|\n]*\|", r"\1 |", text) if page.name == "glossary.md" else text


def test_chinese_pages_latin_prose_is_reported_and_bounded(capsys) -> None:
    counts = {p.name: len(nbtwin.latin_words(_page_prose(p), ALLOW))
              for p in sorted((ROOT / "book" / "zh").glob("*.md"))}
    with capsys.disabled():
        print("\nLatin-script prose words on the Chinese pages:",
              ", ".join(f"{k} {v}" for k, v in counts.items() if v), f"(fail above {MAX_LATIN_PER_PAGE})")
    over = {k: v for k, v in counts.items() if v > MAX_LATIN_PER_PAGE}
    assert not over, f"pages with more than {MAX_LATIN_PER_PAGE} Latin-script prose words: {over}"


def _fonts():
    spec = importlib.util.spec_from_file_location("course_fonts", ROOT / "book" / "_ext" / "course_fonts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_twins_chinese_is_in_the_bundled_font() -> None:
    fonts = _fonts()
    used = set().union(set(), *(set(fonts.CJK.findall(p.read_text(encoding="utf-8"))) for p in TWINS))
    missing = used - fonts.font_chars(fonts.SUBSET)
    assert not missing, f"the bundled CJK font lacks {''.join(sorted(missing))}: pick another word"


DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")
MD_LINK = re.compile(r"\]\((\.\.?/[^)#\s]+)")


@pytest.mark.parametrize("twin", LAB_TWINS, ids=_id)
def test_lab_twin_links_chinese_pages_and_existing_files(twin: Path) -> None:
    nb = json.loads(twin.read_text(encoding="utf-8"))
    text = "\n".join(source_text(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for target in DOC.findall(text) + MD_LINK.findall(text):
        path = (twin.parent / target).resolve()
        assert path.exists() or path.with_suffix(".md").exists() or path.with_suffix(".ipynb").exists(), \
            f"{_id(twin)} links {target}, which does not exist"
        if "/book/" in str(path):
            assert path.parent.name == "zh", f"{_id(twin)} links the English page {target}, not book/zh/"
    assert not re.search(r"\{ref\}`[^`]*<sec-", text), f"{_id(twin)}: a {{ref}} to an English section label"


# --- the tool itself, on small notebooks --------------------------------------------------------

def _nb(cells: list[tuple[str, str]]) -> dict:
    out = []
    for i, (kind, src) in enumerate(cells):
        cell = {"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": src}
        if kind == "code":
            cell.update(execution_count=i + 1, outputs=[{"name": "stdout", "output_type": "stream",
                                                          "text": f"{i}\n"}])
        out.append(cell)
    return {"cells": out, "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def _write(path: Path, nb: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def _translate(zh: Path, text: str = "中文") -> None:
    nb = json.loads(zh.read_text(encoding="utf-8"))
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            c["source"] = text
    _write(zh, nb)


def _twin_translated(en: Path, zh: Path) -> None:
    """A twin made by sync, its Markdown translated and stamped: a twin in step with its English."""
    nbtwin.sync(en, zh)
    _translate(zh)
    nbtwin.stamp(zh)


@pytest.fixture
def course(tmp_path: Path) -> tuple[Path, Path]:
    en = _write(tmp_path / "notebooks" / "lab.ipynb",
                _nb([("markdown", "# Lab one"), ("code", "x = 1"), ("markdown", "Some words here.")]))
    return en, tmp_path / "notebooks" / "zh" / "lab.ipynb"


def test_sync_creates_an_untranslated_twin_and_stamp_marks_it(course) -> None:
    en, zh = course
    nbtwin.sync(en, zh)
    nb = json.loads(zh.read_text(encoding="utf-8"))
    assert nb["metadata"]["course"] == {"lang": "zh"}
    assert any("untranslated" in p for p in nbtwin.problems(zh))
    assert nbtwin.stamp(zh) == [0, 2]                  # still English: left unstamped
    _translate(zh)
    assert nbtwin.stamp(zh) == []
    assert nbtwin.problems(zh) == []
    assert nbtwin.main(["check", "--root", str(en.parents[1])]) == 0


def test_check_names_code_drift_and_sync_repairs_it(course) -> None:
    en, zh = course
    _twin_translated(en, zh)
    nb = json.loads(en.read_text(encoding="utf-8"))
    nb["cells"][1]["outputs"][0]["text"] = "changed\n"
    _write(en, nb)
    assert any("code cell 1 differs" in p and "outputs" in p for p in nbtwin.problems(zh))
    assert nbtwin.main(["check", "--root", str(en.parents[1])]) == 1
    nbtwin.sync(en, zh)
    assert nbtwin.problems(zh) == []
    assert json.loads(zh.read_text(encoding="utf-8"))["cells"][0]["source"] == ["中文"]   # Markdown kept


def test_a_changed_english_cell_shows_as_stale(course) -> None:
    en, zh = course
    _twin_translated(en, zh)
    nb = json.loads(en.read_text(encoding="utf-8"))
    nb["cells"][2]["source"] = "Other words."
    _write(en, nb)
    assert any("cells [2] stale" in p for p in nbtwin.problems(zh))


def test_sync_refuses_cells_out_of_step_naming_the_index(course, capsys) -> None:
    en, zh = course
    nbtwin.sync(en, zh)
    nb = json.loads(en.read_text(encoding="utf-8"))
    nb["cells"].insert(1, copy.deepcopy(nb["cells"][0]))
    _write(en, nb)
    assert nbtwin.main(["sync", str(en), str(zh)]) == 2
    assert "cell 1: the English cell is markdown, the twin's is code" in capsys.readouterr().err
    assert any("cell 1" in p for p in nbtwin.problems(zh))


def test_exercise_twin_is_checked_against_the_master_and_the_generator(tmp_path: Path) -> None:
    master = _nb([("markdown", "Why? <!-- BEGIN SOLUTION -->Because.<!-- END SOLUTION -->"),
                  ("code", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION")])
    en_sol = _write(tmp_path / "solutions" / "01_x.ipynb", master)
    _write(tmp_path / "exercises" / "01_x.ipynb", exercise_notebook(master))
    zh_sol = tmp_path / "solutions" / "zh" / "01_x.ipynb"
    nbtwin.sync(en_sol, zh_sol)
    _translate(zh_sol, "为什么？<!-- BEGIN SOLUTION -->因为。<!-- END SOLUTION -->")
    nbtwin.stamp(zh_sol)
    zh_ex = tmp_path / "exercises" / "zh" / "01_x.ipynb"
    from course_lib.grading.generate import generate
    generate(zh_sol.parent, zh_ex.parent)
    assert nbtwin.problems(zh_ex) == []                # en_sha1 is the master's, code the exercise's
    text = zh_ex.read_text(encoding="utf-8")
    assert MD_STUBS["zh"] in text and MD_STUB not in text   # the generator's stub in Chinese
    zh_ex.write_text(text.replace("为什么", "为何"), encoding="utf-8")
    assert any("differs from what the generator makes" in p for p in nbtwin.problems(zh_ex))


def test_latin_prose_skips_code_math_targets_acronyms_and_the_allowlist() -> None:
    text = ("见 {doc}`本章 <../../book/zh/01_flops>`，`count_flops` 给出 $6N$，GPU 上 MFU 与 FP8，"
            "[链接](../data/lab_times.json) 与 FlopCounterMode。\n```python\nfor x in range(3): pass\n```\n"
            "```{admonition} 运行环境\n:class: note\n这是 a stray English sentence.\n```")
    assert nbtwin.latin_words(text, ["FlopCounterMode"]) == ["stray", "English", "sentence"]
    assert nbtwin.latin_words("{doc}`the chapter <../book/01_flops>`") == ["the", "chapter"]


def test_a_corrupt_twin_is_named_not_a_traceback(course, capsys) -> None:
    """A twin that is not JSON (a half-written file, a merge conflict) is reported by check, naming
    the file, and sync refuses it with exit status 2 instead of a traceback."""
    en, zh = course
    _twin_translated(en, zh)
    zh.write_text("{not json", encoding="utf-8")
    assert any(str(zh) in p and "not a readable notebook" in p for p in nbtwin.problems(zh))
    assert nbtwin.main(["check", "--root", str(en.parents[1])]) == 1
    assert nbtwin.main(["sync", str(en), str(zh)]) == 2
    assert "not a readable notebook" in capsys.readouterr().err
