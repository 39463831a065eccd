"""A pytest plugin that every pytest run of the course loads first (``addopts`` in pyproject.toml):
it keeps one slow import out of each pytest process.

nbval, a plugin every run loads, imports nbformat, which imports jsonschema; when the optional
``rfc3987_syntax`` package is installed (Jupyter pulls it in), jsonschema imports it to check the
"iri" string format, and importing it compiles a Lark grammar: 1 CPU-s per process, measured, ~2 s
on a busy machine, in each of the dozen pytest processes ``make test`` starts. No notebook and no
test checks that format, so the module is marked as absent before nbval is imported (a ``-p``
plugin is imported before the plugins installed packages register); jsonschema then leaves the
format unchecked, as it does without the package. The notebook tools and the grader do the same in
their own processes (``course_lib.nbtools``, ``course_lib.grading._execute``).
"""
from __future__ import annotations

import sys

sys.modules.setdefault("rfc3987_syntax", None)
