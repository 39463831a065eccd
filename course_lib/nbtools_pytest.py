"""A pytest plugin for ``make test``: the notebooks' kernels compute on a second CPU kernel path.

``make test`` checks every lab's and worked answer's stored outputs under other vectorised kernels
than this machine's own (``ATEN_CPU_CAPABILITY``, chosen by ``nbtools.second_kernel_path``), so a
stored float only this CPU reproduces fails here instead of on a reader's machine. The kernels are
separate processes started by nbval, so the variable only has to be in the environment when a
notebook's kernel starts: this plugin puts it there for each notebook item (before nbval sets up
the notebook, which starts its kernel) and takes it away again for every other test, so the unit
tests and the processes they launch keep this machine's kernels. That lets the notebooks share one
pytest-xdist session with the unit tests, filling the workers' idle time, instead of a second run.

Load it with ``-p course_lib.nbtools_pytest`` and name the path in ``COURSE_NOTEBOOK_KERNEL_PATH``
(``avx2``, ``default``, ...); without that variable it does nothing. The notebooks of
``nbtools.KERNEL_PATH_INDEPENDENT`` keep this machine's kernels.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from .nbtools import KERNEL_PATH_INDEPENDENT

ENV = "COURSE_NOTEBOOK_KERNEL_PATH"
_CAPABILITY = "ATEN_CPU_CAPABILITY"
_ORIGINAL = os.environ.get(_CAPABILITY)   # what the run itself was started with (normally unset)


def kernel_path_for(item_path: Path, root: Path, second: str | None) -> str | None:
    """The ``ATEN_CPU_CAPABILITY`` a test item's processes should see: ``second`` for a notebook
    not in ``KERNEL_PATH_INDEPENDENT``, else what the run was started with."""
    if not second or item_path.suffix != ".ipynb":
        return _ORIGINAL
    try:
        rel = item_path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = item_path.name
    return _ORIGINAL if rel in KERNEL_PATH_INDEPENDENT else second


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    want = kernel_path_for(Path(str(item.fspath)), Path(str(item.config.rootpath)), os.environ.get(ENV))
    if want is None:
        os.environ.pop(_CAPABILITY, None)
    else:
        os.environ[_CAPABILITY] = want
