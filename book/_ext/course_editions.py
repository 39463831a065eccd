"""Sphinx extension: the course's two editions, English and Chinese (中文版), in one offline site.

Layout (COURSE_DESIGN.md, "Editions"): a Chinese page is the twin of an English page of the same
name, ``book/zh/01_flops.md`` beside ``book/01_flops.md``. The twin

* carries the English page's section labels with a ``zh-`` prefix (``(zh-sec-01-mfu)=`` for
  ``(sec-01-mfu)=``), so a label stays unique in the one Sphinx project and a ``{ref}`` in each
  edition stays in that edition;
* runs the English page's code cells unchanged, in the same order (tests/test_editions.py checks
  it), so every glued number and every figure comes from the same code: jupyter-cache keys a
  notebook by its code cells, so the build even executes the code once and both pages paste the
  same outputs. No number of either edition is computed twice or typed.

A figure's caption is part of its cell, so a twin's figure would keep the English caption; the
twin writes the Chinese one right after the cell as a ``{container} zh-caption`` block, and
``TwinCaptions`` moves it into the figure (glued numbers and all). A figure that the English cell
names gets the ``zh-`` prefix on its label too (``TwinFigureLabels``).

On every HTML page this extension puts a language switch at the top of the article: an English
page links its Chinese twin, a Chinese page its English original, and a page with no twin yet (the
labs, the solutions, the chapters not translated) links the Chinese landing page and says that it
is not translated. ``_static/course_editions.js`` makes the link land on the same section of the
twin (the switch carries the map from this page's section ids to the twin's, joined by the labels); without JavaScript it opens the twin's top. A Chinese page
also gets ``<html lang="zh-CN">`` and the ``{answers}`` role speaks Chinese there.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.transforms import SphinxTransform

__version__ = "1.2"
logger = logging.getLogger(__name__)
ZH_DIR = "book/zh/"
ZH_HOME = "book/zh/index"
LABEL_PREFIX = "zh-"            # zh-sec-01-mfu is the twin of sec-01-mfu
SWITCH_CLASS = "course-lang-switch"
# Where each edition's twins live: a page book/X <-> book/zh/X, a lab notebooks/X <-> notebooks/zh/X,
# a worked exercise set solutions/X <-> solutions/zh/X (notebook twins: course_lib/nbtwin.py).
TWIN_DIRS = (("book/", "book/zh/"), ("notebooks/", "notebooks/zh/"), ("solutions/", "solutions/zh/"))


def is_zh(docname: str) -> bool:
    return any(docname.startswith(zh) for _, zh in TWIN_DIRS)


def twin(docname: str, docs: set[str] | frozenset[str]) -> str | None:
    """The page in the other edition that translates ``docname``, or None if there is none."""
    other = None
    for en, zh in TWIN_DIRS:
        if docname.startswith(zh):
            other = en + docname[len(zh):]
        elif docname.startswith(en) and "/" not in docname[len(en):]:
            other = zh + docname[len(en):]
        else:
            continue
        break
    return other if other in docs else None


def zh_label(label: str) -> str:
    """The Chinese twin's label for an English section label."""
    return LABEL_PREFIX + label


def section_map(docname: str, other: str, labels: dict[str, tuple[str, str, str]]) -> dict[str, str]:
    """``{html id on docname: html id on other}`` for the labelled sections the two pages share.

    ``labels`` is Sphinx's std-domain table (label -> (docname, html id, title)); a section's HTML
    id is its title's slug, which differs between the editions, so the labels join them."""
    def own(page: str) -> dict[str, str]:
        return {name: anchor for name, (doc, anchor, _) in labels.items() if doc == page and anchor}
    here, there = own(docname), own(other)
    out = {}
    for name, anchor in here.items():
        mate = name[len(LABEL_PREFIX):] if is_zh(docname) and name.startswith(LABEL_PREFIX) else zh_label(name)
        if mate in there:
            out[anchor] = there[mate]
    return out


