"""No page of the book holds a control character: a stray BEL or TAB renders as a box or a gap.

Issue #19 found `\\approx` and `\\times` typed in a Python string, which became BEL + "pprox" and
TAB + "imes" in chapter 6. Every TOC page's source is checked byte by byte: only newlines are
allowed, and tabs only inside code (fenced blocks of a page, code cells of a notebook).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")      # every C0 control and DEL, except \t and \n
TAB = "\t"


def page_problems(path: Path) -> list[str]:
    """'line N: U+XXXX in prose' for each forbidden control character in a .md or .ipynb page."""
    problems = []
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_bytes().decode("utf-8"))["cells"]
        for i, cell in enumerate(cells):
            src = "".join(cell["source"])
            where = f"cell {i + 1} ({cell['cell_type']})"
            problems += [f"{where}: U+{ord(ch):04X}" for ch in CONTROL.findall(src)]
            if cell["cell_type"] != "code" and TAB in src:
                problems.append(f"{where}: TAB outside code")
        return problems
    fence = None
    for n, line in enumerate(path.read_bytes().decode("utf-8").split("\n"), 1):
        problems += [f"line {n}: U+{ord(ch):04X}" for ch in CONTROL.findall(line)]
        opener = re.match(r"\s*(`{3,}|~{3,})", line)
        if opener and fence is None:
            fence = opener.group(1)
        elif opener and line.strip() == fence:
            fence = None
        elif TAB in line and fence is None:
            problems.append(f"line {n}: TAB outside code")
    return problems


def _source(docname: str) -> Path:
    for suffix in (".md", ".ipynb"):
        if (ROOT / f"{docname}{suffix}").exists():
            return ROOT / f"{docname}{suffix}"
    raise FileNotFoundError(docname)


def test_no_page_holds_a_control_character(toc_pages: list[str]) -> None:
    found = {d: p for d in toc_pages if (p := page_problems(_source(d)))}
    assert not found, f"control characters in book pages: {found}"


def test_bibliography_holds_no_control_character() -> None:
    text = (ROOT / "book/references.bib").read_bytes().decode("utf-8")
    assert not CONTROL.findall(text) and TAB not in text


@pytest.mark.parametrize("text, expected", [
    ("ok $2^{-25} \\approx 3$\n", []),
    ("bad $2^{-25} \x07pprox 3$\n", ["line 1: U+0007"]),
    ("a\tb\n", ["line 1: TAB outside code"]),
    ("```make\nall:\n\tcc x.c\n```\n", []),
    ("line\r\n", ["line 1: U+000D"]),
])
def test_the_check_catches_what_issue_19_found(tmp_path: Path, text: str, expected: list[str]) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8", newline="")
    assert page_problems(page) == expected


def test_the_check_reads_notebook_cells(tmp_path: Path) -> None:
    nb = {"cells": [{"cell_type": "markdown", "source": ["x\ty"]},
                    {"cell_type": "code", "source": ["if x:\n\tpass"]},
                    {"cell_type": "markdown", "source": ["\x08"]}]}
    page = tmp_path / "lab.ipynb"
    page.write_text(json.dumps(nb), encoding="utf-8")
    assert page_problems(page) == ["cell 1 (markdown): TAB outside code", "cell 3 (markdown): U+0008"]
