"""Inside a fresh sandbox: a check that the sandbox works, or one trusted ``course_lib.dist.launch``.

    python -m course_lib.grading._launch --check --status-fd N
    python -m course_lib.grading._launch --limits nproc=..,as=..,fsize=.. --status-fd N

``--check`` imports what the executor needs and writes ``{"event": "ready"}`` to the status pipe
(the grader's preflight). Otherwise it reads ``/sandbox/work/request.json`` (``worker``,
``world_size``, ``timeout``, ``kwargs`` as :mod:`~course_lib.grading.wire` data, written by the
grader), launches the worker and writes ``{"event": "result", "ok": ...}`` or ``{"event":
"result", "error": ...}``. A grader that must *see* a run (chapter 12's kill-and-resume, chapter 4
and 10's measured drills) gets it from here, not from the student's kernel, which could replace
``launch``. The status pipe is closed for every child and this process is made non-dumpable, so
the student code the worker runs can neither write to it nor reopen it through ``/proc``.
"""
from __future__ import annotations

import argparse
import sys

from course_lib.grading._inside import apply_limits, secure_status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.grading._launch")
    p.add_argument("--check", action="store_true")
    p.add_argument("--limits", default="")
    p.add_argument("--status-fd", type=int, required=True)
    a = p.parse_args(argv)
    status = secure_status(a.status_fd)
    from course_lib.grading import wire

    if a.check:
        from course_lib.quick_imports import skip_iri_grammar
        skip_iri_grammar()
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401

        import course_lib.grading._execute  # noqa: F401
        status.write(wire.dumps({"event": "ready"}) + "\n")
        return 0
    apply_limits(a.limits)
    from course_lib.grading.remote import _error, run_request

    try:
        with open("/sandbox/work/request.json", encoding="utf-8") as f:
            req = wire.loads(f.read())
        out = {"ok": wire.encode(run_request(req))}
    except BaseException as e:  # noqa: BLE001 - everything goes back to the grader
        out = {"error": _error(e)}
    status.write(wire.dumps({"event": "result", **out}) + "\n")
    status.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
