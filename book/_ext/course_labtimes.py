"""Sphinx extension: the course map's lab times, as ``make bench`` measured them.

``make bench`` (course_lib/bench.py) times every lab in a fresh kernel and keeps the seconds in
``data/lab_times.json`` with the machine and the date. The landing page reads them at build time:
``{lab-time}`01_flops_lab``` is that lab's time ("38 s"), ``{lab-time}`machine``` and
``{lab-time}`date``` say where and when they were measured. A lab without a measured time is a
build warning (an error in ``make book-strict``), so a new lab cannot show a made-up time.

A lab's own header states no time either (issue #43: lab 1 said "about 15 s" while the map said
28 s): it links ``[as `make bench` measured it](../data/lab_times.json)``, which in Jupyter opens
the measured times and on the site is replaced by that lab's time, machine and date
(``MeasuredLabTime``), so the header and the map show one number.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
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


def _links_to_times(node: nodes.Node) -> bool:
    if not isinstance(node, (nodes.reference, addnodes.download_reference, addnodes.pending_xref)):
        return False
    target = node.get("refuri") or node.get("reftarget") or ""
    return target.split("#")[0].endswith(TIMES.name)


class MeasuredLabTime(SphinxTransform):
    """In a lab (``notebooks/NN_topic_lab``), a link to ``data/lab_times.json`` becomes the lab's
    measured time: "28 s, as make bench measured it on <machine> (<date>)"."""
    default_priority = 400

    def apply(self, **kwargs: Any) -> None:
        docname = self.env.docname
        if not docname.startswith("notebooks/"):
            return
        key = docname.rsplit("/", 1)[-1]
        for link in list(self.document.findall(_links_to_times)):
            self.env.note_dependency(str(TIMES))
            data = lab_times()
            secs = data.get("seconds", {}).get(key)
            if not isinstance(secs, (int, float)):
                logger.warning("no %r in %s: run make bench", key, TIMES.name, location=link)
                continue
            measured = nodes.inline("", "", classes=["course-lab-time"])
            if docname.startswith("notebooks/zh/"):      # a Chinese twin says it in Chinese
                machine = re.sub(r"^(\d+) CPU cores?", r"\1 个 CPU 核", data.get("machine", "本机"))
                measured += [nodes.Text(f"{shown(secs)}（由 "), nodes.literal("make bench", "make bench"),
                             nodes.Text(f" 在 {machine} 上测得，{data.get('date', '日期不详')}）")]
            else:
                measured += [nodes.Text(f"{shown(secs)}, as "), nodes.literal("make bench", "make bench"),
                             nodes.Text(f" measured it on {data.get('machine', 'this machine')} "
                                        f"({data.get('date', 'undated')})")]
            link.replace_self(measured)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_role("lab-time", LabTime())
    app.add_transform(MeasuredLabTime)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
