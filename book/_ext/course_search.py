"""Sphinx extension: search that finds sections, shows a snippet, and finds Chinese terms, offline.

* Sections as entries: at the end of the build every section of every page (and every glossary
  term) is written with its title, anchor and plain text to ``_static/course_sections.js``; the
  search page's ``course_search.js`` ranks those sections for the query (phrase and title matches
  first) and shows each with a snippet. No page is fetched, so it works from ``file://`` too.
* Chinese: the English index keeps a run of Chinese characters as one word ("全分片数据并行"),
  so "数据并行" found nothing. ``SearchEnglishCJK`` also indexes every 2- to 6-character piece
  of such a run, so Sphinx's own index (searchindex.js) finds Chinese terms without a word
  segmenter (jieba is not installed here).
* Chinese to English: the chapters are written in English and name a Chinese term only in the
  glossary, so ``COURSE_ZH`` maps each Chinese term of a glossary definition to its English term
  ("气泡" -> "bubble"); the search page looks for the English term in the chapters too.
* References show what the reader sees: a ``{ref}`` without its own text reads as the section's
  title, a ``{doc}`` as the page's title, and citation keys are left out, so no result shows an
  internal label such as "sec-05-split".
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.search.en import SearchEnglish

__version__ = "1.0"
DATA_FILE = "course_sections.js"
CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
MAX_PIECE = 6
SKIP = (nodes.raw, nodes.comment, nodes.system_message, addnodes.toctree, nodes.substitution_definition)


def cjk_pieces(text: str, longest: int = MAX_PIECE) -> list[str]:
    """Every 2..``longest``-character substring of each run of Chinese characters in ``text``."""
    out = []
    for run in CJK_RUN.findall(text):
        for n in range(2, min(longest, len(run)) + 1):
            out += [run[i:i + n] for i in range(len(run) - n + 1)]
    return out


class SearchEnglishCJK(SearchEnglish):
    """English search whose index also holds the pieces of Chinese terms (see module docstring)."""

    def split(self, input: str) -> list[str]:  # noqa: A002 (Sphinx's signature)
        words = super().split(input)
        return words + [p for p in cjk_pieces(input) if p not in words]


def _xref_text(node: addnodes.pending_xref, env: Any) -> str | None:
    """What an unresolved reference will read as on the page, where its text is still the target
    (a label, a document name, a citation key); ``None``: its own text is what the reader sees."""
    if node.get("refexplicit"):
        return None
    domain, kind, target = node.get("refdomain"), node.get("reftype"), node.get("reftarget", "")
    if domain in ("cite", "footcite"):
        return ""                             # the key; the prose names the authors already
    if env is None:
        return None
    if domain == "std" and kind in ("ref", "numref"):
        label = env.domaindata["std"]["labels"].get(target.lower())
        return label[2] if label and label[2] else ""
    if kind == "doc":
        from sphinx.util import docname_join
        title = env.titles.get(docname_join(node.get("refdoc", ""), target))
        return title.astext() if title is not None else None
    return None


def _text(node: nodes.Node, env: Any = None) -> str:
    """Plain text of ``node`` without code-cell sources, raw HTML or nested sections; references
    read as they will on the page (``_xref_text``) when the build environment ``env`` is given."""
    if isinstance(node, (*SKIP, nodes.section)):
        return ""
    if isinstance(node, addnodes.pending_xref):
        shown = _xref_text(node, env)
        if shown is not None:
            return shown
    if isinstance(node, nodes.container) and node.get("nb_element") == "cell_code_source":
        return ""
    if isinstance(node, nodes.Text):
        return str(node)
    sep = " " if isinstance(node, (nodes.paragraph, nodes.term, nodes.title, nodes.entry, nodes.list_item)) else ""
    return "".join(_text(child, env) for child in node.children) + sep


def _is_glossary_term(term: nodes.term) -> bool:
    return bool(term["ids"]) and isinstance(term.parent, nodes.definition_list_item) \
        and "glossary" in term.parent.parent.get("classes", [])


def sections(doctree: nodes.document, env: Any = None) -> list[tuple[str, str, str]]:
    """``(anchor, title, text)`` for each section of a page and each glossary term in it."""
    out = []
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        if not section["ids"] or title is None:
            continue
        body = re.sub(r"\s+", " ", "".join(_text(c, env) for c in section.children if c is not title)).strip()
        out.append((section["ids"][0], title.astext(), body))
        for term in section.findall(nodes.term):
            if _is_glossary_term(term):
                definition = term.parent.next_node(nodes.definition)
                text = re.sub(r"\s+", " ", _text(definition, env) if definition else "").strip()
                out.append((term["ids"][0], term.astext(), text))
    return out


def chinese_terms(doctree: nodes.document) -> dict[str, list[str]]:
    """``{Chinese term: [English glossary terms, lower case]}`` from the glossary definitions of a
    page: each run of Chinese characters in a definition is a name of the term it defines."""
    out: dict[str, list[str]] = {}
    for term in doctree.findall(nodes.term):
        if not _is_glossary_term(term):
            continue
        definition = term.parent.next_node(nodes.definition)
        english = term.astext().strip().lower()
        for run in CJK_RUN.findall(_text(definition) if definition else ""):
            if english not in out.setdefault(run, []):
                out[run].append(english)
    return out


def section_data(app: Sphinx) -> list[list[str]]:
    """``[docname, page title, anchor, section title, text]`` for every page in the build."""
    env = app.env
    rows = []
    for docname in sorted(env.found_docs):
        if docname not in env.titles:
            continue
        page = env.titles[docname].astext()
        for anchor, title, text in sections(env.get_doctree(docname), env):
            rows.append([docname, page, anchor, title, text])
    return rows


def chinese_index(app: Sphinx) -> dict[str, list[str]]:
    """Every Chinese glossary term of the build and its English terms (``chinese_terms``)."""
    out: dict[str, list[str]] = {}
    for docname in sorted(app.env.found_docs):
        if docname in app.env.titles:
            for zh, english in chinese_terms(app.env.get_doctree(docname)).items():
                out.setdefault(zh, []).extend(e for e in english if e not in out.get(zh, []))
    return out


def _write_data(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(section_data(app), ensure_ascii=False, separators=(",", ":"))
    zh = json.dumps(chinese_index(app), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    (static / DATA_FILE).write_text(f"var COURSE_SECTIONS = {payload};\nvar COURSE_ZH = {zh};\n", encoding="utf-8")


def _search_page_only(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:  # noqa: ARG001
    if pagename == "search":
        app.add_js_file(DATA_FILE, loading_method="defer")
        app.add_js_file("course_search.js", loading_method="defer")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_search_language(SearchEnglishCJK)
    app.connect("html-page-context", _search_page_only)
    app.connect("build-finished", _write_data, priority=400)   # before course_offline checks the build (900)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
