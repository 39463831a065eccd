"""The grader's feedback in the course's two languages: English (the source) and Chinese.

gettext-style: the English text is the key. A message that carries values is a :class:`Message`:
an English template with named placeholders (``"your answer is {ratio}× the expected value"``)
and its values, which is also the English text itself (a ``str``), so English callers and tests see
exactly what they saw before. :func:`render` turns a message into the language asked for: it looks
the template up in that language's table and inserts the values *after* translating, so a number
never has to be re-parsed out of a sentence. A plain string is looked up whole (a Mistake's
message, a hint). A value that is itself a Message is rendered too; any other value (a number, a
file name, an exception's text) is inserted as it is.

The Chinese tables are JSON objects ``{"English template": "中文模板"}``:

* ``course_lib/grading/zh.json``: the framework's own messages (comparisons, timeouts, crashes,
  the in-notebook ``check``'s lines, the summary);
* ``course_lib/checks/zh/<chapter>.json``: each bank's hints, explanations, Mistake messages and
  function graders' messages. They live beside the banks on purpose: a graded run's sandbox hides
  ``course_lib/checks`` (the recognised mistakes name wrong answers and sometimes the right one), so
  their translations are hidden with them.

Nothing here is mutable state: the tables are read once per process into read-only mappings, and
the language is an argument everywhere (``Question.grade(lang=)``, ``Checker(lang=)``,
``Options(lang=)``, ``--lang``). tests/test_grading_i18n.py fails on an English message without a
Chinese entry, on an entry whose English key no longer exists, and on placeholders that differ.
"""
from __future__ import annotations

import functools
import json
import os
import string
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from course_lib._validate import choice

LANGS = ("en", "zh")
DEFAULT_LANG = "en"
LANG_ENV = "COURSE_LANG"   # the in-notebook checker's language when none is given
FRAMEWORK_TABLE = Path(__file__).with_name("zh.json")
BANK_TABLES = Path(__file__).resolve().parents[1] / "checks" / "zh"


SESSION_ENV = "JPY_SESSION_NAME"   # Jupyter names the notebook a kernel runs for in its environment
TWIN_FOLDER = "zh"                 # a Chinese twin lives in a zh/ folder beside its English notebook


def notebook_lang(nb: Any = None, path: str | Path | None = None) -> str | None:
    """The language a notebook says it is written in: its metadata ``course.lang`` (the Chinese
    twins say "zh"), else "zh" for a notebook in a ``zh`` folder; None when neither says."""
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    course = meta.get("course") if isinstance(meta, dict) else None
    lang = course.get("lang") if isinstance(course, dict) else None
    if lang in LANGS:
        return lang
    return "zh" if path is not None and Path(path).parent.name == TWIN_FOLDER else None


def session_lang() -> str | None:
    """The language of the notebook this kernel runs, in practice mode: Jupyter passes its path as
    ``JPY_SESSION_NAME`` (IPython also calls it ``__session__``; VS Code ``__vsc_ipynb_file__``);
    the notebook's own metadata, else its folder, tells (:func:`notebook_lang`). None elsewhere."""
    path = os.environ.get(SESSION_ENV)
    if not path:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        shell = get_ipython()
        ns = shell.user_ns if shell is not None else {}
        path = ns.get("__session__") or ns.get("__vsc_ipynb_file__")
    if not isinstance(path, str) or not path.endswith(".ipynb"):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, ValueError, RecursionError):
        nb = None
    return notebook_lang(nb, path)


def check_lang(lang: Any) -> str:
    """``lang`` if it is one of :data:`LANGS`, else ValueError naming it."""
    return choice("lang", lang, LANGS)


def key(text: str) -> str:
    """The catalog key of an English text: its words separated by single spaces (messages are
    shown whitespace-normalised, and a bank's implicit string concatenation may leave doubles)."""
    return " ".join(str(text).split())


class Message(str):
    """English text made from ``template`` and named ``values``; renders in another language.

    ``Message("Off by {ratio}×.", ratio="2.00")`` equals the string ``"Off by 2.00×."``. Without
    values the template is the text as written (braces need no escaping). ``cap=True``: the English
    text starts with a capital letter (a clause made into a sentence); Chinese has no capitals."""

    def __new__(cls, template: str, /, *, cap: bool = False, **values: Any) -> Message:
        text = template.format(**values) if values else template
        if cap:
            text = text[:1].upper() + text[1:]
        self = super().__new__(cls, text)
        self.template, self.values, self.cap = template, MappingProxyType(dict(values)), cap
        return self

    def __reduce__(self):  # pickles (and copies) as the English text it is
        return (str, (str(self),))


