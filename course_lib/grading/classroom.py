"""A class folder: which notebooks are whose, what is skipped and why, and grading them in parallel.

``grade CLASS/`` accepts both layouts an instructor gets from a learning platform, mixed:

* one folder per student, ``CLASS/alice/01_flops.ipynb``: the student is the folder's name;
* flat files, ``CLASS/alice-01_flops.ipynb``: the student is the file name without its chapter id
  and the separators around it (``alice``); a file that is only a chapter id (``01_flops.ipynb``,
  one student's folder graded on its own, e.g. ``make grade SUBMISSIONS=exercises``) belongs to the
  student named like ``CLASS`` itself.

Everything else is skipped, and said so with a reason (:class:`Skipped`): symbolic links (never
followed, so a submission cannot point the grader at another student's or the grader's files),
hidden entries, files that are not notebooks, folders inside a student's folder, anything that is
not a regular file or folder, and student folders without a notebook. A student is graded on one
notebook per chapter (:data:`ANOTHER`): the one named like the chapter (``01_flops.ipynb``) if
there is one, else the only one. Grading every copy would let a student try several answers and
keep the best, or hand in a hundred notebooks that each run to the time limit, hours of a class
run that everyone waits for. Two or more for one chapter and none named like it (flat files
``bob 01_flops.ipynb`` and ``bob-01_flops.ipynb``) *collide*: which one counts cannot be told, so
none is graded; each is skipped naming the others (:data:`COLLIDES`) and the runner gives the
student one ``(notebook)`` error row for the chapter (:attr:`Submission.collision`), for the
instructor to resolve. Of a student's notebooks with no chapter id in their name, the first is
reported (the runner fails it at once) and the others are skipped (:data:`NO_CHAPTER`), so a
folder of junk costs the reports one line per student.

:func:`grade_all` runs the submissions on ``jobs`` threads (each waits on its own sandboxed
process, so threads keep the cores busy), with a tqdm progress bar on a terminal and nothing on a
pipe or CI log; the results come back in discovery order whatever order they finish in.
"""
from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
_SEPARATORS = " -_.+"


@dataclass(frozen=True)
class Submission:
    """One notebook to grade: whose it is, where it is, and its name in the reports
    (``alice/01_flops.ipynb`` in a student folder, the file name when flat). With ``collision``
    (the names of a student's notebooks for one chapter, none named like it), not a notebook to
    run but the flag that none of them is graded; ``path`` is the first of them."""

    student: str
    path: Path
    name: str
    collision: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skipped:
    """An entry of the class folder that is not graded, and why (both shown in every report)."""

    entry: str
    reason: str


SYMLINK = "a symbolic link: not followed (it could point at another student's or the grader's files)"
HIDDEN = "hidden (its name starts with '.')"
NOT_NOTEBOOK = "not a notebook (only *.ipynb files are graded)"
NESTED = "a folder inside a student's folder (only CLASS/STUDENT/*.ipynb is graded)"
SPECIAL = "not a regular file or folder"
EMPTY = "a student folder with no notebook (*.ipynb) in it"
ANOTHER = "another notebook of {student}'s for {chapter}: only {graded} is graded (one notebook per student and chapter)"
COLLIDES = ("collides with {names}: {count} notebooks of {student}'s for {chapter} and none named like the "
            "chapter, so none is graded (which one counts cannot be told: keep one and grade again)")
NO_CHAPTER = "another notebook of {student}'s with no chapter id in its name: only {reported} is reported"
FEW = 3   # names listed where a message names a group of a student's files


def few(names: list[str], limit: int = FEW) -> str:
    """``a, b, c and 4 more``: at most ``limit`` names of a group, and how many more."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def default_jobs() -> int:
    """Workers when none is given: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def short_id(chapter: str) -> str:
    """A chapter id as a file name carries it: ``ch01_flops`` → ``01_flops``."""
    return chapter[2:] if chapter.startswith("ch") else chapter


def flat_student(filename: str, chapter: str | None, class_name: str) -> str:
    """The student a flat file belongs to: its stem without the chapter id (``ch01_flops`` or
    ``01_flops``) and the separators left at either end; ``class_name`` if nothing is left."""
    stem = Path(filename).stem
    if chapter:
        stem = re.sub(rf"(?i)(ch)?{re.escape(short_id(chapter))}", " ", stem, count=1)
    stem = re.sub(rf"[{re.escape(_SEPARATORS)}]+", " ", stem).strip()
    return stem.replace(" ", "-") if stem else class_name


