"""Interactive calculators for the labs, built so that the arithmetic is testable without a browser.

The pattern every chapter reuses:

1. a **pure callback** ``f(**inputs) -> dict`` that does all the work (validated inputs, plain
   SI outputs) — tests call it directly, and the book renders a static table from it;
2. ``interactive(callback, controls, render=...)``: a thin ipywidgets wrapper that calls the
   callback whenever a control changes and shows ``render(result)`` (text and/or a figure).

The book never embeds live widgets (the site must work offline and without a kernel); it shows
``static_table(callback, rows)`` instead. A lab's widget cell, rendered without a widget frontend
(the website, nbconvert, a terminal), shows the calculator's output at the starting values
(``CalculatorBox``'s text/plain), not the ``VBox(children=...)`` repr.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping

from .report import si

__all__ = ["static_table", "interactive", "calculator_box"]

STATIC_NOTE = "(static view at the starting values: the controls need a running Jupyter kernel)"


def static_table(callback: Callable[..., dict], rows: Iterable[Mapping], columns: Mapping[str, object]) -> str:
    """Static fallback for the book: call ``callback(**row)`` for each row and format the chosen
    ``columns`` as a Markdown table. ``columns`` maps a result key to a header, or to
    ``(header, format_spec)``; by default counts get k/M/B/T suffixes and floats 3 digits."""
    def cell(v, spec) -> str:
        if spec:
            return format(v, spec)
        if isinstance(v, float):
            return si(v) if abs(v) >= 1e3 and math.isfinite(v) else f"{v:.3g}"
        return str(v)
    cols = {k: (c, "") if isinstance(c, str) else tuple(c) for k, c in columns.items()}
    results = [callback(**row) for row in rows]
    lines = ["| " + " | ".join(h for h, _ in cols.values()) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[k], spec) for k, (_, spec) in cols.items()) + " |" for r in results]
    return "\n".join(lines)


@functools.cache
def _calculator_box_class():
    """``CalculatorBox``, defined on first use so that importing this module needs no ipywidgets."""
    import ipywidgets as w

    class CalculatorBox(w.VBox):
        """A ``VBox`` whose plain-text form is ``fallback`` instead of its repr. A live frontend
        draws the widget (its widget-view MIME type wins); everywhere else, the site included,
        readers see the calculator's output."""

        def __init__(self, children, fallback: str, **kwargs):
            super().__init__(children, **kwargs)
            self.fallback = fallback

        def _repr_mimebundle_(self, **kwargs):
            return super()._repr_mimebundle_(**kwargs) | {"text/plain": self.fallback}

    return CalculatorBox


def calculator_box(children, fallback: str):
    """An ipywidgets ``VBox`` of ``children`` that shows the text ``fallback`` where no widget
    frontend is present (the website, nbconvert, a terminal)."""
    return _calculator_box_class()(list(children), fallback)


def interactive(callback: Callable[..., dict], controls: Mapping, render: Callable[[dict], str] = str,
                figure: Callable[[dict], object] | None = None, per_row: int = 3):
    """Wire ipywidgets ``controls`` (name → widget) to ``callback``: on every change, show
    ``render(result)`` and, if given, ``figure(result)``. Errors (bad input) are shown, not raised.
    Controls are laid out ``per_row`` to a row; without a widget frontend the box shows
    ``render(callback(**starting values))`` (see ``calculator_box``)."""
    import ipywidgets as w
    from IPython.display import display

    out = w.Output()

    def text(values: Mapping) -> str:
        try:
            return render(callback(**values))
        except ValueError as e:
            return f"input error: {e}"

    def update(**values):
        import matplotlib.pyplot as plt
        out.clear_output(wait=True)
        with out:
            try:
                result = callback(**values)
            except ValueError as e:
                print(f"input error: {e}")
                return
            print(render(result))
            if figure is not None:
                fig = figure(result)
                display(fig)
                plt.close(fig)

    w.interactive_output(update, dict(controls))
    boxes = list(controls.values())
    rows = [w.HBox(boxes[i:i + per_row]) for i in range(0, len(boxes), per_row)]
    start = {name: control.value for name, control in controls.items()}
    return calculator_box(rows + [out], f"{text(start)}\n\n{STATIC_NOTE}")