def switch_html(docname: str, docs: set[str] | frozenset[str], uri: Any,
                sections: dict[str, str] | None = None) -> str:
    """The switch for ``docname``; ``uri(target)`` gives the relative URL of a docname and
    ``sections`` maps this page's section ids to the twin's (see section_map)."""
    other = twin(docname, docs)
    if other is not None:
        zh_side = is_zh(docname)
        text, lang = ("English", "en") if zh_side else ("中文", "zh-CN")
        note = "Read this page in English" if zh_side else "阅读本页的中文版"
        return (f'<p class="{SWITCH_CLASS}" data-edition="{"zh" if zh_side else "en"}">'
                f'<a class="course-lang-twin" href="{html.escape(uri(other))}" hreflang="{lang}" lang="{lang}" '
                f'title="{note}" data-sections="{html.escape(json.dumps(sections or {}, sort_keys=True, ensure_ascii=False))}">{text}</a></p>')
    if ZH_HOME in docs and not is_zh(docname):
        return (f'<p class="{SWITCH_CLASS}" data-edition="en"><span lang="zh-CN">本页尚未翻译，'
                f'<a class="course-lang-home" href="{html.escape(uri(ZH_HOME))}" hreflang="zh-CN">'
                f'中文版目录</a></span></p>')
    return ""


ZH_CAPTION_CLASS = "zh-caption"
ZH_ALT_CLASS = "zh-alt"


class TwinCaptions(SphinxTransform):
    """The Chinese caption (and alt text) of a twin's figure. The twin runs the English cell byte
    for byte, its caption metadata included (jupyter-cache hashes cell metadata too, so a changed
    caption would execute the page a second time), so the Chinese caption is written in the page,
    right after the cell, as a ``{container} zh-caption`` block; its glue roles resolve like any
    prose of the page. This transform moves that text into the figure's caption, in place of the
    English one, and drops the block. A cell whose English metadata writes the alt text itself
    (``image: alt:``) gets a ``{container} zh-alt`` block after its caption block, whose plain
    text becomes the images' alt. It runs before course_figures (500), which makes the alt text
    of the other figures from the caption it finds. A block with no captioned figure right before
    it is a build warning."""
    default_priority = 490

    def apply(self, **kwargs: Any) -> None:
        if not is_zh(self.env.docname):
            return
        for block in list(self.document.findall(nodes.container)):
            kind = next((c for c in (ZH_CAPTION_CLASS, ZH_ALT_CLASS) if c in block.get("classes", [])), None)
            if kind is None:
                continue
            figure = self._figure_before(block)
            caption = figure.next_node(nodes.caption) if figure is not None else None
            paragraphs = [p for p in block.children if isinstance(p, nodes.paragraph)]
            if caption is None or len(paragraphs) != 1:
                logger.warning(f"a {kind} block must hold one paragraph and follow a code cell whose "
                               "figure has a caption", location=block, type="course", subtype="caption")
                continue
            if kind == ZH_CAPTION_CLASS:
                caption.children = []
                caption.extend(paragraphs[0].children)
            else:
                alt = " ".join(paragraphs[0].astext().split())
                for image in figure.findall(nodes.image):
                    image["alt"] = alt
            block.parent.remove(block)

    @staticmethod
    def _figure_before(block: nodes.Element) -> nodes.figure | None:
        parent = block.parent
        k = parent.index(block) - 1
        while k >= 0 and isinstance(parent[k], (nodes.target, nodes.comment)):
            k -= 1
        if k < 0 or parent[k].get("nb_element") != "cell_code":
            return None
        # myst-nb wraps every display output of a captioned cell in a figure (a table printed
        # beside the plot too, which course_figures unwraps again): the plot's figure holds an image
        return next((f for f in parent[k].findall(nodes.figure) if next(iter(f.findall(nodes.image)), None)), None)


