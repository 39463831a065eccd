"""Flag submissions whose solution cells are copies of the master notebooks (``grade --solutions``).

A master's solution block (``### BEGIN SOLUTION`` … ``### END SOLUTION``) counts as copied when its
code, normalised (comments, blank lines and spacing dropped, so reformatting or renaming nothing
does not hide it), occurs in the submission's code. It is a flag for the instructor to look at, not
a score: short blocks (under 40 normalised characters) are never flagged, since two honest students
often write the same one-liner.
"""
from __future__ import annotations

import io
import json
import tokenize
from pathlib import Path

from course_lib.grading._notebook import read_capped, source_text
from course_lib.grading.classroom import short_id
from course_lib.grading.generate import CODE_BEGIN, CODE_END

MIN_CHARS = 40


def normalise(code: str) -> str:
    """Python tokens joined by single spaces, without comments and line structure."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(code.split())
    return " ".join(out)


def solution_blocks(master: dict) -> list[str]:
    blocks: list[str] = []
    for cell in master.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        current: list[str] | None = None
        for line in source_text(cell.get("source")).splitlines(True):
            if line.strip() == CODE_BEGIN:
                current = []
            elif line.strip() == CODE_END and current is not None:
                blocks.append(normalise("".join(current)))
                current = None
            elif current is not None:
                current.append(line.strip() + "\n")
    return [b for b in blocks if len(b) >= MIN_CHARS]


def copied_blocks(submission: dict, master: dict) -> tuple[int, int]:
    """(solution blocks of ``master`` found in ``submission``, flaggable blocks in ``master``)."""
    code = " ".join(normalise("\n".join(line.strip() for line in source_text(c.get("source")).splitlines()))
                    for c in submission.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code")
    blocks = solution_blocks(master)
    return sum(b in code for b in blocks), len(blocks)


def copy_note(submission: Path, masters: Path, chapter: str) -> str | None:
    """A note if ``submission`` copies the master of ``chapter`` in folder ``masters``, else None."""
    cands = sorted(masters.glob(f"*{short_id(chapter)}*.ipynb"))
    if not cands:
        return None
    try:
        sub = json.loads(read_capped(submission).decode("utf-8"))
        master = json.loads(cands[0].read_text(encoding="utf-8"))
    except (OSError, ValueError):  # an unreadable or oversized (TooLarge) notebook: the runner reports it
        return None
    if not (isinstance(sub, dict) and isinstance(master, dict) and isinstance(sub.get("cells"), list)):
        return None  # not a notebook: the runner already reports it
    found, total = copied_blocks(sub, master)
    if total and found:
        return f"{found} of {total} solution blocks are copies of {cands[0].name}"
    return None
