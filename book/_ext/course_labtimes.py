"""Sphinx extension: the course map's lab times, as ``make bench`` measured them.

``make bench`` (course_lib/bench.py) times every lab in a fresh kernel and keeps the seconds in
``data/lab_times.json`` with the machine and the date. The landing page reads them at build time:
``{lab-time}`01_flops_lab``` is that lab's time ("38 s"), ``{lab-time}`machine``` and
``{lab-time}`date``` say where and when they were measured. A lab without a measured time is a
build warning (an error in ``make book-strict``), so a new lab cannot show a made-up time.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

__version__ = "1.0"
TIMES = Path(__file__).resolve().parents[2] / "data" / "lab_times.json"
logger = logging.getLogger(__name__)


def lab_times(path: Path = TIMES) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def shown(seconds: float) -> str:
    """A lab's time as the map shows it: whole seconds under 100 ("38 s"), else minutes and seconds."""
    s = round(seconds)
    return f"{s} s" if s < 100 else f"{s // 60} min {s % 60:02d} s"


class LabTime(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        self.env.note_dependency(str(TIMES))
        data, key = lab_times(), self.text.strip()
        if key in ("machine", "date"):
            value = data.get(key)
        else:
            secs = data.get("seconds", {}).get(key)
            value = shown(secs) if isinstance(secs, (int, float)) else None
        if value is None:
            logger.warning("no %r in %s: run make bench", key, TIMES.name, location=self.get_location())
            value = "not measured"
        return [nodes.inline(self.rawtext, value, classes=["course-lab-time"])], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("lab-time", LabTime())
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
