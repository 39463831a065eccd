"""Sphinx extension: every plot a notebook cell draws becomes a numbered, captioned figure with
real alt text, in the chapter pages and the labs alike.

A cell may say it itself (myst-nb cell metadata, e.g. in a ``{code-cell}``'s options)::

    mystnb:
      figure: {caption: "...", name: fig-bubble}
      image: {alt: "..."}

Otherwise the caption and the alt text are read from the cell's own code, which names what the
plot shows: titles, axis labels and legend labels (``describe``), or the course's timeline
drawers (``gantt.draw``, ``simulate.draw``). Each figure gets a label ``fig-<docname>-<k>``
(``/`` as ``-``), so ``{numref}`fig-book-07_fp16-1``` refers to it. A plot whose code names
nothing is a build warning (an error under ``make book-strict``): give it a caption.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

__version__ = "1.0"
logger = logging.getLogger(__name__)

# Plots the course's own drawing functions make, which carry no title/label in the calling code.
DRAWERS = {
    "gantt.draw": "Timeline of a pipeline-parallel step: one row per rank, forward and backward "
                  "passes, waits in recv and optimizer steps as boxes over time",
    "isoflop_figure": "Predicted loss along one IsoFLOP line C = 6ND for each fit, against parameters N, "
                      "with each fit's optimum and the 20-tokens-per-parameter point marked",
    "cost_figure": "Distillation bill in dollars against the teacher tokens bought, at list price, batch "
                   "price and with hidden reasoning, beside the teacher's own pretraining cost (log-log)",
    "sim.draw": "Timeline of the RL simulation: the learner's optimizer steps on top, then one row "
                "per actor, shaded by the share of its decode slots that are busy",
}
_TEX = str.maketrans({"$": "", "\\": "", "{": "", "}": ""})


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's literal parts with '…' for each placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else "…" for v in node.values]
        text = "".join(parts)
        return text if len(text.replace("…", "").strip(" ,:=()")) >= 3 else None
    return None


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.translate(_TEX)).strip(" .")


def describe(code: str) -> tuple[str, str] | None:
    """``(caption, alt)`` for the plot a cell's code draws, from its titles, axis labels and legend
    labels; None when the code names nothing."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    found: dict[str, list[str]] = {"title": [], "xlabel": [], "ylabel": [], "label": []}
    drawers: list[str] = []
    methods = {"set_title": "title", "suptitle": "title", "set_xlabel": "xlabel", "set_ylabel": "ylabel"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        for name, what in DRAWERS.items():
            if func.endswith(name) and what not in drawers:
                drawers.append(what)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if attr in methods and node.args and (t := _text(node.args[0])):
            found[methods[attr]].append(t)
        for kw in node.keywords:
            if kw.arg in found and (t := _text(kw.value)):
                found[kw.arg].append(t)
    found = {k: list(dict.fromkeys(_clean(v) for v in vs if _clean(v))) for k, vs in found.items()}
    axes = [f"{y} against {x}" for y, x in zip(found["ylabel"], found["xlabel"])]
    if not axes and found["xlabel"]:
        axes = [f"{'; '.join(found['ylabel']) or 'values'} against {found['xlabel'][0]}"]
    # a title with placeholders ("… (simulated), p=…") reads badly as a caption: the axes say more
    titles = [s for s in found["title"] if "…" not in s]
    what = "; ".join(axes) or "; ".join(drawers)
    caption = (f"{'; '.join(titles)}: {what}" if titles and what else "; ".join(titles) or what
               or "; ".join(found["title"]))
    if not caption:
        return None
    caption += "."
    alt = caption
    if drawers and axes:
        alt += " " + "; ".join(drawers) + "."
    if found["title"] != titles and "; ".join(found["title"]) not in caption:
        alt += " Titled: " + "; ".join(found["title"]) + "."
    if found["label"]:
        alt += " Series: " + ", ".join(found["label"]) + "."
    return caption, alt


def _images(bundle: nodes.Element) -> list[nodes.image]:
    return list(bundle.findall(nodes.image))


class CaptionCellFigures(SphinxTransform):
    """Wrap each image output of a notebook cell in a numbered figure with caption and alt text."""
    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        docname = self.env.docname
        count = 0
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            bundles = [b for b in cell.findall(nodes.container)
                       if b.get("nb_element") == "mime_bundle" and _images(b)]
            if not bundles:
                continue
            source = next((c for c in cell.children if c.get("nb_element") == "cell_code_source"), None)
            code = "".join(n.astext() for n in source.findall(nodes.literal_block)) if source else ""
            described = describe(code)
            for bundle in bundles:
                count += 1
                figure = bundle.parent if isinstance(bundle.parent, nodes.figure) else None
                caption = figure.next_node(nodes.caption) if figure is not None else None
                text = caption.astext() if caption is not None else (described[0] if described else "")
                alt = described[1] if described else text
                if not text:
                    logger.warning(f"a plot in {docname} (cell {cell.get('cell_index')}) has no caption: its "
                                   "code sets no title or axis labels; add mystnb figure caption metadata",
                                   location=cell, type="course", subtype="figure")
                    continue
                for image in _images(bundle):
                    image["alt"] = image.get("alt") or alt
                if figure is None:
                    figure = nodes.figure("", classes=["course-figure"])
                    bundle.replace_self(figure)
                    figure += bundle
                    figure += nodes.caption(text, text)
                if not figure["names"]:
                    name = nodes.fully_normalize_name(f"fig-{docname.replace('/', '-')}-{count}")
                    figure["names"].append(name)
                    self.document.note_explicit_target(figure, figure)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_transform(CaptionCellFigures)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
