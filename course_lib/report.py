"""Small, stable text reports: the "measured | theory | ratio" table every lab prints."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


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
                  headers: Sequence[str] = ("quantity", "measured", "theory", "ratio")) -> str:
    """Render rows ``(label, measured, theory)`` as an aligned table with a ratio column.

    With ``tolerance`` a last column says ``ok`` when |ratio − 1| ≤ tolerance, else ``OFF``;
    that verdict is what a notebook's checked output should rely on.
    """
    lines = []
    hdr = list(headers) + (["within tol"] if tolerance is not None else [])
    for label, measured, theory in rows:
        ratio = measured / theory if theory else float("nan")
        line = [str(label), fmt(measured, digits), fmt(theory, digits), f"{ratio:.{digits}f}"]
        if tolerance is not None:
            line.append("ok" if abs(ratio - 1) <= tolerance else "OFF")
        lines.append(line)
    widths = [max(len(r[i]) for r in [hdr] + lines) for i in range(len(hdr))]
    out = [" | ".join(h.ljust(w) for h, w in zip(hdr, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in lines]
    return "\n".join(out)
