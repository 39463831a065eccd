"""One plotting style for the whole course, so every chapter's figures read the same way.

Measured data are drawn as markers in ``MEASURED``; theory as lines in ``THEORY``. Use
``figure()`` to get a styled figure and ``save(fig, path)`` to write a deterministic PNG for the
book (no timestamps in the file, fixed DPI).

A book page draws each figure once per edition (``figure(lang=...)``, words from ``course_lib.i18n``)
and glues both; ``glued(fig)`` gives a Chinese figure's words the CJK font and hands the figure to
``glue`` without the inline backend showing it in the cell too.
"""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

from course_lib.i18n import LANGS, translate

# Okabe & Ito's colour-blind-safe palette (Color Universal Design, 2008): the measured, theory
# and third/fourth series stay distinct under protanopia, deuteranopia and tritanopia.
MEASURED = "#D55E00"   # vermillion: what a run measured
THEORY = "#0072B2"     # blue: what a formula predicts
ACCENT = "#E69F00"     # orange: a third series / annotation
NEUTRAL = "#CC79A7"    # reddish purple: a fourth series
# the four above differ in greyscale luminance by >= 0.07 (tests/test_plots.py), so they also read in print
PALETTE = [THEORY, MEASURED, ACCENT, NEUTRAL, "#009E73", "#56B4E9"]   # + bluish green, sky blue

STYLE = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 100,     # notebooks render at 2x this (retina PNG, see figure()); the repr keeps 640x380
    "savefig.dpi": 150,    # book figures written by save()
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "font.size": 10,
    "legend.frameon": False,
    "svg.hashsalt": "course",
}


def _sharp_inline_figures() -> None:
    """In a Jupyter kernel, render inline figures as 2x ("retina") PNG: 200 dpi images, sharp on
    high-density screens and on the site, while a figure's size and repr stay those of 100 dpi, so
    stored notebook outputs still compare equal. Outside a kernel this does nothing."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        set_matplotlib_formats("retina")


# Fonts with the Chinese glyphs, first found wins (fonts-wqy-microhei is a system requirement of the
# book, README.md; the site's own subset is a WOFF, which matplotlib cannot read).
CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Source Han Sans SC", "Microsoft YaHei", "PingFang SC")
CJK_FONT_FILE = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


def cjk_font() -> str:
    """The name of an installed font that draws Chinese, or RuntimeError saying what to install."""
    from matplotlib import font_manager
    names = {f.name for f in font_manager.fontManager.ttflist}
    if not names & set(CJK_FONTS) and CJK_FONT_FILE.is_file():
        font_manager.fontManager.addfont(str(CJK_FONT_FILE))
        names = {f.name for f in font_manager.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in names:
            return name
    raise RuntimeError("a Chinese figure needs a CJK font and none is installed: "
                       f"install fonts-wqy-microhei (one of {', '.join(CJK_FONTS)})")


def figure(ncols: int = 1, nrows: int = 1, lang: str = "en", **kwargs):
    """A styled ``(fig, axes)`` pair; kwargs go to ``plt.subplots``. ``lang="zh"``: the axes' own
    texts (titles, axis labels) get the CJK font; ``glued`` gives it to the rest."""
    import matplotlib.pyplot as plt
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(map(repr, LANGS))}; got {lang!r}")
    _sharp_inline_figures()
    style = STYLE if lang == "en" else {**STYLE, "font.family": [cjk_font(), "DejaVu Sans"]}
    with matplotlib.rc_context(style):
        fig, axes = plt.subplots(nrows, ncols, **kwargs)
    fig.set_layout_engine("constrained")
    for ax in (axes.flat if hasattr(axes, "flat") else [axes]):
        ax.grid(True, alpha=STYLE["grid.alpha"])
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_prop_cycle(STYLE["axes.prop_cycle"])
    return fig, axes


def translated(fig, lang: str = "en"):
    """``fig`` with every word it shows in ``lang``: titles, labels, legends, annotations and fixed
    tick labels, each looked up whole in ``course_lib.i18n`` (``translate``: a drawn text carries
    its numbers, matched against the table's templates). For a drawer written in English: the
    page draws it once per edition and calls this on the Chinese copy. Returns ``fig``."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedLocator
    if lang == "en":
        return fig
    ticks = {id(t.label1) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for t in axis.get_major_ticks() + axis.get_minor_ticks()} | {
        id(t.label2) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for t in axis.get_major_ticks() + axis.get_minor_ticks()}
    for text in fig.findobj(Text):
        if text.get_text() and id(text) not in ticks:
            text.set_text(translate(text.get_text(), lang))
    for ax in fig.axes:                     # named ticks (set_xticks(ticks, labels)): the labels the axis formats
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_locator(), FixedLocator):
                where = axis.get_major_locator()()
                labels = axis.get_major_formatter().format_ticks(where)
                axis.set_ticks(where, [translate(t, lang) for t in labels])
    return fig


def glued(fig):
    """``fig`` ready for ``myst_nb.glue``: every text holding Chinese drawn in the CJK font (the
    words, at normal weight; math in it keeps matplotlib's math fonts), and closed, so the inline backend does not
    also show it in the cell's output (both editions paste their own copy)."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text
    texts = [t for t in fig.findobj(Text) if _CJK.search(t.get_text())]
    if texts:
        family = [cjk_font(), "DejaVu Sans"]
        for text in texts:
            text.set_fontfamily(family)
            text.set_fontweight("normal")    # the CJK font has no bold: matplotlib would warn on stderr
    plt.close(fig)
    return fig


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG with no embedded metadata, so rebuilding gives the same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=STYLE["savefig.dpi"], metadata={"Software": None})
    return path
