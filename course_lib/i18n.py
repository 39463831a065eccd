"""The words the course's code writes on a book page, in the book's two languages (issue #49).

A chapter page and its Chinese twin run the same code cells byte for byte (tests/test_editions.py),
so a table or a figure whose text is English would appear in English on both. Instead the shared
cell draws it twice from the same result, once per language, and glues both (``fig_x`` and
``fig_x_zh``); each edition pastes its own. The Chinese words come from one table,
the folder ``course_lib/i18n_zh/`` (one ``{English text: Chinese}`` file per chapter or module, so
a chapter's words live beside each other and two chapters' translators never edit one file), looked up
by the English text (gettext-style, like the grader's messages in ``course_lib/grading/i18n.py``, which
live apart because the grader's tables are hidden from a graded run's sandbox)::

    ax.set(xlabel=tr("sequence length $s$", lang))
    tr("{n} ranks", "zh", n=4)          # -> "4 个进程": values are inserted after translating

A drawer written in English is drawn once more and ``plots.translated`` (``translate`` here) looks
each text it shows up whole: a drawn text carries its numbers, so the table's templates are matched
against it and the values it shows go into the Chinese template. Math in a label stays math
(``$s$``): matplotlib draws it in its own fonts, the words around it in the CJK font (``plots.glued``). A missing entry is an error that names the text, never an English
word left silently on a Chinese page: tests/test_i18n.py draws each converted figure in Chinese.
The Chinese text must be in the site's bundled CJK font (book/_ext/course_fonts.py), like the pages'.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from course_lib._validate import choice

LANGS = ("en", "zh")
WORD = re.compile(r"[a-z]{2,}")    # text without two lower-case letters in a row (D*/N*, BF16) is symbols and names
MATH = re.compile(r"(?<!\\)\$[^$]*\$")   # matplotlib math: symbols, whatever letters it spells

TABLE = Path(__file__).with_name("i18n_zh")   # one {English text: Chinese} file per chapter or module


@functools.cache
def _table() -> Mapping[str, str]:
    """The Chinese table, read once, on first use (English output never needs it): every file of
    :data:`TABLE` merged. An English text two files give different Chinese is an error naming both
    files, so a chapter cannot silently change another chapter's words."""
    table: dict[str, str] = {}
    where: dict[str, str] = {}
    for path in sorted(TABLE.glob("*.json")):
        for en, zh in json.loads(path.read_text(encoding="utf-8")).items():
            if en in table and table[en] != zh:
                raise ValueError(f"{en!r} is {table[en]!r} in {where[en]} but {zh!r} in {path.name}: "
                                 f"one English text, one Chinese")
            table.setdefault(en, zh)
            where.setdefault(en, path.name)
    return MappingProxyType(table)


def __getattr__(name: str) -> Mapping[str, str]:
    if name == "ZH":                      # i18n.ZH: the whole table, {English text: Chinese}
        return _table()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tr(text: str, lang: str = "en", *, context: str = "", **values: object) -> str:
    """``text`` in ``lang``: itself in English, its entry of :data:`ZH` in Chinese; with ``values``
    the text is a ``str.format`` template, filled after translating. A word that reads two ways ("ok":
    a verdict, or how a run ended) takes a ``context``, its key ``context + "\\x04" + text`` (gettext's
    msgctxt) where the table has one, the plain text's entry otherwise. Text with no two lower-case
    Latin letters in a row ("N = √(C/120)", "δ/M", "BF16") is symbols and names, and stays as it is.
    Raises ValueError for an unknown language and for English text with no Chinese entry (naming
    it, so the fix is one line in the table)."""
    choice("lang", lang, LANGS)
    if lang == "zh":
        key = f"{context}\x04{text}" if context and f"{context}\x04{text}" in _table() else text
        if key not in _table() and not WORD.search(text):
            return text.format(**values) if values else text     # symbols only: "N = √(C/120)", "D*/N*"
        if key not in _table():
            raise ValueError(f"no Chinese entry for {text!r}{f' ({context})' if context else ''}: "
                             f"add it to {TABLE.name}/<chapter>.json")
        text = _table()[key]
    return text.format(**values) if values else text


def tr_all(texts: list[str] | tuple[str, ...], lang: str = "en", *, context: str = "") -> list[str]:
    """Each of ``texts`` in ``lang`` (a table's header row)."""
    return [tr(t, lang, context=context) for t in texts]


_PLACEHOLDER = re.compile(r"\{(\w+)(?:[:!][^{}]*)?\}")


@functools.cache
def _templates() -> tuple[tuple[re.Pattern, str], ...]:
    """Each entry with placeholders as (a pattern matching its English text once filled, its Chinese
    template with the format specs dropped: the values arrive already written), the most specific
    first (the most literal text): a short template ("{n} of {m}") would otherwise fill itself with
    a longer one's whole sentence."""
    out = []
    for en, zh in _table().items():
        if "\x04" in en or not _PLACEHOLDER.search(en):
            continue
        pattern, seen, at = "", set(), 0
        for m in _PLACEHOLDER.finditer(en):
            pattern += re.escape(en[at:m.start()])
            pattern += f"(?P={m[1]})" if m[1] in seen else f"(?P<{m[1]}>.+?)"
            seen.add(m[1])
            at = m.end()
        pattern += re.escape(en[at:])
        out.append((len(_PLACEHOLDER.sub("", en)), re.compile(pattern, re.S), _PLACEHOLDER.sub(r"{\1}", zh)))
    return tuple((p, zh) for _, p, zh in sorted(out, key=lambda t: -t[0]))


def translate(text: str, lang: str = "en") -> str:
    """A text already written out in English (a label a drawer wrote, numbers and all) in ``lang``:
    its own entry, else the first template entry it fills, with the values it shows put into the
    Chinese template; symbols and names stay. ValueError names a text with no entry."""
    choice("lang", lang, LANGS)
    if lang == "en" or text in ("", None) or not WORD.search(MATH.sub("", text)):
        return text
    if text in _table():
        return _table()[text]
    for pattern, zh in _templates():
        if m := pattern.fullmatch(text):
            return zh.format(**m.groupdict())
    raise ValueError(f"no Chinese entry for {text!r}: add it (or its template) to {TABLE.name}/<chapter>.json")
