"""The two editions (COURSE_DESIGN.md, "Editions"; issue #35) cannot drift: source-level checks.

A Chinese page ``book/zh/NN.md`` is the twin of ``book/NN.md``. It must carry the same section
labels (prefixed ``zh-``), run the same code cells in the same order (so the same numbers are
glued and the same figures drawn: nothing is computed twice or typed), paste the same glue keys,
show the same calculators, keep its cross-references inside its edition, and use the Chinese form
of each glossary term that book/zh/terms.yml gives. The switch itself is unit-tested here; the
built site's switches are checked in tests/test_site_static.py. No build: < 1 s.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
ZH = BOOK / "zh"
TWINS = sorted(ZH.glob("*.md"))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BOOK / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


editions = _load("course_editions")
fonts = _load("course_fonts")

LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n.*?^```$", re.S | re.M)
GLUE = re.compile(r"\{glue(?::text|:md|:any|:figure)?\}`([^`:]+)")
CALC = re.compile(r'data-calc="([^"]+)"')
REF = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([^`>]+)>?`")
DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")
MD_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _english(page: Path) -> Path:
    return BOOK / page.name


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _labels(page: Path) -> list[str]:
    return LABEL.findall(_text(page))


def _twin_names() -> set[str]:
    return {p.stem for p in TWINS}


def _all_labels() -> dict[str, str]:
    """label -> page stem, over both editions."""
    out = {}
    for page in [*sorted(BOOK.glob("*.md")), *TWINS]:
        for label in _labels(page):
            out[label] = ("zh/" if page.parent == ZH else "") + page.stem
    return out


def test_there_are_twins_and_each_has_an_english_page() -> None:
    assert {"index", "01_flops"} <= _twin_names()
    orphans = [p.name for p in TWINS if not _english(p).is_file()]
    assert not orphans, f"book/zh pages without an English original: {orphans}"


def test_every_twin_is_in_the_toc() -> None:
    toc = _text(BOOK / "_toc.yml")
    missing = [p.stem for p in TWINS if f"file: book/zh/{p.stem}\n" not in toc]
    assert not missing, f"book/zh pages missing from book/_toc.yml: {missing}"


@pytest.mark.parametrize("page", TWINS, ids=lambda p: p.name)
def test_twin_has_the_same_section_labels_in_the_same_order(page: Path) -> None:
    english = _labels(_english(page))
    assert _labels(page) == [editions.zh_label(x) for x in english], (
        f"book/zh/{page.name}: its labels must be the English page's with the prefix "
        f"{editions.LABEL_PREFIX!r}, in the same order")


@pytest.mark.parametrize("page", TWINS, ids=lambda p: p.name)
def test_twin_runs_the_same_code_cells(page: Path) -> None:
    """Same code, same order: every glued number and every figure comes from one computation
    (jupyter-cache keys a notebook by its code cells, so the build even runs it once)."""
    zh, en = CODE_CELL.findall(_text(page)), CODE_CELL.findall(_text(_english(page)))
    assert len(zh) == len(en), f"book/zh/{page.name}: {len(zh)} code cells, the English page has {len(en)}"
    for k, (a, b) in enumerate(zip(zh, en), 1):
        assert a == b, f"book/zh/{page.name}: code cell {k} differs from the English page's; copy it unchanged"


ZH_CAPTION = re.compile(r"\s*```\{container\} " + editions.ZH_CAPTION_CLASS + r"\n(.+?)\n```$", re.M)
ZH_ALT = re.compile(r"\s*```\{container\} " + editions.ZH_ALT_CLASS + r"\n(.+?)\n```$", re.M)


@pytest.mark.parametrize("page", TWINS, ids=lambda p: p.name)
def test_each_captioned_figure_has_its_chinese_caption_right_after_the_cell(page: Path) -> None:
    """The cell keeps the English caption (byte for byte, see above); the Chinese one is a
    ``{container} zh-caption`` block of one paragraph right after it, which course_editions moves
    into the figure, and where the English cell writes its own alt text a ``zh-alt`` block follows.
    No block stands anywhere else (the build would warn), none is empty."""
    text, problems = _text(page), []
    cells = list(CODE_CELL.finditer(text))
    blocks = text.count("{container} " + editions.ZH_CAPTION_CLASS) + text.count("{container} " + editions.ZH_ALT_CLASS)
    captioned = [m for m in cells if re.search(r"^mystnb:\n(?:  .*\n)*?  figure:\n(?:    .*\n)*?    caption:", m.group(0), re.M)]
    expected = 0
    for k, m in enumerate(captioned, 1):
        after = ZH_CAPTION.match(text, m.end() + 1)
        if after is None or not CJK_RUN.search(after.group(1)) or "\n\n" in after.group(1):
            problems.append(f"captioned figure {k}: no one-paragraph Chinese zh-caption block right after its cell")
            continue
        expected += 1
        if re.search(r"^  image:\n(?:    .*\n)*?    alt:", m.group(0), re.M):
            alt = ZH_ALT.match(text, after.end() + 1)
            expected += 1
            if alt is None or not CJK_RUN.search(alt.group(1)) or "\n\n" in alt.group(1):
                problems.append(f"captioned figure {k}: its cell writes an alt text, no Chinese zh-alt block after the caption")
    assert not problems and blocks == expected, (
        f"book/zh/{page.name}: {problems or f'{blocks} zh-caption/zh-alt blocks, {expected} expected'}")


@pytest.mark.parametrize("page", TWINS, ids=lambda p: p.name)
def test_twin_pastes_the_same_glued_numbers_and_calculators(page: Path) -> None:
    zh, en = _text(page), _text(_english(page))
    # a word the code decides (a verdict, a list's "and") is glued twice by the shared cell, once in
    # English and once in Chinese as KEY_zh: the twin pastes KEY_zh where the English page pastes KEY
    zh_keys = {k.removesuffix("_zh") for k in GLUE.findall(zh)}
    en_keys = set(GLUE.findall(en))
    assert zh_keys == en_keys, (
        f"book/zh/{page.name}: glue keys differ: only in zh {sorted(zh_keys - en_keys)}, "
        f"only in English {sorted(en_keys - zh_keys)}")
    for key in {k for k in GLUE.findall(zh) if k.endswith("_zh")}:
        assert f'glue("{key}"' in en, f"book/zh/{page.name}: {key} is not glued by the English page's cells"
    assert CALC.findall(zh) == CALC.findall(en), f"book/zh/{page.name}: not the same live calculators"


@pytest.mark.parametrize("page", TWINS, ids=lambda p: p.name)
def test_twin_links_stay_in_its_edition(page: Path) -> None:
    """A reference goes to the Chinese twin where there is one, to the English page where not.
    Code cells are left out: they are the English page's, byte for byte, and so is what they print
    (the claim tables' references are the English ledger's)."""
    labels, twins, text = _all_labels(), _twin_names(), CODE_CELL.sub("", _text(page))
    problems = []
    for label in REF.findall(text):
        where = labels.get(label)
        if label.startswith("fig-"):
            continue
        if where is None:
            problems.append(f"{{ref}} to unknown label {label}")
        elif not where.startswith("zh/") and where in twins:
            problems.append(f"{{ref}} {label} is English; use {editions.zh_label(label)}")
    for target in DOC.findall(text) + MD_LINK.findall(text):
        name = Path(target).stem
        if target.startswith("../") and not target.startswith("../../") and name in twins:
            problems.append(f"link {target} goes to the English page; the twin is {name}.md")
    assert not problems, f"book/zh/{page.name}: " + "; ".join(problems)


# --- terms --------------------------------------------------------------------------------------

def _glossary() -> dict[str, str]:
    """English glossary term -> its entry's text."""
    body = _text(BOOK / "glossary.md").split("```{glossary}")[1].split("\n```")[0]
    entries = re.split(r"\n(?=\S)", body.strip())
    return {e.split("\n", 1)[0].strip(): e for e in entries}


