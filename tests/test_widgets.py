"""The labs' calculator widgets: real ipywidgets in Jupyter, the calculator's text everywhere else."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import ipywidgets as w
import pytest

from course_lib import distill, widgets
from course_lib.scaling import explore

ROOT = Path(__file__).resolve().parents[1]
VIEW = "application/vnd.jupyter.widget-view+json"
# (lab, the widget cell's source, the widget factory)
LAB_WIDGETS = [("02_scaling_lab.ipynb", "explore.scaling_widget()", explore.scaling_widget),
               ("09_distill_lab.ipynb", "distill.distill_widget()", distill.distill_widget)]


def _quiet(factory, **kwargs):
    """Build a widget; outside a kernel its Output area prints the first update to stdout."""
    with contextlib.redirect_stdout(io.StringIO()):
        return factory(**kwargs)


@pytest.mark.parametrize("lab, source, factory", LAB_WIDGETS, ids=[lab for lab, _, _ in LAB_WIDGETS])
def test_lab_widget_stored_output_is_the_static_fallback(lab: str, source: str, factory) -> None:
    """What re-executing the cell stores (text/plain) is what the lab has stored: the calculator's text."""
    cells = [c for c in json.loads((ROOT / "notebooks" / lab).read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code" and "".join(c["source"]).strip() == source]
    assert len(cells) == 1
    (stored,) = [o for o in cells[0]["outputs"] if o["output_type"] == "execute_result"]
    bundle = _quiet(factory)._repr_mimebundle_()
    assert "".join(stored["data"]["text/plain"]) == bundle["text/plain"]
    assert VIEW in bundle and "Box(children" not in bundle["text/plain"]


def test_scaling_widget_is_a_live_widget_with_the_calculators_text() -> None:
    box = _quiet(explore.scaling_widget, compute=1e22)
    assert isinstance(box, w.VBox)
    assert [len(row.children) for row in box.children[:-1]] == [3, 2]
    assert isinstance(box.children[-1], w.Output)
    expected = explore.render_scaling(explore.scaling_calculator(1e22, "besiroglu", "H100-SXM", 1024, 0.40))
    assert box._repr_mimebundle_()["text/plain"].startswith(expected + "\n")


def test_distill_widget_lays_out_three_per_row() -> None:
    box = _quiet(distill.distill_widget, visible_tokens=1e10)
    assert [len(row.children) for row in box.children[:-1]] == [3, 3, 3, 2]
    assert "1e+10" in box._repr_mimebundle_()["text/plain"]


def test_interactive_in_user_code_shows_input_errors_as_text() -> None:
    """A user's own calculator: a bad starting value gives the ValueError's text, not a crash."""
    def halve(x: float) -> dict:
        if x < 0:
            raise ValueError(f"x must be >= 0, got {x}")
        return {"half": x / 2}

    ok = _quiet(widgets.interactive, callback=halve, controls={"x": w.FloatText(value=3.0)},
                render=lambda r: f"half = {r['half']}")
    assert ok._repr_mimebundle_()["text/plain"].startswith("half = 1.5\n")
    bad = _quiet(widgets.interactive, callback=halve, controls={"x": w.FloatText(value=-1.0)})
    assert bad._repr_mimebundle_()["text/plain"].startswith("input error: x must be >= 0, got -1.0")


def test_calculator_box_keeps_the_widget_view() -> None:
    box = widgets.calculator_box([w.Label("a")], "plain words")
    bundle = box._repr_mimebundle_()
    assert bundle["text/plain"] == "plain words" and bundle[VIEW]["model_id"] == box.model_id
