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
NEUTRAL = "#56B4E9"    # sky blue: a fourth series
PALETTE = [THEORY, MEASURED, ACCENT, NEUTRAL, "#009E73", "#CC79A7"]   # + bluish green, reddish purple

STYLE = {
    "figure.figsize": (6.4, 3.8),
    "figure.dpi": 150,     # sharp on high-density screens; the site scales images to the column
    "savefig.dpi": 150,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "font.size": 10,
    "legend.frameon": False,
    "svg.hashsalt": "course",
}


def figure(ncols: int = 1, nrows: int = 1, **kwargs):
    """A styled ``(fig, axes)`` pair; kwargs go to ``plt.subplots``."""
    import matplotlib.pyplot as plt
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
