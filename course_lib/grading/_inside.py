"""What a process started inside a sandbox does to itself first: its resource limits and its end
of the status pipe. Shared by the executor (:mod:`course_lib.grading._execute`) and the fresh
launcher (:mod:`course_lib.grading._launch`); imports nothing of the grader, so both can use it
without importing each other.

The status pipe is how the grader learns how far a sandbox got (:mod:`course_lib.grading.sandbox`):
:func:`secure_status` makes it non-inheritable and this process non-dumpable, so the student code
it starts can neither write to it nor reopen it through ``/proc``.
"""
from __future__ import annotations

import ctypes
import os
import resource

_RLIMITS = {"nproc": resource.RLIMIT_NPROC, "as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE}
PR_SET_DUMPABLE = 4


def apply_limits(spec: str) -> None:
    """Set soft and hard limits (``nproc=2048,as=17179869184,fsize=536870912``) for this process
    and everything it starts; no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        resource.setrlimit(_RLIMITS[name], (int(value), int(value)))


def secure_status(fd: int):
    """The status pipe as a file, not inherited by children, with this process non-dumpable."""
    os.set_inheritable(fd, False)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)
