"""Input checks shared by the calculators: every bad argument raises ValueError naming it.

A number must be a real number (not a bool, string, None or list), finite, and fit a float;
an integer must also be integral and at most ``MAX_INT``. ``calculator`` wraps a public
function so that arithmetic which still overflows (1e308 · 6) or divides by an underflowed
product (1e-320 · 1e-320) raises ValueError naming the inputs instead of returning inf or
raising ZeroDivisionError. Validate at the public entry with the public names: a helper called
inside must not be the one that complains, or the user reads a name they never typed.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from numbers import Integral, Real

import numpy as np

MAX_INT = 2 ** 53   # the largest integer a float holds exactly; no count in this course comes near


def _show(value: object) -> str:
    """``repr`` of a bad value, shortened so a 400-digit integer does not flood the message."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def number(name: str, value: object) -> float:
    """Return ``value`` as a finite float, or raise ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {_show(value)}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large (more than a float holds, ~1.8e308), got {_show(value)}") from None
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    return v


def positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise ValueError naming ``name`` if it is not a finite
    positive number (or non-negative when ``allow_zero``)."""
    v = number(name, value)
    if v < 0 or (v == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {bound}, got {_show(value)}")
    return v


def positive_int(name: str, value: object, *, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """Return ``value`` as an int in [``minimum``, ``maximum``], or raise ValueError naming ``name``.

    Integral floats (``8.0``, ``1e6``) are accepted; bools, NaN, inf and fractions are not. The
    upper bound keeps loops and arrays sized by an argument finite (pass a smaller one there).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise ValueError(f"{name} must be an integer, got {_show(value)}")
    if not isinstance(value, Integral):
        v = number(name, value)
        if v != math.floor(v):
            raise ValueError(f"{name} must be an integer, got {_show(value)}")
        value = int(v)
    iv = int(value)
    if iv < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {_show(value)}")
    if iv > maximum:
        top = "2**53" if maximum == MAX_INT else f"{maximum:g}" if maximum >= 10 ** 6 else str(maximum)
        raise ValueError(f"{name} must be <= {top}, got {_show(value)}")
    return iv


def fraction(name: str, value: object, *, allow_one: bool = True) -> float:
    """Return ``value`` as a float in (0, 1] (or (0, 1)), or raise ValueError naming ``name``."""
    v = positive(name, value)
    if v > 1 or (v == 1 and not allow_one):
        raise ValueError(f"{name} must be a fraction in (0, 1{']' if allow_one else ')'}, got {value!r}")
    return v


def utilisation(name: str, value: object) -> float:
    """An MFU-like share in (0, 1]; the message spells out that 45 % is 0.45, the usual slip."""
    u = positive(name, value)
    if u > 1:
        raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r} (45% is 0.45, not 45)")
    return u


def zero_stage(name: str, value: object) -> int:
    """A ZeRO stage: 0 (plain data parallelism), 1, 2 or 3; else ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real) or value not in (0, 1, 2, 3):
        raise ValueError(f"{name} must be 0 (plain DP), 1, 2 or 3, got {_show(value)}")
    return int(value)


def flag(name: str, value: object) -> bool:
    """Return ``value`` if it is True or False, else raise ValueError naming ``name`` (a string
    such as "no" is truthy: accepting it would silently do the opposite of what was meant)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {_show(value)}")
    return bool(value)


def choice(name: str, value: object, options: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` if it is one of ``options``, else raise ValueError naming ``name``."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {_show(value)}")
    return value


# ----------------------------------------------------------------------------- results
def _finite(result: object) -> bool:
    """True if every number in ``result`` (a number, tuple, list, dict or dataclass) is finite."""
    if isinstance(result, (bool, str, Integral)) or result is None:   # an int is finite, 10**400 too
        return True
    if isinstance(result, Real):
        return math.isfinite(result)
    if isinstance(result, dict):
        return all(_finite(v) for v in result.values())
    if isinstance(result, (tuple, list)):
        return all(_finite(v) for v in result)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return all(_finite(getattr(result, f.name)) for f in dataclasses.fields(result))
    return True


def _culprits(sig: inspect.Signature, args: tuple, kwargs: dict, zero_divides: bool = False) -> str:
    """``name=value`` of the most extreme numeric inputs (within 10 decades of the largest
    |log10|), the likely cause of an overflow or an underflowed divisor; an input that is 0
    counts as the most extreme when the error is a division by zero."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return ""
    bound.apply_defaults()
    mags = {}
    for k, v in bound.arguments.items():
        if isinstance(v, Real) and not isinstance(v, (bool, np.bool_)) and v == v:
            if v != 0:
                mags[k] = abs(math.log10(abs(v)))   # math.log10 takes huge ints too
            elif zero_divides:
                mags[k] = math.inf
    if not mags:
        return ", ".join(bound.arguments)
    top = max(mags.values())
    return ", ".join(f"{k}={_show(bound.arguments[k])}" for k, m in mags.items() if m >= top - 10)


def calculator(fn):
    """Decorate a public calculator: an OverflowError, a ZeroDivisionError or a result that is
    not finite becomes a ValueError that names the inputs responsible (the most extreme ones)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
        except (OverflowError, ZeroDivisionError) as exc:
            culprits = _culprits(sig, args, kwargs, isinstance(exc, ZeroDivisionError))
            raise ValueError(f"inputs out of range: {culprits} (too large or too small for float "
                             f"arithmetic: {exc})") from None
        if not _finite(result):
            raise ValueError(f"inputs out of range: {_culprits(sig, args, kwargs)} (too large or too "
                             f"small: the result overflows a float)")
        return result

    return wrapper
