"""The grade of one submission: a :class:`Row` per question of its bank (the score, always finite and
within ``[0, points]``, and the message), gathered in a :class:`NotebookGrade` with whose notebook
it is and the instructor's notes. The runner makes them; :mod:`course_lib.grading.reports` and
:mod:`course_lib.grading.gradebook` read them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Row:
    """One question's grade; the score is always a finite number in [0, points]."""

    qid: str
    points: float
    score: float
    message: str

    def __post_init__(self) -> None:
        s = float(self.score) if isinstance(self.score, (int, float)) else 0.0
        self.score = round(min(max(s, 0.0), float(self.points)), 4) if math.isfinite(s) else 0.0


@dataclass
class NotebookGrade:
    name: str
    chapter: str
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # for the instructor (e.g. copied solutions)
    student: str = ""  # whose notebook it is (the gradebook's row); "" = the notebook's own name

    @property
    def points(self) -> float:
        return round(sum(r.points for r in self.rows), 4)

    @property
    def score(self) -> float:
        return round(sum(r.score for r in self.rows), 4)

    @property
    def percent(self) -> float:
        return 100.0 * self.score / self.points if self.points else 0.0
