"""Sphinx extension: exercises the d2l way, and an instructor build without the answers.

* A chapter links the student notebook with ``{download}`` and its worked answers with the role
  ``{answers}`NN_topic``` (" (worked answers)", a link to ``solutions/NN_topic``).
* On the site every solution block of ``solutions/*.ipynb`` sits in a collapsed "Show answer"
  toggle: at read time each code cell holding a ``### BEGIN SOLUTION`` block gets the
  ``hide-input`` tag (the markers themselves are dropped from what readers see), and a Markdown
  ``<!-- BEGIN SOLUTION -->`` span becomes a collapsed "Show answer" dropdown. The notebooks on disk
  are not touched.
* ``SOLUTIONS=0`` in the environment (``make book SOLUTIONS=0``) builds the site with no solutions
  pages at all: the TOC loses them (``filter_toc``), ``{answers}`` renders nothing, and any other
  link to a solutions page renders as its plain text, so no link dangles. A source tree without
  ``solutions/`` (the students' course that ``python -m course_lib.grading handout`` writes) builds
  the same way, whatever ``SOLUTIONS`` says.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

from course_lib.grading.generate import CODE_BEGIN, CODE_END, MD_BEGIN, MD_END

__version__ = "1.0"
SOLUTIONS_DIR = "solutions"
SHOW, HIDE = "Show answer", "Hide answer"
# the answer toggles of a Chinese twin (solutions/zh/) in Chinese, like the pages' "显示代码"
LABELS = {"en": (SHOW, HIDE), "zh": ("显示答案", "隐藏答案")}
_OFF = {"0", "no", "false", "off"}
logger = logging.getLogger(__name__)


def solutions_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether the build includes the worked answers: yes unless ``SOLUTIONS`` is 0/no/false/off."""
    value = (os.environ if environ is None else environ).get("SOLUTIONS", "1")
    return value.strip().lower() not in _OFF


def _is_solution(path: str) -> bool:
    return path.strip("/").split("/", 1)[0] == SOLUTIONS_DIR


