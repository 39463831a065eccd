"""Wide tables and figures read at a phone's 390 px and a desktop's 1280 px (issue #43, items 12-15).

The reviewer found, in Chromium: the landing page's course map showing only "#" and "chapter" at
1280 px (a 1,453 px table in an 800 px column, the labs and solutions off-screen, no sign that it
scrolled); chapter 13's published runs showing no number on a phone's first screen; multi-panel
figures shrunk to 3-5 px labels on a phone; a lab's time stated three ways. Here: every wide table
either shows all its columns or scrolls with a visible cue, at both widths; the course map fits a
desktop column; each row of chapter 13's table shows a number on a phone's first screen; every
figure draws matplotlib's 10-point labels at least ``MIN_LABEL_PX`` tall (a wide one scrolls, with
the cue, to get there); the labs show the measured time of ``make bench``; chapter 13's MFU sweep
ticks the values it plots.

Needs the built book (fixture ``html_dir``) and Debian's Chromium (``browser``, from tests/test_site.py).
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from test_site import DESKTOP, browser  # noqa: F401  (the Chromium fixture, shared with the site test)

ROOT = Path(__file__).resolve().parents[1]
PHONE = {"width": 390, "height": 844}
TABLE_PAGES = ("book/index", "book/11_tensor_context", "book/13_plan", "book/14_expert_parallel",
               "book/zh/index", "book/zh/13_plan")
FIGURE_PAGES = ("book/02_scaling", "book/05_pipeline", "book/06_stability", "book/09_distill", "book/13_plan",
                "book/14_expert_parallel", "notebooks/05_pipeline_lab", "notebooks/13_plan_lab")
# matplotlib's 10-point labels are 13.9 px at the 100 dpi of a plot's own width; drawn at half that
# width or more they stay >= 7 px, what a 6.4-inch single-panel plot gets in a phone's column
LABEL_PX, MIN_LABEL_PX = 10 / 72 * 100, 7.0


# Resolves once the page has stopped moving: no CSS transition or animation running (the theme
# slides its sidebar in when a window widens past a phone's), then two frames more, the one where a
# ResizeObserver hears the last size change and the one where course_scroll.js, acting in a
# requestAnimationFrame, marks the boxes.
SETTLED = """() => new Promise(done => {
    let calm = 0;
    const tick = () => {
        const moving = document.getAnimations().some(a => a.playState === 'running' &&
            !(a.effect && a.effect.getComputedTiming().endTime === Infinity));   // not a spinner
        calm = moving ? 0 : calm + 1;
        if (calm >= 3) done(true); else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
})"""


@pytest.fixture(scope="module")
def open_page(browser: Any, site_url: str, html_dir: Path) -> Iterator[Any]:  # noqa: F811
    """``open_page(docname, viewport)``: one tab, a page loaded (images decoded, scripts run) at that
    size. The page the tab already shows is resized instead of loaded again, as a reader turns a
    phone or widens a window: course_scroll.js lays the page out on "resize" with the same function
    as on "load" (update), so each page is loaded once, at a phone's width (the tests below ask for
    its widths in turn, the phone's first), and checked at both."""
    context = browser.new_context(viewport=DESKTOP, service_workers="block")
    page = context.new_page()

    def go(docname: str, viewport: dict) -> Any:
        if not (html_dir / f"{docname}.html").is_file():
            pytest.skip(f"no {docname}.html in this build")
        page.set_viewport_size(viewport)
        url = f"{site_url}/{docname}.html"
        if page.url != url:
            page.goto(url, wait_until="load")
        page.evaluate(SETTLED)              # the resize/load handlers of course_scroll.js have run
        return page
    try:
        yield go
    finally:
        context.close()


# For each table of five or more columns in the article: the columns past its box's visible right
# edge, and whether the box says it scrolls (a visible "scroll sideways" line just before it).
TABLES = """() => {
    const article = document.querySelector('main .bd-article');
    const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    const visible = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
        return r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility !== 'hidden'; };
    const out = [];
    for (const t of article.querySelectorAll('table')) {
        if (!t.querySelector('tr > :nth-child(5)')) continue;
        let box = t.parentElement;
        while (box && box !== article && !scrolls(box)) box = box.parentElement;
        const right = Math.min(box.getBoundingClientRect().right, innerWidth);
        const hidden = [...t.querySelectorAll('thead th, tr:first-child > th')]
            .filter(th => th.getBoundingClientRect().right > right + 1).map(th => th.textContent.trim());
        let cue = box.previousElementSibling;
        const cued = !!cue && cue.classList.contains('course-scroll-cue') && visible(cue)
                     && box.getAttribute('data-course-scrolls') === 'more';
        out.push({head: [...t.querySelectorAll('th')].slice(0, 3).map(th => th.textContent.trim()).join(' | '),
                  map: t.classList.contains('course-map'), hidden, cued,
                  width: Math.round(t.getBoundingClientRect().width), box: Math.round(box.clientWidth)});
    }
    return out;
}"""


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])   # a page's widths in turn
@pytest.mark.parametrize("docname", TABLE_PAGES)
def test_wide_tables_show_every_column_or_say_they_scroll(open_page: Any, docname: str, viewport: dict) -> None:
    """Issue #43 item 12: at 1280 px the course map showed "#" and "chapter" only, and nothing said
    that it scrolled. A table whose columns do not all fit on screen must say so where it starts;
    the course map must fit a desktop column outright."""
    tables = open_page(docname, viewport).evaluate(TABLES)
    assert tables, f"{docname}: no table of five or more columns found"
    for t in tables:
        if t["map"] and viewport is DESKTOP:
            assert not t["hidden"], (f"{docname} at 1280 px: the course map is {t['width']} px in a "
                                     f"{t['box']} px column, {t['hidden']} off-screen")
        assert not t["hidden"] or t["cued"], (
            f"{docname} at {viewport['width']} px: table '{t['head']}' ({t['width']} px in {t['box']} px) hides "
            f"{t['hidden']} to the right and nothing on screen says it scrolls")


