"""The Chinese edition as a reader sees it holds no English prose (issue #49, "done when").

tests/test_twins.py counts Latin-script prose in the Chinese pages' MyST source and the twins'
Markdown; that misses what code writes onto a page: the generated tables, verdict lines, glued
text, figure captions and alt text. This file reads the BUILT pages (fixture ``html_dir``: the
session's one book build, or COURSE_HTML_DIR=DIR/_build/html): each Chinese chapter page
(book/zh/*.html) and each rendered twin notebook (notebooks/zh/*.html, solutions/zh/*.html), the
article's visible text plus every image's alt text, without code (``pre``/``code``: a notebook's
printed outputs are code), a twin notebook's outputs (byte for byte the English notebook's, by
design: its figures and their generated alt text are English; reported apart, not failed), math, the theme's chrome, the
switch to the English edition, citations (author-year links and the bibliography's entries, cited
names and titles), the glossary's column of English headwords and the notes' own words: the column of
the claim ledger that quotes them (笔记原文) and a quotation “…” that holds Chinese (the notes, written in
Chinese, keep some English words; an English quotation is counted). What is left is counted with
``course_lib.nbtwin.latin_words`` against book/zh/latin_allowlist.txt, like the sources.
"""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from course_lib import nbtwin

ROOT = Path(__file__).resolve().parents[1]
ALLOW = nbtwin.load_allowlist(ROOT / "book" / "zh" / "latin_allowlist.txt")
PARSER = "lxml" if importlib.util.find_spec("lxml") else "html.parser"
# Latin-script prose words a built Chinese page may show beyond the allowlist: a stray word, never a
# sentence or a table's column of English
MAX_LATIN_PER_BUILT_PAGE = 8
# what a reader does not read as the page's prose: code and outputs, math (MathJax's source and its
# rendering), the heading anchors, the edition switch ("English"), citations and bibliography entries
NOT_PROSE = ", ".join([
    "pre", "code", "script", "style", "mjx-container", ".math", ".MathJax", ".headerlink",
    ".course-lang-switch", ".bibtex-citation", ".citation", "nav",
])


def _pages() -> list[str]:
    """The built pages of the Chinese edition, named by their HTML path under the site."""
    pages = [f"book/zh/{p.stem}.html" for p in sorted((ROOT / "book" / "zh").glob("*.md"))]
    for folder in ("notebooks/zh", "solutions/zh"):
        pages += [f"{folder}/{p.stem}.html" for p in sorted((ROOT / folder).glob("*.ipynb"))]
    return pages


PAGES = _pages()
# table columns that are not the page's prose: the glossary's English headwords, the notes' own words
VERBATIM_COLUMNS = ("English", "笔记原文")
# a quotation with Chinese in it quotes the notes (issue #49: "the claim ledger quotes the seeds")
SEED_QUOTE = re.compile(r"“[^“”]*[\u3400-\u9fff][^“”]*”")


def visible_text(html: str, *, outputs: bool = True) -> str:
    """The text a reader of a built page reads as prose: the article (``article.bd-article``)
    without :data:`NOT_PROSE`, the :data:`VERBATIM_COLUMNS` of its tables and the quotations of
    the notes (:data:`SEED_QUOTE`), then each image's alt text (a figure's description for a
    screen reader is part of the page)."""
    soup = BeautifulSoup(html, PARSER)
    article = soup.select_one("article.bd-article")
    if article is None:
        raise ValueError("no article.bd-article in the page: the theme's layout changed")
    for tag in article.select(NOT_PROSE if outputs else f"{NOT_PROSE}, .cell_output"):
        tag.decompose()
    for table in article.find_all("table"):
        heads = [th.get_text(" ", strip=True) for th in table.select("thead th")]
        for col in sorted((heads.index(h) for h in VERBATIM_COLUMNS if h in heads), reverse=True):
            for row in table.find_all("tr"):
                cells = row.find_all(["td", "th"], recursive=False)
                if len(cells) > col:
                    cells[col].decompose()
    alts = [img.get("alt", "") for img in article.find_all("img")]
    return SEED_QUOTE.sub(" ", "\n".join([article.get_text(" "), *alts]))


def is_twin(page: str) -> bool:
    """A rendered twin notebook, whose code cells and outputs are the English notebook's."""
    return not page.startswith("book/")


@functools.cache
def page_latin(html_dir: Path, page: str, *, outputs: bool | None = None) -> list[str]:
    """The Latin-script prose words a reader meets on one built Chinese page; a twin's outputs
    are left out unless ``outputs`` (None: a chapter page's outputs count, a twin's do not).
    Cached: the report and the per-page checks read each page once."""
    path = html_dir / page
    if not path.is_file():
        raise FileNotFoundError(f"the build wrote no {page}")
    text = visible_text(path.read_text(encoding="utf-8"), outputs=not is_twin(page) if outputs is None else outputs)
    return nbtwin.latin_words(text, ALLOW)


