"""Stage 3: heuristic quality filters in the style of Gopher's MassiveWeb rules.

Rae et al. 2021 (arXiv 2112.11446, App. A.1.1 and Table A1) keep a web document only if it has
50–100,000 words, a mean word length of 3–10 characters, at most 0.1 "#" or ellipsis tokens per
word, at most 90% of lines starting with a bullet, at most 30% of lines ending in an ellipsis, at
least 80% of words containing a letter, and at least two of the stop words *the, be, to, of, and,
that, have, with*; and only if it is not repetitive: duplicate lines (≤ 30% of lines, ≤ 20% of
characters), duplicate paragraphs (same), the most frequent 2/3/4-gram (≤ 20/18/16% of
characters), and characters inside repeated 5…10-grams (≤ 15…10%).

Each rule is a pure function of the text, so it parallelises trivially and can be audited one by
one: ``failed_rules(text)`` names every rule a document breaks; ``RULES`` lists them in the order
the pipeline applies them (the first failure is the one a removal is attributed to).
Words are whitespace-separated tokens, as in the paper; the thresholds are keyword arguments.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

__all__ = ["STOP_WORDS", "BULLETS", "RULES", "words", "stop_word_rule", "repetition_stats",
           "stats", "failed_rules", "first_failure"]

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("•", "‣", "●", "◦", "▪", "-", "*", "–", "—")
_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")
_PARAS = re.compile(r"\n\s*\n")


def words(text: str) -> list[str]:
    """Whitespace-separated tokens of ``text``."""
    return text.split()


def stop_word_rule(text: str, min_stop_words: int = 2) -> bool:
    """Keep (True) iff at least ``min_stop_words`` *distinct* stop words occur, compared after
    case-folding and stripping surrounding punctuation ("The," counts as "the"). Real prose is
    full of function words; keyword lists, word salads and machine junk are not."""
    found = {_PUNCT.sub("", w.casefold()) for w in words(text)} & set(STOP_WORDS)
    return len(found) >= min_stop_words


def _dup_fraction(items: list[str]) -> tuple[float, float]:
    """(fraction of items that repeat an earlier item, fraction of their characters)."""
    if not items:
        return 0.0, 0.0
    seen: set[str] = set()
    n_dup = chars_dup = 0
    for it in items:
        if it in seen:
            n_dup += 1
            chars_dup += len(it)
        seen.add(it)
    total = sum(len(it) for it in items)
    return n_dup / len(items), (chars_dup / total if total else 0.0)


def repetition_stats(ws: list[str]) -> dict[str, float]:
    """Gopher's n-gram repetition statistics over the word list ``ws``: for n = 2, 3, 4 the share
    of word characters covered by the most frequent n-gram, and for n = 5…10 the share of word
    characters covered by n-grams that occur more than once (each word counted once)."""
    out: dict[str, float] = {}
    lengths = [len(w) for w in ws]
    total = sum(lengths) or 1
    for n in range(2, 11):
        grams = [tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)]
        if not grams:
            out[f"top_{n}gram" if n <= 4 else f"dup_{n}gram"] = 0.0
            continue
        counts = Counter(grams)
        if n <= 4:
            gram, c = counts.most_common(1)[0]
            out[f"top_{n}gram"] = (c * sum(len(w) for w in gram) / total) if c > 1 else 0.0
        else:
            covered = [False] * len(ws)
            for i, g in enumerate(grams):
                if counts[g] > 1:
                    covered[i:i + n] = [True] * n
            out[f"dup_{n}gram"] = sum(k for k, c in zip(lengths, covered) if c) / total
    return out


def stats(text: str) -> dict[str, float]:
    """Every statistic the rules look at, computed in one pass over ``text``."""
    ws = words(text)
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    paras = [p.strip() for p in _PARAS.split(text) if p.strip()]
    n = len(ws) or 1
    s = {
        "n_words": float(len(ws)),
        "mean_word_length": sum(len(w) for w in ws) / n,
        "symbol_ratio": sum(w.count("#") + w.count("...") + w.count("…") for w in ws) / n,
        "bullet_lines": sum(ln.startswith(BULLETS) for ln in lines) / (len(lines) or 1),
        "ellipsis_lines": sum(ln.endswith(("...", "…")) for ln in lines) / (len(lines) or 1),
        "alpha_words": sum(any(ch.isalpha() for ch in w) for w in ws) / n,
        "stop_words": float(len({_PUNCT.sub("", w.casefold()) for w in ws} & set(STOP_WORDS))),
    }
    s["dup_line_frac"], s["dup_line_chars"] = _dup_fraction(lines)
    s["dup_para_frac"], s["dup_para_chars"] = _dup_fraction(paras)
    s.update(repetition_stats(ws))
    return s


_TOP = {2: 0.20, 3: 0.18, 4: 0.16}
_DUP = {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}

# name -> (what it removes, test on the stats that is True when the document FAILS)
RULES: dict[str, tuple[str, Callable[[dict], bool]]] = {
    "word_count": ("fewer than 50 or more than 100,000 words",
                   lambda s: not 50 <= s["n_words"] <= 100_000),
    "mean_word_length": ("mean word length outside 3-10 characters",
                         lambda s: not 3 <= s["mean_word_length"] <= 10),
    "symbol_ratio": ("more than 0.1 '#' or ellipsis per word", lambda s: s["symbol_ratio"] > 0.1),
    "bullet_lines": ("over 90% of lines start with a bullet", lambda s: s["bullet_lines"] > 0.9),
    "ellipsis_lines": ("over 30% of lines end with an ellipsis", lambda s: s["ellipsis_lines"] > 0.3),
    "alpha_words": ("under 80% of words contain a letter", lambda s: s["alpha_words"] < 0.8),
    "stop_words": ("fewer than 2 distinct stop words", lambda s: s["stop_words"] < 2),
    "dup_lines": ("duplicate lines: >30% of lines or >20% of characters",
                  lambda s: s["dup_line_frac"] > 0.3 or s["dup_line_chars"] > 0.2),
    "dup_paragraphs": ("duplicate paragraphs: >30% of paragraphs or >20% of characters",
                       lambda s: s["dup_para_frac"] > 0.3 or s["dup_para_chars"] > 0.2),
    "top_ngram": ("the top 2/3/4-gram covers >20/18/16% of characters",
                  lambda s: any(s[f"top_{n}gram"] > t for n, t in _TOP.items())),
    "dup_ngram": ("repeated 5..10-grams cover >15..10% of characters",
                  lambda s: any(s[f"dup_{n}gram"] > t for n, t in _DUP.items())),
}


def failed_rules(text: str) -> list[str]:
    """Names of every rule in ``RULES`` that ``text`` breaks (empty list: keep it)."""
    s = stats(text)
    return [name for name, (_, fails) in RULES.items() if fails(s)]


def first_failure(text: str) -> str | None:
    """The first rule (in ``RULES`` order) that ``text`` breaks, or None."""
    failed = failed_rules(text)
    return failed[0] if failed else None
