"""Sphinx extension: ship the chapter pages' live calculators (no kernel, no network).

Every page loads ``_static/calculators_data.js`` (the constants, generated here from
``course_lib.site_data`` at build time, so JavaScript and Python share one source) and then
``_static/calculators_i18n.js`` (the words of the Chinese edition's calculators), then
``_static/calculators.js`` (the formulas and input checks, from ``book/_static``), then
``_static/calculators_plan.js`` (chapter 13's planner, which registers itself there). A page opts in
with an empty ``<div class="course-calc" data-calc="...">`` in a ``{raw} html`` block; the script
fills it with labelled inputs and outputs. Without JavaScript the div shows its fallback text and
the chapter's static table still carries the numbers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

__version__ = "1.0"
DATA_FILE = "calculators_data.js"


def _write_data(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from course_lib.site_data import calculator_data_js
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / DATA_FILE).write_text(calculator_data_js(), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_js_file(DATA_FILE)
    app.add_js_file("calculators_i18n.js")     # the Chinese edition's words (before calculators.js reads them)
    app.add_js_file("calculators.js")
    app.add_js_file("calculators_plan.js")    # registers chapter 13's planner with calculators.js
    app.connect("build-finished", _write_data, priority=400)   # before course_offline's checks (500)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
