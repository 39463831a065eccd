"""Comparing a student's answer with a reference value, and the messages that say what is off.

Numbers: ``math.isclose`` with a relative and an absolute tolerance (NaN never matches).
Sequences (lists, tuples, numpy arrays, torch tensors): same length, elementwise. Strings:
case-insensitive after stripping. Bools: exactly. Messages are deterministic: a student's numbers
are shown to 4 significant digits, ratios to 3.
"""
from __future__ import annotations

import inspect
import math
from numbers import Real
from typing import Any


def to_plain(x: Any) -> Any:
    """Numpy arrays/scalars and torch tensors -> Python numbers and (nested) lists; tuples stay
    tuples; anything else unchanged."""
    if isinstance(x, (str, bytes, bool, int, float)) or x is None:
        return x
    if isinstance(x, tuple):
        return tuple(to_plain(v) for v in x)
    if isinstance(x, list):
        return [to_plain(v) for v in x]
    if hasattr(x, "detach") and callable(x.detach):  # torch.Tensor
        x = x.detach().cpu()
    tolist = getattr(x, "tolist", None)
    if callable(tolist):  # numpy array / scalar, torch tensor
        try:
            return tolist()
        except Exception:  # noqa: BLE001 - an exotic object: compare it as it is
            return x
    return x


def as_number(x: Any) -> float | None:
    """``x`` as a float if it is a real number (not a bool), else None."""
    x = to_plain(x)
    if isinstance(x, bool) or not isinstance(x, Real):
        return None
    return float(x)


def fmt_num(x: float) -> str:
    """A student's (or reference) number to 4 significant digits."""
    return f"{x:.4g}"


def fmt_points(x: float) -> str:
    return f"{round(float(x), 4):g}"


def describe(x: Any) -> str:
    """Short, deterministic description of an answer of the wrong kind."""
    if x is None:
        return "None (did you forget to assign or return the value?)"
    if x is Ellipsis:
        return "... (the placeholder is still there)"
    if isinstance(x, bool):
        return f"bool {x}"
    if isinstance(x, str):
        s = x if len(x) <= 40 else x[:37] + "..."
        return f"str {s!r}"
    if isinstance(x, Real):
        return f"{type(x).__name__} {fmt_num(float(x))}"
    if inspect.isfunction(x) or inspect.ismethod(x) or inspect.isbuiltin(x):
        return f"function {getattr(x, '__name__', '?')!r} (did you forget to call it?)"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of length {len(x)}"
    shape = getattr(x, "shape", None)
    if shape is not None:
        return f"{type(x).__name__} of shape {tuple(shape)}"
    return type(x).__name__


def _fmt_ratio(r: float) -> str:
    """2.00, 0.333, 86400, 1.16e-05: three significant digits, whole numbers when large."""
    if 100 <= abs(r) < 1e6:
        return f"{r:.0f}"
    if 0.01 <= abs(r) < 100:
        return f"{r:#.3g}"
    return f"{r:.3g}"


def _isclose(a: float, e: float, rtol: float, atol: float) -> bool:
    return math.isclose(a, e, rel_tol=rtol, abs_tol=atol)  # NaN never matches


def _tolerance(rtol: float, atol: float) -> str:
    parts = []
    if rtol:
        parts.append(f"±{rtol * 100:.2g}%")
    if atol:
        parts.append(f"±{fmt_num(atol)} absolute")
    return " or ".join(parts) if parts else "exact"


def kind_message(a: float, e: float, rtol: float, atol: float) -> str:
    """Why number ``a`` is not ``e`` without telling ``e``: the kind of error only (graded runs)."""
    tol = f"tolerance {_tolerance(rtol, atol)}"
    if e == 0 or a == 0 or math.isnan(a) or math.isinf(a):
        return f"your answer is not within the {tol} of the expected value"
    r = a / e
    if r < 0:
        return "your answer has the wrong sign"
    k = round(math.log10(r))
    if k != 0 and math.isclose(r, 10.0 ** k, rel_tol=0.02):
        return "your answer is off by a power of ten: check units and prefixes (k, M, G, T)"
    if math.isclose(r, 2, rel_tol=0.02) or math.isclose(r, 0.5, rel_tol=0.02):
        return "your answer is off by a factor of 2"
    if 0.9 < r < 1.1:
        return f"your answer is close (within 10%) but outside the {tol}"
    return f"your answer is not within the {tol} of the expected value"


