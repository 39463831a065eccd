"""The website without a browser (issue #21): exercises and answers, figures, search, the CJK font,
notation and number format.

The first group needs no book build: the book/_ext extensions' own functions, a three-page Sphinx
project built with and without SOLUTIONS=0 (a real sphinx-build, a few seconds), the font subset
against the book's sources. The second group reads the built site (fixture ``html_dir``, the one
book build of the session, or COURSE_HTML_DIR) with BeautifulSoup and runs the search page's own
JavaScript under node on the built data.
"""
from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup

from course_lib.report import si

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "book" / "_ext"
SEARCH_JS = ROOT / "book" / "_static" / "course_search.js"
NODE = shutil.which("node")
PARSER = "lxml" if importlib.util.find_spec("lxml") else "html.parser"
needs_node = pytest.mark.skipif(NODE is None and not os.environ.get("CI"), reason="node is not installed")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXT / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


exercises, figures, search, fonts = (_load(n) for n in
                                     ("course_exercises", "course_figures", "course_search", "course_fonts"))


def _toc_files(toc: dict) -> list[str]:
    found = []

    def walk(entries: list[dict]) -> None:
        for e in entries:
            if "file" in e:
                found.append(e["file"])
            for key in ("parts", "chapters", "sections"):
                walk(e.get(key, []))
    found.append(toc["root"])
    walk(toc.get("parts", []) + toc.get("chapters", []))
    return found


# --- exercises: answers collapsed, an instructor build without them -----------------------------

def test_solutions_switch_reads_the_environment() -> None:
    assert exercises.solutions_enabled({}) is True
    assert exercises.solutions_enabled({"SOLUTIONS": "1"}) is True
    for off in ("0", "no", "False", " off "):
        assert exercises.solutions_enabled({"SOLUTIONS": off}) is False


def test_toc_without_solutions_keeps_everything_else() -> None:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    before = _toc_files(toc)
    after = _toc_files(exercises.filter_toc(toc))
    assert any(f.startswith("solutions/") for f in before)
    assert after == [f for f in before if not f.startswith("solutions/")]
    for part in exercises.filter_toc(toc)["parts"]:
        assert part.get("chapters"), f"empty part left in the TOC: {part}"
    assert _toc_files(toc) == before, "filter_toc changed its input"


def test_solution_cells_are_collapsed_and_lose_their_markers() -> None:
    master = nbformat.read(ROOT / "solutions" / "01_flops.ipynb", as_version=4)
    shown = exercises.solution_cells(json.loads(nbformat.writes(master)))
    n_solutions = 0
    for before, after in zip(master.cells, shown["cells"]):
        if before.cell_type == "code" and "### BEGIN SOLUTION" in before.source:
            n_solutions += 1
            assert "hide-input" in after["metadata"]["tags"]
            assert after["metadata"]["mystnb"]["code_prompt_show"] == "Show answer"
            assert "SOLUTION" not in "".join(after["source"])
            assert "check(" in "".join(after["source"])       # the rest of the cell stays
        else:
            assert "hide-input" not in after.get("metadata", {}).get("tags", [])
    assert n_solutions >= 5
    written = exercises.solution_cells({"cells": [{"cell_type": "markdown", "metadata": {},
                                                   "source": "Why?\n<!-- BEGIN SOLUTION -->\nBecause.\n<!-- END SOLUTION -->"}]})
    assert written["cells"][0]["source"] == "Why?\n\n\n:::{dropdown} Show answer\nBecause.\n:::\n\n"
    # a Chinese twin's toggles speak Chinese
    zh = exercises.solution_cells(json.loads(nbformat.writes(master)), "zh")
    prompts = {c["metadata"]["mystnb"]["code_prompt_show"] for c in zh["cells"] if "mystnb" in c.get("metadata", {})}
    assert prompts == {"显示答案"}


MINI_CONF = """
import sys
sys.path.insert(0, {ext!r})
extensions = ["myst_nb", "sphinx_external_toc", "sphinx_design", "sphinx_togglebutton", "course_exercises"]
external_toc_path = "_toc.yml"
external_toc_exclude_missing = True
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["_build"]
"""
MINI_TOC = {"format": "jb-book", "root": "index",
            "parts": [{"caption": "Chapters", "chapters": [{"file": "ch"}]},
                      {"caption": "Solutions", "chapters": [{"file": "solutions/s1"}]}]}


