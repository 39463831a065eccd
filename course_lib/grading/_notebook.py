"""Notebook plumbing shared by the generator, the runner and ``course_lib.nbtools``.

- :func:`dumps`: the one on-disk form (nbformat's: sources and text outputs as lists of lines,
  ``json.dumps(indent=1, sort_keys=True, ensure_ascii=False)`` and a trailing newline), so the same
  notebook always gives the same bytes.
- :func:`kernel_manager_class`: a kernel manager that starts ipykernel with *this* interpreter
  (``sys.executable``), whatever ``python3`` kernelspec a user has installed elsewhere.
- :func:`read_capped`: the bytes of a file a submission controls, refused before reading when it
  is larger than the grader will hold (``SUBMISSION_CAP``), a link or not a regular file.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TIMING_KEYS = ("execution", "ExecuteTime")
_ID_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

#: The largest notebook the grader reads, in bytes. The course's biggest lab, with every figure
#: in its outputs, is about 0.6 MB. Every reader of a submission holds it whole (the runner, the
#: copy of it the sandbox runs, the copy check), so without a cap a sparse file (``truncate -s``:
#: gigabytes of size, no disk) costs the grader twice its size in memory: 2 GB measured 4.2 GB,
#: and a dozen would end a 24 GB machine's run for the whole class.
SUBMISSION_CAP = 64 << 20


class TooLarge(ValueError):
    """A file over the cap of :func:`read_capped`; ``size`` and ``cap`` in bytes."""

    def __init__(self, size: int, cap: int) -> None:
        super().__init__(f"{size} bytes, over the limit of {cap}")
        self.size, self.cap = size, cap


def read_capped(path: Path, cap: int = SUBMISSION_CAP) -> bytes:
    """The bytes of the regular file ``path`` if it holds at most ``cap`` of them.

    Opened without following a symbolic link and without waiting on a FIFO; judged by its size
    before a byte is read (so a sparse terabyte costs nothing), and read at most ``cap + 1``
    bytes deep in case it grows meanwhile. Raises :class:`TooLarge` when over the cap, ``OSError``
    when it cannot be opened or is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"not a regular file: {Path(path).name}")
        if st.st_size > cap:
            raise TooLarge(st.st_size, cap)
        data = f.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(len(data), cap)
    return data


def source_text(src: Any) -> str:
    """A cell's source as text: a string, or the strings of a list; anything else (a hostile or
    broken notebook) is no text."""
    if isinstance(src, list):
        return "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def split_lines(text: Any) -> list[str]:
    return source_text(text).splitlines(True)


def _split_outputs(outputs: list[dict]) -> None:
    for out in outputs:
        if "text" in out:
            out["text"] = split_lines(out["text"])
        for mime, value in (out.get("data") or {}).items():
            if isinstance(value, (str, list)) and (mime.startswith("text/") or mime == "image/svg+xml"):
                out["data"][mime] = split_lines(value)


def dumps(nb: dict) -> str:
    """Deterministic JSON text of notebook ``nb`` (a plain dict or NotebookNode); mutates line form."""
    for cell in nb.get("cells", []):
        cell["source"] = split_lines(cell.get("source", ""))
        if cell.get("cell_type") == "code":
            _split_outputs(cell.get("outputs", []))
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def strip_widgets(nb: dict) -> None:
    """Drop widget state from notebook metadata and widget views from outputs."""
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if isinstance(data, dict) and WIDGET_MIME in data:
                data.pop(WIDGET_MIME)
                if not data:
                    continue
            kept.append(out)
        cell["outputs"] = kept


def normalise_executed(nb: dict) -> None:
    """Make an executed notebook reproducible: keep valid cell ids (assign stable ones where
    missing or duplicated), execution counts 1..n over executed code cells, no timing metadata,
    no widget state."""
    seen: set[str] = set()
    for i, cell in enumerate(nb.get("cells", [])):
        cid = cell.get("id")
        if not isinstance(cid, str) or not _ID_OK.match(cid) or cid in seen:
            base, k = f"cell-{i}", 0
            cid = base
            while cid in seen:
                k += 1
                cid = f"{base}-{k}"
            cell["id"] = cid
        seen.add(cid)
        for key in TIMING_KEYS:
            cell.get("metadata", {}).pop(key, None)
    if nb.get("nbformat") == 4 and nb.get("nbformat_minor", 0) < 5:
        nb["nbformat_minor"] = 5  # cell ids need nbformat 4.5
    n = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("execution_count") is None:
            for out in cell.get("outputs", []):
                if "execution_count" in out:
                    out["execution_count"] = None
            continue
        n += 1
        cell["execution_count"] = n
        for out in cell.get("outputs", []):
            if "execution_count" in out:
                out["execution_count"] = n
    strip_widgets(nb)


def kernel_manager_class() -> type:
    """An AsyncKernelManager class whose kernel is ipykernel on ``sys.executable`` (pass it to
    ``NotebookClient(kernel_manager_class=...)``), whatever 'python3' kernelspec is installed."""
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    class ThisPythonKernelManager(AsyncKernelManager):
        @property
        def kernel_spec(self) -> KernelSpec:
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                name="python3", display_name="Python 3 (ipykernel)", language="python",
                metadata={"debugger": True})

    return ThisPythonKernelManager
