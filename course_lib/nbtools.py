"""Notebook tools for authors.

    python -m course_lib.nbtools run PATH.ipynb [PATH.ipynb ...] [--timeout 600] [--allow-errors]
    python -m course_lib.nbtools second-path      # prints avx2 or default: another CPU kernel path
    python -m course_lib.nbtools second-path-ignores   # the notebooks that pass skips, as --ignore options
    python -m course_lib.nbtools kernel-path-independent   # and the same notebooks, as paths

``run`` executes each notebook in place with a fresh ipykernel on this interpreter (the venv's),
working directory = the notebook's folder, stores the outputs, then normalises the file so that
re-running an unchanged notebook gives the same bytes apart from genuinely changed outputs:
cell ids kept (stable ones assigned where missing), execution counts 1..n, no per-cell timing
metadata, no widget state, JSON with indent=1, sorted keys and a trailing newline.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from course_lib.grading._notebook import dumps, kernel_manager_class, normalise_executed


def _read(path: Path):
    """nbformat.read, except that cells without an id do not get a random one (normalising gives
    them a stable ``cell-<index>`` instead)."""
    import nbformat

    text = Path(path).read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    raw = json.loads(text)
    if raw.get("nbformat") == 4 and len(raw.get("cells", [])) == len(nb.cells):
        for raw_cell, cell in zip(raw["cells"], nb.cells, strict=True):
            if "id" not in raw_cell:
                cell.pop("id", None)
    return nb


def normalise_file(path: Path) -> None:
    """Normalise a notebook file in place without executing it."""
    nb = _read(path)
    normalise_executed(nb)
    Path(path).write_text(dumps(nb), encoding="utf-8")


def run(path: Path, *, timeout: float = 600, allow_errors: bool = False) -> None:
    """Execute notebook ``path`` in place (cwd = its folder) and normalise it.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell unless
    ``allow_errors``; the file is then left unchanged.
    """
    from nbclient import NotebookClient

    path = Path(path)
    nb = _read(path)
    client = NotebookClient(
        nb, kernel_manager_class=kernel_manager_class(), kernel_name="python3",
        timeout=int(timeout), allow_errors=allow_errors, record_timing=False,
        resources={"metadata": {"path": str(path.resolve().parent)}},
    )
    client.execute()
    normalise_executed(nb)
    path.write_text(dumps(nb), encoding="utf-8")


def second_kernel_path(native: str | None = None) -> str | None:
    """The ``ATEN_CPU_CAPABILITY`` value that makes torch compute with other kernels than its own.

    A stored notebook output must come out the same on any CPU; torch picks its vectorised kernels
    by CPU (AVX-512, AVX2, or none), so re-running a notebook under a different choice is the
    cheapest stand-in for another machine. AVX-512 machines get ``avx2``, others ``default``
    (scalar kernels); ``None`` where torch already runs the default kernels (nothing else to try).
    """
    if native is None:
        import torch
        native = torch.backends.cpu.get_cpu_capability()
    native = native.upper()
    if native == "DEFAULT":
        return None
    return "avx2" if native.startswith("AVX512") else "default"


# Notebooks the second kernel path skips (``make test``'s second pass), each with the reason its
# checked outputs cannot depend on which vectorised kernels torch runs. Kept short: the second pass
# exists for float results and float bounds, and a notebook leaves this list when it gains one.
KERNEL_PATH_INDEPENDENT = {
    "notebooks/12_failures_lab.ipynb":
        "every checked output is a count (restarts, steps redone, shard files, flagged ranks) or a "
        "bit-identity between two runs on the same machine, never a float; its ~45 s are real "
        "multi-process restarts",
}


def kernel_path_independent() -> list[str]:
    """The notebooks of :data:`KERNEL_PATH_INDEPENDENT`, which ``make test`` checks on this machine's
    own kernels (``kernel-path-independent``); every other notebook is checked on the second path."""
    return list(KERNEL_PATH_INDEPENDENT)


def second_pass_ignores() -> list[str]:
    """pytest ``--ignore`` options for :data:`KERNEL_PATH_INDEPENDENT` (``second-path-ignores``)."""
    return [f"--ignore={path}" for path in kernel_path_independent()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.nbtools")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("second-path", help="print the ATEN_CPU_CAPABILITY value of another kernel path "
                                       "(empty where there is none)")
    sub.add_parser("kernel-path-independent", help="print the notebooks whose checked outputs do not depend "
                                                   "on the kernel path (checked on this machine's kernels)")
    sub.add_parser("second-path-ignores", help="print the pytest --ignore options of the notebooks whose "
                                               "checked outputs do not depend on the kernel path")
    r = sub.add_parser("run", help="execute notebooks in place and store normalised outputs")
    r.add_argument("paths", nargs="+", type=Path)
    r.add_argument("--timeout", type=float, default=600, help="seconds per cell (default 600)")
    r.add_argument("--allow-errors", action="store_true", help="store error outputs instead of failing")
    n = sub.add_parser("normalise", help="normalise notebooks in place without executing them")
    n.add_argument("paths", nargs="+", type=Path)
    a = p.parse_args(argv)
    if a.command == "second-path":
        print(second_kernel_path() or "")
        return 0
    if a.command == "kernel-path-independent":
        print(" ".join(kernel_path_independent()))
        return 0
    if a.command == "second-path-ignores":
        print(" ".join(second_pass_ignores()))
        return 0
    from .quick_imports import skip_iri_grammar
    skip_iri_grammar()
    status = 0
    for path in a.paths:
        if not path.is_file():
            print(f"error: no such notebook: {path}", file=sys.stderr)
            status = 1
            continue
        if a.command == "normalise":
            normalise_file(path)
            print(f"normalised {path}")
            continue
        try:
            run(path, timeout=a.timeout, allow_errors=a.allow_errors)
        except Exception as e:  # noqa: BLE001 - report per notebook, keep going
            print(f"error: {path}: {type(e).__name__}: {e}", file=sys.stderr)
            status = 1
            continue
        print(f"executed {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