def filter_toc(toc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a jupyter-book TOC without the solutions pages; a part or a chapter list left
    empty goes too (Sphinx would otherwise warn about an empty toctree)."""
    def keep(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for entry in entries:
            if _is_solution(str(entry.get("file", ""))):
                continue
            entry = dict(entry)
            for key in ("chapters", "sections", "parts"):
                if key in entry:
                    entry[key] = keep(entry[key])
                    if not entry[key]:
                        del entry[key]
            if "file" in entry or any(k in entry for k in ("chapters", "sections", "url", "glob")):
                out.append(entry)
        return out
    out = dict(toc)
    for key in ("parts", "chapters", "sections"):
        if key in out:
            out[key] = keep(out[key])
    return out


def solution_cells(notebook: dict[str, Any], lang: str = "en") -> dict[str, Any]:
    """The notebook with each answer collapsed: code cells holding a solution block are tagged
    ``hide-input`` with a "Show answer" prompt (显示答案 in a Chinese twin, ``lang="zh"``) and lose
    the BEGIN/END marker lines; Markdown solution spans become a collapsed dropdown so labelled."""
    show, hide = LABELS[lang]
    for cell in notebook.get("cells", []):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code" and CODE_BEGIN in src:
            lines = [ln for ln in src.split("\n") if ln.strip() not in (CODE_BEGIN, CODE_END)]
            cell["source"] = "\n".join(lines)
            meta = cell.setdefault("metadata", {})
            tags = meta.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
            meta.setdefault("mystnb", {}).update(code_prompt_show=show, code_prompt_hide=hide)
        elif cell.get("cell_type") == "markdown" and MD_BEGIN in src:
            cell["source"] = re.sub(
                re.escape(MD_BEGIN) + r"(.*?)" + re.escape(MD_END),
                lambda m: f"\n\n:::{{dropdown}} {show}\n{m.group(1).strip()}\n:::\n\n",
                src, flags=re.S)
    return notebook


def _on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    if not _is_solution(docname) or not source[0].lstrip().startswith("{"):
        return
    lang = "zh" if docname.startswith(f"{SOLUTIONS_DIR}/zh/") else "en"
    source[0] = json.dumps(solution_cells(json.loads(source[0]), lang), ensure_ascii=False)


def _on_config_inited(app: Sphinx, config: Config) -> None:
    """Runs before sphinx-external-toc reads the TOC (priority 900): without solutions, point it
    at a filtered copy written under the build folder."""
    # a tree without solutions/ (the students' handout) builds as SOLUTIONS=0: no {answers} link dangles
    config.course_solutions = solutions_enabled() and (Path(app.srcdir) / SOLUTIONS_DIR).is_dir()
    if config.course_solutions or "external_toc_path" not in config:
        return
    path = Path(config.external_toc_path)
    path = path if path.is_absolute() else Path(app.srcdir) / path
    toc = filter_toc(yaml.safe_load(path.read_text(encoding="utf-8")))
    out = Path(app.doctreedir) / "_toc_no_solutions.yml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(toc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    config.external_toc_path = str(out)
    config.exclude_patterns = [*config.exclude_patterns, f"{SOLUTIONS_DIR}/**"]
    logger.info("[course_exercises] building without the solutions pages (SOLUTIONS=0 or no solutions/)")


def answers_role(name, rawtext, text, lineno, inliner, options=None, content=None):  # noqa: ARG001
    """``{answers}`01_flops``` -> " (worked answers)" linking solutions/01_flops; nothing at all
    in a build without solutions."""
    env = inliner.document.settings.env
    if not env.config.course_solutions:
        return [], []
    zh = env.docname.startswith("book/zh/")          # the Chinese edition links its own twin
    twin = f"/{SOLUTIONS_DIR}/zh/{text.strip()}"
    target = twin if zh and twin.lstrip("/") in env.found_docs else f"/{SOLUTIONS_DIR}/{text.strip()}"
    label = "参考答案" if zh else "worked answers"
    ref = addnodes.pending_xref(rawtext, nodes.inline(rawtext, label), refdomain="std",
                                reftype="doc", reftarget=target, refexplicit=True, refwarn=True,
                                refdoc=env.docname)
    ref.line = lineno
    return [nodes.inline(rawtext, "", nodes.Text(" ("), ref, nodes.Text(")"), classes=["course-answers"])], []


class DropSolutionLinks(SphinxPostTransform):
    """Without solutions, a link to a solutions page (a lab's, the index table's, a Markdown
    link or a ``{doc}`` role) keeps its text and loses the link instead of dangling. Runs before
    MyST's and Sphinx's own resolvers (priorities 9 and 10), which would warn."""
    default_priority = 5

    def run(self, **kwargs: Any) -> None:
        if self.config.course_solutions:
            return
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") not in ("doc", "myst"):
                continue
            target = str(node.get("reftarget", ""))
            if node["reftype"] == "doc" and not target.startswith("/"):   # {doc} is relative to its page
                target = posixpath.normpath(posixpath.join(posixpath.dirname(node.get("refdoc", "")), target))
            if _is_solution(target):   # a link with no text of its own would show its target: show nothing
                text = node.astext() if node.get("refexplicit") else ""
                node.replace_self(nodes.inline("", text, classes=["course-answers-omitted"]))


def _on_build_finished(app: Sphinx, exception: Exception | None) -> None:
    """A build without solutions must not leave an earlier build's solutions pages behind."""
    if exception is not None or app.config.course_solutions or app.builder.format != "html":
        return
    import shutil
    for sub in (SOLUTIONS_DIR, f"_sources/{SOLUTIONS_DIR}"):
        shutil.rmtree(Path(app.outdir) / sub, ignore_errors=True)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("course_solutions", True, "env")
    app.connect("config-inited", _on_config_inited, priority=800)
    app.connect("source-read", _on_source_read)
    app.add_post_transform(DropSolutionLinks)
    app.connect("build-finished", _on_build_finished)
    app.add_role("answers", answers_role)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
