"""One slow import kept out of the course's processes that read notebooks.

nbformat imports jsonschema; when the optional ``rfc3987_syntax`` package is installed (Jupyter pulls
it in), jsonschema imports it to check the "iri" string format, and importing it compiles a Lark
grammar: 1.4 CPU-s per process, measured (~2.5 s on a busy machine). No notebook and no test checks
that format. ``skip_iri_grammar()`` marks the module absent, so jsonschema leaves the format
unchecked, as it does without the package; it must run before nbformat is first imported. The
notebook tools, the grader's launcher and its runner call it; every pytest run of the course loads
this module as a plugin first (``-p course_lib.quick_imports`` in pyproject's ``addopts``: a ``-p``
plugin is imported before nbval, which imports nbformat), and importing it does the same.
"""
from __future__ import annotations

import sys


def skip_iri_grammar() -> None:
    """Mark ``rfc3987_syntax`` as absent in this process (a module imported already stays)."""
    sys.modules.setdefault("rfc3987_syntax", None)


skip_iri_grammar()