TERMS = yaml.safe_load((ZH / "terms.yml").read_text(encoding="utf-8"))


def test_every_glossary_term_has_its_chinese_form() -> None:
    glossary = _glossary()
    assert set(TERMS) == set(glossary), (f"book/zh/terms.yml: missing {sorted(set(glossary) - set(TERMS))}, "
                                         f"not in the glossary {sorted(set(TERMS) - set(glossary))}")
    for term, zh in TERMS.items():
        given = CJK_RUN.findall(glossary[term])
        if given:   # the English glossary already names a Chinese term: the editions agree on it
            missing = [run for run in CJK_RUN.findall(zh) if run not in glossary[term]]
            assert not missing, f"{term}: terms.yml says {zh!r}, the glossary entry says {given}"


def test_each_translated_chapter_uses_the_chinese_form_of_its_terms() -> None:
    labels, glossary = _all_labels(), _glossary()
    checked, problems = 0, []
    for term, zh in TERMS.items():
        for label in re.findall(r"sec-[\w-]+", glossary[term]):
            page = labels.get(editions.zh_label(label))
            if page is None:
                continue                    # that chapter is not translated yet
            checked += 1
            if zh not in _text(BOOK / f"{page}.md"):
                problems.append(f"book/{page}.md defines {term!r} but never writes {zh!r}")
    assert checked >= 5 and not problems, problems


