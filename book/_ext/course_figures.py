"""Sphinx extension: every plot a notebook cell draws becomes a numbered, captioned figure with
real alt text, in the chapter pages and the labs alike.

A cell should say what its plot shows and what to notice (myst-nb cell metadata, e.g. in a
``{code-cell}``'s options)::

    mystnb:
      figure:
        caption: "The bubble falls to {glue:text}`bubble_m8:.1%` at m = 8 ..."
        name: fig-bubble
      image: {alt: "..."}        # optional: the alt text is the caption's text otherwise

The caption is MyST, so a number in it is glued like a number in the prose: ``{glue:text}`` (or
``{glue}``) of a value that any cell of the same page glues (the cell itself may glue it; myst-nb
reads every glued value of the executed notebook before it renders a cell). No number is typed by
hand and none is lost on the way to the alt text: this transform runs after the roles are
resolved, so the alt text is the caption's rendered text (glued numbers included), followed by
what the code says of the axes and series (``details``).

A cell without a caption gets one from its own code, which names what the plot shows: titles,
axis labels and legend labels (``describe``), or the course's timeline drawers (``gantt.draw``,
``simulate.draw``). An f-string with placeholders is left out of it (its values exist only in the
executed picture; a caption or alt text never shows a "…" in their place). Each figure gets a
label ``fig-<docname>-<k>`` (``/`` as ``-``) unless its metadata names it, so
``{numref}`fig-book-07_fp16-1``` refers to it. A plot whose code names nothing is a build warning
(an error under ``make book-strict``): give it a caption.

A plot wider than a phone can show at a readable size (issue #43: chapter 5's 9.6-inch panels drew
their labels 3-5 px tall in a 342 px column) is marked ``course-wide-figure`` and
``course-minw-<px>``: under 600 px course.css draws it at least that wide (``READABLE`` of its own
width, so a 10-point label stays about 7.6 px) inside a box that scrolls sideways, with the cue of
course_scroll.js; the caption stays in the column. Wider screens are unchanged. A plot pasted with
``{glue:figure}`` (each edition pastes its own) is marked the same way.
"""
from __future__ import annotations

import ast
import re
import struct
from math import ceil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

__version__ = "1.3"
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
# The smallest share of its own width a plot is drawn at on a phone: matplotlib's 10-point labels at
# 100 dpi are 13.9 px, so 0.55 keeps them >= 7.6 px. A plot up to WIDE px (a 6.4-inch figure and
# its margins) already gets that in a 390 px phone's 342 px column.
READABLE, WIDE, STEP, WIDEST = 0.55, 660, 25, 875
_TEX = str.maketrans({"$": "", "\\": "", "{": "", "}": ""})


def _text(node: ast.AST) -> str | None:
    """A string literal's text, or an f-string's when it has no placeholder; None otherwise (the
    code does not know what a placeholder will print, and "…" in its place teaches nothing)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(v.value for v in node.values)
    return None


_MATH_WORDS = {r"\times": "×", r"\cdot": "·", r"\approx": "≈", r"\propto": "∝", r"\sqrt": "√", r"\le": "≤",
               r"\ge": "≥", r"\Psi": "Ψ", r"\delta": "δ", r"\sigma": "σ", r"\alpha": "α", r"\beta": "β",
               r"\top": "T", r"\tfrac23": "2/3", r"\,": " "}


def plain_math(tex: str) -> str:
    """TeX as a screen reader can say it: ``\\sqrt{2\\delta M}`` → ``√(2δ M)``, ``f_\\text{min}`` → ``f_min``."""
    text = re.sub(r"\\(?:text|mathrm|operatorname)\{([^{}]*)\}", r"\1", tex)
    text = re.sub(r"√\{([^{}]*)\}", r"√(\1)", re.sub(r"\\sqrt\s*", "√", text))
    for command, word in _MATH_WORDS.items():
        text = re.sub(re.escape(command) + r"(?![A-Za-z])", word, text)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)           # \log, \max: the name
    text = re.sub(r"([_^])\{([^{}]*)\}",                  # 2^{16} → 2^16, (1/b)^{1/r} → (1/b)^(1/r)
                  lambda m: m[1] + (m[2] if re.fullmatch(r"-?[\w.*]+", m[2]) else f"({m[2]})"), text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def spoken(node: nodes.Element) -> str:
    """A caption's text for the alt attribute: glued values as rendered, math in plain symbols."""
    node = node.deepcopy()
    for math in list(node.findall(nodes.math)):
        math.replace_self(nodes.Text(plain_math(math.astext())))
    return re.sub(r"\s+", " ", node.astext()).strip()


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.translate(_TEX)).strip(" .")


