"""Sphinx extension: the Chinese edition's chrome in Chinese, and figures numbered per page.

The theme (sphinx-book-theme on pydata) writes its own words around each page — "Skip to main
content", "Search this book...", "previous"/"next", "Contents", its buttons' tooltips — in the build's
one language, English, and its left sidebar is the whole book's table of contents, so a Chinese page
used to show fifteen English chapter titles beside Chinese prose. This extension, after the HTML is
written, rewrites the Chinese pages (``book/zh/…`` and the notebook twins under ``notebooks/zh/``,
``solutions/zh/``):

* the theme's words, from one table (``CHROME``), in the page's chrome only — never inside the
  article, whose text is the author's;
* the sidebar: the Chinese edition's own map, one part per chapter (its page, lab and exercises in
  Chinese where a twin exists, else the English one marked 「英文」), the back matter, and a link to the
  English edition; the current page marked as the theme marks it;
* each figure's number: "图 3" instead of "Fig. 3" (the ``<title>`` ends with the Chinese book title).

Figures are numbered per page in both editions (``renumber_figures``): Sphinx numbers them through
the whole book, so chapter 1's first figure on the Chinese page read "Fig. 103" (the Chinese part
comes after the fifteen English ones). A page's figures are now 1, 2, … in reading order.
"""
from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from course_editions import is_zh, twin   # where each edition's twins live: one place

__version__ = "1.0"
BOOK_ZH = "预训练，实测"
ENGLISH = "英文"

# The theme's words -> Chinese. Keys are the exact strings the theme writes (text or attribute).
CHROME = {
    "Skip to main content": "跳到正文",
    "Back to top": "回到顶部",
    "Search": "搜索",
    "Search this book...": "搜索本书……",
    "Contents": "本页目录",
    "On this page": "本页目录",
    "previous": "上一页",
    "next": "下一页",
    "previous page": "上一页",
    "next page": "下一页",
    "Index": "索引",
    "Site navigation": "站点导航",
    "Main": "主导航",
    "Page": "本页",
    "Version warning": "版本提示",
    "Toggle primary sidebar": "显示或隐藏左侧目录",
    "Toggle secondary sidebar": "显示或隐藏本页目录",
    "Download this page": "下载本页",
    "Download source file": "下载源文件",
    "Download notebook file": "下载 notebook 文件",
    "Print to PDF": "打印为 PDF",
    "Fullscreen mode": "全屏",
    "Color mode": "配色",
    "Light": "浅色",
    "Dark": "深色",
    "System Settings": "跟随系统",
    "By The course authors": "作者：本课程的作者们",
    "Works offline: math, search and figures are served from this folder.":
        "离线可用：公式、搜索和图都由本文件夹提供。",
    "Back matter": "附录",
    "Pretraining, Measured": BOOK_ZH,
}
_ATTRS = ("title", "aria-label", "placeholder", "data-bs-title", "alt")
_TEXT = re.compile(r">(\s*)([^<>]*?[A-Za-z][^<>]*?)(\s*)<")
_ATTR = re.compile(r'\b(' + "|".join(_ATTRS) + r')="([^"]*)"')
_ARTICLE = re.compile(r"<article\b.*?</article>", re.S)
_NAV = re.compile(r'(<nav[^>]*class="bd-links bd-docs-nav"[^>]*>)(.*?)(</nav>)', re.S)
_FIGNUM = re.compile(r'(<span class="caption-number">)Fig\. ')
_CHAPTER = re.compile(r"^book/(\d\d)_")


def translate_chrome(page: str) -> str:
    """The theme's words in Chinese, outside the article (whose text is left as written)."""
    def text(m: re.Match) -> str:
        zh = CHROME.get(html.unescape(m.group(2)))
        return f">{m.group(1)}{html.escape(zh, quote=False)}{m.group(3)}<" if zh else m.group(0)

    def attr(m: re.Match) -> str:
        zh = CHROME.get(html.unescape(m.group(2)))
        return f'{m.group(1)}="{html.escape(zh)}"' if zh else m.group(0)

    def chrome(part: str) -> str:
        return _ATTR.sub(attr, _TEXT.sub(text, part))

    out, last = [], 0
    for m in _ARTICLE.finditer(page):
        out += [chrome(page[last:m.start()]), m.group(0)]
        last = m.end()
    out.append(chrome(page[last:]))
    page = "".join(out)
    page = _FIGNUM.sub(r"\1图 ", page)
    page = re.sub(r"© Copyright ([^<.]+)\.", r"© \1 版权所有。", page)
    return re.sub(r"(<title>.*?) &#8212; [^<]*</title>", rf"\1 &#8212; {BOOK_ZH}</title>", page, count=1, flags=re.S)


