"""How the command line reads a typed value: a number as the site's calculators read a field, a
true/false switch, a JSON list. Apart from ``__main__`` so the CLI stays one sitting; the names keep
their leading underscore (the CLI's and its tests' own)."""
from __future__ import annotations

import argparse
import json
import re

from ._validate import _show

# A number as the site's calculators read a field (book/_static/calculators.js: parseField after
# expandSuffix), so the same text means the same number on the page and here: trimmed of the
# browser's white space, then a magnitude in any case, k M B/G T P (powers of 1000, M is never
# milli) or Ki Mi Gi Ti Pi (powers of 1024), after an integer (70B is the integer 70000000000) or a
# decimal (1.5M is the float 1.5e6); then an integer literal is an exact int (so 10**400 is seen as
# too large by the calculator, not rounded), a float literal a float (1e9, 0.45, inf, nan).
_WS = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"   # what JavaScript trims
_TRIM = re.compile(f"^[{_WS}]+|[{_WS}]+$")
_SUFFIX = re.compile(f"([+-]?)([0-9]+\\.?[0-9]*|\\.[0-9]+)[{_WS}]*(ki|mi|gi|ti|pi|k|m|b|g|t|p)", re.IGNORECASE)
_DECIMAL = {"k": 3, "m": 6, "b": 9, "g": 9, "t": 12, "p": 15}
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


def _expand_suffix(text: str) -> str:
    """``70B`` -> ``70000000000``, ``1.5M`` -> ``1.5e6``, ``128Ki`` -> ``131072`` (calculators.js's
    expandSuffix); any other text unchanged."""
    m = _SUFFIX.fullmatch(text)
    if not m:
        return text
    sign, num, suffix = m.group(1), m.group(2), m.group(3).lower()
    if suffix in _DECIMAL:
        return sign + num + ("0" * _DECIMAL[suffix] if num.isdigit() else f"e{_DECIMAL[suffix]}")
    scale = 1024 ** ("kmgtp".index(suffix[0]) + 1)
    return sign + (str(int(num) * scale) if num.isdigit() else repr(float(num) * scale))


def _number(text: str) -> int | float:
    """A number as typed, read as the site reads it (see above)."""
    t = _expand_suffix(_TRIM.sub("", text))
    if _INT.fullmatch(t):
        return int(t)
    if _FLOAT.fullmatch(t):
        return float(t)
    raise argparse.ArgumentTypeError(f"expected a number such as 70B, 15T, 2k, 1.5M, 128Ki or 1e9, got {text!r}")


def _optional_number(text: str) -> int | float | None:
    """A number, or ``none`` for an optional argument left to its default rule (``--mfu none``)."""
    return None if text.lower() == "none" else _number(text)


def _switch(text: str) -> bool:
    """true or false, nothing else: any other word would be a truthy string in Python."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _json_list(text: str) -> list:
    shown = _show(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    except RecursionError:   # [[[...]]] 3000 deep exhausts the parser's stack
        raise argparse.ArgumentTypeError(f"expected a JSON list such as [5, 3, 0], got one nested too "
                                         f"deeply to read: {shown}") from None
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"expected a JSON list such as [5, 3, 0], got {shown}")
    return value
