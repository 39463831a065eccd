"""Input checks shared by the calculators: every bad argument raises ValueError naming it."""
from __future__ import annotations

import math
from numbers import Real


def positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise ValueError naming ``name`` if it is not a finite
    positive number (or non-negative when ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` as an int ≥ ``minimum``, or raise ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Real) or float(value) != int(value):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def fraction(name: str, value: object, *, allow_one: bool = True) -> float:
    """Return ``value`` as a float in (0, 1] (or (0, 1)), or raise ValueError naming ``name``."""
    v = positive(name, value)
    if v > 1 or (v == 1 and not allow_one):
        raise ValueError(f"{name} must be a fraction in (0, 1{']' if allow_one else ')'}, got {value!r}")
    return v


def choice(name: str, value: object, options: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` if it is one of ``options``, else raise ValueError naming ``name``."""
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value  # type: ignore[return-value]