def sidebar_parts(docs: set[str], titles: dict[str, str], toc: list[tuple[str, list[str]]]) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """The Chinese sidebar: for each chapter part of the book's toc, (caption, [(docname, title,
    translated)]) with each entry's Chinese twin where one exists; then the Chinese back matter."""
    parts = []
    for _caption, entries in toc:
        if not entries or not _CHAPTER.match(entries[0]):
            continue
        items = []
        for doc in entries:
            zh = twin(doc, docs)
            items.append((zh, titles.get(zh, ""), True) if zh else (doc, titles.get(doc, ""), False))
        head = titles.get(twin(entries[0], docs) or "", "") or titles.get(entries[0], "")
        number = int(_CHAPTER.match(entries[0]).group(1))
        parts.append((f"{number} · {re.split('[：:—]', head)[0].strip()}", items))
    back = [(d, titles.get(d, ""), True) for d in sorted(docs)
            if d.startswith("book/zh/") and not re.match(r"book/zh/(\d\d_|index$)", d)]
    order = ["notes", "claims", "glossary", "notation", "gpu_box", "references"]
    back.sort(key=lambda e: order.index(e[0][8:]) if e[0][8:] in order else len(order))
    if back:
        parts.append((CHROME["Back matter"], back))
    return parts


def sidebar_html(current: str, parts: list, uri) -> str:
    """The nav's inner HTML in the theme's own classes (so its CSS and collapse script apply)."""
    out = ['<div class="bd-toc-item navbar-nav active">',
           '<ul class="nav bd-sidenav bd-sidenav__home-link"><li class="toctree-l1">'
           f'<a class="reference internal" href="{uri("book/zh/index")}">{BOOK_ZH}</a></li></ul>']
    for caption, items in parts:
        out.append(f'<p aria-level="2" class="caption" role="heading"><span class="caption-text">{html.escape(caption)}</span></p>')
        out.append('<ul class="nav bd-sidenav">')
        for doc, title, translated in items:
            here = doc == current
            cls = ' class="toctree-l1 current active"' if here else ' class="toctree-l1"'
            a_cls = "reference internal current" if here else "reference internal"
            mark = "" if translated else f'（{ENGLISH}）'
            out.append(f'<li{cls}><a class="{a_cls}" href="{uri(doc) or "#"}">{html.escape(title)}{mark}</a></li>')
        out.append('</ul>')
    out.append('<p aria-level="2" class="caption" role="heading"><span class="caption-text">English</span></p>'
               f'<ul class="nav bd-sidenav"><li class="toctree-l1"><a class="reference internal" lang="en" '
               f'href="{uri("book/index")}">Pretraining, Measured (English edition)</a></li></ul></div>')
    return "\n".join(out)


def _toc(app: Sphinx) -> list[tuple[str, list[str]]]:
    """(caption, [docnames]) per part of book/_toc.yml."""
    site_map = getattr(app.env, "external_site_map", None)
    if site_map is None:
        return []
    root = site_map[site_map.root.docname]
    out = []
    for sub in root.subtrees:
        out.append((sub.caption or "", [str(doc) for doc in sub.files()]))
    return out


def renumber_figures(app: Sphinx, env: Any) -> list[str]:
    """Number each page's figures 1, 2, … in reading order (Sphinx numbers them book-wide)."""
    for kinds in env.toc_fignumbers.values():
        for kind, numbers in kinds.items():
            ordered = sorted(numbers, key=lambda fid: numbers[fid])
            kinds[kind] = {fid: (i + 1,) for i, fid in enumerate(ordered)}
    return []


def rewrite_zh_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    docs = set(app.env.found_docs)
    titles = {d: app.env.titles[d].astext() for d in docs if d in app.env.titles}
    parts = sidebar_parts(docs, titles, _toc(app))
    out = Path(app.outdir)
    for doc in sorted(d for d in docs if is_zh(d)):
        path = out / (doc + ".html")
        if not path.is_file():
            continue
        page = translate_chrome(path.read_text(encoding="utf-8"))
        nav = sidebar_html(doc, parts, lambda target, doc=doc: app.builder.get_relative_uri(doc, target))
        page = _NAV.sub(lambda m, nav=nav: m.group(1) + nav + m.group(3), page, count=1)
        path.write_text(page, encoding="utf-8")


THEME_NAV = "sbt-sidebar-nav.html"                # sphinx-book-theme's sidebar: the whole book's toc
ZH_NAV = "course-zh-sidebar-nav.html"              # an empty nav (templates/), filled by rewrite_zh_pages
TEMPLATES = Path(__file__).parent / "templates"


def _add_templates(app: Sphinx, config: Any) -> None:
    config.templates_path = [*config.templates_path, os.path.relpath(TEMPLATES, app.srcdir)]


def skip_theme_nav(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:  # noqa: ARG001
    """A Chinese page's sidebar template is the empty nav: the theme generates its table of contents
    of the whole book for each page it writes (on the 58 Chinese pages, 11 % of the build's CPU, measured), and on a
    Chinese page ``rewrite_zh_pages`` replaces it anyway. Runs before the theme renders the sidebars
    (priority 400 < the theme's 500)."""
    if is_zh(pagename) and THEME_NAV in context.get("sidebars", ()):
        context["sidebars"] = [ZH_NAV if name == THEME_NAV else name for name in context["sidebars"]]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _add_templates)
    app.connect("html-page-context", skip_theme_nav, priority=400)
    app.connect("env-get-updated", renumber_figures, priority=900)
    app.connect("build-finished", rewrite_zh_pages)
    return {"version": __version__, "env_version": 1, "parallel_read_safe": True, "parallel_write_safe": True}
