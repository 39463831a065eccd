"""The students' copy of the course for a graded term: ``python -m course_lib.grading handout DEST``.

Copies the files git tracks, except the graded masters (``solutions/``) and the instructor's tests
(``tests/``), and points what linked to a master (the book's pages and table of contents) at the
student version in ``exercises/`` of the same name. The course repository itself keeps the masters
for self-study; grading uses the instructor's checkout, never this copy.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

EXCLUDED = ("solutions/", "tests/")
_LINK = re.compile(r"(?<![\w/.])(\.\./)?solutions/")
_REWRITE = (".md", ".yml", ".yaml", ".ipynb")


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def handout(repo: Path, dest: Path) -> list[str]:
    """Write the students' copy of ``repo`` into ``dest`` (which must not exist); return its files."""
    repo, dest = Path(repo).resolve(), Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: give a new folder")
    written = []
    for rel in tracked_files(repo):
        if rel.startswith(EXCLUDED) or not (repo / rel).is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(_REWRITE) and not rel.startswith("exercises/"):
            text = (repo / rel).read_text(encoding="utf-8").replace("Exercises — solutions", "Exercises")
            target.write_text(_LINK.sub(lambda m: (m.group(1) or "") + "exercises/", text), encoding="utf-8")
        else:
            shutil.copy2(repo / rel, target)
        written.append(rel)
    return written