# Each body row of the table whose header names "ratio": the numbers wholly inside the box's visible
# part, before any scrolling (the first screen).
FIRST_SCREEN = """() => {
    const article = document.querySelector('main .bd-article');
    const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    const t = [...article.querySelectorAll('table')].find(t =>
        [...t.querySelectorAll('th')].some(th => th.textContent.trim() === 'ratio'));
    if (!t) return null;
    let box = t.parentElement;
    while (box && box !== article && !scrolls(box)) box = box.parentElement;
    const b = box.getBoundingClientRect(), right = Math.min(b.right, innerWidth);
    return [...t.querySelectorAll('tbody tr')].map(tr => {
        const cells = [...tr.children];
        const seen = cells.slice(1).filter(td => {     // the text itself, not its cell's width
            const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT), range = document.createRange();
            let left = Infinity, end = -Infinity;
            for (let n = walk.nextNode(); n; n = walk.nextNode()) {
                if (!n.textContent.trim()) continue;
                range.selectNodeContents(n);
                const r = range.getBoundingClientRect();
                left = Math.min(left, r.left); end = Math.max(end, r.right);
            }
            return left >= b.left - 1 && end <= right + 1 && /\\d/.test(td.textContent); });
        return {row: cells[0].textContent.trim(), numbers: seen.map(td => td.textContent.trim())};
    });
}"""


def test_chapter_13s_published_runs_show_a_number_on_a_phones_first_screen(open_page: Any) -> None:
    """Issue #43 item 13: at 390 px the first screen of chapter 13's published-runs table held the
    run's name and the unit ("days (no total published)"), and no number."""
    rows = open_page("book/13_plan", PHONE).evaluate(FIRST_SCREEN)
    assert rows, "book/13_plan: no table with a 'ratio' column"
    blind = [r["row"] for r in rows if not r["numbers"]]
    assert not blind, f"book/13_plan at 390 px: rows with no number on the first screen: {blind}"


