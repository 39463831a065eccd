"""Course figures: sharp inline PNGs whose repr (what nbval compares) does not depend on the resolution."""
from __future__ import annotations

import base64
import struct

import nbformat
from nbclient import NotebookClient

from course_lib import plots


def test_inline_figures_are_2x_png_with_a_100_dpi_repr():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from course_lib import plots\nimport matplotlib.pyplot as plt\n"
        "fig, ax = plots.figure()\nax.plot([1, 2], [1, 2])\nplt.show()")]
    NotebookClient(nb, kernel_name="python3", timeout=60).execute()
    out = nb.cells[0].outputs[0]
    assert out["data"]["text/plain"] == "<Figure size 640x380 with 1 Axes>"
    width, height = struct.unpack(">II", base64.b64decode(out["data"]["image/png"])[16:24])
    shown = out["metadata"]["image/png"]
    assert width >= 2 * shown["width"] - 1 and height >= 2 * shown["height"] - 1   # >= 200 dpi


def test_palette_series_stay_distinct_in_greyscale():
    def grey(hex_colour: str) -> float:
        r, g, b = (int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    main = [plots.MEASURED, plots.THEORY, plots.ACCENT, plots.NEUTRAL]
    levels = sorted(grey(c) for c in main)
    assert min(b - a for a, b in zip(levels, levels[1:])) > 0.05
