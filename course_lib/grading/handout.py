"""The students' copy of the course for a graded term: ``python -m course_lib.grading handout DEST``.

A student course, not the instructor's with words swapped:

* copied as git tracks them: the book, the labs, ``exercises/``, ``course_lib/``, ``data/``;
* left out: the graded masters (``solutions/``), the instructor's tests and CI (``tests/``,
  ``.ci/``), the chapter authors' guide (``CONTRIBUTING.md``) and the instructor's documents
  (``docs/``);
* written for students (``handout_files/``): ``README.md``, ``docs/GRADING.md`` (what the grader
  counts) and a ``Makefile`` with ``book``, ``lab`` and ``check`` (the in-notebook feedback on their
  exercises, :mod:`course_lib.grading.selfcheck`) and no target that needs what was left out;
* rebuilt for students: the book's table of contents has an "Exercises" part of the student
  notebooks where the instructor's has the solutions (the Chinese section's solution twins become
  the exercise twins, ``exercises/zh/``); ``_config.yml`` stops excluding
  ``exercises/``; the home page's tables lose the instructor's rows and point at the exercises;
  links from pages and labs to a master point at its exercise.

Every rewrite of a page checks that what it rewrites is still there and raises
:class:`HandoutError` otherwise, so a changed page fails ``handout`` (and its test) instead of
leaving solutions text in the students' site. The course repository keeps the masters for
self-study; grading uses the instructor's checkout, never this copy.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

EXCLUDED = ("solutions/", "tests/", ".ci/", "docs/", "CONTRIBUTING.md")
TEMPLATES = Path(__file__).with_name("handout_files")
WRITTEN = {"README.md": "README.md", "docs/GRADING.md": "GRADING.md", "Makefile": "Makefile"}
_LINK = re.compile(r"(?<![\w/.])((?:\.\./)*)solutions/")   # ../solutions/X, ../../solutions/zh/X (a twin)
_RELINK = (".md", ".ipynb")
_TOC_HEADER = """\
# Table of contents of the students' course (written by `python -m course_lib.grading handout`).
# The book root is the repository root (see book/_config.yml), so paths are relative to it.
"""


class HandoutError(RuntimeError):
    """A page the handout rewrites no longer has what the rewrite expects."""


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def handout(repo: Path, dest: Path) -> list[str]:
    """Write the students' copy of ``repo`` into ``dest`` (which must not exist); return its files."""
    repo, dest = Path(repo).resolve(), Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: give a new folder")
    rewrite = {"book/_toc.yml": student_toc, "book/_config.yml": student_config, "book/index.md": student_index,
               "book/zh/index.md": student_index_zh}
    files = [rel for rel in tracked_files(repo)
             if not rel.startswith(EXCLUDED) and rel not in WRITTEN and (repo / rel).is_file()]
    texts: dict[str, str] = {}
    for rel in files:   # every rewrite first: a HandoutError leaves no half-written folder
        if rel in rewrite:
            texts[rel] = rewrite[rel]((repo / rel).read_text(encoding="utf-8"))
        elif rel.endswith(_RELINK) and not rel.startswith("exercises/"):
            text = (repo / rel).read_text(encoding="utf-8")
            texts[rel] = _LINK.sub(lambda m: (m.group(1) or "") + "exercises/", text)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in texts:
            target.write_text(texts[rel], encoding="utf-8")
        else:
            shutil.copy2(repo / rel, target)
    for rel, template in WRITTEN.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(TEMPLATES / template, target)
    return sorted([*files, *WRITTEN])


def student_toc(text: str) -> str:
    """The instructor's TOC with every solutions page replaced, where it stands (each chapter's
    part: page, lab, exercises; a Chinese twin among the Chinese section's entries), by the
    student notebook of the same chapter."""
    toc = yaml.safe_load(text)
    found = 0

    def swap(entries: list) -> None:
        nonlocal found
        for entry in entries:
            name = str(entry.get("file", ""))
            if name.startswith("solutions/"):
                entry["file"] = "exercises/" + name.split("/", 1)[1]
                found += 1
            swap(entry.get("sections", []))

    for part in toc.get("parts", []):
        swap(part.get("chapters", []))
    if not found:
        raise HandoutError("book/_toc.yml: no solutions/ page to turn into its exercises notebook")
    if "solutions/" in yaml.safe_dump(toc):
        raise HandoutError("book/_toc.yml: a solutions page nested where the handout cannot replace it")
    return _TOC_HEADER + yaml.safe_dump(toc, sort_keys=False, allow_unicode=True)