def _mini_book(root: Path) -> None:
    """A chapter that links its exercises and answers, a landing page with a Markdown link to the
    solutions, a master notebook (one code answer, one written answer) and its student version."""
    (root / "solutions").mkdir(parents=True)
    (root / "exercises").mkdir()
    (root / "conf.py").write_text(MINI_CONF.format(ext=str(EXT)), encoding="utf-8")
    (root / "_toc.yml").write_text(yaml.safe_dump(MINI_TOC), encoding="utf-8")
    (root / "index.md").write_text("# Home\n\nSee [the solutions](solutions/s1.ipynb). Answers: [](solutions/s1.ipynb)\n", encoding="utf-8")
    (root / "ch.md").write_text("# Chapter\n\nThe {download}`exercises <exercises/s1.ipynb>`{answers}`s1` "
                                "grade your work; {doc}`all answers <solutions/s1>`.\n", encoding="utf-8")
    for folder, body in (("solutions", "### BEGIN SOLUTION\nanswer_value = 2 + 2\n### END SOLUTION\nprint(answer_value)"),
                         ("exercises", "raise NotImplementedError")):
        nb = nbformat.v4.new_notebook()
        nb.metadata.update(kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
                           language_info={"name": "python"})
        nb.cells = [nbformat.v4.new_markdown_cell("# Exercises\n\n**Q2.** Why?\n\n<!-- BEGIN SOLUTION -->\n"
                                                  "Because four is even.\n<!-- END SOLUTION -->"),
                    nbformat.v4.new_code_cell(body)]
        nbformat.write(nb, root / folder / "s1.ipynb")


def _sphinx(root: Path, out: str, solutions: str) -> Path:
    env = {**os.environ, "SOLUTIONS": solutions}
    run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", "-d", str(root / f"_build/{out}.doctrees"),
                          str(root), str(root / "_build" / out)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"sphinx-build (SOLUTIONS={solutions}) failed:\n{run.stdout}\n{run.stderr}"
    return root / "_build" / out


def test_instructor_build_has_no_solutions_and_no_dangling_links(tmp_path: Path) -> None:
    """A real Sphinx build with SOLUTIONS=0 (warnings are errors, so a dangling link fails it) of
    a tiny book; the full build's toggles are checked on the book itself, below."""
    _mini_book(tmp_path)
    bare = _sphinx(tmp_path, "bare", "0")
    assert not (bare / "solutions").exists() and not list(bare.rglob("_sources/solutions/*"))
    html = "".join(p.read_text(encoding="utf-8") for p in bare.glob("*.html"))
    assert "solutions/s1" not in html and "worked answers" not in html
    chapter = BeautifulSoup((bare / "ch.html").read_text(encoding="utf-8"), "html.parser")
    assert "all answers" in chapter.get_text()                 # the text stays, the link goes
    (download,) = chapter.select("a.download")
    student = (bare / download["href"]).read_text(encoding="utf-8")
    assert "NotImplementedError" in student and "answer_value" not in student


# --- figures --------------------------------------------------------------------------------------

def test_the_course_map_lists_every_chapter_with_its_four_artefacts() -> None:
    """The home page's course map grows with the TOC: a chapter added to book/_toc.yml without
    its row (chapter, lab, solutions, student notebook) on book/index.md fails here."""
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    chapters = [c["file"].removeprefix("book/") for part in toc["parts"] if part["caption"] == "Chapters"
                for c in part["chapters"]]
    index = (ROOT / "book" / "index.md").read_text(encoding="utf-8")
    for n, name in enumerate(chapters, start=1):
        row = next((line for line in index.splitlines() if line.startswith(f"| {n} | ")), "")
        for target in (f"({name}.md)", f"(../notebooks/{name}_lab.ipynb)", f"(../solutions/{name}.ipynb)",
                       f"<../exercises/{name}.ipynb>"):
            assert target in row, f"book/index.md: course map row {n} lacks {target}"


