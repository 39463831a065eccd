"""Sphinx extension: a chapter page's cached outputs are reused only while the code they ran is the same.

The book executes its chapter pages through jupyter-cache (``execute_notebooks: cache``), which keys
a page by the text of its code cells. A page's cells call ``course_lib`` and read ``data/``, so a
change there (a fix to a model, a new Chinese entry in ``course_lib/i18n_zh/``, a re-run sweep)
left the page's old outputs in the next ``make book``, silently: numbers from code that no longer
exists, and English where the table now has Chinese. A fresh clone (CI) never saw it; an author
rebuilding did.

Here each executed page gets one more code cell at its end, at build time only, tagged
``remove-cell`` (executed, never shown): a comment holding the digest of every ``course_lib``
source and ``data/`` file. Any change there changes every page's key, and each page is read and
runs again (``env-get-outdated``: also the pages whose own text did not change);
unchanged, the cache is used as before (the handout's build, whose ``course_lib`` and ``data/`` are
the same files, reuses the course's cache). The pages' files on disk are not touched, so the
two editions' code cells stay byte for byte the same (tests/test_editions.py).
"""
from __future__ import annotations

import fnmatch
import hashlib
import subprocess
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config

__version__ = "1.0"

# what a page's code can read: the library (its code and its tables of strings) and the stored data
SOURCES = (("course_lib", ("*.py", "*.json")), ("data", ("*",)))
CELL = ("\n\n```{{code-cell}} ipython3\n:tags: [remove-cell]\n"
        "# computed from course_lib and data/ with digest {digest} (book/_ext/course_cache.py)\n```\n")


def _files(root: Path) -> list[Path]:
    """The files of :data:`SOURCES`: those git tracks when ``root`` is a checkout (so an untracked
    file of an author's tree, which the students' handout does not copy, counts in neither), else
    every file there (a handout, a tarball), caches and hidden files left out."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *(f for f, _ in SOURCES)], cwd=root,
                             capture_output=True, check=True, timeout=60).stdout.decode()
        listed = [root / rel for rel in out.split("\0") if rel]
    except (OSError, subprocess.SubprocessError):
        listed = []
    if not listed:
        listed = [p for folder, _ in SOURCES for p in (root / folder).rglob("*")]
    keep = []
    for path in listed:
        rel = path.relative_to(root)
        patterns = dict(SOURCES).get(rel.parts[0], ())
        if (path.is_file() and "__pycache__" not in rel.parts and not any(part.startswith(".") for part in rel.parts)
                and any(fnmatch.fnmatch(path.name, pat) for pat in patterns)):
            keep.append(path)
    return sorted(set(keep))


def digest(root: Path) -> str:
    """sha256 over the paths and bytes of the files in :data:`SOURCES` under ``root``, the first
    16 hex digits."""
    h = hashlib.sha256()
    for path in _files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def with_digest(text: str, key: str) -> str:
    """A MyST notebook page's text with the digest cell appended; any other text as it is."""
    if "```{code-cell}" not in text or not text.lstrip().startswith("---"):
        return text
    return text.rstrip("\n") + CELL.format(digest=key)


def _on_config_inited(app: Sphinx, config: Config) -> None:
    app.course_digest = digest(Path(app.srcdir))     # once a build (reading the files takes ~0.1 s)


def _on_env_get_outdated(app: Sphinx, env: Any, added: set, changed: set, removed: set) -> list[str]:
    """Every page read again when the digest differs from the last build's: a page whose own text
    did not change would otherwise keep its old HTML, built from the old outputs."""
    if getattr(env, "course_digest", None) == app.course_digest:
        return []
    env.course_digest = app.course_digest
    return sorted(d for d in env.found_docs if d.startswith("book/") and d not in added)


def _on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    if docname.startswith("book/"):                  # the executed pages (book/_config.yml: execute)
        source[0] = with_digest(source[0], app.course_digest)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _on_config_inited)
    app.connect("env-get-outdated", _on_env_get_outdated)
    app.connect("source-read", _on_source_read)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