def _parts(code: str) -> dict[str, list[str]] | None:
    """What a cell's code names of its plot: titles, axis labels, legend labels, drawers."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    found: dict[str, list[str]] = {"title": [], "xlabel": [], "ylabel": [], "label": [], "drawer": []}
    methods = {"set_title": "title", "suptitle": "title", "set_xlabel": "xlabel", "set_ylabel": "ylabel"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        found["drawer"] += [what for name, what in DRAWERS.items() if func.endswith(name)]
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if attr in methods and node.args and (t := _text(node.args[0])):
            found[methods[attr]].append(t)
        for kw in node.keywords:
            if kw.arg in found and (t := _text(kw.value)):
                found[kw.arg].append(t)
    return {k: list(dict.fromkeys(_clean(v) for v in vs if _clean(v))) for k, vs in found.items()}


def _axes(found: dict[str, list[str]], lang: str = "en") -> list[str]:
    """The plotted axes, "y against x" ("y 随 x 的变化" on a Chinese page; the labels themselves are
    quoted as the image draws them)."""
    pair = (lambda y, x: f"{y} 随 {x} 的变化") if lang == "zh" else (lambda y, x: f"{y} against {x}")
    axes = [pair(y, x) for y, x in zip(found["ylabel"], found["xlabel"])]
    if not axes and found["xlabel"]:
        axes = [pair("; ".join(found["ylabel"]) or ("数值" if lang == "zh" else "values"), found["xlabel"][0])]
    return axes


def describe(code: str) -> tuple[str, str] | None:
    """``(caption, alt)`` for the plot a cell's code draws, from its titles, axis labels and legend
    labels; None when the code names nothing."""
    found = _parts(code)
    if found is None:
        return None
    titles, axes, drawers = found["title"], _axes(found), found["drawer"]
    what = "; ".join(axes) or "; ".join(drawers)
    caption = f"{'; '.join(titles)}: {what}" if titles and what else "; ".join(titles) or what
    if not caption:
        return None
    caption += "."
    alt = caption
    if drawers and axes:
        alt += " " + "; ".join(drawers) + "."
    if found["label"]:
        alt += " Series: " + ", ".join(found["label"]) + "."
    return caption, alt


def details(code: str, lang: str = "en") -> str:
    """What the code says of the plot beyond a written caption, for the alt text: its axes (or the
    drawer's description) and legend labels, e.g. "Plotted: loss against step. Series: a, b."
    (on a Chinese page, ``lang="zh"``: "图中：loss 随 step 的变化。曲线：a、b。")."""
    found = _parts(code)
    if not found:
        return ""
    out = []
    what = "; ".join(_axes(found, lang)) or "; ".join(found["drawer"])
    if lang == "zh":
        if what:
            out.append(f"图中：{what}。")
        if found["label"]:
            out.append("曲线：" + "、".join(found["label"]) + "。")
        return "".join(out)
    if what:
        out.append(f"Plotted: {what}.")
    if found["label"]:
        out.append("Series: " + ", ".join(found["label"]) + ".")
    return " ".join(out)


def _images(bundle: nodes.Element) -> list[nodes.image]:
    return list(bundle.findall(nodes.image))


def css_width(image: nodes.image, srcdir: str = "") -> float | None:
    """The width in CSS px a plot is drawn at on a wide screen: the output's own metadata (a 2x
    "retina" PNG says half its pixel width), else the PNG's pixels at its pHYs resolution over 100 dpi."""
    width = str(image.get("width", "")).removesuffix("px")
    if re.fullmatch(r"\d+(\.\d+)?", width):
        return float(width)
    uri = image.get("uri", "")
    if not uri.endswith(".png"):
        return None
    # myst-nb's uri is relative to the source folder, "/"-prefixed (Sphinx's convention)
    path = next((p for p in (Path(srcdir) / uri.lstrip("/"), Path(uri)) if p.is_file()), None)
    try:
        head = path.read_bytes()[:4096] if path else b""
    except OSError:
        return None
    if head[12:16] != b"IHDR":
        return None
    pixels = struct.unpack(">I", head[16:20])[0]
    at = head.find(b"pHYs")
    if at > 0 and head[at + 12] == 1:                       # unit: metre
        dpi = struct.unpack(">I", head[at + 4:at + 8])[0] * 0.0254
        return pixels * 100 / dpi if dpi > 0 else float(pixels)
    return float(pixels)