def test_the_course_map_shows_each_labs_measured_time(html_dir: Path) -> None:
    """Issue #34: the course map's lab-time column holds each lab's time as make bench measured it
    (data/lab_times.json), not one budget repeated; the student notebook reads as its file name."""
    labtimes = _load("course_labtimes")
    data = labtimes.lab_times()
    soup = BeautifulSoup((html_dir / "book" / "index.html").read_text(encoding="utf-8"), PARSER)
    table = next(t for t in soup.select("main table") if "lab time" in t.get_text())
    heads = [th.get_text(strip=True) for th in table.select("thead th")]
    shown = []
    for tr in table.select("tbody tr"):
        cells = [td.get_text(" ", strip=True) for td in tr.find_all("td")]
        row = dict(zip(heads, cells))
        lab = tr.find("a", href=re.compile(r"notebooks/\w+_lab\.html"))["href"].split("/")[-1].removesuffix(".html")
        assert row["lab time"] == labtimes.shown(data["seconds"][lab]), f"{lab}: {row['lab time']!r}"
        assert re.fullmatch(r"\d\d_\w+\.ipynb", row["student notebook"]), row["student notebook"]
        shown.append(row["lab time"])
    assert len(shown) == len(data["seconds"]) and len(set(shown)) > 1, shown
    page = soup.get_text(" ", strip=True)
    assert data["machine"] in page and data["date"] in page


def test_a_plot_is_described_by_its_own_code() -> None:
    code = ('fig, ax = plots.figure()\nax.plot(x, y, label="measured")\nax.plot(x, z, label=f"theory, n={n}")\n'
            'ax.set(xlabel="ranks $n$", ylabel="error", title="FP16 all-reduce")\nplt.show()')
    caption, alt = figures.describe(code)
    assert caption == "FP16 all-reduce: error against ranks n."
    assert alt.endswith("Series: measured.")         # an f-string's placeholders never become "…"
    assert figures.describe("gantt.draw(tl, ax, unit='ms')")[0].startswith("Timeline of a pipeline")
    assert figures.describe("fig, ax = plots.figure()\nax.plot(x, y)\nplt.show()") is None
    assert figures.describe("not python (") is None


# --- search ---------------------------------------------------------------------------------------

def test_chinese_terms_are_indexed_by_their_pieces() -> None:
    assert search.cjk_pieces("全分片数据并行 (FSDP)") [:3] == ["全分", "分片", "片数"]
    assert "数据并行" in search.cjk_pieces("全分片数据并行")
    words = search.SearchEnglishCJK({}).split("inference (推理) cost, 全分片数据并行")
    assert {"inference", "推理", "数据并行", "全分片数据并行"} <= set(words)


