"""Latin-script prose left in Chinese text: what a reader of a Chinese page or notebook twin would
read as an English word, once code, math, link targets, roles' targets, file paths, acronyms and an
allowlist of terms and cited titles are set aside (``python -m course_lib.nbtwin latin``,
tests/test_twins.py). Apart from ``nbtwin`` so each reads in one sitting."""
from __future__ import annotations

import re
from pathlib import Path

_SKIP = [
    re.compile(r"\A---\n.*?^---[ \t]*$", re.M | re.S),               # a page's YAML front matter
    re.compile(r"^(`{3,}|~{3,})(?!\{(?!code))[^\n]*\n.*?^\1[ \t]*$", re.M | re.S),  # fenced code
    re.compile(r"^(`{3,}|~{3,}|:{3,})(\{admonition\}|\{[\w:-]+\}.*$)?", re.M),  # directive fences ({glue:figure} too), arguments
    re.compile(r"[\w./-]*\.(?:png|svg|jpe?g|gif|ipynb|md|json|csv|py|txt|pdf)\b"),  # file paths
    re.compile(r"<!--.*?-->", re.S),                                   # comments
    re.compile(r"\$\$.*?\$\$", re.S), re.compile(r"(?<!\\)\$[^$\n]+\$"),  # math
    re.compile(r"\\\(.*?\\\)", re.S), re.compile(r"\\\[.*?\\\]", re.S),
    re.compile(r"``[^`]+``"),                                            # double-backtick code
    re.compile(r"^:[\w-]+:.*$", re.M),                                 # directive options
    re.compile(r"^\([\w:-]+\)=\s*$", re.M),                            # MyST labels
    re.compile(r"<[A-Za-z/][^<>]*>"),                                  # HTML tags
    re.compile(r"\]\([^)]*\)"),                                         # link targets
    re.compile(r"\]\[[^\]]*\]|^\[[^\]]+\]:.*$", re.M),                 # reference links
    re.compile(r"https?://\S+"),
    re.compile(r"\{[\w:-]+\}`[^`]*`"),                                 # roles (their text kept first)
    re.compile(r"`[^`\n]+`"),                                           # inline code
    re.compile(r"（[A-Za-z][^（）\u3000-\u9fff]{0,40}）"),                # a term's English gloss: 术语（term）
]
_ROLE_TEXT = re.compile(r"\{[\w:-]+\}`([^`<]*?)\s*<[^`>]*>`")
_WORD = re.compile(r"[A-Za-z][\w'’-]*[A-Za-z0-9]|[A-Za-z]")


def strip_nonprose(text: str) -> str:
    """Markdown with code, math, link and reference targets, roles' targets, HTML and directive
    options removed: what a reader reads as prose (link texts stay)."""
    text = _ROLE_TEXT.sub(lambda m: m.group(1), text)  # {doc}`text <target>` reads as its text
    for rx in _SKIP:
        text = rx.sub(" ", text)
    return text


def load_allowlist(path: Path) -> list[str]:
    """Terms, names and cited titles that stay in Latin script (one a line, ``#`` comments);
    longest first, so a title is removed before the words inside it."""
    lines = Path(path).read_text(encoding="utf-8").splitlines() if Path(path).is_file() else []
    terms = {t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")}
    return sorted(terms, key=lambda t: (-len(t), t))


def latin_words(text: str, allow: list[str] = ()) -> list[str]:
    """The Latin-script words of Markdown ``text`` read as prose: outside code, math, targets and
    the allowlisted terms; acronyms, unit-like tokens (no two lowercase letters in a row: GPU, MFU,
    kB) and tokens with a digit or underscore (uint8, bf16, DeepSeek-V3) are names, not prose."""
    text = strip_nonprose(text)
    for term in allow:
        text = re.sub(r"(?<![A-Za-z])" + re.escape(term) + r"(?![A-Za-z])", " ", text,
                      flags=re.IGNORECASE)
    return [w for w in _WORD.findall(text) if re.search(r"[a-z]{2}", w) and not re.search(r"[\d_]", w)]