# Every plot in the article: how tall its 10-point labels are drawn (its drawn width over its own
# width at 100 dpi: the <img>'s width attribute/style, else its pixels), and, when it runs past its
# box, whether that box scrolls and says so.
FIGURES = """(labelPx) => {
    const article = document.querySelector('main .bd-article');
    const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    const visible = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
        return r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility !== 'hidden'; };
    const out = [];
    for (const img of article.querySelectorAll('figure img')) {
        if (!img.naturalWidth || !(img.getAttribute('src') || '').endsWith('.png')) continue;
        const own = parseFloat(img.style.width) || img.naturalWidth;
        const r = img.getBoundingClientRect();
        let box = img.parentElement;
        while (box && box !== article && !scrolls(box)) box = box.parentElement;
        const right = Math.min(box.getBoundingClientRect().right, innerWidth);
        const cue = box.previousElementSibling;
        out.push({src: img.getAttribute('src').split('/').pop().slice(0, 12), own: Math.round(own),
                  drawn: Math.round(r.width), label: labelPx * r.width / own,
                  past: r.right > right + 1, scrolls: box !== article && box.scrollWidth > box.clientWidth,
                  cued: !!cue && cue.classList.contains('course-scroll-cue') && visible(cue)});
    }
    return out;
}"""


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])   # a page's widths in turn
@pytest.mark.parametrize("docname", FIGURE_PAGES)
def test_figures_draw_their_labels_readably(open_page: Any, docname: str, viewport: dict) -> None:
    """Issue #43 item 14: chapter 5's, 13's and 14's multi-panel plots shrank to ~342x120 px on a
    phone, their labels 3-5 px tall. Every plot's labels are drawn >= MIN_LABEL_PX; one that runs
    past the column for it scrolls in its own box, with a visible cue."""
    figures = open_page(docname, viewport).evaluate(FIGURES, LABEL_PX)
    assert figures, f"{docname}: no plot found"
    small = [f"{f['src']}: {f['own']} px drawn {f['drawn']} px, labels {f['label']:.1f} px"
             for f in figures if f["label"] < MIN_LABEL_PX]
    assert not small, f"{docname} at {viewport['width']} px, labels under {MIN_LABEL_PX} px:\n  " + "\n  ".join(small)
    hidden = [f"{f['src']} (scrolls: {f['scrolls']}, cue: {f['cued']})" for f in figures
              if f["past"] and not (f["scrolls"] and f["cued"])]
    assert not hidden, f"{docname} at {viewport['width']} px, plots cut off without a cue: {hidden}"


def test_a_lab_shows_the_time_make_bench_measured(html_dir: Path) -> None:
    """Issue #43 item 15: lab 1's header said "about 15 s", the course map 28 s. A lab's page shows
    the measured time (data/lab_times.json, as the course map does), and no link is left in its place."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from course_labtimes import shown
    seconds = json.loads((ROOT / "data" / "lab_times.json").read_text(encoding="utf-8"))["seconds"]
    for key, secs in seconds.items():
        page = html_dir / "notebooks" / f"{key}.html"
        if not page.is_file():
            continue
        html = page.read_text(encoding="utf-8")
        times = [re.sub(r"\s+", " ", t.get_text()) for t in
                 BeautifulSoup(html, "html.parser").select("main span.course-lab-time")]
        assert times, f"{page.name}: the header shows no measured time"
        assert times[0].startswith(shown(secs) + ", as make bench measured it"), \
            f"{page.name}: shows {times[0]!r}, make bench measured {shown(secs)}"
        assert "lab_times.json" not in html, f"{page.name}: still links data/lab_times.json"


def test_chapter_13s_mfu_sweep_ticks_the_plotted_values() -> None:
    """Issue #43 item 14: the sweep's log axes ticked decades and minor ticks that marked none of the
    plotted widths and sequence lengths, and their labels overlapped."""
    import matplotlib
    matplotlib.use("Agg")
    from course_lib.plan.explore import mfu_figure
    sweeps = {"width": [(1024, 0.2), (2048, 0.3), (4096, 0.4), (8192, 0.5)],
              "seq_len": [(2048, 0.4), (8192, 0.4), (32768, 0.3), (65536, 0.2)],
              "n_gpus": [(128, 0.4), (512, 0.4), (2048, 0.3), (8192, 0.2)]}
    fig = mfu_figure(sweeps)
    fig.canvas.draw()
    for ax, (key, points) in zip(fig.axes, sweeps.items()):
        xs = [x for x, _ in points]
        assert list(ax.get_xticks()) == xs, f"{key}: ticks {list(ax.get_xticks())}, plotted {xs}"
        assert not list(ax.get_xticks(minor=True)), f"{key}: minor ticks mark no plotted value"
        boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), f"{key}: tick labels overlap"
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["2K", "8K", "32K", "64K"]