def student_config(text: str) -> str:
    """``_config.yml`` without ``exercises`` in the book's ``exclude_patterns`` (the students' TOC
    lists the exercises as pages); everything else, comments included, as it is."""
    out, n = re.subn(r"(?m)^(\s*)- exercises\s*\n", "", text, count=1)
    if n != 1:
        raise HandoutError("book/_config.yml: no '- exercises' line in exclude_patterns to remove")
    out = out.replace("notebooks/ and solutions/", "notebooks/ and exercises/")
    excluded = yaml.safe_load(out).get("exclude_patterns", [])
    if "exercises" in excluded:
        raise HandoutError("book/_config.yml: exercises still excluded")
    return out


_INDEX_RULES = (
    # (pattern, replacement, how many times it must match: None = at least once)
    (r"(?m)^\| publish the site without answers \|.*\n", "", 1),
    (r"(?m)^\| grade a class \|.*\n", "", 1),
    (r"(?m)^\| check everything \| `make test` \|.*$",
     "| check your exercises | `make check` | runs your exercise notebooks in a fresh kernel, as the "
     "grader will, and prints what `check(...)` says about each question (`docs/GRADING.md` says what "
     "the grader counts) |", 1),
    (r"graded exercises with worked solutions, and the student version of those exercises",
     "and graded exercises", 1),
    (r"\| exercises — solutions \| student notebook \|", "| exercises | notebook to download |", 1),
    (r"\[solutions\]\(\.\./solutions/(\w+)\.ipynb\)", r"[exercises](../exercises/\1.ipynb)", None),
)


# the same rewrite for the Chinese edition's home page (book/zh/index.md, issue #35)
_INDEX_RULES_ZH = (
    (r"(?m)^\| 发布不含答案的网站 \|.*\n", "", 1),
    (r"(?m)^\| 给一个班评分 \|.*\n", "", 1),
    (r"(?m)^\| 检查一切 \| `make test` \|.*$",
     "| 检查你的练习 | `make check` | 像评分器那样在全新的 kernel 里运行你的练习 notebook，并打印 `check(...)` "
     "对每道题的反馈（评分器统计什么，见 `docs/GRADING.md`） |", 1),
    (r"带参考答案的计分练习，以及这些练习的学生版", "计分练习", 1),
    (r"\| 练习（参考答案） \| 学生 notebook \|", "| 练习 | 下载 notebook |", 1),
    (r"\[答案\]\(\.\./\.\./solutions/((?:zh/)?\w+)\.ipynb\)", r"[练习](../../exercises/\1.ipynb)", None),
)


def _rewrite(text: str, rules, page: str, leftover: str) -> str:
    """Apply ``rules`` (pattern, replacement, expected matches) to ``page``'s text; any rule that
    matches other than expected, or a ``leftover`` mention of solutions after them, is an error."""
    for pattern, repl, times in rules:
        text, n = re.subn(pattern, repl, text)
        if n == 0 or (times is not None and n != times):
            raise HandoutError(f"{page}: expected {times or 'some'} match(es) of {pattern!r}, found {n}")
    if re.search(leftover, text, re.I):
        raise HandoutError(f"{page}: still mentions solutions after the rewrite")
    return text


def student_index_zh(text: str) -> str:
    """book/zh/index.md for students, as ``student_index`` does for the English home page."""
    return _rewrite(text, _INDEX_RULES_ZH, "book/zh/index.md", r"solution|答案")


def student_index(text: str) -> str:
    """The home page for students: no rows for the instructor (publishing without answers,
    grading a class, the test suite), a ``make check`` row, and the course map's exercises column
    pointing at the exercises pages."""
    return _rewrite(text, _INDEX_RULES, "book/index.md", r"solution")
