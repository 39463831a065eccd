"""The page makers of the synthetic crawl: each turns a source document into one kind of page.

A real crawl's pages go wrong in a handful of recognisable ways, and each function here makes one
of them from clean text: ``_wrap`` puts a document inside another site's header and footer,
``edit_words`` makes a near-duplicate, ``_reformat`` serves the same text as different bytes,
``_templated`` re-publishes it per Python version, ``_low_quality`` writes spam, symbol lines,
error pages, menus, word salad and teasers, and ``_broken`` corrupts the UTF-8. ``data.crawl``
(the ``Page`` and ``Crawl`` model and ``build_crawl``) decides how many of each to make and labels
them; the random ones take their generator as an argument, so a crawl is a function of its seed.
"""
from __future__ import annotations

import random
import re

__all__ = ["edit_words"]

_STOP = {"the", "be", "to", "of", "and", "that", "have", "with", "a", "an", "is", "in", "it", "or",
         "as", "for", "on", "by", "are", "not", "this", "if", "at", "from", "which", "can", "its"}


def _title(doc: str) -> str:
    return doc.strip().splitlines()[0][:60]


def _wrap(doc: str, site: str) -> str:
    header = (f"{site} | Home | Tutorials | Reference | Blog | Contact\n"
              f"You are here: Home › Reference › {_title(doc)}\n"
              f"Last updated 12 March 2024 · 5 min read · Share on Twitter · Share on LinkedIn")
    footer = (f"Was this page helpful? Yes No\n"
              f"© 2024 {site} — All rights reserved. Privacy policy · Terms of use · Cookie settings\n"
              f"Subscribe to the {site} newsletter for weekly tutorials, tips and news.")
    return f"{header}\n\n{doc}\n\n{footer}"


def edit_words(doc: str, rate: float, vocab: list[str], rng: random.Random) -> str:
    """A near-duplicate of ``doc``: each word is, with probability ``rate``, replaced by a word of
    ``vocab`` (60%), deleted (20%) or doubled (20%); line structure is kept."""
    lines = []
    for line in doc.split("\n"):
        out = []
        for w in line.split(" "):
            u = rng.random()
            if not w or u >= rate:
                out.append(w)
            elif u < rate * 0.6:
                out.append(rng.choice(vocab))
            elif u < rate * 0.8:
                continue
            else:
                out.extend([w, w])
        lines.append(" ".join(out))
    return "\n".join(lines)


def _reformat(doc: str, variant: int) -> tuple[str, str]:
    """Same text, different bytes: returns (text as served, charset)."""
    if variant == 0:
        return doc.replace("\n", "  \r\n"), "utf-8"
    if variant == 1:
        return doc.replace(". ", ".\u00a0 ").replace("\n\n", "\n\n\n"), "utf-8"
    return doc, ("cp1252" if variant == 2 else "utf-16")


def _templated(doc: str, version: int) -> str:
    others = " ".join(f"3.{v}" for v in range(8, 14) if v != version)
    return (f"Python 3.{version} documentation — {_title(doc)}\n"
            f"This page describes Python 3.{version}. Other versions: {others}\n\n{doc}")


def _low_quality(kind: str, rng: random.Random, vocab: list[str], sources: list[str]) -> str:
    """One synthetic low-quality page of ``kind`` (one of ``LOW_KINDS``)."""
    if kind == "spam":
        kw = rng.sample(["cheap", "python", "tutorial", "download", "free", "best", "course", "online",
                         "ebook", "pdf", "crack", "certificate", "bootcamp", "jobs"], 5)
        phrases = [f"{kw[0]} {kw[1]} {kw[2]}", f"best {kw[1]} {kw[3]} now", f"{kw[4]} {kw[0]} {kw[1]} free",
                   f"buy {kw[2]} {kw[3]} online"]
        sentences = [f"{rng.choice(phrases).capitalize()}! {rng.choice(phrases)} {rng.choice(phrases)}."
                     for _ in range(rng.randint(25, 45))]
        return "\n".join(" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3))
    if kind == "symbols":
        parts = ["###", "#", "…", "★★★", "$$$", "»»", "|", "#tags", "...", "@@", "~~~", "##"]
        return "\n".join(" ".join(rng.choice(parts) if rng.random() < 0.8 else rng.choice(["new", "top", "hot"])
                                  for _ in range(rng.randint(6, 14))) for _ in range(rng.randint(8, 20)))
    if kind == "short":
        msg = rng.choice(["Page not found.", "Loading…", "Please enable JavaScript to view this page.",
                          "Access denied.", "Coming soon!", "Redirecting…", "This page has moved.",
                          "Session expired, please log in again."])
        return f"{msg} Error reference {rng.randint(1000, 99999)}."
    if kind == "nav_list":
        items = ["Home", "About us", "Products", "Pricing", "Blog", "Careers", "Contact", "Support",
                 "Documentation", "Downloads", "Community", "Events", "Partners", "Press", "Login"]
        bullet = rng.choice(["•", "-", "*", "‣"])
        return "\n".join(f"{bullet} {rng.choice(items)} {rng.choice(items).lower()}"
                         for _ in range(rng.randint(40, 90)))
    if kind == "word_salad":
        content = [w for w in vocab if w.lower() not in _STOP]
        return "\n".join(" ".join(rng.choice(content) for _ in range(rng.randint(8, 14)))
                         for _ in range(rng.randint(12, 25)))
    sentences = [x for x in re.split(r"(?<=[.:])\s+", rng.choice(sources)) if len(x.split()) > 6]
    picks = [sentences[rng.randrange(len(sentences))] for _ in range(rng.randint(15, 30))] if sentences else []
    return "\n".join(" ".join(x.split()[: rng.randint(5, 9)]) + "…" for x in picks)  # "ellipsis"


def _broken(doc: str, rng: random.Random) -> bytes:
    raw = doc.encode("utf-8")
    bad = rng.choice([b"\xff", b"\xc3(", b"\xe2\x80", b"\xa0\xa1", b"\xfe\xfe"])
    cut = rng.randrange(len(raw) // 4, len(raw))
    return raw[:cut] + bad + raw[cut:]
