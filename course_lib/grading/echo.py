"""What ``check(qid, answer)`` shows of the answer itself, in practice mode: the value with its unit
before the verdict (``answer = 41.45 days  ✔ days_34b_8t: correct (2/2 points)``), so a worked
solution shows its answer and a student sees what was actually submitted.

The value comes from the student's code, so the text is built without calling its ``repr`` or
``str`` (an unknown object shows as its type's name, a container is read through its base type's
methods), without converting a whole array or tensor (only its shape, dtype and first elements are
read), with control characters escaped and the whole cut to :data:`LIMIT` characters
(:func:`course_lib.grading.values.printable`). Numbers show 4 significant digits, like every number
in the feedback (whole numbers below a million in full), so stored outputs are machine-stable.
Graded runs echo nothing (the recorder prints only "answer recorded").
"""
from __future__ import annotations

import itertools
import math
from numbers import Integral, Real
from typing import Any

from course_lib.grading.values import describe, printable

LIMIT = 100          # characters of the whole echo
_ITEMS = 6           # elements of a sequence, array or dict shown before "…"
_DEPTH = 3           # nesting shown before "[…]"
_STR = 40            # characters of a string answer
# units that name a kind of pure number: shown in parentheses, "0.3081 (fraction)"
DIMENSIONLESS = ("fraction", "probability", "exponent")


def with_unit(text: str, unit: str | None) -> str:
    """``text`` followed by ``unit`` as a reader expects it: ``41.45 days``, ``0.3081 (fraction)``,
    ``4.883×``; nothing added for no unit."""
    if not unit:
        return text
    if unit == "×":
        return text + "×"
    if unit in DIMENSIONLESS:
        return f"{text} ({unit})"
    return f"{text} {unit}"


def fmt_value(x: float | int) -> str:
    """A number readably, at 4 significant digits: fixed notation from 10^-3 to 10^6 (``0.1593``,
    ``41.45``; whole numbers and anything from 1,000 on rounded to a whole number with thousands
    separators: ``1,415``, ``51,422``), scientific outside (``1.632e24``, ``8.847e6``,
    ``1.16e-5``); an int exactly, below 10^15 (``15,616``)."""
    if isinstance(x, Integral):
        n = int(x)
        if abs(n) < 10 ** 15:
            return f"{n:,}"
        try:
            x = float(n)
        except OverflowError:
            return f"{'a negative' if n < 0 else 'an'} integer of {n.bit_length():,} bits"
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    a = abs(x)
    if a != 0 and (a >= 1e6 or a < 1e-3):
        mantissa, exp = f"{x:.3e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"
    if a >= 1000 or x == int(x):
        return f"{round(x):,}"
    return f"{x:.4g}"


def _array(x: Any, depth: int) -> str:
    """A numpy array or torch tensor: a small 1-D one like a list, a bigger one as its dtype and
    shape and its first elements (read through a view: an expanded tensor is never materialised)."""
    shape = tuple(int(d) for d in x.shape)
    if hasattr(x, "detach"):
        x = x.detach()
    if not shape:
        return _one(x.item(), depth)
    dtype = str(x.dtype).removeprefix("torch.")
    kind = "tensor" if hasattr(x, "detach") else "array"
    if math.prod(shape) == 0:
        return f"empty {dtype} {kind} of shape {shape}"
    first = x[(0,) * (len(shape) - 1)][:_ITEMS]
    values = [_one(v, depth + 1) for v in first.tolist()]
    if len(shape) == 1 and shape[0] <= _ITEMS:
        return "[" + ", ".join(values) + "]"
    return f"{dtype} {kind} of shape {shape} [{', '.join(values)}, …]"


def _one(x: Any, depth: int) -> str:
    if isinstance(x, bool) or x is None or x is Ellipsis:
        return str(x)
    # containers are read through the base type's own methods: a subclass's overrides never run
    if isinstance(x, str):
        head = str.__getitem__(x, slice(0, _STR))
        return repr(head + "…" if str.__len__(x) > _STR else head)
    if isinstance(x, Real):
        return fmt_value(x)
    if depth >= _DEPTH:
        return "[…]"
    if isinstance(x, (list, tuple)):
        base = tuple if isinstance(x, tuple) else list
        n = base.__len__(x)
        items = [_one(v, depth + 1) for v in base.__getitem__(x, slice(0, _ITEMS))]
        if n > _ITEMS:
            items.append(f"… ({n:,} values)")
        inner = ", ".join(items) + ("," if base is tuple and n == 1 else "")
        return f"({inner})" if base is tuple else f"[{inner}]"
    if isinstance(x, dict):
        keys = list(itertools.islice(dict.__iter__(x), _ITEMS))
        items = [f"{_one(k, depth + 1)}: {_one(dict.__getitem__(x, k), depth + 1)}" for k in keys]
        if dict.__len__(x) > _ITEMS:
            items.append(f"… ({dict.__len__(x):,} keys)")
        return "{" + ", ".join(items) + "}"
    if isinstance(x, (set, frozenset)):   # no order to show deterministically
        base = set if isinstance(x, set) else frozenset
        return f"{base.__name__} of {base.__len__(x):,} values"
    if hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "tolist"):
        return _array(x, depth)
    return describe(x) if callable(x) else type(x).__name__


def show_answer(answer: Any, unit: str | None = None) -> str:
    """The one-line echo of ``answer`` in ``unit``: escaped, at most :data:`LIMIT` characters, and
    never an exception (what cannot be shown is named by its type)."""
    try:
        text = _one(answer, 0)
        if isinstance(answer, str) or answer is None or callable(answer) and not hasattr(answer, "shape"):
            unit = None                      # a unit after a string or a function says nothing
    except Exception as e:  # noqa: BLE001 - student objects may raise anywhere
        text, unit = f"{type(answer).__name__} (cannot be shown: {type(e).__name__})", None
    return printable(with_unit(text, unit), LIMIT)
