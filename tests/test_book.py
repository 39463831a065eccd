"""The book builds with warnings as errors, and the website it writes needs no network.

The build itself runs once per session (fixture `book_build` in conftest.py), exactly like
`make book-strict`. The browser-level checks live in test_site.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Hosts that serve scripts, styles or fonts to documentation sites; none may appear in what a page loads.
CDN_HOSTS = re.compile(
    r"(?:unpkg\.com|cdn\.jsdelivr\.net|cdnjs\.cloudflare\.com|fonts\.googleapis\.com|fonts\.gstatic\.com"
    r"|cdn\.mathjax\.org|ajax\.googleapis\.com|code\.jquery\.com|googletagmanager\.com"
    r"|google-analytics\.com|plausible\.io|mybinder\.org|use\.fontawesome\.com|kit\.fontawesome\.com"
    r"|cdn\.plot\.ly|requirejs\.org)",
    re.IGNORECASE,
)
MATHJAX_FILES = (
    "MathJax.js",
    "config/TeX-AMS-MML_HTMLorMML-full.js",
    "jax/input/TeX/config.js",
    "jax/output/HTML-CSS/fonts/STIX-Web/fontdata.js",
    "fonts/HTML-CSS/STIX-Web/woff/STIXMathJax_Main-Regular.woff",
    "extensions/TeX/AMSmath.js",
    "localization/en/en.js",
)


def _load_extension() -> ModuleType:
    path = ROOT / "book" / "_ext" / "course_offline.py"
    spec = importlib.util.spec_from_file_location("course_offline", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


offline = _load_extension()


def _pages(html_dir: Path) -> list[Path]:
    return [p for p in sorted(html_dir.rglob("*.html"))
            if not p.relative_to(html_dir).as_posix().startswith(("_static/", "_sources/"))]


def _local_assets(page: Path, html_dir: Path) -> list[Path]:
    """Local scripts and stylesheets a page loads (query strings dropped)."""
    text = page.read_text(encoding="utf-8")
    refs = re.findall(r'<script[^>]*\ssrc="([^"]+)"', text)
    refs += re.findall(r'<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"', text)
    refs += re.findall(r'<link[^>]*href="([^"]+)"[^>]*rel="stylesheet"', text)
    assets = []
    for ref in refs:
        if "://" in ref or ref.startswith("//"):
            continue  # reported by test_no_external_resources
        path = (page.parent / ref.split("?")[0].split("#")[0]).resolve()
        assets.append(path)
    return assets


# ------------------------------------------------------------------------------------ the build
def test_book_builds_with_warnings_as_errors(book_build) -> None:
    warnings = [line for line in book_build.log.splitlines() if re.search(r"WARNING: |ERROR: ", line)]
    assert book_build.returncode == 0, (
        f"`jupyter-book build . -W -n --keep-going` failed (exit {book_build.returncode}).\n"
        + ("Warnings:\n" + "\n".join(warnings) + "\n" if warnings else "")
        + f"Last lines of the log (full log: build/test-artifacts/book-build.log):\n{book_build.tail()}"
    )
    assert not warnings


def test_every_toc_page_has_html(html_dir: Path, toc_pages: list[str]) -> None:
    missing = [name for name in toc_pages if not (html_dir / f"{name}.html").is_file()]
    assert not missing, f"TOC pages without HTML output: {missing}"
    assert (html_dir / "index.html").is_file(), "no top-level index.html (redirect to the root page)"


def test_exercises_are_downloads_not_pages(html_dir: Path) -> None:
    assert not list((html_dir / "exercises").glob("*.html")), "exercises/ must not be book pages"


def test_labs_and_solutions_are_not_executed(book_build) -> None:
    if book_build.reused:
        pytest.skip("build reused (COURSE_BOOK_REUSE=1): no build log")
    executed = re.findall(r"((?:notebooks|solutions|exercises)/\S+): Executing notebook", book_build.log)
    assert not executed, f"these notebooks are committed with outputs and must not be re-executed: {executed}"


def test_build_does_not_crawl_the_virtualenv(html_dir: Path) -> None:
    sources = html_dir / "_sources"
    for folder in (".venv", "_build", "tests", "docs", "exercises", "course_lib"):
        assert not (sources / folder).exists(), f"{folder}/ was treated as book source"
        assert not (html_dir / folder).exists(), f"{folder}/ was rendered into the website"
    for name in ("README", "CONTRIBUTING"):
        assert not (html_dir / f"{name}.html").exists(), f"{name}.md was rendered into the website"


# -------------------------------------------------------------------------------- offline website
def test_no_external_resources(html_dir: Path) -> None:
    found = offline.find_external_resources(html_dir)
    assert not found, "generated files that would load from the network:\n" + "\n".join(
        f"  {page}: {urls}" for page, urls in found.items())


def test_no_widget_javascript(html_dir: Path) -> None:
    """Widgets have static fallbacks; the ipywidgets embed manager (require.js + CDN) is never loaded."""
    for page in _pages(html_dir):
        text = page.read_text(encoding="utf-8")
        for marker in ("embed-amd.js", "require.min.js", "html-manager", "application/vnd.jupyter.widget-view+json"):
            assert marker not in text, f"{page.relative_to(html_dir)} embeds widget JavaScript ({marker})"


def test_loaded_assets_are_local_and_cdn_free(html_dir: Path) -> None:
    problems: list[str] = []
    seen: set[Path] = set()
    for page in _pages(html_dir):
        for asset in _local_assets(page, html_dir):
            if asset in seen:
                continue
            seen.add(asset)
            rel = asset.relative_to(html_dir) if asset.is_relative_to(html_dir) else asset
            if not asset.is_file():
                problems.append(f"{page.relative_to(html_dir)} loads missing file {rel}")
                continue
            text = asset.read_text(encoding="utf-8", errors="replace")
            if asset.suffix == ".css":
                problems += [f"{rel}: {u}" for u in offline.external_resources_in_css(text)]
            hosts = sorted(set(CDN_HOSTS.findall(text)))
            if hosts and "mathjax" not in asset.parts:  # MathJax.js only names its CDN in comments
                problems.append(f"{rel} mentions CDN hosts {hosts}")
    assert seen, "no local scripts or stylesheets found: is the HTML there?"
    assert not problems, "\n".join(problems)


def test_mathjax_is_served_locally(html_dir: Path) -> None:
    mathjax = html_dir / "_static" / "mathjax"
    missing = [f for f in MATHJAX_FILES if not (mathjax / f).is_file()]
    assert not missing, f"MathJax files missing under _static/mathjax: {missing}"
    size = sum(p.stat().st_size for p in mathjax.rglob("*") if p.is_file())
    assert size < 6e6, f"the MathJax copy should stay small (TeX + HTML-CSS + STIX woff), it is {size / 1e6:.1f} MB"
    math_pages = [p for p in _pages(html_dir) if 'class="math' in p.read_text(encoding="utf-8")]
    assert math_pages, "no page contains math: dollarmath/amsmath rendering is not being exercised"
    for page in math_pages:
        text = page.read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]*\ssrc="([^"]*MathJax\.js[^"]*)"', text)
        assert scripts, f"{page.relative_to(html_dir)} has math but does not load MathJax"
        for src in scripts:
            target = (page.parent / src.split("?")[0]).resolve()
            assert target == (mathjax / "MathJax.js").resolve(), f"{page.name} loads MathJax from {src}"
        assert "window.MathJax = " not in text, f"{page.name} still carries a MathJax 3 configuration"
        assert 'type="text/x-mathjax-config"' in text, f"{page.name} lacks the MathJax 2 configuration"


def test_search_is_built(html_dir: Path, toc_pages: list[str]) -> None:
    assert (html_dir / "search.html").is_file()
    index = (html_dir / "searchindex.js").read_text(encoding="utf-8")
    missing = [name for name in toc_pages if f'"{name}"' not in index]
    assert not missing, f"pages missing from the search index: {missing}"


# ------------------------------------------------------------- the offline checker itself (no build)
def test_checker_flags_what_a_browser_would_fetch() -> None:
    page = """<html><head>
      <script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>
      <link rel="stylesheet" href="//fonts.googleapis.com/css?family=Lato">
      <link rel="canonical" href="https://example.org/book/">
      <style>@import "https://example.org/a.css"; body { background: url(https://example.org/b.png) }</style>
      <script>const THEBE_JS_URL = "https://unpkg.com/thebe@0.8.2/lib/index.js"</script>
      <script type="application/vnd.jupyter.widget-state+json">{"url": "https://example.org"}</script>
      </head><body>
      <img src="https://example.org/c.png" srcset="local.png 1x, https://example.org/d.png 2x">
      <div style="background-image: url('https://example.org/e.png')"></div>
      <a href="https://arxiv.org/abs/2001.08361">Kaplan et al.</a>
      <img src="../_images/local.png"><script src="_static/local.js"></script>
      </body></html>"""
    found = offline.external_resources_in_html(page)
    joined = "\n".join(found)
    for url in ("cdn.jsdelivr.net", "fonts.googleapis.com", "example.org/a.css", "example.org/b.png",
                "unpkg.com", "example.org/c.png", "example.org/d.png", "example.org/e.png"):
        assert url in joined, f"{url} not flagged in {found}"
    for fine in ("arxiv.org", "canonical", "widget-state", "local.png", "local.js"):
        assert fine not in joined, f"{fine} wrongly flagged in {found}"
    # the pages skipped unparsed (no "//" outside a link's tag): nothing there to fetch; a URL with
    # its slashes as character references is still parsed, and caught
    assert offline.external_resources_in_html('<a href="https://arxiv.org/abs/1">K</a><img src="x.png">') == []
    for slashes in ("&#47;&#47;", "&#x2F;&#x2f;", "&sol;&sol;", "&#047;/"):
        found = offline.external_resources_in_html(f'<a href="https://arxiv.org/">K</a><img src="https:{slashes}x.org/i.png">')
        assert found and "x.org/i.png" in found[0], (slashes, found)
    assert offline.external_resources_in_css("@font-face { src: url(https://x.org/f.woff2) }")
    assert not offline.external_resources_in_css("@font-face { src: url(../fonts/f.woff2) }")