def _kind(path: Path) -> str | None:
    """'link', 'dir', 'file' or None (something else), without following a link."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return None
    return "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else None


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir(), key=lambda p: p.name)


def discover(directory: Path, chapter_of: Callable[[str], str | None]) -> tuple[list[Submission], list[Skipped]]:
    """The submissions in class folder ``directory`` and the entries skipped there (see the module
    docstring); ``chapter_of(filename)`` tells a flat file's chapter, to take it off the name."""
    directory = Path(directory)
    subs: list[Submission] = []
    skipped: list[Skipped] = []

    def skip_reason(path: Path, kind: str | None) -> str | None:
        if kind == "link":
            return SYMLINK
        if path.name.startswith("."):
            return HIDDEN
        if kind is None:
            return SPECIAL
        if kind == "file" and path.suffix.lower() != ".ipynb":
            return NOT_NOTEBOOK
        return None

    for entry in _entries(directory):
        kind, rel = _kind(entry), entry.name
        why = skip_reason(entry, kind)
        if why:
            skipped.append(Skipped(rel + ("/" if kind == "dir" else ""), why))
        elif kind == "file":
            subs.append(Submission(flat_student(entry.name, chapter_of(entry.name), directory.name), entry, entry.name))
        else:
            try:
                inner = _entries(entry)
            except OSError as e:
                skipped.append(Skipped(rel + "/", f"cannot be read: {e.strerror or e}"))
                continue
            before = len(subs)
            for path in inner:
                k, r = _kind(path), f"{rel}/{path.name}"
                why = skip_reason(path, k) or (NESTED if k == "dir" else None)
                if why:
                    skipped.append(Skipped(r + ("/" if k == "dir" else ""), why))
                else:
                    subs.append(Submission(entry.name, path, r))
            if len(subs) == before:
                skipped.append(Skipped(rel + "/", EMPTY))
    return _one_per_chapter(subs, skipped, chapter_of)


def _one_per_chapter(subs: list[Submission], skipped: list[Skipped], chapter_of: Callable[[str], str | None]
                     ) -> tuple[list[Submission], list[Skipped]]:
    """Keep one notebook per (student, chapter): the one named exactly like the chapter, else the
    only one; several and none named like it collide (one flag in their place, each skipped
    naming the others). Of a student's notebooks whose chapter cannot be told, the first is kept
    (the runner fails it at once, without running it) and the others are skipped."""
    def canonical(s: Submission, chapter: str) -> bool:
        return s.path.name.lower() in (f"{short_id(chapter)}.ipynb", f"{chapter}.ipynb")

    groups: dict[tuple[str, str | None], list[Submission]] = {}
    for s in subs:
        groups.setdefault((s.student, chapter_of(s.path.name)), []).append(s)
    keep: dict[Submission, Submission] = {}    # first of a group -> what stands for the group
    for (student, chapter), group in groups.items():
        if len(group) == 1:
            keep[group[0]] = group[0]
            continue
        graded = group[0] if chapter is None else next((s for s in group if canonical(s, chapter)), None)
        if graded is not None:
            keep[graded] = graded
            why = ANOTHER if chapter is not None else NO_CHAPTER
            skipped += [Skipped(s.name, why.format(student=student, chapter=chapter, graded=graded.name,
                                                   reported=graded.name)) for s in group if s is not graded]
            continue
        names = [s.name for s in group]
        keep[group[0]] = Submission(student, group[0].path, f"{names[0]} + " + (
            names[1] if len(names) == 2 else f"{len(names) - 1} more"), tuple(names))
        skipped += [Skipped(s.name, COLLIDES.format(count=len(names), student=student, chapter=chapter,
                                                    names=few([n for n in names if n != s.name])))
                    for s in group]
    return [keep[s] for s in subs if s in keep], skipped


def grade_all(items: list[T], grade: Callable[[T], object], jobs: int, *, label: str = "grading") -> list:
    """``[grade(x) for x in items]`` on ``jobs`` threads, in the order of ``items``; a progress bar
    on stderr when it is a terminal. The first exception is raised once the running ones end; the
    ones not started are cancelled."""
    results: list = [None] * len(items)
    bar = None
    if sys.stderr.isatty() and items:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc=label, unit="notebook", file=sys.stderr, leave=False)
    pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, len(items) or 1)), thread_name_prefix="grade")
    try:
        futures = {pool.submit(grade, x): i for i, x in enumerate(items)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if bar is not None:
                bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
    return results
