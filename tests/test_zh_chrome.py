"""The Chinese pages' chrome (book/_ext/course_zh_chrome.py): the theme's words, the sidebar and the
figure numbers in Chinese, and figures numbered per page in both editions. The unit tests run on
small HTML; the last two read the built site (the session's one book build)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))    # as Sphinx's local_extensions does: it imports course_editions
_spec = importlib.util.spec_from_file_location("course_zh_chrome", ROOT / "book" / "_ext" / "course_zh_chrome.py")
chrome = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chrome)

PAGE = """<html><head><title>数 FLOP：6ND &#8212; Pretraining, Measured</title></head><body>
<a class="skip-link" href="#main-content">Skip to main content</a>
<button title="Search" aria-label="Search">Search</button>
<input placeholder="Search this book..." aria-label="Search this book..."/>
<article class="bd-article"><p>Search the previous results: Contents stay English here.</p>
<figure><figcaption><p><span class="caption-number">Fig. 3 </span>图注</p></figcaption></figure></article>
<p class="prev-next-subtitle">previous</p><a title="next page">x</a>
<p>By The course authors</p><p>© Copyright 2026.</p></body></html>"""


def test_the_theme_words_turn_chinese_outside_the_article_only() -> None:
    out = chrome.translate_chrome(PAGE)
    for zh in ("跳到正文", 'title="搜索"', 'placeholder="搜索本书……"', ">上一页<", 'title="下一页"',
               "作者：本课程的作者们", "© 2026 版权所有。", "<title>数 FLOP：6ND &#8212; 预训练，实测</title>",
               '<span class="caption-number">图 3 </span>'):
        assert zh in out, zh
    assert "Search the previous results: Contents stay English here." in out   # the author's text
    for en in ("Skip to main content", ">previous<", "Search this book...", "Fig. 3"):
        assert en not in out, en


def test_the_sidebar_is_the_chinese_edition_with_english_fallbacks_marked() -> None:
    docs = {"book/01_flops", "notebooks/01_flops_lab", "solutions/01_flops", "book/zh/01_flops",
            "notebooks/zh/01_flops_lab", "book/zh/index", "book/zh/notes", "book/zh/glossary", "book/index"}
    titles = {"book/zh/01_flops": "数 FLOP：6ND", "notebooks/zh/01_flops_lab": "实验 1",
              "solutions/01_flops": "Exercises 1", "book/zh/notes": "原始笔记", "book/zh/glossary": "术语表"}
    toc = [("1 · FLOPs: 6ND", ["book/01_flops", "notebooks/01_flops_lab", "solutions/01_flops"]),
           ("中文版", ["book/zh/index"]), ("Back matter", ["book/notes"])]
    parts = chrome.sidebar_parts(docs, titles, toc)
    assert parts[0][0] == "1 · 数 FLOP"
    assert parts[0][1] == [("book/zh/01_flops", "数 FLOP：6ND", True), ("notebooks/zh/01_flops_lab", "实验 1", True),
                           ("solutions/01_flops", "Exercises 1", False)]
    assert parts[-1] == ("附录", [("book/zh/notes", "原始笔记", True), ("book/zh/glossary", "术语表", True)])
    nav = chrome.sidebar_html("notebooks/zh/01_flops_lab", parts, lambda d: f"/{d}.html")
    assert 'class="toctree-l1 current active"><a class="reference internal current" href="/notebooks/zh/01_flops_lab.html">' in nav
    assert "Exercises 1（英文）" in nav and 'href="/book/index.html"' in nav


def test_a_chinese_page_gets_the_empty_nav_instead_of_the_themes_table_of_contents() -> None:
    """The theme's whole-book toc is not generated for a Chinese page (rewrite_zh_pages replaces it):
    its sidebar template is swapped for an empty nav with the class rewrite_zh_pages fills; an
    English page keeps the theme's."""
    theme = ["navbar-logo.html", chrome.THEME_NAV, "search-button-field.html"]
    for page, want in (("book/zh/01_flops", chrome.ZH_NAV), ("notebooks/zh/01_flops_lab", chrome.ZH_NAV),
                       ("book/01_flops", chrome.THEME_NAV), ("notebooks/01_flops_lab", chrome.THEME_NAV)):
        context = {"sidebars": list(theme)}
        chrome.skip_theme_nav(None, page, "page.html", context, None)
        assert context["sidebars"] == [theme[0], want, theme[2]], page
    nav = (chrome.TEMPLATES / chrome.ZH_NAV).read_text(encoding="utf-8")
    assert chrome._NAV.search(nav.split("-#}")[-1]), nav


def test_figures_are_numbered_per_page() -> None:
    class Env:
        toc_fignumbers = {"a": {"figure": {"f9": (9,), "f7": (7,)}}, "b": {"figure": {"g": (12,)}, "table": {}}}
    chrome.renumber_figures(None, Env)
    assert Env.toc_fignumbers == {"a": {"figure": {"f7": (1,), "f9": (2,)}}, "b": {"figure": {"g": (1,)}, "table": {}}}


def test_the_built_chinese_pages_speak_chinese_around_the_text(html_dir: Path) -> None:
    zh_pages = sorted((html_dir / "book" / "zh").glob("[0-9][0-9]_*.html"))
    assert zh_pages
    for path in zh_pages:
        page = path.read_text(encoding="utf-8")
        outside = re.sub(r"<article\b.*?</article>|<script\b.*?</script>", "", page, flags=re.S)
        for en in (">Skip to main content<", ">previous<", ">next<", "Search this book...", ">Contents<",
                   "caption-number\">Fig.", ">Back matter<"):
            assert en not in outside, f"{path.name}: {en}"
        nav = re.search(r'<nav[^>]*bd-docs-nav[^>]*>(.*?)</nav>', page, re.S).group(1)
        # every chapter page in the sidebar is a Chinese sibling, not ../NN_x.html (the English page)
        assert not re.search(r'href="\.\./\d\d_', nav) and ">Counting FLOPs: 6ND<" not in nav, path.name
    first = (html_dir / "book" / "zh" / "01_flops.html").read_text(encoding="utf-8")
    assert '<span class="caption-number">图 1 </span>' in first


def test_each_english_chapter_numbers_its_figures_from_one(html_dir: Path) -> None:
    for path in sorted((html_dir / "book").glob("[0-9][0-9]_*.html")):
        numbers = re.findall(r'<span class="caption-number">Fig\. (\d+) </span>', path.read_text(encoding="utf-8"))
        if numbers:
            assert numbers[0] == "1" and numbers == [str(i + 1) for i in range(len(numbers))], (path.name, numbers)


def test_the_search_page_messages_it_translates_are_sphinxs_own() -> None:
    """course_search.js puts Sphinx's search messages in Chinese for a search from a Chinese page:
    each key must be a message this Sphinx's searchtools.js really asks for (an upgrade that rewords
    one would otherwise leave it English, silently)."""
    import sphinx
    js = (ROOT / "book" / "_static" / "course_search.js").read_text(encoding="utf-8")
    table = js[js.index("const COURSE_SEARCH_ZH"):js.index("};", js.index("const COURSE_SEARCH_ZH"))]
    keys = re.findall(r'^\s*"([^"]+)":', table, re.M)
    tools = (Path(sphinx.__file__).parent / "themes" / "basic" / "static" / "searchtools.js").read_text(encoding="utf-8")
    assert len(keys) >= 5
    for key in keys:
        assert f'"{key}"' in tools, key
