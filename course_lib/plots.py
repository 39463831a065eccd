"""One plotting style for the whole course, so every chapter's figures read the same way.

Measured data are drawn as markers in ``MEASURED``; theory as lines in ``THEORY``. Use
``figure()`` to get a styled figure and ``save(fig, path)`` to write a deterministic PNG for the
book (no timestamps in the file, fixed DPI).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

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


def figure(ncols: int = 1, nrows: int = 1, **kwargs):
    """A styled ``(fig, axes)`` pair; kwargs go to ``plt.subplots``."""
    import matplotlib.pyplot as plt
    _sharp_inline_figures()
    with matplotlib.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, **kwargs)
    fig.set_layout_engine("constrained")
    for ax in (axes.flat if hasattr(axes, "flat") else [axes]):
        ax.grid(True, alpha=STYLE["grid.alpha"])
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_prop_cycle(STYLE["axes.prop_cycle"])
    return fig, axes


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG with no embedded metadata, so rebuilding gives the same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=STYLE["savefig.dpi"], metadata={"Software": None})
    return path
