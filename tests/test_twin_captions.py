"""A lab twin's Chinese figure captions (course_lib/nbtwin.py: notebook metadata course.captions):
missing and stale ones are flagged, stamp records the English caption, sync keeps them, and the book
extension puts them into the figure (book/_ext/course_editions.py, TwinNotebookCaptions)."""
from __future__ import annotations

import json
from pathlib import Path

from test_twins import _nb, _twin_translated, _write

from course_lib import nbtwin


def _lab(tmp_path: Path, caption: str) -> tuple[Path, Path]:
    nb = _nb([("markdown", "# Lab"), ("code", "plot()"), ("markdown", "Words.")])
    nb["cells"][1]["metadata"] = {"mystnb": {"figure": {"caption": caption}}}
    en = _write(tmp_path / "notebooks" / "lab.ipynb", nb)
    zh = tmp_path / "notebooks" / "zh" / "lab.ipynb"
    _twin_translated(en, zh)
    return en, zh


def _set_caption(zh: Path, text: str) -> None:
    nb = json.loads(zh.read_text(encoding="utf-8"))
    nb["metadata"]["course"]["captions"] = {"1": {"zh": text}}
    _write(zh, nb)


def test_a_caption_is_flagged_until_translated_and_stamped(tmp_path: Path) -> None:
    en, zh = _lab(tmp_path, "Loss falls with steps.")
    assert any("caption of code cell 1 is untranslated" in p for p in nbtwin.problems(zh))
    _set_caption(zh, "损失随步数下降。")
    assert any("caption of code cell 1 is stale" in p for p in nbtwin.problems(zh))   # not stamped yet
    nbtwin.stamp(zh)
    assert nbtwin.problems(zh) == []
    nb = json.loads(en.read_text(encoding="utf-8"))                 # the English caption changes
    nb["cells"][1]["metadata"]["mystnb"]["figure"]["caption"] = "Loss falls, then spikes."
    _write(en, nb)
    nbtwin.sync(en, zh)                                              # sync keeps the twin's captions ...
    assert json.loads(zh.read_text(encoding="utf-8"))["metadata"]["course"]["captions"]["1"]["zh"] == "损失随步数下降。"
    assert any("caption of code cell 1 is stale" in p for p in nbtwin.problems(zh))   # ... and flags them


def test_the_book_puts_the_twin_caption_in_the_figure(tmp_path: Path) -> None:
    import importlib.util

    from docutils import nodes
    from docutils.utils import new_document
    from docutils.frontend import get_default_settings

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("course_editions", root / "book" / "_ext" / "course_editions.py")
    editions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(editions)
    _, zh = _lab(tmp_path, "Loss falls with steps.")
    _set_caption(zh, "损失随步数 $t$ 下降。")
    doc = new_document("lab", get_default_settings())
    cell = nodes.container(nb_element="cell_code", cell_index=1)
    cell += nodes.figure("", nodes.caption("", "Loss falls with steps."))
    doc += cell

    class Env:
        docname = "notebooks/zh/lab"

        @staticmethod
        def doc2path(docname: str) -> str:
            return str(zh)

    transform = editions.TwinNotebookCaptions(doc)
    transform.__dict__["env"] = Env        # SphinxTransform.env reads document.settings.env
    doc.settings.env = Env
    transform.apply()
    caption = doc.next_node(nodes.caption)
    assert caption.astext() == "损失随步数 t 下降。" and caption.next_node(nodes.math).astext() == "t"   # math, not "$t$"