class TwinFigureLabels(SphinxTransform):
    """A twin runs its English page's cells byte for byte, so a figure the English cell names
    (``mystnb: figure: name: fig-04-fsdp-unit``) would be named twice in the one Sphinx project
    (a duplicate-label warning). On a Chinese page such a label becomes ``zh-fig-...``, like the
    section labels; the figure's HTML id stays the English one (the page is another file), so
    both editions' figures keep the same anchor. Automatic labels (``fig-book-zh-...``, from
    course_figures) are unique already and are left alone."""
    default_priority = 520      # after course_figures (500) has labelled the unnamed figures

    def apply(self, **kwargs: Any) -> None:
        if not is_zh(self.env.docname):
            return
        doc = self.document
        auto = ("fig-book-", "fig-notebooks-", "fig-solutions-")      # course_figures' own, unique per page
        for name in [n for n in doc.nameids if n.startswith("fig-") and not n.startswith(auto)]:
            new = LABEL_PREFIX + name
            node_id = doc.nameids.pop(name)
            doc.nameids[new] = node_id
            doc.nametypes[new] = doc.nametypes.pop(name)
            node = doc.ids.get(node_id)
            if node is not None:
                node["names"] = [new if n == name else n for n in node["names"]]


_INLINE_MATH = re.compile(r"(?<!\\)\$([^$\n]+?)\$")


def _text_and_math(text: str) -> list[nodes.Node]:
    """A caption's text with its ``$...$`` spans as inline math, as MyST would render them."""
    out: list[nodes.Node] = []
    last = 0
    for m in _INLINE_MATH.finditer(text):
        if m.start() > last:
            out.append(nodes.Text(text[last:m.start()]))
        out.append(nodes.math(m.group(1), m.group(1)))
        last = m.end()
    if last < len(text):
        out.append(nodes.Text(text[last:]))
    return out


class TwinNotebookCaptions(SphinxTransform):
    """A notebook twin's Chinese figure captions. A lab writes a figure's caption in its code cell's
    metadata, which the twin keeps byte for byte; the twin's Chinese captions sit in its notebook
    metadata, ``course.captions = {"<code cell index>": {"zh": ..., "en_sha1": ...}}`` (kept by
    course_lib/nbtwin.py, which flags one missing or stale). This puts each in its cell's figure,
    before course_figures (500) writes the alt text from the caption."""
    default_priority = 490

    def apply(self, **kwargs: Any) -> None:
        docname = self.env.docname
        if not is_zh(docname) or docname.startswith(ZH_DIR):
            return
        try:
            meta = json.loads(Path(self.env.doc2path(docname)).read_text(encoding="utf-8")).get("metadata", {})
        except (OSError, ValueError):
            return
        captions = (meta.get("course") or {}).get("captions") or {}
        for cell in self.document.findall(nodes.container):
            entry = captions.get(str(cell.get("cell_index"))) if cell.get("nb_element") == "cell_code" else None
            caption = cell.next_node(nodes.caption) if isinstance(entry, dict) and entry.get("zh") else None
            if caption is not None:
                caption.children = []
                caption.extend(_text_and_math(entry["zh"]))


def _on_page_context(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:  # noqa: ARG001
    if doctree is None or "body" not in context:
        return
    docs = frozenset(app.env.found_docs)
    other = twin(pagename, docs)
    sections = section_map(pagename, other, app.env.domaindata["std"]["labels"]) if other else None
    switch = switch_html(pagename, docs, lambda target: app.builder.get_relative_uri(pagename, target), sections)
    if switch:
        context["body"] = switch + context["body"]
    if is_zh(pagename):
        context["language"] = "zh-CN"


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_js_file("course_editions.js", loading_method="defer")
    app.add_transform(TwinFigureLabels)
    app.add_transform(TwinCaptions)
    app.add_transform(TwinNotebookCaptions)
    app.connect("html-page-context", _on_page_context)
    # env_version: a build that read its pages with another version of these transforms reads them again
    return {"version": __version__, "env_version": 4, "parallel_read_safe": True, "parallel_write_safe": True}
