"""Generate the student notebooks (``exercises/``) from the graded masters (``solutions/``).

In code cells every block from a line ``### BEGIN SOLUTION`` to ``### END SOLUTION`` (inclusive)
becomes, at the same indentation::

    # YOUR CODE HERE
    raise NotImplementedError("replace this line with your solution")

In Markdown cells every ``<!-- BEGIN SOLUTION -->`` ... ``<!-- END SOLUTION -->`` span becomes
``*Your answer here.*``. Outputs are cleared, execution counts reset, cell ids and metadata kept
(minus execution timing and widget state). The same master always gives byte-identical output.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from course_lib.grading._notebook import TIMING_KEYS, dumps, source_text

CODE_BEGIN, CODE_END = "### BEGIN SOLUTION", "### END SOLUTION"
MD_BEGIN, MD_END = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"
STUB = ("# YOUR CODE HERE", 'raise NotImplementedError("replace this line with your solution")')
MD_STUB = "*Your answer here.*"
MD_STUBS = {"zh": "*在此作答。*"}  # by the master's metadata course.lang (a Chinese twin)


class MarkerError(ValueError):
    """Unbalanced solution markers in a master notebook."""


def _where(name: str, index: int, cell: dict) -> str:
    cid = cell.get("id")
    return f"{name}: cell {index}" + (f" (id {cid})" if cid else "")


def strip_code(source: str, where: str = "cell") -> str:
    """Replace the solution blocks of a code cell's source with the stub."""
    out: list[str] = []
    begin_line = None
    for n, line in enumerate(source.splitlines(True), start=1):
        marker = line.strip()
        if marker == CODE_BEGIN:
            if begin_line is not None:
                raise MarkerError(f"{where}: line {n}: '{CODE_BEGIN}' inside the block opened on line "
                                  f"{begin_line}; close it with '{CODE_END}' first")
            begin_line = n
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}{STUB[0]}\n", f"{indent}{STUB[1]}\n"]
        elif marker == CODE_END:
            if begin_line is None:
                raise MarkerError(f"{where}: line {n}: '{CODE_END}' without a matching '{CODE_BEGIN}'")
            begin_line = None
        elif begin_line is None:
            out.append(line)
    if begin_line is not None:
        raise MarkerError(f"{where}: line {begin_line}: '{CODE_BEGIN}' is never closed by '{CODE_END}'")
    text = "".join(out)
    if not source.endswith("\n") and text.endswith("\n"):
        text = text[:-1]  # keep a cell that did not end with a newline that way
    return text


def strip_markdown(source: str, where: str = "cell", stub: str = MD_STUB) -> str:
    """Replace ``<!-- BEGIN SOLUTION -->`` ... ``<!-- END SOLUTION -->`` spans with the stub."""
    out, pos = [], 0
    while True:
        b, e = source.find(MD_BEGIN, pos), source.find(MD_END, pos)
        if b < 0 and e < 0:
            out.append(source[pos:])
            return "".join(out)
        if b < 0 or (0 <= e < b):
            raise MarkerError(f"{where}: '{MD_END}' without a matching '{MD_BEGIN}'")
        if e < 0:
            raise MarkerError(f"{where}: '{MD_BEGIN}' is never closed by '{MD_END}'")
        nested = source.find(MD_BEGIN, b + len(MD_BEGIN))
        if 0 <= nested < e:
            raise MarkerError(f"{where}: nested '{MD_BEGIN}'")
        out += [source[pos:b], stub]
        pos = e + len(MD_END)


def exercise_notebook(master: dict, name: str = "notebook") -> dict:
    """The student version of notebook dict ``master`` (which is not modified)."""
    nb = copy.deepcopy(master)
    nb.get("metadata", {}).pop("widgets", None)
    course = nb.get("metadata", {}).get("course")
    stub = MD_STUBS.get(course.get("lang") if isinstance(course, dict) else None, MD_STUB)
    for i, cell in enumerate(nb.get("cells", [])):
        where = _where(name, i, cell)
        src = source_text(cell.get("source"))
        for key in TIMING_KEYS:
            cell.get("metadata", {}).pop(key, None)
        if cell.get("cell_type") == "code":
            cell["source"] = strip_code(src, where)
            cell["outputs"] = []
            cell["execution_count"] = None
        elif cell.get("cell_type") == "markdown":
            cell["source"] = strip_markdown(src, where, stub)
    return nb


def render(path: Path) -> str:
    """The exact text of the exercise generated from master notebook file ``path``."""
    path = Path(path)
    master = json.loads(path.read_text(encoding="utf-8"))
    return dumps(exercise_notebook(master, str(path)))


def _pairs(src: Path, dst: Path) -> list[tuple[Path, Path]]:
    if src.is_file():
        return [(src, dst / src.name if dst.is_dir() or dst.suffix != ".ipynb" else dst)]
    return [(p, dst / p.name) for p in sorted(src.glob("*.ipynb")) if p.is_file()]


def generate(src: Path, dst: Path, *, check: bool = False) -> list[Path]:
    """Write (or, with ``check``, only compare) the exercises for the masters in ``src``.

    Returns the destination files that were out of date (written, or differing in check mode).
    In check mode an exercise notebook in ``dst`` without a master in ``src`` also counts.
    Raises :class:`MarkerError` for unbalanced markers, naming the notebook and cell.
    """
    src, dst = Path(src), Path(dst)
    if not src.exists():
        raise FileNotFoundError(f"no such file or folder: {src}")
    pairs = _pairs(src, dst)
    rendered = [(out, render(master)) for master, out in pairs]  # all markers checked before writing
    changed: list[Path] = []
    for out, text in rendered:
        old = out.read_text(encoding="utf-8") if out.exists() else None
        if old == text:
            continue
        changed.append(out)
        if not check:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
    if check and src.is_dir() and dst.is_dir():
        expected = {out for _, out in pairs}
        changed += [p for p in sorted(dst.glob("*.ipynb")) if p not in expected]
    return changed