# --- the extraction itself, on small pages written here (no build) -------------------------------

def _article(body: str) -> str:
    return (f'<html lang="zh-CN"><body><nav>Contents Next</nav><article class="bd-article">{body}'
            "</article><footer>By the authors</footer></body></html>")


def test_visible_text_keeps_prose_tables_and_alt_text_and_drops_code_math_chrome() -> None:
    html = _article(
        '<p>这是 Kaplan 等人<span class="bibtex-citation">[<a title="Scaling laws">Kaplan et al. 2020</a>]'
        '</span>的结论<a class="headerlink">#</a></p>'
        '<div class="course-lang-switch"><a lang="en">English</a></div>'
        '<pre>printed output in English</pre><p>调用 <code>shuffle the shards</code>，'
        '<span class="math notranslate">\\(\\text{per device}\\)</span></p>'
        '<table><tr><th>measured step time</th></tr></table>'
        '<img alt="Timeline of each rank"><div class="citation">Title of a cited paper</div>')
    text = visible_text(html)
    assert "measured step time" in text and "Timeline of each rank" in text   # tables, alt: counted
    for gone in ("Contents", "By the authors", "Kaplan et al", "English", "printed output",
                 "shuffle the shards", "per device", "cited paper", "#"):
        assert gone not in text, gone
    assert nbtwin.latin_words(text, ALLOW) == ["measured", "step", "time", "Timeline", "of", "each"]


def test_english_headwords_and_the_notes_own_words_are_not_counted_but_english_quotes_are() -> None:
    html = _article("<table><thead><tr><th>术语</th><th>English</th><th>含义</th></tr></thead>"
                    "<tbody><tr><td>气泡</td><td>Bubble</td><td>idle time</td></tr></tbody></table>"
                    "<table><thead><tr><th>#</th><th>笔记原文</th><th>结论</th></tr></thead>"
                    "<tbody><tr><td>1</td><td>“Pretraining FLOPs = 6ND”</td><td>wrong</td></tr></tbody></table>"
                    "<p>笔记说“bias 比 variance 更糟”，论文说“might not apply”。</p>")
    assert nbtwin.latin_words(visible_text(html), ALLOW) == ["idle", "time", "wrong", "might", "not", "apply"]


def test_a_twins_outputs_are_set_aside_only_when_asked() -> None:
    html = _article('<p>运行它：</p><div class="cell_output"><img alt="validation loss per byte"></div>')
    assert nbtwin.latin_words(visible_text(html, outputs=False), ALLOW) == []
    assert nbtwin.latin_words(visible_text(html), ALLOW) == ["validation", "loss", "per", "byte"]
    assert is_twin("notebooks/zh/01_flops_lab.html") and not is_twin("book/zh/01_flops.html")


def test_every_chinese_page_and_twin_is_listed() -> None:
    assert len([p for p in PAGES if p.startswith("book/zh/")]) >= 20
    assert {p.split("/", 1)[0] for p in PAGES} == {"book", "notebooks", "solutions"}


# --- the built site ------------------------------------------------------------------------------

def test_chinese_built_pages_latin_prose_is_reported(html_dir: Path, capsys) -> None:
    built = [page for page in PAGES if (html_dir / page).is_file()]
    counts = {page: len(page_latin(html_dir, page)) for page in built}
    shared = sum(len(page_latin(html_dir, p, outputs=True)) - counts[p] for p in built if is_twin(p))
    with capsys.disabled():
        print("\nLatin-script prose words on the built Chinese pages:",
              ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none",
              f"({sum(counts.values())} in all on {len(counts)} pages; fail above {MAX_LATIN_PER_BUILT_PAGE});",
              f"in the twins' outputs, the English notebooks' own (not failed): {shared}")


@pytest.mark.parametrize("page", PAGES)
def test_chinese_built_page_reads_as_chinese(html_dir: Path, page: str) -> None:
    words = page_latin(html_dir, page)
    assert len(words) <= MAX_LATIN_PER_BUILT_PAGE, (
        f"{len(words)} Latin-script prose words on the built {page} (at most {MAX_LATIN_PER_BUILT_PAGE}): "
        f"{' '.join(words)} -- translate them where they are written (the page, or the course_lib code "
        "that glues them: lang= and i18n.tr), or add a real term or cited title to book/zh/latin_allowlist.txt")
