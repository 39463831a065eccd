"""A small synthetic web crawl with ground truth, built from real text that ships with Python.

Real web data is mostly not what you want to train on: the same page under many URLs, the same
article wrapped in different sites' menus, one template filled in for every city or version,
keyword spam, navigation lists, "Page not found", pages in legacy encodings and pages whose bytes
are simply broken. ``build_crawl`` reproduces each of these from the reference-manual sections of
``pydoc_data.topics`` (PSF licence, ~0.47 MB, installed with Python; nothing is downloaded) and
labels every page, so each stage of the pipeline can be *scored*, not just run.

Every page carries its ground truth:

- ``kind``: how it was made (see ``KINDS``);
- ``cluster``: pages made from the same source text share a cluster. Real text has duplicates of
  its own: some pydoc topics repeat sections of others, so source documents whose exact Jaccard
  similarity (word 5-shingles, all pairs) is ≥ 0.5 are one cluster from the start;
- ``dup_of``: the id of the first page of its cluster in crawl order (the copy a deduplicator
  should keep), or ``None`` for that first page and for unique pages.

A fixed tenth of the source documents never enters the crawl: ``Crawl.heldout`` is clean
validation text for the training experiments. Everything is a deterministic function of ``seed``.

This module holds the data model (``KINDS``, ``Page``, ``Crawl``), the source documents and their
clusters, and ``build_crawl``, which assembles the crawl; how each kind of page is made from a
source document (another site's boilerplate, word edits, re-encodings, templates, low-quality and
broken pages) is ``data.page_makers``.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass

from .._validate import positive_int
from .page_makers import _broken, _low_quality, _reformat, _templated, _wrap, edit_words

__all__ = ["KINDS", "DUP_KINDS", "LOW_KINDS", "BAD_KINDS", "Page", "Crawl", "source_documents",
           "source_clusters", "edit_words", "build_crawl", "edited_pairs", "huge_page"]

KINDS = {
    "original": "a clean page, the first copy of its text",
    "exact_dup": "a byte-identical copy of another page",
    "format_dup": "the same text with different bytes: CRLF, trailing spaces, NBSP, another charset",
    "near_edit": "a copy with 1-6% of its words replaced, deleted or repeated",
    "near_wrap": "the same body inside another site's header and footer",
    "templated": "one page re-published per Python version, differing in a few tokens",
    "spam": "keyword stuffing: a few phrases repeated",
    "symbols": "lines of symbols, hash tags and ellipses",
    "short": "a few words: error pages, placeholders",
    "nav_list": "a navigation menu, one bullet per line",
    "word_salad": "content words without any function words",
    "ellipsis": "teaser lines that all end in an ellipsis",
    "empty": "no text at all, or only whitespace",
    "broken_bytes": "declared UTF-8 but not valid UTF-8",
}
DUP_KINDS = ("exact_dup", "format_dup", "near_edit", "near_wrap", "templated")
LOW_KINDS = ("spam", "symbols", "short", "nav_list", "word_salad", "ellipsis")
BAD_KINDS = ("empty", "broken_bytes")

_SITES = ("docs-mirror.example", "pyguide.example", "learn-code.example", "devnotes.example",
          "tutorialhub.example", "codewiki.example")


@dataclass(frozen=True)
class Page:
    """One crawled page: raw bytes as served, the declared charset, and its ground truth."""

    page_id: int
    url: str
    raw: bytes
    charset: str
    kind: str
    cluster: int
    dup_of: int | None

    @property
    def is_dup(self) -> bool:
        """True if an earlier page of the crawl carries the same (or nearly the same) text."""
        return self.dup_of is not None

    @property
    def is_low_quality(self) -> bool:
        return self.kind in LOW_KINDS

    @property
    def is_bad_input(self) -> bool:
        return self.kind in BAD_KINDS


@dataclass(frozen=True)
class Crawl:
    """The pages in crawl order and the held-out clean documents (validation text)."""

    pages: tuple[Page, ...]
    heldout: tuple[str, ...]
    seed: int

    def __len__(self) -> int:
        return len(self.pages)

    def __iter__(self):
        return iter(self.pages)

    def counts(self) -> dict[str, int]:
        """Number of pages of each kind, in the order of ``KINDS``."""
        c = Counter(p.kind for p in self.pages)
        return {k: c[k] for k in KINDS if c[k]}

    def truth_dups(self) -> set[int]:
        """Ids of the pages a perfect deduplicator removes (every copy but the first)."""
        return {p.page_id for p in self.pages if p.is_dup}

    def total_bytes(self) -> int:
        return sum(len(p.raw) for p in self.pages)


def source_documents(min_chars: int = 1200) -> list[str]:
    """The pydoc topics cut into documents: consecutive paragraphs of one topic grouped until a
    document has at least ``min_chars`` characters (a paragraph is never split; a short tail is
    merged into the previous document). Deterministic: topics in sorted-key order."""
    from pydoc_data.topics import topics
    min_chars = positive_int("min_chars", min_chars)
    docs: list[str] = []
    for key in sorted(topics):
        topic_docs: list[str] = []
        current: list[str] = []
        for para in (p.strip("\n") for p in topics[key].strip().split("\n\n") if p.strip()):
            current.append(para)
            if sum(len(p) + 2 for p in current) >= min_chars:
                topic_docs.append("\n\n".join(current))
                current = []
        if current:
            tail = "\n\n".join(current)
            if topic_docs and len(tail) < min_chars // 2:
                topic_docs[-1] += "\n\n" + tail
            else:
                topic_docs.append(tail)
        docs.extend(topic_docs)
    return docs


def source_clusters(docs: list[str], k: int = 5, threshold: float = 0.5) -> list[int]:
    """Cluster id of each document: documents whose *exact* Jaccard similarity of word
    ``k``-shingles is ≥ ``threshold`` are joined (transitively); the id is the smallest index of
    the cluster. All pairs are compared through an inverted index from shingle to documents, the
    exact computation that MinHash + LSH approximates at scale."""
    from .dedup import DisjointSet, shingles
    sets = [shingles(d, k) for d in docs]
    postings: dict[str, list[int]] = {}
    for i, s in enumerate(sets):
        for sh in s:
            postings.setdefault(sh, []).append(i)
    shared: Counter = Counter()
    for ids in postings.values():
        for a in range(len(ids)):
            for b in range(a + 1, len(ids)):
                shared[ids[a], ids[b]] += 1
    groups = DisjointSet()
    for i in range(len(docs)):
        groups.add(i)
    for (a, b), n in sorted(shared.items()):
        if n / (len(sets[a]) + len(sets[b]) - n) >= threshold:
            groups.union(a, b)
    return [groups.find(i) for i in range(len(docs))]


# ------------------------------------------------------------------------------ the crawl
def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{3,}", text)


def build_crawl(seed: int = 0, *, n_low_quality: int = 120, n_bad: int = 20, n_viral: int = 3,
                heldout_every: int = 10) -> Crawl:
    """Build the labelled crawl (about 690 pages, 0.97 MB with the defaults).

    Source documents are grouped by ``source_clusters``; every ``heldout_every``-th cluster is
    held out (one document each: validation text never shares a cluster with the crawl) and every
    other document appears once as an ``original``. Then 15% of them get 1-3 exact or re-formatted
    copies, 25% a near-duplicate (edited, or wrapped in another site's boilerplate), 3 are
    re-published for 6 Python versions, ``n_viral`` are copied 15-30 times each (like a licence
    text or a viral post), and ``n_low_quality`` low-quality and ``n_bad`` empty or undecodable
    pages are mixed in. 10% of originals are served as cp1252, 4% as UTF-16; pages are shuffled.
    """
    for name, value, lo in (("seed", seed, 0), ("n_low_quality", n_low_quality, 0),
                            ("n_bad", n_bad, 0), ("n_viral", n_viral, 0), ("heldout_every", heldout_every, 2)):
        positive_int(name, value, minimum=lo)
    rng = random.Random(seed)
    docs = source_documents()
    clusters = source_clusters(docs)
    reps = sorted(set(clusters))
    held = {c for i, c in enumerate(reps) if i % heldout_every == heldout_every - 1}
    heldout = tuple(docs[c] for c in reps if c in held)
    keep = [i for i in range(len(docs)) if clusters[i] not in held]
    sources, source_cluster = [docs[i] for i in keep], [clusters[i] for i in keep]
    vocab = sorted(set(_words(" ".join(sources))))
    made: list[tuple[str, str, str, int, str]] = []  # (text, charset, kind, cluster, site)

    def add(text: str, kind: str, cluster: int, charset: str = "utf-8", site: str | None = None) -> None:
        made.append((text, charset, kind, cluster, site or rng.choice(_SITES)))

    for c, doc in enumerate(sources):
        u = rng.random()
        add(doc, "original", source_cluster[c], "cp1252" if u < 0.10 else "utf-16" if u < 0.14 else "utf-8")
    order = list(range(len(sources)))
    rng.shuffle(order)
    n_exact, n_near = int(0.15 * len(sources)), int(0.25 * len(sources))
    for c in order[:n_exact]:
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5:
                add(sources[c], "exact_dup", source_cluster[c], made[c][1], made[c][4])
            else:
                text, charset = _reformat(sources[c], rng.randrange(4))
                add(text, "format_dup", source_cluster[c], charset)
    for c in order[n_exact:n_exact + n_near]:
        if rng.random() < 0.5:
            add(edit_words(sources[c], rng.uniform(0.01, 0.06), vocab, rng), "near_edit", source_cluster[c])
        else:
            add(_wrap(sources[c], rng.choice(_SITES)), "near_wrap", source_cluster[c])
    for c in order[n_exact + n_near:n_exact + n_near + 3]:
        for version in range(8, 14):
            add(_templated(sources[c], version), "templated", source_cluster[c])
    for c in order[n_exact + n_near + 3:n_exact + n_near + 3 + n_viral]:
        for _ in range(rng.randint(15, 30)):
            kind = rng.choice(["exact_dup", "format_dup", "near_wrap"])
            text = _wrap(sources[c], rng.choice(_SITES)) if kind == "near_wrap" else sources[c]
            add(text, kind, source_cluster[c], made[c][1] if kind == "exact_dup" else "utf-8")
    next_cluster = len(docs)
    templates: dict[str, int] = {}  # short pages from one message template are near-duplicates
    for i in range(n_low_quality):
        kind = LOW_KINDS[i % len(LOW_KINDS)]
        text = _low_quality(kind, rng, vocab, sources)
        key = text.rsplit(" Error reference", 1)[0] if kind == "short" else f"unique {i}"
        if key not in templates:
            templates[key], next_cluster = next_cluster, next_cluster + 1
        add(text, kind, templates[key])
    raw_pages: list[tuple[bytes, str, str, int, str]] = []
    for text, charset, kind, cluster, site in made:
        raw_pages.append((text.encode(charset), charset, kind, cluster, site))
    for i in range(n_bad):
        if i % 2:
            raw_pages.append((_broken(rng.choice(sources), rng), "utf-8", "broken_bytes", next_cluster, _SITES[0]))
        else:
            raw_pages.append((rng.choice([b"", b"   ", b"\n\n\t \n"]), "utf-8", "empty", next_cluster, _SITES[0]))
        next_cluster += 1
    rng.shuffle(raw_pages)
    first: dict[int, int] = {}
    pages = []
    for pid, (raw, charset, kind, cluster, site) in enumerate(raw_pages):
        dup_of = first.get(cluster)
        first.setdefault(cluster, pid)
        pages.append(Page(pid, f"https://{site}/page/{pid}", raw, charset, kind, cluster, dup_of))
    return Crawl(tuple(pages), heldout, seed)


def edited_pairs(n: int, max_rate: float = 0.3, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs (source document, an ``edit_words`` copy at a rate uniform in [0, max_rate]):
    pairs spanning the whole range of Jaccard similarities, to measure the LSH S-curve."""
    n = positive_int("n", n)
    rng = random.Random(seed)
    docs = source_documents()
    vocab = sorted(set(_words(" ".join(docs))))
    return [(d, edit_words(d, rng.uniform(0.0, max_rate), vocab, rng)) for d in (docs * n)[:n]]


def huge_page(n_bytes: int = 50_000_000, page_id: int = 0) -> Page:
    """One pathological page of ``n_bytes`` bytes of valid text (a runaway log or a data dump),
    generated in memory for the bad-input tests: a pipeline must reject or stream it, never
    choke on it."""
    n_bytes = positive_int("n_bytes", n_bytes)
    unit = b"the quick brown fox jumps over the lazy dog and that is all with it\n"
    raw = (unit * (n_bytes // len(unit) + 1))[:n_bytes]
    return Page(page_id, "https://logs.example/huge", raw, "utf-8", "huge", -1, None)
