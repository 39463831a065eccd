"""Comparing a student's answer with a reference value, and the messages that say what is off.

Numbers: ``math.isclose`` with a relative and an absolute tolerance (NaN never matches).
Sequences (lists, tuples, numpy arrays, torch tensors): same length, elementwise. Strings:
case-insensitive after stripping. Bools: exactly. Messages are deterministic: a student's numbers
are shown to 4 significant digits, ratios to 3.
"""
from __future__ import annotations

import inspect
import math
import re
from numbers import Real
from typing import Any

from course_lib.grading.i18n import msg


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
    """Short, deterministic description of an answer of the wrong kind (a translatable Message
    where it has words of its own)."""
    if x is None:
        return msg("None (did you forget to assign or return the value?)")
    if x is Ellipsis:
        return msg("... (the placeholder is still there)")
    if isinstance(x, bool):
        return f"bool {x}"
    if isinstance(x, str):
        s = x if len(x) <= 40 else x[:37] + "..."
        return f"str {s!r}"
    if isinstance(x, Real):
        return f"{type(x).__name__} {fmt_num(float(x))}"
    if inspect.isfunction(x) or inspect.ismethod(x) or inspect.isbuiltin(x):
        return msg("function {name} (did you forget to call it?)", name=repr(getattr(x, "__name__", "?")))
    if isinstance(x, (list, tuple)):
        return msg("{type} of length {n}", type=type(x).__name__, n=len(x))
    shape = getattr(x, "shape", None)
    if shape is not None:
        return msg("{type} of shape {shape}", type=type(x).__name__, shape=tuple(shape))
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
    rel, abs_ = f"±{rtol * 100:.2g}%", f"±{fmt_num(atol)}"
    if rtol and atol:
        return msg("{rel} or {abs} absolute", rel=rel, abs=abs_)
    if atol:
        return msg("{abs} absolute", abs=abs_)
    return rel if rtol else msg("exact")


def kind_message(a: float, e: float, rtol: float, atol: float) -> str:
    """Why number ``a`` is not ``e`` without telling ``e``: the kind of error only (graded runs)."""
    tol = _tolerance(rtol, atol)
    if e == 0 or a == 0 or math.isnan(a) or math.isinf(a):
        return msg("your answer is not within the tolerance {tol} of the expected value", tol=tol)
    r = a / e
    if r < 0:
        return msg("your answer has the wrong sign")
    k = round(math.log10(r))
    if k != 0 and math.isclose(r, 10.0 ** k, rel_tol=0.02):
        return msg("your answer is off by a power of ten: check units and prefixes (k, M, G, T)")
    if math.isclose(r, 2, rel_tol=0.02) or math.isclose(r, 0.5, rel_tol=0.02):
        return msg("your answer is off by a factor of 2")
    if 0.9 < r < 1.1:
        return msg("your answer is close (within 10%) but outside the tolerance {tol}", tol=tol)
    return msg("your answer is not within the tolerance {tol} of the expected value", tol=tol)


def ratio_message(a: float, e: float, rtol: float, atol: float) -> str:
    """Why number ``a`` is not ``e``: direction and ratio, never only 'wrong'."""
    if math.isnan(a):
        return msg("your answer is NaN")
    if math.isinf(a):
        return msg("your answer is infinite")
    if e == 0:
        return msg("your answer is {answer}, the expected value is 0", answer=fmt_num(a))
    if a == 0:
        return msg("your answer is 0, the expected value is not")
    r = a / e
    if r < 0:
        return msg("your answer has the wrong sign ({ratio}× the expected value)", ratio=_fmt_ratio(r))
    tol = _tolerance(rtol, atol)
    if 0.9 < r < 1.1:
        pct = f"{abs((r - 1) * 100):.2g}"
        if r > 1:
            return msg("your answer is {pct}% above the expected value (tolerance {tol})", pct=pct, tol=tol)
        return msg("your answer is {pct}% below the expected value (tolerance {tol})", pct=pct, tol=tol)
    ratio = _fmt_ratio(r)
    k = round(math.log10(r))
    if k != 0 and math.isclose(r, 10.0 ** k, rel_tol=0.02):
        if r > 1:
            return msg("your answer is {ratio}× the expected value (too large) — a power of ten: "
                       "check units and prefixes (k, M, G, T)", ratio=ratio)
        return msg("your answer is {ratio}× the expected value (too small) — a power of ten: "
                   "check units and prefixes (k, M, G, T)", ratio=ratio)
    if math.isclose(r, 2, rel_tol=0.02):
        return msg("your answer is {ratio}× the expected value (too large) — a factor of 2", ratio=ratio)
    if math.isclose(r, 0.5, rel_tol=0.02):
        return msg("your answer is {ratio}× the expected value (too small) — a factor of 2", ratio=ratio)
    if r > 1:
        return msg("your answer is {ratio}× the expected value (too large)", ratio=ratio)
    return msg("your answer is {ratio}× the expected value (too small)", ratio=ratio)


