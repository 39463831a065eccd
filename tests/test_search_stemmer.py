"""The book's search index is built with the Snowball stemmer's C implementation (PyStemmer).

Sphinx stems every word of every page for searchindex.js; with the pure-Python stemmer that was
17 of the 95 s of a book build (cProfile, 349k calls), paid twice by `make test` (the course's book
and the handout's). snowballstemmer switches to PyStemmer by itself when it can import it, and both
implement the same Snowball algorithms, so the index is the same: checked here word for word on
every word of the chapter pages."""
from __future__ import annotations

import re
from pathlib import Path

import snowballstemmer
from snowballstemmer.porter_stemmer import PorterStemmer

ROOT = Path(__file__).resolve().parents[1]


def test_sphinx_stems_with_the_c_stemmer() -> None:
    stemmer = snowballstemmer.stemmer("porter")       # what sphinx.search.en asks for
    assert type(stemmer).__module__ == "Stemmer", (
        f"{type(stemmer)}: PyStemmer is missing (requirements.txt pins it); the book builds ~17 s slower")


def test_the_c_stemmer_gives_the_pure_python_stems_on_the_books_words() -> None:
    words = sorted({w.lower() for page in sorted((ROOT / "book").glob("*.md"))
                    for w in re.findall(r"[A-Za-z][a-z]{2,}", page.read_text(encoding="utf-8"))})
    assert len(words) > 2000
    fast, slow = snowballstemmer.stemmer("porter"), PorterStemmer()
    differ = [(w, fast.stemWord(w), slow.stemWord(w)) for w in words if fast.stemWord(w) != slow.stemWord(w)]
    assert not differ, f"stems differ: {differ[:10]}"
