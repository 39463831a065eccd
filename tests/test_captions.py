"""Captions that teach (issue #34): every figure of the book and the labs, read from the sources
(no book build): the caption each one will get from book/_ext/course_figures.py and its alt text.

A chapter page's figure has a written caption (``mystnb: figure: caption`` in its cell's options)
that says what the plot shows and what to notice, and every number in it is glued from the code
(the prose rule of test_prose_numbers, applied to captions). Nowhere, labs included, does a
caption or an alt text hold a placeholder ("…", a "{name}" left unformatted); no two captions are
the same sentence; each names a quantity. The built site's figures are checked again, rendered,
in test_site_static.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from myst_nb.core.read import read_myst_markdown_notebook

from test_prose_numbers import CODE_LITERAL, GLOBAL, NUMBER, PAGES, STRIP, code_inputs, is_input

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("course_figures", ROOT / "book" / "_ext" / "course_figures.py")
assert _spec and _spec.loader
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)

# A chapter page's cell draws a plot when it shows one or calls a course drawer.
DRAWS = re.compile(r"plt\.show\(|\b(?:gantt|sim|simulate)\.draw\(|\w+_figure\(")
GLUE = re.compile(r"\{glue(?::text|:md)?\}`[^`]*`")
# What a caption may measure by: a number, a glued value, or a quantity (unit or measured word).
QUANTITY = re.compile(
    r"\d|\{glue|%|\b(?:FLOPs?|bytes?|[kMGT]B|ms|seconds?|hours?|days?|tokens?|loss|nats|fraction|share|"
    r"ratio|error|bubble|utili[sz]ation|MFU|goodput|memory|time|steps?|rate|probability|spacing|sum|"
    r"cost|dollars|size|parameters|compute|lag|ranks?|count|degree|throughput|speed)\b", re.I)


def _figure_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("mystnb", {})
    return {"caption": (meta.get("figure") or {}).get("caption"), "alt": (meta.get("image") or {}).get("alt")}


# A figure a cell glues once per edition (issue #49) and the English page pastes with its caption.
GLUED_FIGURE = re.compile(r"^```\{glue:figure\} (\S+)\n((?::[\w-]+:[^\n]*\n)*)\n(.+?)\n```$", re.S | re.M)


def _figures() -> list[tuple[str, int | str, str, str | None, str | None]]:
    """(page, cell index or glue name, code, written caption or None, alt text) of every figure."""
    out = []
    for page in sorted((ROOT / "book").glob("[01][0-9]_*.md")):
        nb = read_myst_markdown_notebook(page.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb.cells):
            # a cell that draws for glue (plots.glued) shows nothing itself: its figures are below
            if cell.cell_type == "code" and DRAWS.search(cell.source) and "plots.glued(" not in cell.source:
                out.append((f"book/{page.name}", i, cell.source, *_figure_meta(cell).values()))
        for m in GLUED_FIGURE.finditer(page.read_text(encoding="utf-8")):
            alt = re.search(r"^:alt: (.*)$", m[2], re.M)
            out.append((f"book/{page.name}", f"glue {m[1]}", "", " ".join(m[3].split()), alt and alt[1]))
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and any("image/png" in o.get("data", {}) for o in cell.outputs):
                out.append((f"notebooks/{path.name}", i, cell.source, *_figure_meta(cell).values()))
    return out


FIGURES = _figures()


def _caption_and_alt(code: str, caption: str | None, alt: str | None) -> tuple[str, str]:
    """What the extension gives the figure: a written caption (glue roles as in the source) and the
    alt text built from it, or the caption and alt text generated from the code."""
    if caption:
        return caption, alt or " ".join(filter(None, [caption, figures.details(code)]))
    generated = figures.describe(code) or ("", "")
    return generated[0], alt or generated[1]


def _placeholders(text: str) -> list[str]:
    bare = GLUE.sub("", text)
    bare = re.sub(r"\$[^$]*\$", "", bare)                 # math may hold braces
    return re.findall(r"…|\{[^}]*\}|\.\.\.", bare)


def typed_in(caption: str, allowed: list[tuple[str, str]], inputs: set[float]) -> list[str]:
    """The numbers of a caption that test_prose_numbers would call typed by hand: not glued, not
    math or code, not on the page's allowlist, not an input literal of the page's code."""
    text = caption
    for pattern in STRIP:
        text = pattern.sub(" ", text)
    for pattern, _ in GLOBAL + allowed:
        text = re.sub(pattern, " ", text)
    return [m.group(0) for m in NUMBER.finditer(text) if not is_input(m.group(0), text[m.end():], inputs)]


def notebook_inputs(path: Path) -> set[float]:
    """The numeric literals of a lab's code cells, the inputs it runs with (a lab cannot glue)."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    # literals, and numbers written into the code's own strings (a title's "LR x50", "CF 1")
    return ({float(m.replace("_", "")) for m in CODE_LITERAL.findall(code)}
            | {float(m) for m in re.findall(r"(?<![\d.])\d+(?:\.\d+)?", code)})


def test_the_figures_are_found() -> None:
    pages = {p for p, *_ in FIGURES}
    assert sum(p.startswith("book/") for p, *_ in FIGURES) > 30 and len(FIGURES) > 70
    assert {"book/05_pipeline.md", "notebooks/04_dp_fsdp_lab.ipynb"} <= pages


def test_every_chapter_figure_has_a_written_caption_that_glues_its_numbers() -> None:
    bad = []
    for page, i, _code, caption, _alt in FIGURES:
        if not page.startswith("book/"):
            continue
        where = f"{page} cell {i}"
        if not caption:
            bad.append(f"{where}: no written caption (mystnb: figure: caption: ...)")
            continue
        if len(caption.split()) < 15:
            bad.append(f"{where}: caption too short to say what to notice: {caption!r}")
        if typed := typed_in(caption, PAGES.get(Path(page).name, []), code_inputs(ROOT / page)):
            bad.append(f"{where}: numbers typed in the caption (glue them): {typed} in {caption!r}")
    assert not bad, "\n".join(bad)


def test_every_lab_figure_has_a_written_caption_whose_numbers_are_the_lab_s_inputs() -> None:
    """A lab's figure is drawn when a reader runs it, on their machine: its caption cannot glue, so
    it may only quote what the lab runs with (2 ranks, 16 bands of 8 rows), never a result."""
    bad = []
    for page, i, _code, caption, _alt in FIGURES:
        if not page.startswith("notebooks/"):
            continue
        where = f"{page} cell {i}"
        if not caption or len(caption.split()) < 15:
            bad.append(f"{where}: no written caption that says what to notice: {caption!r}")
            continue
        if typed := typed_in(caption, PAGES.get(Path(page).name, []), notebook_inputs(ROOT / page)):
            bad.append(f"{where}: numbers in the caption that the lab does not run with: {typed} in {caption!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind", ["caption", "alt"])
def test_no_caption_or_alt_text_holds_a_placeholder(kind: str) -> None:
    bad = []
    for page, i, code, caption, alt in FIGURES:
        text = _caption_and_alt(code, caption, alt)[kind == "alt"]
        if not text:
            bad.append(f"{page} cell {i}: no {kind}")
        elif found := _placeholders(text):
            bad.append(f"{page} cell {i}: {kind} holds {found}: {text[:120]!r}")
    assert not bad, "\n".join(bad)


def test_captions_are_distinct_and_name_a_quantity() -> None:
    seen: dict[str, str] = {}
    bad = []
    for page, i, code, caption, alt in FIGURES:
        text, _ = _caption_and_alt(code, caption, alt)
        key = re.sub(r"\W+", " ", text).strip().lower()
        if key in seen:
            bad.append(f"{page} cell {i}: the same caption as {seen[key]}: {text[:100]!r}")
        seen[key] = f"{page} cell {i}"
        if not QUANTITY.search(text):
            bad.append(f"{page} cell {i}: caption names no quantity: {text!r}")
    assert not bad, "\n".join(bad)


def test_a_written_caption_leads_the_alt_text_and_placeholders_are_dropped() -> None:
    code = ('ax.plot(x, y, label="measured")\nax.plot(x, z, label=f"theory, n={n}")\n'
            'ax.set(xlabel="ranks $n$", ylabel="error", title=f"p={p}")\nplt.show()')
    assert figures.describe(code) == ("error against ranks n.", "error against ranks n. Series: measured.")
    assert figures.details(code) == "Plotted: error against ranks n. Series: measured."
    assert figures.details(code, "zh") == "图中：error 随 ranks n 的变化。曲线：measured。"   # a Chinese page
    assert _caption_and_alt(code, "Error grows as √n up to {glue:text}`n8:.2f`.", None)[1] == (
        "Error grows as √n up to {glue:text}`n8:.2f`. Plotted: error against ranks n. Series: measured.")
    assert _placeholders("bubble {glue:text}`b:.1%` at $m_{i}$") == []
    assert _placeholders("p=…, {m} ranks") == ["…", "{m}"]
    assert figures.plain_math(r"J^* \approx (1/b)^{1/r}, \sqrt{2\delta M}, f_\text{min}, 2^{-16}, 2^{e-m}") == \
        "J^* ≈ (1/b)^(1/r), √(2δ M), f_min, 2^-16, 2^(e-m)"
    assert typed_in("The bubble is 27.3 % at $m = 8$ on 4 ranks, {glue:text}`b:.1%` in chapter 5.", [], {4.0}) \
        == ["27.3"]


def _png(width: int, height: int, dpi: float | None) -> bytes:
    """A PNG's signature, IHDR and (with ``dpi``) pHYs chunks: all css_width reads."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
    if dpi:
        ppm = round(dpi / 0.0254)
        head += chunk(b"pHYs", struct.pack(">IIB", ppm, ppm, 1))
    return head + chunk(b"IEND", b"")


def test_a_wide_plot_is_marked_to_be_drawn_readably_on_a_phone(tmp_path: Path) -> None:
    """Issue #43: a plot wider than a phone's column can show readably (chapter 5's 971 px panels drew
    4.9 px labels in 342 px) gets course-wide-figure and course-minw-N (N >= 55 % of its own width),
    from the output's width or, for a lab's stored plot, the PNG's pixels at its resolution; a
    6.4-inch plot is left alone; and course.css has a rule for every N the extension can write."""
    from docutils import nodes
    (tmp_path / "wide.png").write_bytes(_png(1011, 351, 100))
    (tmp_path / "retina.png").write_bytes(_png(2022, 702, 200))
    assert figures.css_width(nodes.image(uri="/wide.png"), str(tmp_path)) == pytest.approx(1011, abs=1)
    assert figures.css_width(nodes.image(uri="/retina.png"), str(tmp_path)) == pytest.approx(1011, abs=1)
    assert figures.css_width(nodes.image(uri="x.png", width="971")) == 971

    def classes(width: str) -> list[str]:
        figure, bundle = nodes.figure(), nodes.container()
        bundle += nodes.image(uri="x.png", width=width)
        figure += bundle
        figures.mark_wide(figure, bundle)
        return figure["classes"]
    assert classes("651") == []
    assert classes("971") == ["course-wide-figure", "course-minw-550"]      # 0.55 x 971 = 534 -> 550
    assert classes("5000") == ["course-wide-figure", f"course-minw-{figures.WIDEST}"]
    css = (ROOT / "book" / "_static" / "course.css").read_text(encoding="utf-8")
    least = figures.STEP * -(-figures.READABLE * figures.WIDE // figures.STEP)
    for n in range(int(least), figures.WIDEST + 1, figures.STEP):
        assert f"figure.course-minw-{n} img {{ width: max(100%, {n}px) !important; }}" in css, n
