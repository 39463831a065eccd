"""Small, stable reports: the "measured | theory | ratio" table every lab prints, Markdown tables
for the book pages, 1.23B-style numbers, the largest difference between two sets of tensors, and
the stored runs a book page reads (``load_cached``)."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from course_lib.i18n import tr, tr_all


def fmt(x: float, digits: int = 3) -> str:
    """Format a number with ``digits`` significant digits, stable across machines."""
    if isinstance(x, str):
        return x
    if x == 0 or not math.isfinite(x):
        return str(x)
    if 1e-3 <= abs(x) < 1e6:
        return f"{x:.{digits}g}"
    return f"{x:.{max(digits - 1, 0)}e}"


def compare_table(rows: Iterable[Sequence], *, digits: int = 3, tolerance: float | None = None,
                  headers: Sequence[str] = ("quantity", "measured", "theory", "ratio"), lang: str = "en") -> str:
    """Render rows ``(label, measured, theory)`` as an aligned table with a ratio column.

    With ``tolerance`` a last column says ``ok`` when |ratio − 1| ≤ tolerance, else ``OFF``;
    that verdict is what a notebook's checked output should rely on. ``lang="zh"`` writes the
    headers and verdicts in Chinese (``course_lib.i18n``); the labels are the caller's.
    """
    lines = []
    hdr = tr_all([*headers, *(["within tol"] if tolerance is not None else [])], lang)
    for label, measured, theory in rows:
        ratio = measured / theory if theory else float("nan")
        line = [str(label), fmt(measured, digits), fmt(theory, digits), f"{ratio:.{digits}f}"]
        if tolerance is not None:
            line.append(tr("ok" if abs(ratio - 1) <= tolerance else "OFF", lang))
        lines.append(line)
    widths = [max(text_width(r[i]) for r in [hdr] + lines) for i in range(len(hdr))]
    out = [" | ".join(_ljust(h, w) for h, w in zip(hdr, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(_ljust(c, w) for c, w in zip(r, widths)) for r in lines]
    return "\n".join(out)


def text_width(text: str) -> int:
    """Columns ``text`` takes in a monospace font: a CJK character (wide, East Asian width W/F) two."""
    from unicodedata import east_asian_width
    return sum(2 if east_asian_width(c) in "WF" else 1 for c in text)


def _ljust(text: str, width: int) -> str:
    return text + " " * (width - text_width(text))


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def si(x: float) -> str:
    """``x`` with 3 significant digits and a k/M/B/T suffix (1.23B), as the book's tables quote sizes;
    from 10¹⁵ on (FLOP counts) as a power of ten, 3.15 × 10²³, the way papers quote compute."""
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e15:
        mantissa, exponent = f"{x:.2e}".split("e")
        return f"{float(mantissa):.3g} × 10{str(int(exponent)).translate(_SUPERSCRIPT)}"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def md_table(header: Sequence[str], rows: Iterable[Sequence]):
    """A Markdown table (an ``IPython.display.Markdown``, which the book renders as a real table)
    from a header and rows of already formatted cells."""
    from IPython.display import Markdown
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return Markdown("\n".join(lines))


def max_abs_diff(a: dict, b: dict) -> float:
    """Largest elementwise difference between two name → tensor dicts with the same keys (e.g. a
    parallel run's gradients against the single-process reference's)."""
    if set(a) != set(b):
        raise ValueError(f"the dicts name different parameters: {sorted(set(a) ^ set(b))[:4]}")
    return max(float((a[k] - b[k]).abs().max()) for k in a)



def load_cached(path: str | Path, command: str) -> dict:
    """A run stored as JSON for a book page to read, or FileNotFoundError saying the ``command``
    that regenerates it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} not found; regenerate it with: {command}")
    return json.loads(path.read_text())