def msg(template: str, /, **values: Any) -> Message:
    """A translatable message: ``msg("Your norm is {r:.3g}× the global norm.", r=x)``. The Chinese
    table must have the same placeholders (names and format specs) as ``template``."""
    return Message(template, **values)


def lit(text: str) -> Message:
    """A fixed text (a Mistake's message, a grader's constant) as a value another message embeds,
    so that it is translated too (plain strings inside a message are inserted as they are)."""
    return text if isinstance(text, Message) else Message(str(text))


def sentence(clause: Any) -> Message:
    """``clause`` as a sentence: capitalised, with a full stop (Chinese: 。)."""
    return Message("{clause}.", cap=True, clause=lit(clause) if isinstance(clause, str) else clause)


def join(first: Any, second: Any) -> Message:
    """Two messages one after the other (a grader's message, then the Mistake it recognised)."""
    return Message("{first} {second}", first=lit(first), second=lit(second))


class Series(Message):
    """Messages in a row (``"a; b; c"``), each translated on its own and joined by the separator
    that suits the language (``"; "`` is ``"；"`` in Chinese, a space between sentences nothing)."""

    SEPARATORS = MappingProxyType({"zh": MappingProxyType({"; ": "；", "; and ": "；并且", ", ": "，", " ": ""})})

    def __new__(cls, parts: Any, sep: str = "; ") -> Series:
        parts = tuple(lit(p) if isinstance(p, str) else lit(str(p)) for p in parts)
        self = str.__new__(cls, sep.join(parts))
        self.template, self.values, self.cap = "", MappingProxyType({}), False
        self.parts, self.sep = parts, sep
        return self


def series(parts: Any, sep: str = "; ") -> Series:
    """``sep.join(parts)`` that stays translatable (see :class:`Series`)."""
    return Series(parts, sep)


def cases_partial(passed: int, total: int, notes: dict) -> tuple[float, Series]:
    """A code question's partial credit when some of its ``total`` cases fail: three quarters of the
    points in proportion to the cases passed, and each distinct mistake once with the cases it broke
    (``notes``: {why: [case label, ...]}, in the order found)."""
    return passed / total * 0.75, series(msg("{why} (cases {cases})", why=w, cases=" ".join(c))
                                         for w, c in notes.items())


def _read(path: Path) -> dict[str, str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in data.items()):
        raise ValueError(f"{path}: a message table must be a JSON object of strings")
    return {key(k): v for k, v in data.items()}


def tables(lang: str) -> dict[str, Mapping[str, str]]:
    """The tables of ``lang`` by name (``"framework"`` and each chapter's id), as read from disk;
    the tests check them. A table the sandbox hides (the banks') is simply absent there."""
    check_lang(lang)
    if lang == "en":
        return {}
    out = {"framework": MappingProxyType(_read(FRAMEWORK_TABLE))}
    if BANK_TABLES.is_dir():
        for p in sorted(BANK_TABLES.glob("*.json")):
            out[p.stem] = MappingProxyType(_read(p))
    return out


@functools.cache
def catalog(lang: str) -> Mapping[str, str]:
    """Every table of ``lang`` merged into one read-only mapping (read once per process)."""
    merged: dict[str, str] = {}
    for table in tables(lang).values():
        merged.update(table)
    return MappingProxyType(merged)


def render(text: Any, lang: str = DEFAULT_LANG) -> str:
    """``text`` in ``lang``: English is the text itself; otherwise a Message's template (or a plain
    string, whole) is looked up and its values inserted after translation. An English text that
    has no entry stays English (the catalog test keeps that from happening to a known message)."""
    if lang == "en" or not isinstance(text, str):
        return str(text)
    table = catalog(check_lang(lang))
    if isinstance(text, Series):
        sep = Series.SEPARATORS.get(lang, {}).get(text.sep, text.sep)
        return sep.join(render(p, lang) for p in text.parts)
    if not isinstance(text, Message):
        return table.get(key(text), str(text))
    template = table.get(key(text.template), text.template)
    if not text.values:
        return template
    values = {k: render(v, lang) if isinstance(v, Message) else v for k, v in text.values.items()}
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):  # a broken entry must never cost a grade
        return str(text)


def placeholders(template: str) -> set[tuple[str, str]]:
    """The ``(name, format spec)`` pairs of ``template``'s fields: both editions must agree."""
    return {(name, spec or "") for _, name, spec, _ in string.Formatter().parse(template)
            if name is not None}
