"""The website in a real headless browser, with the network out of reach.

_build/html is served on 127.0.0.1 (fixture `site_url`); Debian's Chromium, driven by the
`playwright` package (its own browser download is never used), opens every page of the TOC plus
search.html and genindex.html. Any request to another host is recorded and fails at a dead proxy, so a page
that still depends on a CDN fails here even on a machine that has network access.

Skipped only when /usr/bin/chromium is missing and CI is not set; under CI a missing browser fails.
Each page is loaded once: the offline checks and the layout at 1280 px run on that load, then the
same page is narrowed to 390 px (a phone) and measured again. With COURSE_SCREENSHOTS=1 (`make
screenshots`) a full-page screenshot of every page at both widths goes to
build/test-artifacts/screenshots/ (NAME-1280.jpg, NAME-390.jpg), so a reviewer can look at the site
without building it. `make test` takes none: they assert nothing and were a quarter of each page's
time (about 1.2 s of 4.5 s per page, measured on the 2-core machine), some three minutes of workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from machine_load import patience

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium"))
# Every request to another host goes to a closed port of this machine (a proxy that is not there)
# and fails; Chromium never proxies loopback, so the local server is reached. The pages' checks
# record each such request as external (the `request` event) and fail on it. Unlike an intercepting
# route, this keeps the browser's cache on, which a module's page visits share (page_visits).
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--proxy-server=http://127.0.0.1:9"]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
LOCAL_SCHEMES = {"data", "blob", "about", "file"}
SCREENSHOTS = ROOT / "build" / "test-artifacts" / "screenshots"
TAKE_SCREENSHOTS = os.environ.get("COURSE_SCREENSHOTS", "").strip() not in {"", "0"}
MATHJAX_TIMEOUT_MS = 30_000
DESKTOP = {"width": 1280, "height": 900}   # every context opens at it; a tab reused for the next page returns to it

# Math nodes written by Sphinx/MyST (MathJax's own HTML-CSS output also uses class "math").
SOURCE_MATH = ("() => [...document.querySelectorAll('.math')]"
               ".filter(e => !e.closest('.MathJax, .MathJax_Display'))")
# MathJax 2 is done when its startup has posted "End" and every MyST/Sphinx `.math` node holds the
# final HTML-CSS output (the fast preview is replaced) or an error. Timing out here means math that
# never typesets; the report below then says which.
MATHJAX_DONE = """() => {
    if (!(window.MathJax && MathJax.Hub && MathJax.Hub.Startup && MathJax.Hub.Startup.signal)) return false;
    if (!MathJax.Hub.Startup.signal.posted.map(String).includes('End')) return false;
    const done = '.MathJax, .MathJax_Display, .MathJax_Error, .merror, .noError';
    return (""" + SOURCE_MATH + """)().every(e => e.querySelector(done));
}"""
# What MathJax left behind: rendered nodes, math that was not typeset, TeX errors, raw delimiters.
MATHJAX_REPORT = """() => {
    const math = (""" + SOURCE_MATH + """)();
    const rendered = '.MathJax, .MathJax_Display, .MathJax_SVG, mjx-container';
    const unrendered = math.filter(e => !e.querySelector(rendered)).map(e => e.textContent.slice(0, 80));
    const errors = [...document.querySelectorAll('.merror, .noError, .MathJax_Error, mjx-merror')]
        .map(e => e.textContent.slice(0, 80));
    const posted = (window.MathJax && MathJax.Hub) ? MathJax.Hub.signal.posted.map(m => String(m)) : [];
    const signals = posted.filter(m => /^(TeX Jax - |Math Processing Error|file load error)/.test(m));
    const article = document.querySelector('main') || document.body;
    const copy = article.cloneNode(true);
    copy.querySelectorAll('pre, code, script, style, .MathJax_Preview, textarea').forEach(e => e.remove());
    const text = copy.textContent;
    const raw = ['$$', '\\\\(', '\\\\[', '\\\\begin{'].filter(d => text.includes(d));
    return {math: math.length, rendered: document.querySelectorAll(rendered).length,
            unrendered, errors, signals, raw};
}"""
# Every <img> decoded (lazy ones forced to load first).
BROKEN_IMAGES = """async () => {
    const broken = [];
    for (const img of document.images) {
        img.loading = 'eager';
        try { await img.decode(); } catch (e) {}
        if (!(img.complete && img.naturalWidth > 0)) broken.push(img.currentSrc || img.src);
    }
    return broken;
}"""


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        reason = (f"{CHROMIUM} not found: the site test drives Debian's Chromium "
                  "(apt-get install chromium chromium-driver; .ci/run does this)")
        if _in_ci():
            pytest.fail(reason + " -- CI is set, so a missing browser is a failure")
        pytest.skip(reason)
    with sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        except Exception as exc:  # the driver or the browser failed to start
            pytest.fail(f"could not start {CHROMIUM} through playwright: {exc}")
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Visit:
    url: str
    status: int | None = None
    requests: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    mathjax: dict[str, Any] | None = None
    collected: Any = None
    layouts: dict[int, dict[str, Any]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        out = []
        for name in ("external", "bad_responses", "failed_requests", "console_errors", "page_errors",
                     "broken_images"):
            if getattr(self, name):
                out.append(f"{name}: {getattr(self, name)}")
        return out


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or parts.hostname in LOCAL_HOSTS


def new_context(browser: Any) -> Any:
    """A browser context at 1280 x 900 with service workers off; the launch's dead proxy keeps the
    network out of reach (LAUNCH_ARGS), and its HTTP cache is on."""
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    context.set_default_timeout(patience(30_000))      # every other wait: stretched on a busy machine
    return context


def _wait_until_quiet(page: Any, loading: dict[Any, str], activity: list[float], url: str,
                      quiet_s: float = 0.5) -> None:
    """Wait until every request the page made has finished (or failed) and none started or ended
    for ``quiet_s`` (``activity[0]``: when one last did, kept by the page's request events): the
    condition itself. Time the caller spent measuring the page counts toward it, so a page that
    was quiet while it was measured is not waited on again. Chromium's "networkidle" also counts
    connections the page never reports, and twice in two fresh-clone runs under load it never
    came with nothing of the page's in flight (45 s)."""
    limit = patience(10_000) / 1000
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if not loading and time.monotonic() - activity[0] >= quiet_s:
            return
        page.wait_for_timeout(100)                  # lets the page's events arrive
    raise AssertionError(f"{url}: requests still loading after {limit:.0f} s: {sorted(loading.values())}")


def _wait_until_settled(page: Any, loading: dict[Any, str], activity: list[float], url: str) -> None:
    """Wait until no request of the page is in flight (quiet for no time at all) and its fonts are
    in: what it shows is then laid out for good, and can be measured."""
    _wait_until_quiet(page, loading, activity, url, quiet_s=0.0)
    page.evaluate("() => document.fonts.ready.then(() => true)")


def visit(browser: Any, url: str, screenshot: Path | None = None, after_load: str | None = None,
          collect: str | None = None, redirects_to: str | None = None,
          layout_widths: tuple[int, ...] = (), context: Any = None, tab: Any = None) -> Visit:
    """Open `url` in a fresh browser context (or a new tab of ``context``, whose cache it then
    shares, or in ``tab``, an open tab that stays open for the next page); record everything the
    page asks for and reports.

    With ``layout_widths`` (the first must be the 1280 px it opens at) the page's layout report is
    taken at each width in turn, resizing the same page, with a screenshot at each when
    ``screenshot`` is given (its stem gets ``-WIDTH`` appended)."""
    result = Visit(url)
    own = context is None and tab is None
    if own:
        context = new_context(browser)
    page = tab if tab is not None else context.new_page()
    if tab is not None and page.viewport_size != DESKTOP:   # the last page ended at a phone's width
        page.set_viewport_size(DESKTOP)
    loading: dict[Any, str] = {}        # requests in flight (_wait_until_quiet)
    activity = [time.monotonic()]       # when a request last started or ended (_wait_until_quiet)

    def requested(r: Any) -> None:
        result.requests.append(r.url)
        loading[r] = r.url
        activity[0] = time.monotonic()
        if not _is_local(r.url):
            result.external.append(r.url)

    def finished(r: Any) -> None:
        loading.pop(r, None)
        activity[0] = time.monotonic()

    def failed(r: Any) -> None:
        finished(r)
        if _is_local(r.url):
            result.failed_requests.append(f"{r.url}: {r.failure}")

    handlers = {
        "request": requested,
        "requestfinished": finished,
        "requestfailed": failed,
        "response": lambda r: result.bad_responses.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        "console": lambda m: result.console_errors.append(m.text) if m.type == "error" else None,
        "pageerror": lambda e: result.page_errors.append(str(e)),
    }
    for event, handler in handlers.items():
        page.on(event, handler)
    try:
        response = page.goto(url, wait_until="load", timeout=patience(30_000))
        result.status = response.status if response else None
        if redirects_to:  # e.g. the top-level index.html, a meta-refresh to book/index.html
            page.wait_for_url(redirects_to, timeout=patience(15_000))
            page.wait_for_load_state("load")
        if page.evaluate("() => document.querySelectorAll('.math').length") > 0:
            try:
                page.wait_for_function(MATHJAX_DONE, timeout=patience(MATHJAX_TIMEOUT_MS))
            except PlaywrightTimeout:
                pass  # the report says what did not typeset
            result.mathjax = page.evaluate(MATHJAX_REPORT)
        if after_load:
            page.wait_for_function(after_load, timeout=patience(15_000))
        if collect:
            result.collected = page.evaluate(collect)
        result.broken_images = page.evaluate(BROKEN_IMAGES)
        _wait_until_settled(page, loading, activity, url)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
        for width in layout_widths:
            if width != page.viewport_size["width"]:
                page.set_viewport_size({"width": width, "height": 900})
            result.layouts[width] = page.evaluate(LAYOUT_REPORT)
            if screenshot is not None:
                page.screenshot(path=str(screenshot.with_name(f"{screenshot.stem}-{width}.jpg")), full_page=True, quality=70)
        if screenshot is not None and not layout_widths:
            page.screenshot(path=str(screenshot), full_page=True)
        _wait_until_quiet(page, loading, activity, url)   # the page asks for nothing more
    finally:
        if tab is None:
            page.close()
        else:   # the tab goes on to the next page; this visit's record stops here
            for event, handler in handlers.items():
                page.remove_listener(event, handler)
        if own:
            context.close()
    return result


@pytest.fixture(scope="module")
def page_visits(browser: Any) -> Iterator[tuple[dict[str, Visit], Any]]:
    """One load per page, shared by the offline check and the layout check of that page; the
    module's pages open one after another in one tab of one context, so the theme's scripts,
    MathJax and the fonts come from its cache after the first page, and no page pays for a new tab's
    renderer (measured: 3.1 s a page with a fresh context each time, 2.5 s with a tab each, and
    1.7 CPU-s less per page in one tab). The first page of each module is a first visit."""
    context = new_context(browser)
    try:
        yield {}, context.new_page()
    finally:
        context.close()


def _page_visit(visits: tuple[dict[str, Visit], Any], browser: Any, site_url: str, site_page: str) -> Visit:
    done, tab = visits
    if site_page not in done:
        shot = SCREENSHOTS / site_page.replace("/", "__") if TAKE_SCREENSHOTS else None
        done[site_page] = visit(browser, f"{site_url}/{site_page}.html", screenshot=shot,
                                layout_widths=LAYOUT_WIDTHS, tab=tab)
    return done[site_page]


def test_page_works_offline(browser: Any, site_page: str, site_url: str, html_dir: Path,
                            page_visits: tuple[dict[str, Visit], Any]) -> None:
    if not (html_dir / f"{site_page}.html").is_file():
        if site_page == "genindex":
            pytest.skip("no genindex.html in this build")
        pytest.fail(f"{site_page}.html was not built")
    source = (html_dir / f"{site_page}.html").read_text(encoding="utf-8")
    has_math = 'class="math' in source
    v = _page_visit(page_visits, browser, site_url, site_page)

    assert v.status == 200, f"{site_page}: HTTP {v.status}"
    assert not v.problems(), f"{site_page}:\n  " + "\n  ".join(v.problems())
    assert v.requests and all(_is_local(u) for u in v.requests)
    if has_math:
        mj = v.mathjax
        assert mj is not None and mj["math"] > 0, f"{site_page}: math in the HTML but no math nodes in the page"
        assert mj["rendered"] > 0, f"{site_page}: {mj['math']} math nodes but no MathJax output"
        assert not mj["unrendered"], f"{site_page}: math not typeset: {mj['unrendered']}"
        assert not mj["errors"], f"{site_page}: MathJax errors: {mj['errors']}"
        assert not mj["signals"], f"{site_page}: TeX errors: {mj['signals']}"
        assert not mj["raw"], f"{site_page}: raw TeX delimiters left in the text: {mj['raw']}"


def test_a_page_asking_another_host_is_caught_and_never_reaches_it(browser: Any, tmp_path: Path) -> None:
    """No route intercepts requests: the launch's dead proxy keeps other hosts out of reach, and
    the visit still records the request as external."""
    page = tmp_path / "cdn page.html"
    page.write_text('<html><body><p>x</p><img src="http://cdn.example.com/x.png">'
                    '<script src="https://cdn.example.com/x.js"></script></body></html>', encoding="utf-8")
    context = new_context(browser)
    failures: list[str] = []
    context.on("requestfailed", lambda r: failures.append(f"{r.url} {r.failure}"))
    try:
        v = visit(browser, page.as_uri(), context=context)
    finally:
        context.close()
    assert sorted(v.external) == ["http://cdn.example.com/x.png", "https://cdn.example.com/x.js"], v.external
    assert "external" in " ".join(v.problems())
    # stopped at this machine's closed port, on a machine with network access too
    assert sorted(failures) == [f"{u} net::ERR_PROXY_CONNECTION_FAILED" for u in sorted(v.external)], failures


def test_a_request_a_page_makes_after_it_was_measured_is_still_caught(browser: Any, tmp_path: Path) -> None:
    """The visit measures the page, then waits until no request has started or ended for half a
    second: a page that asks another host for something a moment after it has loaded (a late
    script, a lazy image) is caught even when it was measured before the request left."""
    page = tmp_path / "late page.html"
    page.write_text('<html><body><main><article class="bd-article"><p>x</p></article></main>'
                    '<script>setTimeout(() => { new Image().src = '
                    '"http://late.example.com/x.png"; }, 300);</script></body></html>', encoding="utf-8")
    v = visit(browser, page.as_uri(), layout_widths=LAYOUT_WIDTHS)
    assert sorted(v.layouts) == sorted(LAYOUT_WIDTHS)
    assert v.external == ["http://late.example.com/x.png"], v.requests


def test_search_works_offline(browser: Any, site_url: str) -> None:
    results = "() => document.querySelectorAll('#search-results ul.search li').length > 0"
    v = visit(browser, f"{site_url}/search.html?q=FLOPs", after_load=results,
              collect="() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.href)",
              screenshot=SCREENSHOTS / "search.png" if TAKE_SCREENSHOTS else None)
    assert not v.problems(), "search page:\n  " + "\n  ".join(v.problems())
    assert any(u.endswith("/searchindex.js") for u in v.requests), "search index not loaded"
    assert any("book/01_flops.html" in link for link in v.collected), f"search for FLOPs found {v.collected}"


def test_book_opens_from_the_file_system(browser: Any, html_dir: Path) -> None:
    """`make book` tells readers to open _build/html/index.html directly: file:// must work too."""
    start = visit(browser, (html_dir / "index.html").as_uri(), redirects_to="**/book/index.html")
    assert not start.problems(), "index.html (file://):\n  " + "\n  ".join(start.problems())
    chapter = visit(browser, (html_dir / "book" / "01_flops.html").as_uri())
    assert not chapter.problems(), "chapter 1 (file://):\n  " + "\n  ".join(chapter.problems())
    assert chapter.mathjax and chapter.mathjax["rendered"] > 0 and not chapter.mathjax["unrendered"]
    found = visit(browser, (html_dir / "search.html").as_uri() + "?q=FLOPs",
                  after_load="() => document.querySelectorAll('#search-results ul.search li').length > 0")
    assert not found.problems(), "search (file://):\n  " + "\n  ".join(found.problems())


def test_language_switch_lands_on_the_same_section(browser: Any, html_dir: Path) -> None:
    """English -> 中文 -> English from file://: the switch keeps the section the reader is in."""
    context = browser.new_context(viewport=DESKTOP)
    context.route("**/_static/mathjax/**", lambda route: route.abort())   # not needed here; saves seconds
    try:
        page = context.new_page()
        page.goto((html_dir / "book" / "01_flops.html").as_uri() + "#sec-01-mfu", wait_until="domcontentloaded")
        page.click("a.course-lang-twin")
        page.wait_for_url("**/book/zh/01_flops.html#zh-sec-01-mfu", wait_until="domcontentloaded")
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        page.goto((html_dir / "book" / "zh" / "01_flops.html").as_uri() + "#zh-sec-01-days", wait_until="domcontentloaded")
        page.click("a.course-lang-twin")
        page.wait_for_url("**/book/01_flops.html#sec-01-days", wait_until="commit")
    finally:
        context.close()


# ------------------------------------------------------------------ layout (issue #21): readable pages
LAYOUT_WIDTHS = (1280, 390)   # the first is the width visit() opens a page at
# In the article: every block whose content is wider than its box scrolls (overflow-x auto/scroll),
# and nothing outside a scrolling box sticks out past the column (which would be cut off or widen
# the page). Inline boxes and MathJax internals are skipped; MathJax display math scrolls itself.
LAYOUT_REPORT = """() => {
    const article = document.querySelector('main .bd-article') || document.querySelector('main');
    const col = article.getBoundingClientRect();
    const scrolls = v => v === 'auto' || v === 'scroll';
    const name = e => e.tagName.toLowerCase() + [...e.classList].slice(0, 2).map(c => '.' + c).join('');
    const clipped = [];
    for (const e of article.querySelectorAll('*')) {
        const cs = getComputedStyle(e);
        if (cs.display.startsWith('inline') || cs.display === 'none' || !e.getClientRects().length) continue;
        if (e.closest('.MathJax, .MathJax_Display, .MathJax_Preview, mjx-container')) continue;
        let inScroller = false;
        for (let p = e.parentElement; p && p !== article; p = p.parentElement)
            if (scrolls(getComputedStyle(p).overflowX)) { inScroller = true; break; }
        const what = `${name(e)} "${e.textContent.trim().slice(0, 50)}"`;
        if (e.scrollWidth > e.clientWidth + 1 && !scrolls(cs.overflowX))
            clipped.push(`${what}: content ${e.scrollWidth} px in ${e.clientWidth} px, overflow-x ${cs.overflowX}`);
        else if (!inScroller && e.getBoundingClientRect().right > col.right + 1)
            clipped.push(`${what}: right edge past the column`);
    }
    const pre = article.querySelector('div.highlight pre, div.cell_output pre');
    let fits100 = null;
    if (pre) {
        const probe = document.createElement('span');
        probe.textContent = 'x'.repeat(100);
        pre.appendChild(probe);
        fits100 = probe.getBoundingClientRect().width <= pre.clientWidth;
        probe.remove();
    }
    // Issue #34: a figure keeps its shape. Every decoded image in the article is drawn at the aspect
    // ratio of its own pixels (within 2 %), whatever the column's width.
    const squashed = [];
    for (const img of article.querySelectorAll('img')) {
        const r = img.getBoundingClientRect();
        if (!img.naturalWidth || !img.naturalHeight || r.width < 2 || r.height < 2) continue;
        const ratio = (r.width / r.height) / (img.naturalWidth / img.naturalHeight);
        if (Math.abs(ratio - 1) > 0.02)
            squashed.push(`${(img.getAttribute('src') || '').split('/').pop()}: drawn ${r.width.toFixed(0)}x` +
                          `${r.height.toFixed(0)} px for ${img.naturalWidth}x${img.naturalHeight} (aspect x${ratio.toFixed(2)})`);
    }
    // A wide results table (five columns or more) scrolls inside its box with one line per row, so
    // it stays short on a phone instead of squeezing its columns into word-wide strips.
    const tallRows = [], tallTables = [], unpinned = [];
    for (const t of article.querySelectorAll('table')) {
        if (!t.querySelector('tr > :nth-child(5)')) continue;
        // ... and is at most two screens tall (chapter 13's published runs were 1,790 px at 390),
        // its first column pinned while it scrolls on a phone
        const height = t.getBoundingClientRect().height;
        if (height > 2 * innerHeight)
            tallTables.push(`${name(t)} "${t.textContent.trim().slice(0, 40)}": ${height.toFixed(0)} px, ` +
                            `${(height / innerHeight).toFixed(1)} screens of ${innerHeight} px`);
        const first = t.querySelector('tbody tr > :first-child');
        if (innerWidth <= 768 && first && getComputedStyle(first).position !== 'sticky')
            unpinned.push(`${name(t)} "${t.textContent.trim().slice(0, 40)}"`);
        // (the course map is the exception: its chapter titles wrap at spaces, checked below)
        for (const tr of t.classList.contains('course-map') ? [] : t.querySelectorAll('tbody tr')) {
            const cell = tr.querySelector('td');
            const line = cell ? parseFloat(getComputedStyle(cell).lineHeight) || 24 : 24;
            if (tr.getBoundingClientRect().height > 2.5 * line + 24)
                tallRows.push(`${name(t)} row "${tr.textContent.trim().slice(0, 40)}": ` +
                              `${tr.getBoundingClientRect().height.toFixed(0)} px tall`);
        }
    }
    // The landing page's course map at a phone's width: no word broken (nothing overflows a cell that
    // may only wrap at spaces), and a lab's time on the first screen, beside its chapter.
    const mapProblems = [];
    for (const t of article.querySelectorAll('table.course-map')) {
        const scroller = t.closest('.pst-scrollable-table-container') || t.parentElement;
        const right = scroller.getBoundingClientRect().right;
        for (const td of t.querySelectorAll('td')) {
            const cs = getComputedStyle(td);
            if (cs.overflowWrap !== 'normal' || cs.wordBreak !== 'normal' || td.scrollWidth > td.clientWidth + 1)
                mapProblems.push(`cell "${td.textContent.trim().slice(0, 30)}" may break a word`);
        }
        const time = t.querySelector('tbody tr > :nth-child(4)');
        if (innerWidth <= 400 && time && time.getBoundingClientRect().right > right + 1)
            mapProblems.push(`the lab time ends at ${time.getBoundingClientRect().right.toFixed(0)} px, past the first screen`);
    }
    const doc = document.documentElement;
    const copy = (document.querySelector('main') || document.body).cloneNode(true);
    copy.querySelectorAll('pre, code, script, style, textarea, .MathJax, .MathJax_Display, .MathJax_Preview, ' +
                          '.MathJax_SVG, .math, mjx-container').forEach(e => e.remove());
    const text = copy.textContent;
    const searchBoxes = [...document.querySelectorAll('.search-button, .search-button-field')].filter(e => {
        const r = e.getBoundingClientRect(), st = getComputedStyle(e);
        return r.width > 0 && r.height > 0 && st.visibility !== 'hidden' && st.display !== 'none'; }).length;
    return {clipped, fits100, squashed, tallRows, tallTables, unpinned, mapProblems, searchBoxes, pageOverflow: doc.scrollWidth - doc.clientWidth,
            tex: text.match(/\\\\[A-Za-z]{2,}/g) || [],
            widgetRepr: (document.body.innerText.match(/[HV]Box\\(children/g) || []).length};
}"""


def test_page_reads_well(browser: Any, site_page: str, site_url: str, html_dir: Path,
                         page_visits: tuple[dict[str, Visit], Any]) -> None:
    """Issue #21: nothing clipped at desktop and phone widths, a 100-column print fits the desktop
    column, no widget repr, no raw TeX commands outside math; issue #34: every figure keeps its
    aspect ratio (within 2 %) at both widths, and a table of five or more columns keeps its rows one
    line tall (it scrolls sideways instead, its first column pinned on a phone) and is at most two
    screens tall."""
    if not (html_dir / f"{site_page}.html").is_file():
        pytest.skip(f"no {site_page}.html in this build")
    layouts = _page_visit(page_visits, browser, site_url, site_page).layouts
    assert sorted(layouts) == sorted(LAYOUT_WIDTHS), f"{site_page}: measured at {sorted(layouts)} px only"
    for width in LAYOUT_WIDTHS:
        r = layouts[width]
        assert not r["clipped"], f"{site_page} at {width} px, clipped:\n  " + "\n  ".join(r["clipped"][:10])
        assert not r["squashed"], (f"{site_page} at {width} px, figures drawn out of shape:\n  "
                                   + "\n  ".join(r["squashed"][:10]))
        assert not r["tallRows"], (f"{site_page} at {width} px, wide tables wrap their rows:\n  "
                                   + "\n  ".join(r["tallRows"][:10]))
        assert not r["tallTables"], (f"{site_page} at {width} px, wide tables over two screens tall:\n  "
                                     + "\n  ".join(r["tallTables"][:10]))
        assert not r["mapProblems"], f"{site_page} at {width} px, the course map: " + "; ".join(r["mapProblems"])
        assert not r["unpinned"], (f"{site_page} at {width} px, wide tables whose first column scrolls away:\n  "
                                   + "\n  ".join(r["unpinned"][:10]))
        assert r["pageOverflow"] <= 1, f"{site_page} at {width} px: the page scrolls sideways by {r['pageOverflow']} px"
        assert r["searchBoxes"] == 1, f"{site_page} at {width} px: {r['searchBoxes']} search boxes on screen, not one"
        if width >= 1200:
            assert r["fits100"] in (None, True), f"{site_page}: a 100-character line does not fit a code block at {width} px"
            assert not r["tex"], f"{site_page}: raw TeX in the visible text: {sorted(set(r['tex']))}"
            assert r["widgetRepr"] == 0, f"{site_page}: a widget prints its repr instead of its static fallback"


def test_citations_read_author_year(html_dir: Path) -> None:
    """Citations name the authors and year ([Hoffmann et al., 2022]), not an alpha label ([HBM+22]):
    book/_config.yml sets bibtex_reference_style where Sphinx sees it."""
    import re
    page = (html_dir / "book" / "02_scaling.html").read_text(encoding="utf-8")
    cites = re.findall(r'<a class="reference internal" href="references\.html#[^"]*"[^>]*>([^<]+)</a>', page)
    assert cites, "chapter 2 cites nothing"
    assert not [c for c in cites if re.fullmatch(r"[A-Z]{1,4}\+?\d{2}", c.strip())], f"alpha labels: {cites[:5]}"
    assert any(re.search(r"(19|20)\d{2}", c) for c in cites), f"no year in the citations: {cites[:5]}"
