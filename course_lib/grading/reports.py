"""The reports the runner writes from the grades of a folder of notebooks (one
:class:`~course_lib.grading.grades.NotebookGrade` each): a plain-text table for the terminal,
``summary.md`` for a CI job summary, ``junit.xml`` for CI test panels, ``grades.json`` (everything, strict JSON) and
``gradebook.csv`` (one row per student, :mod:`course_lib.grading.gradebook`). Every report also
lists the class folder's entries that were skipped, with the reason."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from course_lib.grading import gradebook
from course_lib.grading.classroom import Skipped
from course_lib.grading.grades import NotebookGrade
from course_lib.grading.values import fmt_points, shown


FEW_SKIPPED = 5      # skipped entries listed per student (or the class folder's own) in a report
MOST_SKIPPED = 100   # skipped entries listed in all: 50,000 junk files must not make a summary.md
                     # past a CI job summary's limit (1 MiB on GitHub); grades.json keeps every one


def skipped_listing(skipped: list[Skipped]) -> list[tuple[str, str] | str]:
    """What a report shows of the skipped entries: ``(entry, reason)`` for at most
    :data:`FEW_SKIPPED` per student (the first part of the entry's path; the class folder's own
    entries together) and :data:`MOST_SKIPPED` in all, escaped, and in place of the rest a line
    saying how many more were skipped and whose."""
    owners: dict[str, list[Skipped]] = {}
    for s in skipped:
        head, sep, _ = s.entry.partition("/")
        owners.setdefault(head if sep else "", []).append(s)
    out: list[tuple[str, str] | str] = []
    listed = rest = rest_owners = 0
    for owner, entries in owners.items():
        take = min(len(entries), FEW_SKIPPED, MOST_SKIPPED - listed)
        out += [(gradebook.printable(s.entry), gradebook.printable(s.reason)) for s in entries[:take]]
        listed += take
        if take == 0:
            rest, rest_owners = rest + len(entries), rest_owners + 1
        elif take < len(entries):
            whose = f"{gradebook.printable(owner)}'s" if owner else "the class folder's own"
            out.append(f"{len(entries) - take:,} more of {whose} {len(entries):,} skipped entries "
                       "(grades.json lists every one)")
    if rest:
        out.append(f"{rest:,} more skipped entries of {rest_owners:,} more students or folders "
                   "(grades.json lists every one)")
    return out


def table(grades: list[NotebookGrade], pass_mark: float, skipped: list[Skipped] = ()) -> str:
    head = ("notebook", "question", "points", "score", "message")
    rows = [(g.name, r.qid, fmt_points(r.points), fmt_points(r.score), r.message)
            for g in grades for r in g.rows]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(4)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths), "-" * 7)]
    lines += [fmt.format(*r) for r in rows]
    lines.append("")
    for g in grades:
        verdict = "pass" if g.percent >= pass_mark else "FAIL"
        lines.append(f"{g.name} ({g.chapter}): {fmt_points(g.score)}/{fmt_points(g.points)} points "
                     f"({g.percent:.1f}%) {verdict}")
        lines += [f"  note: {n}" for n in g.notes]
    lines += ["", "per student:", *gradebook.students_table(grades)]
    if skipped:
        lines += ["", f"skipped {len(skipped):,} entr{'y' if len(skipped) == 1 else 'ies'} of the class folder:"]
        lines += [f"  {x[0]}: {x[1]}" if isinstance(x, tuple) else f"  ... {x}" for x in skipped_listing(skipped)]
    n_fail = sum(g.percent < pass_mark for g in grades)
    lines.append(f"{len(grades)} notebook(s) graded, {n_fail} below the pass mark of {fmt_points(pass_mark)}%.")
    return shown("\n".join(lines))


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def summary_markdown(grades: list[NotebookGrade], pass_mark: float, skipped: list[Skipped] = ()) -> str:
    lines = [f"# Grades (pass mark {fmt_points(pass_mark)}%)", "",
             "| notebook | chapter | score | points | % | result |", "|---|---|---:|---:|---:|---|"]
    for g in grades:
        verdict = "pass" if g.percent >= pass_mark else "**FAIL**"
        lines.append(f"| {_md(g.name)} | {_md(g.chapter)} | {fmt_points(g.score)} | {fmt_points(g.points)} "
                     f"| {g.percent:.1f} | {verdict} |")
    notes = [f"- {_md(g.name)}: {_md(n)}" for g in grades for n in g.notes]
    if notes:
        lines += ["", "Notes for the instructor:", "", *notes]
    lines += ["", "## Students", "", *gradebook.students_markdown(grades, _md)]
    if skipped:
        lines += ["", f"## Skipped ({len(skipped):,})", "", "| entry | reason |", "|---|---|"]
        lines += [f"| {_md(x[0])} | {_md(x[1])} |" if isinstance(x, tuple) else f"| … | {_md(x)} |"
                  for x in skipped_listing(skipped)]
    lines += ["", "## Questions"]
    lines += ["", "| notebook | question | points | score | message |", "|---|---|---:|---:|---|"]
    for g in grades:
        for r in g.rows:
            lines.append(f"| {_md(g.name)} | {_md(r.qid)} | {fmt_points(r.points)} | {fmt_points(r.score)} "
                         f"| {_md(r.message)} |")
    return shown("\n".join(lines) + "\n")


def junit_xml(grades: list[NotebookGrade]) -> bytes:
    """One testsuite per notebook, one testcase per question; < full marks is a failure."""
    suites = ET.Element("testsuites", name="course grading")
    total_tests = total_fail = 0
    for g in grades:
        fails = sum(r.score < r.points for r in g.rows)
        total_tests, total_fail = total_tests + len(g.rows), total_fail + fails
        s = ET.SubElement(suites, "testsuite", name=shown(g.name), tests=str(len(g.rows)), failures=str(fails),
                          errors="0", skipped="0", time=f"{g.seconds:.3f}")
        props = ET.SubElement(s, "properties")
        for k, v in (("chapter", g.chapter), ("score", fmt_points(g.score)),
                     ("points", fmt_points(g.points)), ("percent", f"{g.percent:.1f}")):
            ET.SubElement(props, "property", name=k, value=shown(v))
        stem = shown(g.name).removesuffix(".ipynb")   # alice/01_flops: two students' 01_flops stay apart
        for r in g.rows:
            tc = ET.SubElement(s, "testcase", classname=f"{stem}.{shown(g.chapter)}", name=shown(r.qid), time="0")
            if r.score < r.points:
                text = shown(f"{fmt_points(r.score)}/{fmt_points(r.points)} points: {r.message}")
                ET.SubElement(tc, "failure", message=text, type="score").text = text
    suites.set("tests", str(total_tests))
    suites.set("failures", str(total_fail))
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def _safe(data: object) -> object:
    """``data`` with every string (keys too) :func:`~course_lib.grading.values.shown`: a file name
    that is not UTF-8 (``notes\\xff.txt``) is written as its escape, never a crash of the report."""
    if isinstance(data, str):
        return shown(data)
    if isinstance(data, dict):
        return {_safe(k): _safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_safe(v) for v in data]
    return data


def grades_json(grades: list[NotebookGrade], pass_mark: float, skipped: list[Skipped] = (), **run: object) -> str:
    """Strict JSON (``allow_nan=False``): a NaN anywhere is a bug that fails loudly here. Names are
    written as they are, but for the bytes of a file name that are not UTF-8 (escaped ``\\xNN``)."""
    data = [{"notebook": g.name, "student": g.student or g.name, "chapter": g.chapter, "score": g.score, "points": g.points,
             "percent": round(g.percent, 1), "passed": g.percent >= pass_mark, "notes": g.notes,
             "questions": [{"qid": r.qid, "points": r.points, "score": r.score, "message": r.message}
                           for r in g.rows]} for g in grades]
    return json.dumps(_safe({"pass_mark": pass_mark, "notebooks": data, "students": gradebook.students_json(grades),
                             "skipped": [{"entry": s.entry, "reason": s.reason} for s in skipped], **run}),
                      indent=1, sort_keys=True,
                      ensure_ascii=False, allow_nan=False) + "\n"


def write_reports(grades: list[NotebookGrade], outdir: Path, pass_mark: float, skipped: list[Skipped] = (),
                  **run: object) -> int:
    """Print the table and write the four reports (each whole, then renamed into place);
    return the exit status: 1 if any notebook is below ``pass_mark``, else 0."""
    print(table(grades, pass_mark, skipped))
    for name, content in (("summary.md", summary_markdown(grades, pass_mark, skipped).encode()),
                          ("junit.xml", junit_xml(grades)),
                          ("grades.json", grades_json(grades, pass_mark, skipped, **run).encode()),
                          ("gradebook.csv", gradebook.gradebook_csv(grades).encode("utf-8"))):
        tmp = outdir / f".{name}.tmp"
        tmp.write_bytes(content)
        tmp.replace(outdir / name)
    return 1 if any(g.percent < pass_mark for g in grades) else 0