def mark_wide(figure: nodes.figure, bundle: nodes.Element, srcdir: str = "") -> None:
    """Classes that let course.css draw a wide plot readably on a phone (see the module's docstring)."""
    widths = [w for w in (css_width(i, srcdir) for i in _images(bundle)) if w]
    if not widths or max(widths) <= WIDE or "course-wide-figure" in figure["classes"]:
        return
    least = min(STEP * ceil(READABLE * max(widths) / STEP), WIDEST)   # course.css has a rule for each
    figure["classes"] += ["course-wide-figure", f"course-minw-{least}"]


_GLUE_TEXT = re.compile(r"\{glue(?::text)?\}`([^`:]+)(?::([^`]*))?`")


def glued_alt(alt: str, glue: dict) -> str:
    """An alt text with its ``{glue:text}`key:fmt``` roles replaced by the glued values (``glue``:
    the page's glue data, as myst-nb writes it), as the caption's roles are (an option's text is not
    parsed as MyST); a key the page did not glue stays as written, so the site test names it."""
    from myst_nb.core.variables import format_plain_text

    def value(m: re.Match) -> str:
        try:
            return format_plain_text(glue[m.group(1)]["data"]["text/plain"], m.group(2) or "")
        except Exception:   # noqa: BLE001 (no such key, no text/plain, a bad format): leave it visible
            return m.group(0)
    return _GLUE_TEXT.sub(value, alt)


def page_glue(app: Any, docname: str) -> dict:
    """The glue data myst-nb wrote for ``docname`` (``<build>/jupyter_execute/<doc>.glue.json``,
    written while the page was parsed; the renderer that held it is gone by transform time)."""
    import json
    path = Path(app.outdir).parent / "jupyter_execute" / f"{docname}.glue.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class CaptionCellFigures(SphinxTransform):
    """Wrap each image output of a notebook cell in a numbered figure with caption and alt text."""
    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        docname = self.env.docname
        count = 0
        glue = None
        for image in self.document.findall(nodes.image):   # a {glue:figure}'s :alt: is plain text
            if "{glue" in image.get("alt", ""):
                glue = page_glue(self.app, docname) if glue is None else glue
                image["alt"] = glued_alt(image["alt"], glue)
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            self._unwrap_non_images(cell)
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
                if caption is not None:              # written: its rendered text, glued numbers included
                    text = re.sub(r"\s+", " ", caption.astext()).strip()
                    lang = "zh" if re.match(r"(book|notebooks|solutions)/zh/", docname) else "en"
                    alt = ("" if lang == "zh" else " ").join(filter(None, [spoken(caption), details(code, lang)]))
                else:
                    text, alt = described if described else ("", "")
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
                mark_wide(figure, bundle, self.env.srcdir)
                if not figure["names"]:
                    name = nodes.fully_normalize_name(f"fig-{docname.replace('/', '-')}-{count}")
                    figure["names"].append(name)
                    for old in [i for i in figure["ids"] if re.fullmatch(r"id\d+", i)]:
                        figure["ids"].remove(old)        # an automatic "id7": the label names it instead
                        self.document.ids.pop(old, None)
                    self.document.note_explicit_target(figure, figure)
        for figure in self.document.findall(nodes.figure):   # a pasted plot ({glue:figure}) is no cell's
            mark_wide(figure, figure, self.env.srcdir)         # (a cell's is marked already: a no-op)

    def _unwrap_non_images(self, cell: nodes.Element) -> None:
        """myst-nb wraps every display output of a cell with figure options in that figure, a
        table printed beside the plot included: only the plot keeps the caption and a number."""
        for figure in list(cell.findall(nodes.figure)):
            bundles = [c for c in figure.children if c.get("nb_element") == "mime_bundle"]
            if bundles and not any(_images(b) for b in bundles):
                for name in figure["names"]:
                    self.document.nameids.pop(name, None)
                    self.document.nametypes.pop(name, None)
                for i in figure["ids"]:
                    self.document.ids.pop(i, None)
                figure["ids"], figure["names"] = [], []       # replace_self would hand them on
                figure.replace_self(bundles)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_transform(CaptionCellFigures)
    app.add_js_file("course_scroll.js", loading_method="defer")   # the cue on a box that scrolls sideways
    # env_version: a build that read its pages with another version of this transform reads them again
    return {"version": __version__, "env_version": 4, "parallel_read_safe": True, "parallel_write_safe": True}