# --- font ---------------------------------------------------------------------------------------

def test_the_font_subset_covers_the_chinese_edition() -> None:
    used = set().union(*(set(fonts.CJK.findall(_text(p))) for p in TWINS))
    assert len(used) > 300
    assert used <= fonts.book_cjk_chars(), "course_fonts.SOURCES does not read book/zh/"
    missing = used - fonts.font_chars(fonts.SUBSET)
    assert not missing, f"the CJK font lacks {''.join(sorted(missing))}: run python book/_ext/course_fonts.py"


# --- the switch (unit) --------------------------------------------------------------------------

DOCS = frozenset({"book/index", "book/01_flops", "book/02_scaling", "book/zh/index", "book/zh/01_flops",
                  "notebooks/01_flops_lab"})


def test_twin_maps_both_ways_and_only_to_existing_pages() -> None:
    assert editions.twin("book/01_flops", DOCS) == "book/zh/01_flops"
    assert editions.twin("book/zh/01_flops", DOCS) == "book/01_flops"
    assert editions.twin("book/02_scaling", DOCS) is None
    assert editions.twin("notebooks/01_flops_lab", DOCS) is None


def test_notebook_twins_are_twins_too() -> None:
    """A lab or a worked exercise set has its Chinese twin under zh/ (course_lib/nbtwin.py)."""
    docs = DOCS | {"notebooks/zh/01_flops_lab", "solutions/01_flops", "solutions/zh/01_flops"}
    assert editions.twin("notebooks/01_flops_lab", docs) == "notebooks/zh/01_flops_lab"
    assert editions.twin("notebooks/zh/01_flops_lab", docs) == "notebooks/01_flops_lab"
    assert editions.twin("solutions/zh/01_flops", docs) == "solutions/01_flops"
    assert editions.is_zh("solutions/zh/01_flops") and not editions.is_zh("solutions/01_flops")