def ratio_message(a: float, e: float, rtol: float, atol: float) -> str:
    """Why number ``a`` is not ``e``: direction and ratio, never only 'wrong'."""
    if math.isnan(a):
        return "your answer is NaN"
    if math.isinf(a):
        return "your answer is infinite"
    if e == 0:
        return f"your answer is {fmt_num(a)}, the expected value is 0"
    if a == 0:
        return "your answer is 0, the expected value is not"
    r = a / e
    if r < 0:
        return f"your answer has the wrong sign ({_fmt_ratio(r)}× the expected value)"
    if 0.9 < r < 1.1:
        pct = (r - 1) * 100
        side = "above" if pct > 0 else "below"
        return (f"your answer is {abs(pct):.2g}% {side} the expected value "
                f"(tolerance {_tolerance(rtol, atol)})")
    msg = f"your answer is {_fmt_ratio(r)}× the expected value (too {'large' if r > 1 else 'small'})"
    k = round(math.log10(r))
    if k != 0 and math.isclose(r, 10.0 ** k, rel_tol=0.02):
        msg += " — a power of ten: check units and prefixes (k, M, G, T)"
    elif math.isclose(r, 2, rel_tol=0.02) or math.isclose(r, 0.5, rel_tol=0.02):
        msg += " — a factor of 2"
    return msg


def compare(ans: Any, exp: Any, rtol: float, atol: float, unit: str | None = "", path: str = "",
            graded: bool = False) -> str | None:
    """None if ``ans`` matches ``exp``, else a message saying what is off (``graded``: the kind of
    error only, see :func:`kind_message`).

    Numbers: ``math.isclose`` with ``rtol``/``atol``. Sequences (lists, tuples, arrays, tensors):
    same length, elementwise. Strings: case-insensitive, stripped. Bools: exactly. Dicts: same keys,
    values compared. Anything else: ``==``.
    """
    ans, exp = to_plain(ans), to_plain(exp)
    at = f"at {path}: " if path else ""
    if isinstance(exp, bool):
        a = ans if isinstance(ans, bool) else None
        if a is None:
            return f"{at}expected True or False, got {describe(ans)}"
        return None if a == exp else f"{at}{a} is not the right answer"
    if isinstance(exp, Real):
        a = as_number(ans)
        if a is None:
            u = f" ({unit.strip('()')})" if unit else ""
            return f"{at}expected a number{u}, got {describe(ans)}"
        if _isclose(a, float(exp), rtol, atol):
            return None
        return at + (kind_message if graded else ratio_message)(a, float(exp), rtol, atol)
    if isinstance(exp, str):
        if not isinstance(ans, str):
            return f"{at}expected a string, got {describe(ans)}"
        ok = ans.strip().casefold() == exp.strip().casefold()
        return None if ok else f"{at}{describe(ans)} is not the answer we expected"
    if isinstance(exp, (list, tuple)):
        if not isinstance(ans, (list, tuple)):
            return f"{at}expected a sequence of {len(exp)} values, got {describe(ans)}"
        if len(ans) != len(exp):
            return f"{at}expected {len(exp)} values, got {len(ans)}"
        for i, (x, y) in enumerate(zip(ans, exp)):
            m = compare(x, y, rtol, atol, unit, f"{path}[{i}]", graded)
            if m is not None:
                return m
        return None
    if isinstance(exp, dict):
        if not isinstance(ans, dict):
            return f"{at}expected a dict, got {describe(ans)}"
        if set(ans) != set(exp):
            missing = sorted(map(str, set(exp) - set(ans)))
            extra = sorted(map(str, set(ans) - set(exp)))
            return f"{at}keys differ (missing: {', '.join(missing) or '-'}; unexpected: {', '.join(extra) or '-'})"
        for k in sorted(exp, key=str):
            m = compare(ans[k], exp[k], rtol, atol, unit, f"{path}[{k!r}]", graded)
            if m is not None:
                return m
        return None
    try:
        return None if bool(ans == exp) else f"{at}{describe(ans)} is not the answer we expected"
    except Exception as e:  # noqa: BLE001
        return f"{at}cannot compare {describe(ans)}: {type(e).__name__}: {e}"


def printable(text: Any, limit: int = 300) -> str:
    """``text`` as one line safe for every report: control characters (C0, DEL, C1, and the
    Unicode line/paragraph separators and bidi overrides a terminal or Markdown would act on)
    shown as ``\\xNN``/``\\uNNNN`` escapes, cut to ``limit`` characters. Pure: reports call it on
    file names and messages that came from a submission."""
    import unicodedata

    out = []
    for ch in " ".join(str(text).split(" ")):
        if ch in "\t\n\r":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):  # Cf: bidi, zero-width
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    s = " ".join("".join(out).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."
