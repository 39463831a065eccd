"""Questions of a chapter's bank and the mistakes they recognise.

A :class:`Question` is either a *value* question (``expected=`` a zero-argument callable giving the
reference answer, compared with a tolerance) or a *function* question (``grader=`` a callable that
receives the student's answer object and returns ``(fraction, message)``). Grading never raises
because of what a student typed: any exception becomes a score of 0 with the error text.

Every message is deterministic: numbers a student typed are shown to 4 significant digits, ratios to
3, so stored notebook outputs do not depend on the machine.

Feedback: ``"practice"`` (in the notebook) explains a wrong number by its ratio to the reference
("2.00× the expected value"); ``"graded"`` (the headless grader) names only the kind of error (a
recognised mistake, a power of ten, a factor of 2, the sign, close but outside the tolerance), so a
graded run cannot be used to read the reference off its ratio. A function question's ``grader`` may
take a second argument, a ``numpy.random.Generator``: seeded per graded run (fixed in practice), it
draws inputs the notebook never saw.

Language: every message is made in English as an :mod:`course_lib.grading.i18n` template (or is a
bank's fixed text) and rendered last, in ``grade(lang=...)``'s language; :meth:`Question.assess`
gives the score and the untranslated message, so the score can never depend on the language.
"""
from __future__ import annotations

import inspect
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from course_lib import _validate
from course_lib.grading.i18n import DEFAULT_LANG, Message, check_lang, join, msg, render, sentence
from course_lib.grading.values import as_number, compare, describe, fmt_points, to_plain

_QID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# ``unit=NO_UNIT``: the answer is no quantity (booleans, strings, a value that is just a number);
# the default ``unit=None`` means the bank did not say (tests/test_grading_echo.py rejects that)
NO_UNIT = ""


