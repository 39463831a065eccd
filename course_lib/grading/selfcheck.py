"""A student's own check before handing in: ``python -m course_lib.grading check [NOTEBOOK|DIR ...]``
(``make check`` in the students' course).

Runs each exercise notebook from the top in a fresh kernel, the way the grader will, but in
*practice* mode, on the student's own machine, without a sandbox (it is their code, run for
them), and prints what ``check.summary()`` says at the end: each question ✔ correct, ✘ wrong (with
the practice feedback of its cell), · not checked (its cell raised, e.g. the stub's
``NotImplementedError``, or never ran). A cell that raises does not stop the run, as in grading.
The notebooks on disk are not changed. Exit status 0 when every question of every notebook is
fully correct, 1 otherwise, 2 for a usage error (no notebook found). ``--lang zh``: the checks and
this report speak Chinese (the kernels get ``COURSE_LANG``, which every ``Checker`` reads); without
it (and without ``COURSE_LANG``) each notebook is checked in its own language (a Chinese twin in
Chinese: ``i18n.notebook_lang``).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from course_lib.grading.i18n import LANG_ENV, msg, notebook_lang, render

_MARK = "__course_selfcheck__ "
# Appended as the notebook's last cell: every Checker the notebook made prints its summary, and one
# line of data this module reads (then hides).
_SUMMARY_CELL = f"""\
import json as _json
from course_lib.grading.checker import Checker as _Checker
_checkers = [_v for _v in list(globals().values()) if isinstance(_v, _Checker)]
for _c in _checkers:
    _c.summary()
    _got, _total = _c.score()
    print({_MARK!r} + _json.dumps({{"chapter": _c.chapter_id, "got": _got, "total": _total,
          "correct": sum(_r.correct for _r in _c._best.values()), "questions": len(_c.questions)}}))
if not _checkers:
    print("no check = Checker(...) in this notebook: nothing was checked")
"""


def notebooks(args: list[Path]) -> list[Path]:
    """The notebooks named, and the ``*.ipynb`` directly in each folder named, in order."""
    found: list[Path] = []
    for a in args:
        found += sorted(a.glob("*.ipynb")) if a.is_dir() else [a] if a.suffix == ".ipynb" and a.is_file() else []
    return found


def _texts(cell: dict) -> list[str]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            out.append(f"{o.get('ename')}: {o.get('evalue')}\n")
    return out


def wrong_lines(output: str) -> list[str]:
    """The lines of a check cell's output that report a wrong answer: ``✘ qid: ...``, or a value
    question's ``answer = <value>  ✘ qid: ...`` (the echo never holds two spaces in a row)."""
    wrong = []
    for line in output.splitlines():
        verdict = line.split("  ", 1)[-1] if line.startswith("answer = ") else line
        if verdict.lstrip().startswith("✘"):
            wrong.append(line.strip())
    return wrong


def check_notebook(path: Path, timeout_cell: float = 120.0, lang: str | None = "en") -> tuple[bool, str]:
    """Run ``path`` (a copy in memory) in practice mode; (every question correct, the report in
    ``lang``; None: the notebook's own language)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from course_lib.grading import remote

    nb = nbformat.read(path, as_version=4)
    lang = lang or notebook_lang(nb, path) or "en"
    nb.cells.append(nbformat.v4.new_code_cell(_SUMMARY_CELL))
    env = {k: v for k, v in os.environ.items() if k != remote.MODE_ENV}   # practice, never graded
    env[LANG_ENV] = lang
    client = NotebookClient(nb, timeout=timeout_cell, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    lines = [f"== {path}"]
    try:
        client.execute(env=env)
    except CellTimeoutError:
        lines.append(render(msg("a cell ran past {limit:g} s: stopped there (the grader would interrupt it too)",
                                limit=timeout_cell), lang))
    except DeadKernelError:
        lines.append(render(msg("the kernel died: stopped there"), lang))
    wrong = []
    for cell in nb.cells[:-1]:
        if cell.cell_type == "code" and "check(" in cell.source:
            wrong += wrong_lines("".join(_texts(cell)))
    if wrong:
        lines += [render(msg("feedback on the wrong answers:"), lang), *(f"  {w}" for w in wrong)]
    summaries = []
    for text in _texts(nb.cells[-1]):
        for line in text.splitlines():
            if line.startswith(_MARK):
                summaries.append(json.loads(line[len(_MARK):]))
            else:
                lines.append(line)
    ok = bool(summaries) and all(s["correct"] == s["questions"] for s in summaries)
    return ok, "\n".join(lines)


def main(paths: list[Path], timeout_cell: float = 120.0, lang: str | None = "en") -> int:
    found = notebooks(paths)
    if not found:
        print(f"error: no notebooks (*.ipynb) in {' '.join(map(str, paths))}", file=sys.stderr)
        return 2
    n_ok = 0
    for path in found:
        ok, report = check_notebook(path, timeout_cell, lang)
        n_ok += ok
        print(report, flush=True)
    langs = {lang or notebook_lang(path=p) or "en" for p in found}   # the last line: theirs when all agree
    print("\n" + render(msg("{n_ok} of {n} notebook(s) fully correct", n_ok=n_ok, n=len(found)),
                        langs.pop() if len(langs) == 1 else "en"))
    return 0 if n_ok == len(found) else 1
