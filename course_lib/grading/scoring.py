"""How a run scores a submission: its :class:`Options`, what it answered (:class:`Answers`, read
strictly from the sandbox's answers file), each answer scored against the bank loaded in the
grader's process (:func:`score_answer`), and for a question with no score, why
(:func:`reason`: "not implemented", "not attempted (its cell raised ...)", ...), told from the
executor's progress events. :mod:`course_lib.grading.runner` runs the sandboxes and calls these.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.grading import remote, wire
from course_lib.grading._notebook import source_text
from course_lib.grading.grades import Row
from course_lib.grading.i18n import check_lang, msg, render
from course_lib.grading.question import Question
from course_lib.grading.values import fmt_points, printable


@dataclass
class Options:
    """How a run grades: time limits (s), feedback mode, the seed of the drawn inputs, the
    assignment when given on the command line, and the language of the feedback ("en", "zh":
    the messages only; scores do not depend on it; None: each notebook's own, as
    ``i18n.notebook_lang`` reads it, else English)."""

    timeout_cell: float = 60.0
    timeout_notebook: float = 300.0
    feedback: str = "graded"
    seed: int = 0
    chapter: str | None = None
    bank: str | None = None
    jobs: int = 0   # notebooks graded at once; 0: one per core
    lang: str | None = None

    def __post_init__(self) -> None:
        if self.lang is not None:
            check_lang(self.lang)


# --------------------------------------------------------------------------- reading a notebook
def _cells(nb: dict) -> list[dict]:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [c if isinstance(c, dict) else {} for c in cells] if isinstance(cells, list) else []


def _check_cell(nb: dict, qid: str) -> int | None:
    pat = re.compile(r"(?<![.\w])check\(\s*([\"'])" + re.escape(qid) + r"\1")
    for i, cell in enumerate(_cells(nb)):
        if cell.get("cell_type") == "code" and pat.search(source_text(cell.get("source"))):
            return i
    return None


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    if path.is_file() and not path.is_symlink():
        with open(path, "rb") as f:
            text = f.read(wire.MAX_TEXT)
        for line in text.splitlines():
            try:
                row = wire.loads(line)
            except wire.WireError:
                continue  # a forged or cut line is no answer
            if isinstance(row, dict):
                rows.append(row)
    return rows


def one_line(text: str, limit: int = 200) -> str:
    return printable(text, limit)  # one line, control characters escaped: safe in every report

# --------------------------------------------------------------------------- answers
@dataclass
class Answers:
    """What a submission answered: the last answer per question (wire data) and what it revealed."""

    answers: dict[str, object] = field(default_factory=dict)
    revealed: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, path: Path) -> Answers:
        a = cls()
        for row in read_jsonl(path):
            qid = row.get("qid")
            if not isinstance(qid, str):
                continue
            if row.get("event") == "answer" and "answer" in row:
                a.answers[qid] = row["answer"]
            elif row.get("event") == "revealed":
                a.revealed.add(qid)
        return a


def score_answer(q: Question, data: object, channel: remote.Channel | None, opts: Options) -> Row:
    lang = opts.lang or "en"
    try:
        answer = wire.decode(data, channel.function if channel else None)
    except (wire.WireError, RecursionError, MemoryError) as e:
        return Row(q.qid, q.points, 0.0, one_line(render(msg("error: the recorded answer is malformed ({error})",
                                                                error=str(e)), lang)))
    except Exception as e:  # noqa: BLE001 - an answer numpy/torch cannot build costs this question only
        return Row(q.qid, q.points, 0.0, one_line(render(msg("error: the recorded answer cannot be read ({error})",
                                                                error=type(e).__name__), lang)))
    r = q.grade(answer, feedback=opts.feedback, seed=opts.seed, lang=lang)
    text = render(msg("correct"), lang) if r.correct else one_line(r.message, 300)
    return Row(q.qid, q.points, r.score, text)

# --------------------------------------------------------------------------- reasons and rows
def _cell_states(events: list[dict]) -> tuple[dict[int, dict], str | None, int | None]:
    """Per code cell: the 'done' row (or {'status': 'running'}); plus how the run stopped early
    ('dead', 'fail: ...') and at which cell."""
    states: dict[int, dict] = {}
    stop, stop_cell = None, None
    for row in events:
        ev, cell = row.get("event"), row.get("cell")
        if ev == "start" and isinstance(cell, int):
            states[cell] = {"status": "running"}
        elif ev == "done" and isinstance(cell, int):
            states[cell] = row
        elif ev == "dead":
            stop, stop_cell = "dead", cell if isinstance(cell, int) else None
        elif ev == "fail":
            stop = "fail: " + str(row.get("error", ""))
    return states, stop, stop_cell


def reason(nb: dict, q: Question, answered: bool, events: list[dict], finished: bool,
            opts: Options) -> str:
    """Why question ``q`` has no score (in ``opts.lang``)."""
    return one_line(render(_why(nb, q, answered, events, finished, opts), opts.lang or "en"), 300)


def _why(nb: dict, q: Question, answered: bool, events: list[dict], finished: bool, opts: Options) -> str:
    if answered:  # a function answer that could not be called
        return msg("not graded: the notebook did not reach its end, so your function could not be called")
    states, stop, stop_cell = _cell_states(events)
    c = _check_cell(nb, q.qid)
    last = len(_cells(nb)) - 1
    window = [states[i] for i in sorted(states) if i <= (last if c is None else c)]
    if any(s.get("ename") == "NotImplementedError" for s in window):
        return msg("not implemented")
    own = states.get(c) if c is not None else None
    if any(s.get("timeout") for s in window):
        why = msg("a cell at or before it ran past the {limit} s cell limit", limit=fmt_points(opts.timeout_cell))
    elif not finished and (own is None or own.get("status") == "running"):
        why = msg("the notebook ran past its {limit} s limit before it", limit=fmt_points(opts.timeout_notebook))
    elif own is not None and own.get("status") == "error":
        why = msg("its cell raised {error}", error=f"{own.get('ename')}: {own.get('evalue')}")
    elif stop == "dead" and (c is None or stop_cell is None or c >= stop_cell):
        if isinstance(stop_cell, int) and stop_cell >= 0:
            why = msg("the kernel died while running cell {cell}", cell=stop_cell + 1)
        else:
            why = msg("the kernel died")
    elif stop and stop.startswith("fail"):
        why = msg("the notebook could not be run: {error}", error=stop[6:])
    elif c is not None and c not in states:
        why = msg("its cell did not run")
    else:
        why = msg("no {call} call ran", call=f'check("{q.qid}", ...)')
    return msg("not attempted ({why})", why=why)
