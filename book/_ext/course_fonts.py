"""The CJK font the site ships: a subset of WenQuanYi Micro Hei holding exactly the Chinese
characters the book uses, so the glossary's terms render on any machine, offline, instead of as
boxes where no system CJK font is installed. course.css declares it with @font-face.

Regenerate after adding Chinese text (tests/test_site_static.py fails until you do)::

    .venv/bin/python book/_ext/course_fonts.py

Licence: WenQuanYi Micro Hei is dual-licensed Apache-2.0 / GPL-3+ with font exception; the
subset is used under Apache-2.0 (book/_static/fonts/LICENSE.md).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
SUBSET = ROOT / "book" / "_static" / "fonts" / "wqy-microhei-subset.woff"
# CJK punctuation, ideographs (with extension A and compatibility forms), full-width forms
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
SOURCES = ("book/*.md", "book/zh/*.md", "book/zh/terms.yml", "course_lib/grading/handout.py",
           "book/references.bib", "notebooks/*.ipynb", "solutions/*.ipynb",
           # words the scripts write on the page
           "notebooks/zh/*.ipynb", "solutions/zh/*.ipynb", "course_lib/claims_zh.py", "course_lib/i18n_zh/*.json",
           "book/_static/calculators_i18n.js", "book/_static/course_editions.js", "book/_ext/course_editions.py",
           "book/_static/course_search.js", "book/_ext/course_zh_chrome.py")


def book_cjk_chars(root: Path = ROOT) -> set[str]:
    """Every CJK character in the book's sources (pages, labs, solutions, references)."""
    chars: set[str] = set()
    for pattern in SOURCES:
        for path in root.glob(pattern):
            chars |= set(CJK.findall(path.read_text(encoding="utf-8")))
    return chars


def font_chars(path: Path = SUBSET) -> set[str]:
    """The characters a font file has glyphs for."""
    from fontTools.ttLib import TTFont
    with TTFont(path, fontNumber=0) as font:
        return {chr(code) for code in font.getBestCmap()}


def build_subset(chars: set[str], out: Path = SUBSET, source: Path = SOURCE_FONT) -> Path:
    """Write a WOFF subset of ``source`` (face 0 of the .ttc) with ``chars``; hinting and
    unused tables dropped, so the file stays small. Deterministic for the same input."""
    from fontTools import subset
    options = subset.Options()
    options.flavor = "woff"
    options.font_number = 0
    options.hinting = False
    options.desubroutinize = True
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]   # keep copyright and licence strings
    font = subset.load_font(str(source), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text="".join(sorted(chars)))
    subsetter.subset(font)
    if "head" in font:
        font["head"].modified = font["head"].created    # no build timestamp in the file
    out.parent.mkdir(parents=True, exist_ok=True)
    subset.save_font(font, str(out), options)
    return out


if __name__ == "__main__":
    written = build_subset(book_cjk_chars())
    print(f"{written.relative_to(ROOT)}: {len(font_chars(written))} characters, {written.stat().st_size} bytes")
    sys.exit(0)
