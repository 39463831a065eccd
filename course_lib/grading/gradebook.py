"""A class's grades per student: the totals in the reports and ``gradebook.csv``.

``gradebook.csv`` is what Canvas, Moodle, Gradescope-style gradebooks import: UTF-8 (no byte-order
mark), a plain header ``student,<chapter>,...,total``, the student id first, one row per student,
one column per chapter graded in this run, numeric cells (points, no ``%`` or ``/``). A blank
cell means no notebook of that chapter from that student (importers read blank as "no grade", not
as 0; the total counts it as 0). ``grade`` grades one notebook per student and chapter
(:mod:`course_lib.grading.classroom`); given two of one chapter from elsewhere, the higher score
counts and a note says so. A student id that a spreadsheet would read as a formula
(it begins with ``=``, ``+``, ``-``, ``@``) is written with a leading ``'``; control characters
are written as ``\\xNN``.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from course_lib.grading.grades import NotebookGrade
from course_lib.grading.values import printable as _printable
from course_lib.grading.values import shown as _shown


@dataclass
class StudentTotal:
    """One student's points per chapter (the best notebook of each), and their sum."""

    student: str
    scores: dict[str, float] = field(default_factory=dict)
    points: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    counted: dict[str, str] = field(default_factory=dict)   # chapter -> the notebook that counts

    @property
    def total(self) -> float:
        return round(sum(self.scores.values()), 4)

    @property
    def total_points(self) -> float:
        return round(sum(self.points.values()), 4)

    @property
    def percent(self) -> float:
        return 100.0 * self.total / self.total_points if self.total_points else 0.0


def students(grades: list[NotebookGrade]) -> list[StudentTotal]:
    """Per student (sorted by id): the best score per chapter; notebooks whose assignment could not
    be told (chapter ``?``) count in no column and get a note."""
    by: dict[str, StudentTotal] = {}
    for g in grades:
        s = by.setdefault(g.student or g.name, StudentTotal(g.student or g.name))
        if g.chapter == "?":
            s.notes.append(f"{g.name}: no chapter in its name, not counted")
            continue
        if g.chapter in s.scores:
            keep = g.score > s.scores[g.chapter]
            best = g.name if keep else s.counted[g.chapter]
            s.notes.append(f"two notebooks for {g.chapter} ({s.counted[g.chapter]}, {g.name}): "
                           f"the higher score counts ({best})")
            if not keep:
                continue
        s.scores[g.chapter], s.points[g.chapter], s.counted[g.chapter] = g.score, g.points, g.name
    return [by[k] for k in sorted(by)]


def chapters(totals: list[StudentTotal]) -> list[str]:
    return sorted({c for s in totals for c in s.scores})


def number(x: float) -> str:
    """A plain decimal every importer reads: no exponent, no trailing zeros (7, 5.5, 0.3333)."""
    text = f"{round(float(x), 4):.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def printable(text: str) -> str:
    """``text`` with control (and other non-printable) characters and a file name's undecodable
    bytes escaped (``values.printable``, never cut): a file name shown on a terminal or in a report
    cannot move the cursor, start a heading or stop the report from being written."""
    return _printable(text, limit=None)


def safe_id(text: str) -> str:
    """A student id as a cell: control characters as ``\\xNN``, a formula-looking id defused."""
    text = printable(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def gradebook_csv(grades: list[NotebookGrade]) -> str:
    totals = students(grades)
    cols = chapters(totals)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(["student", *cols, "total"])
    for s in totals:
        w.writerow([safe_id(s.student), *(number(s.scores[c]) if c in s.scores else "" for c in cols),
                    number(s.total)])
    return _shown(buf.getvalue())


def students_table(grades: list[NotebookGrade]) -> list[str]:
    """Lines for the terminal: each student's points per chapter and total."""
    totals = students(grades)
    if not totals:
        return []
    cols = chapters(totals)
    head = ["student", *cols, "total"]
    rows = [[safe_id(s.student), *(f"{number(s.scores[c])}/{number(s.points[c])}" if c in s.scores else "-"
                                   for c in cols), f"{number(s.total)}/{number(s.total_points)} ({s.percent:.1f}%)"]
            for s in totals]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"  note ({safe_id(s.student)}): {printable(n)}" for s in totals for n in s.notes]
    return lines


def students_markdown(grades: list[NotebookGrade], md) -> list[str]:
    """The students table as Markdown (``md`` escapes a cell)."""
    totals = students(grades)
    cols = chapters(totals)
    lines = ["| student | " + " | ".join(md(c) for c in cols) + " | total | points | % |",
             "|---|" + "---:|" * (len(cols) + 3)]
    for s in totals:
        cells = [number(s.scores[c]) if c in s.scores else "–" for c in cols]
        lines.append(f"| {md(safe_id(s.student))} | " + " | ".join(cells) +
                     f" | {number(s.total)} | {number(s.total_points)} | {s.percent:.1f} |")
    lines += [f"- {md(safe_id(s.student))}: {md(printable(n))}" for s in totals for n in s.notes]
    return lines


def students_json(grades: list[NotebookGrade]) -> list[dict]:
    return [{"student": s.student, "scores": s.scores, "points": s.points, "total": s.total,
             "total_points": s.total_points, "percent": round(s.percent, 1), "notes": s.notes}
            for s in students(grades)]