def test_switch_links_the_twin_at_the_same_section_or_the_chinese_home() -> None:
    def uri(target: str) -> str:
        return f"URI({target})"
    labels = {"sec-01-mfu": ("book/01_flops", "mfu-and-hfu", "MFU and HFU"),
              "zh-sec-01-mfu": ("book/zh/01_flops", "mfu-与-hfu", "MFU 与 HFU"),
              "sec-02-fit": ("book/02_scaling", "fit", "Fit")}
    to_zh = editions.section_map("book/01_flops", "book/zh/01_flops", labels)
    assert to_zh == {"mfu-and-hfu": "mfu-与-hfu"}
    assert editions.section_map("book/zh/01_flops", "book/01_flops", labels) == {"mfu-与-hfu": "mfu-and-hfu"}
    en = editions.switch_html("book/01_flops", DOCS, uri, to_zh)
    assert 'href="URI(book/zh/01_flops)"' in en and ">中文</a>" in en and "mfu-与-hfu" in en
    zh = editions.switch_html("book/zh/01_flops", DOCS, uri)
    assert 'href="URI(book/01_flops)"' in zh and ">English</a>" in zh
    for untranslated in ("book/02_scaling", "notebooks/01_flops_lab"):
        page = editions.switch_html(untranslated, DOCS, uri)
        assert 'href="URI(book/zh/index)"' in page and "尚未翻译" in page


def test_the_students_handout_rewrites_the_chinese_home_page_too() -> None:
    """`make handout` gives students a Chinese home page without the instructor's rows or answers;
    the words it writes are in the font subset (course_fonts reads handout.py)."""
    from course_lib.grading.handout import student_index_zh
    text = student_index_zh(_text(ZH / "index.md"))
    assert "[练习](../../exercises/zh/01_flops.ipynb)" in text and "`make check`" in text   # the Chinese twin
    assert "答案" not in text and "solutions/" not in text
    assert set(fonts.CJK.findall(text)) <= fonts.font_chars(fonts.SUBSET)


def test_a_figure_named_by_the_english_cell_gets_the_zh_prefix_on_the_twin() -> None:
    """The twin runs the English cell, name included: its figure label must not collide."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    def page(docname: str) -> nodes.document:
        settings = get_default_settings(Parser)
        settings.env = SimpleNamespace(docname=docname)
        doc = new_document(docname, settings)
        for name in ("fig-04-fsdp-unit", "fig-book-zh-04_dp_fsdp-1"):
            figure = nodes.figure(ids=[name], names=[name])
            doc += figure
            doc.note_explicit_target(figure, figure)
        editions.TwinFigureLabels(doc).apply()
        return doc
    zh, en = page("book/zh/04_dp_fsdp"), page("book/04_dp_fsdp")
    assert set(zh.nameids) == {"zh-fig-04-fsdp-unit", "fig-book-zh-04_dp_fsdp-1"}
    assert zh.ids["fig-04-fsdp-unit"]["names"] == ["zh-fig-04-fsdp-unit"]    # same HTML anchor
    assert set(en.nameids) == {"fig-04-fsdp-unit", "fig-book-zh-04_dp_fsdp-1"}


def test_the_chinese_caption_and_alt_blocks_replace_the_english_ones() -> None:
    """TwinCaptions on a doctree shaped as myst-nb leaves it: cell, then the zh blocks."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    def page(docname: str) -> nodes.document:
        settings = get_default_settings(Parser)
        settings.env = SimpleNamespace(docname=docname)
        doc = new_document(docname, settings)
        cell = nodes.container(nb_element="cell_code")
        cell += nodes.figure("", nodes.image(uri="a.png", alt="English alt"), nodes.caption("", "English caption"))
        doc += cell
        for kind, text in ((editions.ZH_CAPTION_CLASS, "中文图注"), (editions.ZH_ALT_CLASS, "中文替代文字")):
            doc += nodes.container("", nodes.paragraph("", text), classes=[kind])
        editions.TwinCaptions(doc).apply()
        return doc
    zh = page("book/zh/04_dp_fsdp")
    assert zh.next_node(nodes.caption).astext() == "中文图注" and zh.next_node(nodes.image)["alt"] == "中文替代文字"
    assert not [c for c in zh.findall(nodes.container) if c.get("classes")], "the zh blocks are dropped"
    en = page("book/04_dp_fsdp")          # an English page is left alone
    assert en.next_node(nodes.caption).astext() == "English caption"