def compare(ans: Any, exp: Any, rtol: float, atol: float, unit: str | None = "", path: str = "",
            graded: bool = False) -> str | None:
    """None if ``ans`` matches ``exp``, else a message saying what is off (``graded``: the kind of
    error only, see :func:`kind_message`).

    Numbers: ``math.isclose`` with ``rtol``/``atol``. Sequences (lists, tuples, arrays, tensors):
    same length, elementwise. Strings: case-insensitive, stripped. Bools: exactly. Dicts: same keys,
    values compared. Anything else: ``==``.
    """
    ans, exp = to_plain(ans), to_plain(exp)

    def at(problem: str) -> str:
        return msg("at {path}: {problem}", path=path, problem=problem) if path else problem

    if isinstance(exp, bool):
        a = ans if isinstance(ans, bool) else None
        if a is None:
            return at(msg("expected True or False, got {got}", got=describe(ans)))
        return None if a == exp else at(msg("{answer} is not the right answer", answer=a))
    if isinstance(exp, Real):
        a = as_number(ans)
        if a is None:
            if unit:
                return at(msg("expected a number ({unit}), got {got}", unit=unit.strip("()"), got=describe(ans)))
            return at(msg("expected a number, got {got}", got=describe(ans)))
        if _isclose(a, float(exp), rtol, atol):
            return None
        return at((kind_message if graded else ratio_message)(a, float(exp), rtol, atol))
    if isinstance(exp, str):
        if not isinstance(ans, str):
            return at(msg("expected a string, got {got}", got=describe(ans)))
        ok = ans.strip().casefold() == exp.strip().casefold()
        return None if ok else at(msg("{got} is not the answer we expected", got=describe(ans)))
    if isinstance(exp, (list, tuple)):
        if not isinstance(ans, (list, tuple)):
            return at(msg("expected a sequence of {n} values, got {got}", n=len(exp), got=describe(ans)))
        if len(ans) != len(exp):
            return at(msg("expected {n} values, got {got}", n=len(exp), got=len(ans)))
        for i, (x, y) in enumerate(zip(ans, exp)):
            m = compare(x, y, rtol, atol, unit, f"{path}[{i}]", graded)
            if m is not None:
                return m
        return None
    if isinstance(exp, dict):
        if not isinstance(ans, dict):
            return at(msg("expected a dict, got {got}", got=describe(ans)))
        if set(ans) != set(exp):
            missing = sorted(map(str, set(exp) - set(ans)))
            extra = sorted(map(str, set(ans) - set(exp)))
            return at(msg("keys differ (missing: {missing}; unexpected: {extra})",
                          missing=", ".join(missing) or "-", extra=", ".join(extra) or "-"))
        for k in sorted(exp, key=str):
            m = compare(ans[k], exp[k], rtol, atol, unit, f"{path}[{k!r}]", graded)
            if m is not None:
                return m
        return None
    try:
        return None if bool(ans == exp) else at(msg("{got} is not the answer we expected", got=describe(ans)))
    except Exception as e:  # noqa: BLE001
        return at(msg("cannot compare {got}: {error}", got=describe(ans), error=f"{type(e).__name__}: {e}"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(m: re.Match) -> str:
    o = ord(m.group())
    return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"


def shown(text: Any) -> str:
    """``text`` with every lone surrogate escaped, so that any report can encode it as UTF-8: a byte
    of a file name that is not UTF-8 (``os.fsdecode`` keeps it as U+DC80..U+DCFF) as the ``\\xNN``
    it was (``notes\\xff.txt``), any other surrogate as ``\\uNNNN``. Nothing else changes, so a
    name that is valid UTF-8 is shown as it is."""
    text = str(text)
    return _SURROGATE.sub(_escape_surrogate, text) if not text.isascii() else text


def printable(text: Any, limit: int | None = 300) -> str:
    """``text`` as one line safe for every report: undecodable bytes of a file name shown as
    ``\\xNN`` (:func:`shown`), control characters (C0, DEL, C1, and the Unicode line/paragraph
    separators and bidi overrides a terminal or Markdown would act on) as ``\\xNN``/``\\uNNNN``
    escapes, cut to ``limit`` characters (None: never cut). Pure: reports call it on file names and
    messages that came from a submission."""
    import unicodedata

    out = []
    for ch in " ".join(shown(text).split(" ")):
        if ch in "\t\n\r":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cn", "Zl", "Zp"):  # Cf: bidi, zero-width
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    s = " ".join("".join(out).split())
    return s if limit is None or len(s) <= limit else s[: limit - 3] + "..."