# --------------------------------------------------------------------------- Mistake
@dataclass(frozen=True)
class Mistake:
    """A recognised wrong answer: ``when(answer, expected)`` is true -> show ``message``."""

    when: Callable[[Any, Any], bool]
    message: str

    def matches(self, answer: Any, expected: Any) -> bool:
        """Whether this mistake explains ``answer``; a predicate that raises does not match."""
        try:
            return bool(self.when(answer, expected))
        except Exception:  # noqa: BLE001 - student input may break an author's predicate
            return False

    @classmethod
    def ratio(cls, r: float, message: str, rtol: float = 0.02) -> Mistake:
        """The answer is ≈ ``r`` × the expected value (numbers, or sequences elementwise)."""
        r = float(r)

        def when(answer: Any, expected: Any) -> bool:
            exp = to_plain(expected)
            if isinstance(exp, (list, tuple)):
                return compare(answer, [float(v) * r for v in exp], rtol, 0.0) is None
            e = as_number(exp)
            return e is not None and compare(answer, e * r, rtol, 0.0) is None

        return cls(when, message)

    @classmethod
    def equals(cls, value: Any, message: str, rtol: float = 1e-6, atol: float = 0.0) -> Mistake:
        """The answer equals ``value`` (same comparison rules as a value question)."""
        return cls(lambda answer, expected: compare(answer, value, rtol, atol) is None, message)

    @classmethod
    def predicate(cls, fn: Callable[..., bool], message: str) -> Mistake:
        """``fn(answer)`` (or ``fn(answer, expected)`` if it takes two arguments) is true."""
        try:
            n = len([p for p in inspect.signature(fn).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
        except (TypeError, ValueError):
            n = 1
        if n >= 2:
            return cls(lambda answer, expected: fn(answer, expected), message)
        return cls(lambda answer, expected: fn(answer), message)


# the unit slips every question in a unit recognises (after the bank's own mistakes): the answer
# is ratio × the expected value when given in the other unit
_DAY, _HOUR, _GIB = 86400.0, 3600.0, 2.0 ** 30
UNIT_MISTAKES: dict[str, tuple[tuple[float, str], ...]] = {
    "days": ((_DAY, "That is seconds, not days."), (24.0, "That is hours, not days."),
             (1440.0, "That is minutes, not days.")),
    "hours": ((_HOUR, "That is seconds, not hours."), (1 / 24, "That is days, not hours."),
              (60.0, "That is minutes, not hours.")),
    "s": ((1 / _DAY, "That is days, not seconds."), (1 / _HOUR, "That is hours, not seconds."),
          (1 / 60, "That is minutes, not seconds."), (1e3, "That is milliseconds, not seconds.")),
    "GiB": ((_GIB / 1e9, "That is GB (10^9 bytes), not GiB (2^30 bytes)."),
            (_GIB, "That is bytes, not GiB.")),
    "GB": ((1e9 / _GIB, "That is GiB (2^30 bytes), not GB (10^9 bytes)."), (1e9, "That is bytes, not GB.")),
    "bytes": ((1e-9, "That is GB, not bytes."), (1 / _GIB, "That is GiB, not bytes.")),
}


def unit_mistakes(unit: str) -> tuple[Mistake, ...]:
    """The recognised unit slips of a question whose answer is in ``unit`` (see UNIT_MISTAKES)."""
    return tuple(Mistake.ratio(r, m, rtol=0.01) for r, m in UNIT_MISTAKES.get(unit, ()))


# --------------------------------------------------------------------------- Question
@dataclass(frozen=True)
class Result:
    """Outcome of grading one answer: ``score`` out of ``points`` with an explanation."""

    qid: str
    points: float
    score: float
    message: str

    @property
    def correct(self) -> bool:
        return self.score >= self.points

    def line(self, lang: str = DEFAULT_LANG) -> str:
        """The one line ``check()`` prints, in ``lang`` (the message is already in it)."""
        p, s = fmt_points(self.points), fmt_points(self.score)
        if self.correct:
            tail = f" — {self.message}" if self.message else ""
            return render(msg("✔ {qid}: correct ({points}/{points} points)", qid=self.qid, points=p), lang) + tail
        return f"✘ {self.qid}: {s}/{p} — {self.message}"


def error_text(e: BaseException) -> str:
    """An exception as one short line, ``Type: text`` (the text is the student's or Python's own
    words, shown as they are in every language)."""
    text = " ".join(str(e).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Question:
    """One graded question; see the module docstring and CONTRIBUTING.md for the two kinds."""

    def __init__(self, qid: str, points: float, prompt: str, *,
                 expected: Callable[[], Any] | None = None, rtol: float = 1e-6, atol: float = 0.0,
                 mistakes: list[Mistake] | tuple[Mistake, ...] = (), hint: str = "",
                 grader: Callable[[Any], tuple[float, str]] | None = None, explanation: str = "",
                 unit: str | None = None):
        if not isinstance(qid, str) or not _QID.match(qid):
            raise ValueError(f"qid must be a short identifier (letters, digits, _ . -), got {qid!r}")
        self.qid = qid
        self.points = _validate.positive("points", points)
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {prompt!r}")
        if (expected is None) == (grader is None):
            raise ValueError(f"question {qid!r}: give exactly one of expected= or grader=")
        if expected is not None and not callable(expected):
            raise ValueError(f"question {qid!r}: expected must be a zero-argument callable")
        if grader is not None and not callable(grader):
            raise ValueError(f"question {qid!r}: grader must be a callable")
        self.rtol = _validate.positive("rtol", rtol, allow_zero=True)
        self.atol = _validate.positive("atol", atol, allow_zero=True)
        self.mistakes = tuple(mistakes)
        for m in self.mistakes:
            if not isinstance(m, Mistake):
                raise ValueError(f"question {qid!r}: mistakes must be Mistake objects, got {m!r}")
        if unit is not None and not isinstance(unit, str):
            raise ValueError(f"question {qid!r}: unit must be a string (NO_UNIT for none), got {unit!r}")
        self.prompt, self.hint, self.explanation, self.unit = prompt, hint, explanation, unit
        self.expected, self.grader = expected, grader
        self._reference: tuple[Any] | None = None

    def __repr__(self) -> str:
        kind = "value" if self.expected is not None else "function"
        return f"Question({self.qid!r}, points={fmt_points(self.points)}, {kind})"

    @property
    def is_value(self) -> bool:
        return self.expected is not None

    def reference(self) -> Any:
        """The reference answer of a value question (computed once, then cached)."""
        if self.expected is None:
            raise ValueError(f"question {self.qid!r} is graded by a function and has no reference value")
        if self._reference is None:
            self._reference = (self.expected(),)
        return self._reference[0]

    def grade(self, answer: Any, *, feedback: str = "practice", seed: int = 0, lang: str = DEFAULT_LANG) -> Result:
        """Score ``answer``; never raises because of it. ``feedback`` is "practice" or "graded";
        ``seed`` seeds the inputs a function question's grader draws; ``lang`` is the language of
        the message only (the score and the mistake recognised are the same in every language)."""
        if feedback not in ("practice", "graded"):
            raise ValueError(f"feedback must be 'practice' or 'graded', got {feedback!r}")
        check_lang(lang)
        fraction, message = self.assess(answer, feedback=feedback, seed=seed)
        return Result(self.qid, self.points, round(fraction * self.points, 4), " ".join(render(message, lang).split()))

    def assess(self, answer: Any, *, feedback: str = "practice", seed: int = 0) -> tuple[float, str]:
        """(fraction of the points, the message in English, translatable: a Message or a bank's
        fixed text): what :meth:`grade` scores and then renders in the language asked for."""
        if self.grader is not None:
            return self._grade_function(answer, seed)
        try:
            exp = self.reference()
        except Exception as e:  # noqa: BLE001
            return 0.0, msg("Error while computing the reference answer: {error}", error=error_text(e))
        try:
            problem = compare(answer, exp, self.rtol, self.atol, self.unit, graded=feedback == "graded")
        except Exception as e:  # noqa: BLE001
            problem = msg("could not compare your answer: {error}", error=error_text(e))
        if problem is None:
            return 1.0, ""
        for m in (*self.mistakes, *unit_mistakes(self.unit)):
            if m.matches(answer, exp):
                return 0.0, m.message
        return 0.0, sentence(problem)

    def _takes_rng(self) -> bool:
        try:
            params = [p for p in inspect.signature(self.grader).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            return False
        return len(params) >= 2

    def _grade_function(self, answer: Any, seed: int) -> tuple[float, str]:
        try:
            if self._takes_rng():
                import numpy as np

                rng = np.random.default_rng([seed, zlib.crc32(self.qid.encode())])
                out = self.grader(answer, rng)
            else:
                out = self.grader(answer)
        except NotImplementedError as e:
            return 0.0, msg("not implemented ({error})", error=error_text(e))
        except Exception as e:  # noqa: BLE001 - student code run by the grader raised
            return 0.0, msg("Your code raised {error}", error=error_text(e))
        if isinstance(out, tuple) and len(out) == 2:
            frac, message = out
        else:
            frac, message = out, ""
        f = as_number(frac) if not isinstance(frac, bool) else float(frac)
        if f is None or math.isnan(f):
            return 0.0, msg("Grader error: it returned {got}, not (fraction, message)", got=describe(out))
        f = min(1.0, max(0.0, f))
        text = message if isinstance(message, Message) else str(message)   # any other str subclass: plain
        if f < 1.0:
            for m in self.mistakes:
                if m.matches(answer, None):
                    text = join(text, m.message) if text.strip() else m.message
                    break
            if not text.strip():
                text = msg("{pct}% of the grader's tests passed", pct=f"{round(f * 100):d}")
        return f, text
