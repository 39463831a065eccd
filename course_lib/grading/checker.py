"""The in-notebook API: ``check = Checker("ch01_flops")`` then ``check("qid", answer)``.

``check(...)`` prints one deterministic line and returns a ``Verdict``: true for full marks, and
silent as a cell's last value (the line above already said it). For a value question the line
shows the answer with its unit before the verdict (``answer = 41.45 days  ✔ days_34b_8t: correct
(2/2 points)``, see :mod:`course_lib.grading.echo`), so a worked solution shows its result.
``check.hint(qid)``, ``check.reveal(qid)`` and ``check.summary()`` help a stuck student.

Graded runs (``python -m course_lib.grading grade``) set ``COURSE_GRADE_MODE=graded`` inside the
sandbox: there ``Checker`` loads no question bank and ``check(...)`` only records the answer (see
:mod:`course_lib.grading.remote`); the grader scores it outside the sandbox. ``reveal`` then shows
nothing and costs the question its points.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
from typing import Any

from course_lib.grading import remote
from course_lib.grading.echo import show_answer, with_unit
from course_lib.grading.i18n import LANG_ENV, check_lang, msg, render, session_lang
from course_lib.grading.question import Question, Result
from course_lib.grading.values import fmt_num, fmt_points, to_plain
_CHAPTER = re.compile(r"^[A-Za-z0-9_]+$")


def available_chapters() -> list[str]:
    import course_lib.checks as checks

    return sorted(m.name for m in pkgutil.iter_modules(checks.__path__) if not m.name.startswith("_"))


def load_bank(chapter_id: str, bank: str | None = None) -> list[Question]:
    """The ``QUESTIONS`` of ``course_lib.checks.<chapter_id>`` (or of module ``bank`` if given).

    Raises ValueError for an unknown chapter, a bank without a ``QUESTIONS`` list of Question, or
    duplicate question ids.
    """
    if not isinstance(chapter_id, str) or not _CHAPTER.match(chapter_id):
        raise ValueError(f"chapter_id must be a chapter id like '01_flops' or 'ch01_flops', got {chapter_id!r}")
    modname = bank if bank is not None else f"course_lib.checks.{chapter_id}"
    try:
        module = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name is None or not (modname == e.name or modname.startswith(e.name + ".")):
            raise  # the bank exists but one of its own imports is missing
        known = ", ".join(available_chapters()) or "none"
        raise ValueError(f"unknown chapter {chapter_id!r}: no question bank module {modname!r} "
                         f"(chapters with a bank: {known})") from None
    questions = getattr(module, "QUESTIONS", None)
    if not isinstance(questions, (list, tuple)) or not all(isinstance(q, Question) for q in questions):
        raise ValueError(f"question bank {modname!r} must define QUESTIONS: list[Question]")
    seen: set[str] = set()
    for q in questions:
        if q.qid in seen:
            raise ValueError(f"question bank {modname!r}: duplicate question id {q.qid!r}")
        seen.add(q.qid)
    return list(questions)


class Verdict:
    """What ``check(...)`` returns: truthy exactly on full marks (``if check(...)``, ``assert
    check(...)``), with the score; a notebook shows nothing for it, since the verdict line was
    already printed (a bare ``True`` under every check cell said nothing new)."""

    __slots__ = ("correct", "score", "points")

    def __init__(self, correct: bool, score: float, points: float) -> None:
        self.correct, self.score, self.points = bool(correct), score, points

    def __bool__(self) -> bool:
        return self.correct

    def __eq__(self, other: object) -> bool:
        return self.correct == other if isinstance(other, bool) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Verdict(correct={self.correct}, score={fmt_points(self.score)}/{fmt_points(self.points)})"

    def _ipython_display_(self) -> None:
        """Display nothing: IPython calls this instead of printing the repr as the cell's value."""