def _node_search(script: Path, data: list | Path, queries: list[str], zh: dict | None = None,
                 edition: str | None = None) -> dict[str, list]:
    """``courseSearch`` in Node for each query, best first, over ``data``: a list of sections (with
    ``zh`` as COURSE_ZH), or the built course_sections.js, which defines both; searched from a page
    of ``edition`` ("zh", "en") or from none."""
    program = """
const fs = require("fs"), vm = require("vm");
const {courseSearch} = require(process.argv[1]);
let data = process.argv[2], zh = JSON.parse(process.argv[4]), edition = JSON.parse(process.argv[5]);
if (data.startsWith("[")) data = JSON.parse(data);
else {
  const ctx = {};
  vm.runInNewContext(fs.readFileSync(data, "utf8") + ";this.s = COURSE_SECTIONS; this.z = COURSE_ZH;", ctx);
  [data, zh] = [ctx.s, ctx.z];
}
const out = {};
for (const q of JSON.parse(process.argv[3])) out[q] = courseSearch(q, data, zh, edition).reverse();
console.log(JSON.stringify(out));
"""
    arg = json.dumps(data, ensure_ascii=False) if isinstance(data, list) else str(data)
    run = subprocess.run([NODE or "node", "-e", program, str(script), arg, json.dumps(queries, ensure_ascii=False),
                          json.dumps(zh or {}, ensure_ascii=False), json.dumps(edition)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@needs_node
def test_section_search_ranks_the_section_about_the_phrase_first() -> None:
    sections = [
        ["book/02_scaling", "Chinchilla scaling", "loss", "The loss", "loss " * 30 + "scaling " * 30],
        ["book/06_stability", "Stability", "loss-scaling", "Loss scaling", "Multiply the loss by S. <b>"],
        ["book/glossary", "Glossary", "term-over-training", "Over-training", "to save inference (推理) cost"],
    ]
    found = _node_search(SEARCH_JS, sections, ["loss scaling", "推理", "nothing-like-this"])
    best = found["loss scaling"][0]
    assert best[0] == "book/06_stability" and best[1] == "Stability &gt; Loss scaling" and best[2] == "#loss-scaling"
    assert "&lt;b&gt;" in best[3]                      # snippets are escaped before Sphinx inserts them
    assert [r[0] for r in found["推理"]] == ["book/glossary"] and "推理" in found["推理"][0][3]
    assert found["nothing-like-this"] == []


@needs_node
def test_each_edition_searches_its_own_pages_first() -> None:
    """Issue #35: a Chinese page's search box sends edition=zh, an English page's edition=en
    (course_editions.js); that edition's sections come first, each edition in its own order, and the
    other edition's still follow (an untranslated chapter is found from a Chinese page)."""
    sections = [
        ["book/05_pipeline", "Pipeline parallelism", "bubble", "The bubble", "1F1B bubble " * 4],
        ["book/zh/05_pipeline", "流水线并行", "气泡", "气泡", "1F1B 气泡 " * 3],
        ["book/08_moe", "MoE", "cap", "Capacity", "1F1B twice, 1F1B"],
        ["book/zh/index", "预训练，实测", "map", "课程地图", "1F1B 一次"],
    ]
    order = {ed: [r[0] for r in _node_search(SEARCH_JS, sections, ["1F1B"], edition=ed)["1F1B"]]
             for ed in (None, "zh", "en")}
    assert order[None] == ["book/05_pipeline", "book/zh/05_pipeline", "book/08_moe", "book/zh/index"], order
    assert order["zh"] == ["book/zh/05_pipeline", "book/zh/index", "book/05_pipeline", "book/08_moe"], order
    assert order["en"] == ["book/05_pipeline", "book/08_moe", "book/zh/05_pipeline", "book/zh/index"], order
    editions_js = (ROOT / "book" / "_static" / "course_editions.js").read_text(encoding="utf-8")
    assert 'field.name = "edition"' in editions_js and "data-edition" in editions_js
    assert 'get("edition")' in SEARCH_JS.read_text(encoding="utf-8")


# --- CJK font, number format ----------------------------------------------------------------------

def test_font_subset_covers_every_chinese_character_of_the_book() -> None:
    used = fonts.book_cjk_chars()
    assert "推" in used and len(used) > 20
    missing = used - fonts.font_chars(fonts.SUBSET)
    assert not missing, f"the CJK font lacks {''.join(sorted(missing))}: run python book/_ext/course_fonts.py"
    licence = (fonts.SUBSET.parent / "LICENSE.md").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in licence and "WenQuanYi" in licence
    css = (ROOT / "book" / "_static" / "course.css").read_text(encoding="utf-8")
    assert f'url("fonts/{fonts.SUBSET.name}")' in css and '"Course CJK"' in css


@pytest.mark.parametrize(("x", "text"), [(3.15e23, "3.15 × 10²³"), (3.8e25, "3.8 × 10²⁵"), (9.996e24, "1 × 10²⁵"),
                                         (-1.63e24, "-1.63 × 10²⁴"), (4.56e17, "4.56 × 10¹⁷"), (9.99e14, "999T"),
                                         (1.56e13, "15.6T"), (7.5e9, "7.5B"), (12, "12"), (float("inf"), "inf")])
def test_si_quotes_flop_counts_as_powers_of_ten(x: float, text: str) -> None:
    assert si(x) == text


# --- the built site -------------------------------------------------------------------------------

@functools.cache
def _soup(path: Path) -> BeautifulSoup:
    """A parsed page (parsed once per session; the tests below only read it)."""
    return BeautifulSoup(path.read_text(encoding="utf-8"), PARSER)


def _pages(html_dir: Path) -> list[Path]:
    return [p for p in sorted(html_dir.rglob("*.html"))
            if not p.relative_to(html_dir).as_posix().startswith(("_static/", "_sources/"))]


def _words(text: str) -> int:
    """Words of a caption or alt text: space-separated ones, each Chinese character counting as one
    (Chinese is written without spaces)."""
    cjk = re.findall(r"[\u3400-\u9fff]", text)
    return len(re.sub(r"[\u3400-\u9fff]", " ", text).split()) + len(cjk)


def test_every_figure_is_numbered_captioned_and_described(html_dir: Path) -> None:
    """Rendered, as a reader sees them: a numbered caption and alt text on every figure, with the
    glued numbers filled in (no "…" or "{name}" left, no unresolved glue role), no caption twice
    (tests/test_captions.py checks the same on the sources, without a build)."""
    bad, n, seen = [], 0, {}
    # "{n}" left by an unformatted string, not a TeX group ("\\text{min}", "C^{a}") of math
    placeholder = re.compile(r"…|(?<![\w^_\\])\{[A-Za-z_]\w*(?::[^}]*)?\}|\{glue")
    for page in _pages(html_dir):
        for img in _soup(page).select("main img"):
            n += 1
            where = f"{page.relative_to(html_dir)}: {img.get('src', '')[-20:]}"
            alt = img.get("alt", "").strip()
            if _words(alt) < 4 or re.search(r"(_images/|\.png|\.svg|^[0-9a-f]{20,})", alt):
                bad.append(f"{where}: alt text {alt[:60]!r}")
            if placeholder.search(alt):
                bad.append(f"{where}: alt text holds a placeholder: {alt[:100]!r}")
            figure = img.find_parent("figure")
            caption = figure.find("figcaption") if figure else None
            if caption is None or not caption.select_one(".caption-number") or not figure.get("id"):
                bad.append(f"{where}: no numbered caption / label")
                continue
            text = caption.select_one(".caption-text")
            text = (text or caption).get_text(" ", strip=True)
            if _words(text) < 4:
                bad.append(f"{where}: caption {text!r}")
            if placeholder.search(text):
                bad.append(f"{where}: caption holds a placeholder: {text[:100]!r}")
            # a Chinese twin (book/zh/) shows its English page's very figures: the same caption there is by design
            twin = re.sub(r"^(book|notebooks|solutions)/zh/", r"\1/", str(page.relative_to(html_dir)))
            if text in seen and seen[text].split(":")[0] != twin:
                bad.append(f"{where}: the same caption as {seen[text]}: {text[:80]!r}")
            seen.setdefault(text, where)
        for figure in _soup(page).select("main figure"):
            if figure.find("img") is None:        # a table a captioned cell printed beside its plot
                bad.append(f"{page.relative_to(html_dir)}: a figure without an image: "
                           f"{figure.get_text(' ', strip=True)[:60]!r}")
    assert n > 30, f"only {n} images found"
    assert not bad, "\n".join(bad)


def test_chapter_exercise_links_open_the_student_notebook(html_dir: Path) -> None:
    for page in sorted((html_dir / "book").glob("[01][0-9]_*.html")):
        soup = _soup(page)
        links = [a for a in soup.select("main a.download") if a["href"].endswith(f"/{page.stem}.ipynb")]
        assert links, (f"{page.name}: no download link to exercises/{page.stem}.ipynb; write the chapter's link as "
                       f"{{download}}`exercises <../exercises/{page.stem}.ipynb>`{{answers}}`{page.stem}`")
        notebook = (page.parent / links[0]["href"]).read_text(encoding="utf-8")
        assert "NotImplementedError" in notebook and "### BEGIN SOLUTION" not in notebook, page.name
        answers = [a["href"] for a in soup.select("main .course-answers a")]
        assert answers == [f"../solutions/{page.stem}.html"], f"{page.name}: {answers}"


def test_worked_answers_sit_in_collapsed_toggles(html_dir: Path) -> None:
    for page in sorted((html_dir / "solutions").glob("*.html")):
        soup = _soup(page)
        master = nbformat.read(ROOT / "solutions" / f"{page.stem}.ipynb", as_version=4)
        answers = [c for c in master.cells if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source]
        toggles = [d for d in soup.select("main details") if "Show answer" in d.summary.get_text()]
        assert len(toggles) == len(answers), f"{page.name}: {len(toggles)} toggles for {len(answers)} answers"
        assert not any(d.has_attr("open") for d in toggles), page.name
        assert "BEGIN SOLUTION" not in soup.get_text(), page.name
        outside = copy.copy(soup.select_one("main"))
        for d in outside.select("details"):
            d.decompose()
        prompts = re.sub(r"[`$*]", "", "".join(c.source for c in master.cells if c.cell_type == "markdown"))
        for cell in answers:                                # no line of an answer shows outside a toggle
            block = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            for line in (ln.strip() for ln in block.splitlines()):
                if len(line) > 12 and line not in prompts:
                    assert line not in outside.get_text(), f"{page.name}: answer line {line!r} is visible"


def _search_index(html_dir: Path) -> dict:
    text = (html_dir / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def test_search_index_finds_chinese_terms(html_dir: Path) -> None:
    index = _search_index(html_dir)
    glossary = index["docnames"].index("book/glossary")
    for term in ("推理", "数据并行", "缩放定律"):
        docs = index["terms"].get(term)
        docs = [docs] if isinstance(docs, int) else (docs or [])
        assert glossary in docs, f"{term!r} does not find the glossary"


def _chinese_first(results: list) -> bool:
    """A Chinese query's results: the sections that hold the word itself (the Chinese edition's
    pages, the glossary's entry) come first, the glossary among them, and only then the English
    sections found through the glossary's English term."""
    own = [r[0] for r in results if r[4] >= 1000]    # course_search.js: 1000 per word matched itself
    # (the Chinese edition: its pages and its notebook twins)
    return (results[:len(own)] == [r for r in results if r[4] >= 1000] and "book/glossary" in own
            and (re.match(r"(book|notebooks|solutions)/zh/", own[0]) is not None or own[0] == "book/glossary"))


@needs_node
def test_search_by_section_on_the_built_site(html_dir: Path) -> None:
    data = html_dir / "_static" / search.DATA_FILE
    assert data.is_file(), "course_sections.js was not written"
    search_page = (html_dir / "search.html").read_text(encoding="utf-8")
    assert "course_search.js" in search_page and search.DATA_FILE in search_page
    found = _node_search(html_dir / "_static" / "course_search.js", data, ["loss scaling", "推理", "bubble"])
    assert found["loss scaling"][0][0] == "book/06_stability", [r[:3] for r in found["loss scaling"][:5]]
    assert found["loss scaling"][0][2] != "#", "the best hit should be a section, not a whole page"
    assert found["推理"] and _chinese_first(found["推理"]), [r[0] for r in found["推理"][:8]]
    assert found["bubble"][0][0].endswith("05_pipeline") or found["bubble"][0][0].endswith("05_pipeline_lab")
    assert all(r[3] for r in found["bubble"]), "every section result carries a snippet"


@needs_node
def test_search_shows_titles_tolerates_typos_and_finds_chapters_in_chinese(html_dir: Path) -> None:
    """Issue #34: a result shows section titles, never an internal label ("[sec-05-split]" was one);
    a typo of a long word still finds it; a Chinese term finds the chapter sections about its
    English term (through the glossary), after the sections that hold the word itself: the
    glossary's own entry and the Chinese edition's pages."""
    data = html_dir / "_static" / search.DATA_FILE
    found = _node_search(html_dir / "_static" / "course_search.js", data,
                         ["气泡", "数据并行", "stragler", "pipline bubble", "bubble", "xqzvwk"])
    label = re.compile(r"\b(sec|fig|eq|tab)-[0-9a-z]+(-[0-9a-z]+)+\b")
    for query, results in found.items():
        for r in results:
            assert not label.search(r[1] + " " + r[3]), f"{query!r}: {r[1]!r} shows a label: {r[3]!r}"
    glossary_bubble = next(r for r in found["bubble"] if r[0] == "book/glossary")
    assert "[The bubble: fill, drain" in glossary_bubble[3], glossary_bubble[3]    # a {ref} reads as its title
    for zh, chapter in (("气泡", "book/05_pipeline"), ("数据并行", "book/04_dp_fsdp")):
        docs = [r[0] for r in found[zh]]
        assert _chinese_first(found[zh]) and chapter in docs, f"{zh}: {docs[:8]}"
    assert any(r[0] == "book/10_pipeline_rl" for r in found["stragler"][:5]), [r[:3] for r in found["stragler"][:5]]
    assert found["pipline bubble"][0][0] in ("book/05_pipeline", "notebooks/05_pipeline_lab"), found["pipline bubble"][:3]
    assert found["xqzvwk"] == []


@needs_node
def test_typo_distance_is_bounded() -> None:
    """Edit distance 1 for 5 to 7 letters (a swap of neighbours is 1), 2 from 8; shorter words
    match only as typed."""
    sections = [["book/10", "RL", "s", "Stragglers", "a straggler waits; the bubble"]]
    queries = ["stragler", "strgglr", "bubbel", "buble", "bxbxle", "bubl", "strxgglxr", "strxgxlxr"]
    found = _node_search(SEARCH_JS, sections, queries)
    assert [q for q in queries if found[q]] == ["stragler", "bubbel", "buble", "strxgglxr"], found


def test_site_ships_the_cjk_font_for_every_character_it_shows(html_dir: Path) -> None:
    font = html_dir / "_static" / "fonts" / fonts.SUBSET.name
    assert font.is_file()
    shown = set()
    for page in _pages(html_dir):
        shown |= set(fonts.CJK.findall(_soup(page).get_text()))
    assert "推" in shown
    missing = shown - fonts.font_chars(font)
    assert not missing, f"characters the site shows but its font lacks: {''.join(sorted(missing))}"


def test_notation_page_is_in_the_book(html_dir: Path) -> None:
    page = _soup(html_dir / "book" / "notation.html")
    symbols = {td.get_text(" ", strip=True) for td in page.select("main table tbody tr td:first-child")}
    assert len(symbols) >= 20
    index = (html_dir / "book" / "index.html").read_text(encoding="utf-8")
    assert "notation.html" in index, "the notation page is not in the navigation"


def test_flop_counts_print_in_one_format(html_dir: Path) -> None:
    text = copy.copy(_soup(html_dir / "book" / "01_flops.html").select_one("main"))
    for block in text.select("div.cell_input"):
        block.decompose()
    prose = re.sub(r"\s+", " ", text.get_text(" "))
    assert "× 10²³ FLOP" in prose and "× 10²⁵" in prose
    assert not re.search(r"\d\.\d+e\+\d+ FLOP", prose), "a FLOP count printed as 1.23e+24"
    scaling = copy.copy(_soup(html_dir / "book" / "02_scaling.html").select_one("main"))
    for block in scaling.select("div.cell_input"):
        block.decompose()
    printed = re.findall(r"\d(?:\.\d+)?e\+\d+", scaling.get_text(" "))
    assert not printed, f"chapter 2 prints compute as {printed[:3]}, not with report.si"


def test_every_figure_can_be_cross_referenced(html_dir: Path) -> None:
    """Each figure's label is in objects.inv, so {numref}`fig-book-07_fp16-1` resolves."""
    import posixpath

    from sphinx.util.inventory import InventoryFile
    with (html_dir / "objects.inv").open("rb") as f:
        labels = InventoryFile.load(f, "", posixpath.join).get("std:label", {})
    ids = {fig["id"] for page in _pages(html_dir) for fig in _soup(page).select("main figure[id]")
           if fig.find("img") is not None}
    targets = {entry[2].split("#")[-1] for name, entry in labels.items() if name.startswith("fig-")}
    assert len(ids) > 30 and ids <= targets, f"figures without a label: {sorted(ids - targets)[:5]}"


# --- editions (issue #35): a language switch on every page ---------------------------------------

def test_every_page_has_a_language_switch_that_resolves(html_dir: Path, toc_pages: list[str]) -> None:
    """Each TOC page links its twin in the other edition (or, untranslated, the Chinese landing
    page); every switch's target exists in the build, and a Chinese page declares its language."""
    problems, twins = [], 0
    for name in toc_pages:
        path = html_dir / f"{name}.html"
        soup = _soup(path)
        link = soup.select_one("main p.course-lang-switch a")
        if link is None:
            problems.append(f"{name}: no language switch")
            continue
        if not (path.parent / link["href"].split("#")[0]).resolve().is_file():
            problems.append(f"{name}: the switch links {link['href']}, which is not in the build")
        twins += "course-lang-twin" in link.get("class", [])
        if name.startswith("book/zh/") and soup.html.get("lang") != "zh-CN":
            problems.append(f"{name}: <html lang={soup.html.get('lang')!r}>, not zh-CN")
    assert not problems, "\n".join(problems)
    assert twins >= 4, "fewer than two pairs of twin pages link each other"