class Recorded:
    """What ``check(...)`` returns in a graded run: falsy (nothing was scored here), shown as nothing."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Recorded()"

    def _ipython_display_(self) -> None:
        """Display nothing."""


class Checker:
    """Grades a chapter's questions inside a notebook (practice), or records the answers for the
    grader (graded runs). ``bank`` overrides the bank's module path in practice (tests, instructors
    trying out a bank outside ``course_lib.checks``); a graded run ignores it.

    ``lang`` is the language of everything it prints: ``"en"`` or ``"zh"``; by default the
    environment's ``COURSE_LANG`` when the checker is made, else the language of the notebook it
    runs in (a Chinese twin speaks Chinese: ``i18n.session_lang``), else English.
    ``check.lang = "zh"`` switches an existing checker. It changes words only: scores and
    recognised mistakes are the same in both."""

    def __init__(self, chapter_id: str, *, bank: str | None = None, lang: str | None = None):
        self.chapter_id = chapter_id
        self.lang = lang if lang is not None else (os.environ.get(LANG_ENV) or session_lang() or "en")
        self._recorder = remote.recorder()
        self.questions: dict[str, Question] = (
            {} if self._recorder else {q.qid: q for q in load_bank(chapter_id, bank)})
        self._best: dict[str, Result] = {}

    @property
    def lang(self) -> str:
        """The language this checker speaks ("en" or "zh")."""
        return self._lang

    @lang.setter
    def lang(self, value: str) -> None:
        self._lang = check_lang(value)

    def __repr__(self) -> str:
        return f"Checker({self.chapter_id!r}, {len(self.questions)} questions)"

    def _say(self, template: str, **values: Any) -> None:
        print(render(msg(template, **values), self._lang))

    def _question(self, qid: str) -> Question:
        q = self.questions.get(qid) if isinstance(qid, str) else None
        if q is None:
            raise ValueError(render(msg("unknown question {qid} for chapter {chapter}; questions: {known}",
                                        qid=repr(qid), chapter=repr(self.chapter_id),
                                        known=", ".join(self.questions)), self._lang))
        return q

    def __call__(self, qid: str, answer: Any) -> Verdict | Recorded:
        """Grade ``answer`` for question ``qid`` and print one line (a value question's answer and
        unit, then the verdict); truthy if full marks. In a graded run: record it for the grader
        (the last answer to a question counts) and echo nothing of it."""
        if self._recorder is not None:
            self._recorder.answer(self.chapter_id, str(qid), answer)
            self._say("→ {qid}: answer recorded (graded run: scored after the notebook has run)", qid=qid)
            return Recorded()
        q = self._question(qid)
        result = q.grade(answer, lang=self._lang)
        best = self._best.get(qid)
        if best is None or result.score >= best.score:
            self._best[qid] = result
        shown = render(msg("answer = {answer}  ", answer=show_answer(answer, q.unit)), self._lang) if q.is_value else ""
        print(shown + result.line(self._lang))
        return Verdict(result.correct, result.score, result.points)

    def _graded(self, what: str, qid: str) -> bool:
        """In a graded run, say that ``what`` is not available (and record it); True if graded."""
        if self._recorder is None:
            return False
        self._recorder.write({"event": what, "qid": str(qid)})
        if what == "revealed":
            self._say("{qid}: no reference answer in a graded run and the question now scores 0.", qid=qid)
        elif what == "hint":
            self._say("{qid}: no hint in a graded run.", qid=qid)
        else:
            self._say("{qid}: no question text in a graded run.", qid=qid)
        return True

    def hint(self, qid: str) -> None:
        """Print the hint of question ``qid``."""
        if self._graded("hint", qid):
            return
        q = self._question(qid)
        if q.hint:
            self._say("Hint for {qid}: {hint}", qid=qid, hint=render(q.hint, self._lang))
        else:
            self._say("No hint for {qid}; re-read the question:\n{prompt}", qid=qid, prompt=q.prompt)

    def prompt(self, qid: str) -> None:
        """Print the text of question ``qid``."""
        if self._graded("prompt", qid):
            return
        q = self._question(qid)
        self._say("{qid} ({points} points): {prompt}", qid=qid, points=fmt_points(q.points), prompt=q.prompt)

    def reveal(self, qid: str) -> None:
        """Print the reference answer (value questions) and the explanation, if any."""
        if self._graded("revealed", qid):
            return
        q = self._question(qid)
        lines = []
        if q.is_value:
            try:
                lines.append(msg("Reference answer for {qid}: {answer}{tolerance}", qid=qid,
                                 answer=_show(q.reference(), q.unit), tolerance=_tolerance_note(q)))
            except Exception as e:  # noqa: BLE001
                lines.append(msg("Reference answer for {qid} could not be computed: {error}", qid=qid,
                                 error=f"{type(e).__name__}: {e}"))
        if q.explanation:
            explanation = render(q.explanation, self._lang)
            lines.append(explanation if q.is_value else
                         msg("Explanation for {qid}: {explanation}", qid=qid, explanation=explanation))
        if not lines:
            lines.append(msg("{qid} is graded by running your code; there is no single value to reveal.", qid=qid))
        print("\n".join(render(line, self._lang) for line in lines))

    def score(self) -> tuple[float, float]:
        """(points scored so far, points available) in this session, best attempt per question."""
        got = sum(r.score for r in self._best.values())
        return round(got, 4), round(sum(q.points for q in self.questions.values()), 4)

    def summary(self) -> None:
        """Print points so far and the state of every question."""
        if self._recorder is not None:
            self._say("{chapter}: graded run — your answers are recorded and scored after the notebook has run.",
                      chapter=self.chapter_id)
            return
        got, total = self.score()
        n_ok = sum(r.correct for r in self._best.values())
        lines = [render(msg("{chapter}: {got}/{total} points ({n_ok} of {n} questions fully correct)",
                            chapter=self.chapter_id, got=fmt_points(got), total=fmt_points(total), n_ok=n_ok,
                            n=len(self.questions)), self._lang)]
        for qid, q in self.questions.items():
            r = self._best.get(qid)
            if r is None:
                lines.append(render(msg("  · {qid}: not checked yet ({points} points)", qid=qid,
                                        points=fmt_points(q.points)), self._lang))
            else:
                mark = "✔" if r.correct else "✘"
                lines.append(f"  {mark} {qid}: {fmt_points(r.score)}/{fmt_points(q.points)}")
        print("\n".join(lines))


def _show(value: Any, unit: str = "") -> str:
    """A reference value printed stably (6 significant digits for floats)."""
    v = to_plain(value)

    def one(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:.6g}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(one(y) for y in x)
            return f"({inner})" if isinstance(x, tuple) else f"[{inner}]"
        return repr(x)

    return with_unit(one(v), unit)


def _tolerance_note(q: Question) -> str:
    def has_float(x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            return any(has_float(y) for y in x)
        if isinstance(x, dict):
            return any(has_float(y) for y in x.values())
        return isinstance(x, float)

    if not has_float(to_plain(q.reference())):
        return ""
    rel, abs_ = f"±{q.rtol * 100:.2g}%", f"±{fmt_num(q.atol)}"
    if q.rtol and q.atol:
        return msg(" (accepted within {rel} or {abs})", rel=rel, abs=abs_)
    if q.rtol or q.atol:
        return msg(" (accepted within {tol})", tol=rel if q.rtol else abs_)
    return ""
