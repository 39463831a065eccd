"""Stages 1 and 2: decode and normalise pages, remove exact duplicates by content hash, remove
near-duplicates with MinHash + LSH, and score both against the crawl's ground truth.

Decoding never guesses silently: a page is decoded with the charset it declares, strictly; an
empty page, a page over ``max_bytes`` and a page whose bytes are not valid in its charset raise
``PageError`` whose ``reason`` the pipeline counts.

MinHash (Broder 1997): for a random hash function h, P[min h(A) = min h(B)] = |A∩B|/|A∪B|, the
Jaccard similarity J of the two shingle sets. A signature of ``num_perm`` such minima estimates J
with standard error √(J(1−J)/num_perm). LSH cuts the signature into ``bands`` bands of ``rows``
rows; two documents become candidates if all rows of at least one band agree, which happens with
probability ``s_curve(J) = 1 − (1 − J^rows)^bands`` — an S-shaped curve whose steep part sits
near ``(1/bands)^(1/rows)``. The signatures come from ``datasketch`` (``MinHash``) and the index
is ``datasketch.MinHashLSH``; the union-find on top keeps the first page of each cluster.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .._validate import fraction, positive_int

__all__ = ["PageError", "REJECT_REASONS", "decode_page", "normalize", "dedup_key", "content_hash",
           "exact_dedup", "shingles", "jaccard", "signature", "signature_jaccard", "s_curve",
           "lsh_threshold", "choose_bands", "band_collision", "DisjointSet", "near_dedup", "Score", "score",
           "pair_stats", "sweep"]

REJECT_REASONS = ("empty", "too_large", "invalid_encoding")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TRAILING = re.compile(r"[ \t]+\n")
_BLANKS = re.compile(r"\n{3,}")
_WORD = re.compile(r"\w+")


class PageError(ValueError):
    """A page that cannot enter the pipeline; ``reason`` is one of ``REJECT_REASONS``."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


def decode_page(raw: bytes, charset: str = "utf-8", max_bytes: int = 1 << 20) -> str:
    """Decode ``raw`` strictly with its declared ``charset`` and normalise it (see ``normalize``).

    Raises ``PageError`` with reason ``"too_large"`` (checked first, before touching the bytes, so
    a 50 MB page costs nothing), ``"invalid_encoding"`` (bytes not valid in ``charset``, or an
    unknown charset), or ``"empty"`` (nothing but whitespace after normalising).
    """
    max_bytes = positive_int("max_bytes", max_bytes)
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise ValueError(f"raw must be bytes, got {type(raw).__name__}")
    if len(raw) > max_bytes:
        raise PageError("too_large", f"page has {len(raw):,} bytes > max_bytes={max_bytes:,}")
    try:
        text = bytes(raw).decode(charset, errors="strict")
    except (UnicodeDecodeError, LookupError) as e:
        raise PageError("invalid_encoding", f"not valid {charset}: {e}") from None
    text = normalize(text)
    if not text:
        raise PageError("empty", "page is empty after normalisation")
    return text


def normalize(text: str) -> str:
    """The text we train on: Unicode NFC, ``\\n`` line ends, no-break spaces as spaces, no control
    characters, no trailing spaces, at most one blank line in a row, no leading/trailing space."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text.replace("\u00a0", " ").replace("\t", "    "))
    text = _TRAILING.sub("\n", text + "\n")
    return _BLANKS.sub("\n\n", text).strip()


def dedup_key(text: str) -> str:
    """What exact dedup compares: NFKC, case-folded, all whitespace runs collapsed to one space.
    Two pages with the same key differ only in formatting, never in words."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def content_hash(text: str) -> str:
    """128-bit BLAKE2b digest of ``dedup_key(text)`` (hex). At 10^12 documents the chance of any
    collision is ~10^-15: a hash equality is a content equality."""
    return hashlib.blake2b(dedup_key(text).encode("utf-8"), digest_size=16).hexdigest()


def exact_dedup(items: Iterable[tuple[int, str]]) -> Iterator[tuple[int, int | None]]:
    """Stream ``(page_id, content_hash)`` pairs; yield ``(page_id, dup_of)`` where ``dup_of`` is
    the first page with the same hash, or None. Memory: one entry per distinct hash."""
    first: dict[str, int] = {}
    for pid, h in items:
        seen = first.setdefault(h, pid)
        yield pid, (seen if seen != pid else None)


# ------------------------------------------------------------------------------ MinHash + LSH
def shingles(text: str, k: int = 5) -> set[str]:
    """The set of word ``k``-grams of ``text`` (words = runs of letters/digits, case-folded). A
    text with fewer than ``k`` words is one shingle; an empty text, the empty set."""
    k = positive_int("k", k)
    words = _WORD.findall(text.casefold())
    if len(words) <= k:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: set, b: set) -> float:
    """|A∩B| / |A∪B| (0.0 when both sets are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def signature(text: str, k: int = 5, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    """MinHash signature (``num_perm`` uint32 minima, datasketch's default affine32 scheme) of the
    word ``k``-shingles of ``text``. Same text, k, num_perm and seed → same signature anywhere."""
    from datasketch import MinHash
    num_perm = positive_int("num_perm", num_perm)
    m = MinHash(num_perm=num_perm, seed=seed)
    m.update_batch([s.encode("utf-8") for s in sorted(shingles(text, k))])
    return m.hashvalues.copy()


def signature_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The MinHash estimate of Jaccard: the fraction of positions where two signatures agree."""
    if a.shape != b.shape:
        raise ValueError(f"signatures must have the same length, got {a.shape} and {b.shape}")
    return float(np.mean(a == b))


def s_curve(s, bands: int, rows: int):
    """Probability that two documents of Jaccard ``s`` share at least one LSH band:
    1 − (1 − s^rows)^bands. Works on floats and numpy arrays."""
    bands, rows = positive_int("bands", bands), positive_int("rows", rows)
    s = np.asarray(s, dtype=float)
    if np.any((s < 0) | (s > 1)) or np.any(np.isnan(s)):
        raise ValueError(f"s must be a Jaccard similarity in [0, 1], got {s!r}")
    out = 1.0 - (1.0 - s ** rows) ** bands
    return float(out) if out.ndim == 0 else out


def lsh_threshold(bands: int, rows: int) -> float:
    """Where the S-curve is steepest, approximately: (1/bands)^(1/rows)."""
    return (1.0 / positive_int("bands", bands)) ** (1.0 / positive_int("rows", rows))


def choose_bands(num_perm: int, threshold: float, fp_weight: float = 0.5,
                 fn_weight: float = 0.5) -> tuple[int, int]:
    """The (bands, rows) with bands·rows ≤ ``num_perm`` that minimise
    fp_weight·∫₀^t P(s) ds + fn_weight·∫_t^1 (1 − P(s)) ds, the weighted area of false positives
    below the threshold t and false negatives above it (the criterion datasketch uses)."""
    num_perm = positive_int("num_perm", num_perm)
    t = fraction("threshold", threshold, allow_one=False)
    lo, hi = np.linspace(0.0, t, 401), np.linspace(t, 1.0, 401)
    best, best_cost = (1, 1), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            cost = (fp_weight * np.trapezoid(s_curve(lo, b, r), lo)
                    + fn_weight * np.trapezoid(1.0 - s_curve(hi, b, r), hi))
            if cost < best_cost - 1e-12:
                best, best_cost = (b, r), cost
    return best


def band_collision(a: np.ndarray, b: np.ndarray, bands: int, rows: int) -> bool:
    """Whether two signatures agree on every row of at least one band (an LSH candidate pair)."""
    n = positive_int("bands", bands) * positive_int("rows", rows)
    if n > min(len(a), len(b)):
        raise ValueError(f"bands*rows={n} exceeds the signature length {min(len(a), len(b))}")
    return bool(np.any(np.all((a[:n] == b[:n]).reshape(bands, rows), axis=1)))


class DisjointSet:
    """Union-find whose representative is always the smallest id of a set (the first page)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def add(self, x: int) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def near_dedup(signatures: Sequence[tuple[int, np.ndarray]], bands: int, rows: int,
               verify: float | None = None, seed: int = 1) -> dict[int, int | None]:
    """Near-dedup ``(page_id, signature)`` pairs in order with ``datasketch.MinHashLSH``.

    Every candidate pair (sharing a band) is merged with union-find, unless ``verify`` is given, in
    which case only pairs whose *estimated* Jaccard is ≥ ``verify`` are (fewer false positives).
    Returns ``{page_id: dup_of}`` with ``dup_of`` the smallest page id of its cluster (None for it).
    """
    from datasketch import MinHash, MinHashLSH
    bands, rows = positive_int("bands", bands), positive_int("rows", rows)
    if verify is not None:
        verify = fraction("verify", verify)
    if not signatures:
        return {}
    num_perm = len(signatures[0][1])
    lsh = MinHashLSH(num_perm=num_perm, params=(bands, rows))
    groups, sig_of = DisjointSet(), {}
    for pid, sig in signatures:
        m = MinHash(num_perm=num_perm, seed=seed, hashvalues=sig, scheme="affine32")
        groups.add(pid)
        sig_of[pid] = sig
        for other in lsh.query(m):
            if verify is None or signature_jaccard(sig, sig_of[other]) >= verify:
                groups.union(pid, other)
        lsh.insert(pid, m)
    out: dict[int, int | None] = {}
    for pid, _ in signatures:
        root = groups.find(pid)
        out[pid] = root if root != pid else None
    return out


@dataclass(frozen=True)
class Score:
    """Detection quality of a set of removed ids against the true set."""

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def score(predicted: Iterable[int], truth: Iterable[int]) -> Score:
    """Compare the ids a stage removed with the ids it should have removed."""
    pred, true = set(predicted), set(truth)
    return Score(tp=len(pred & true), fp=len(pred - true), fn=len(true - pred))


def pair_stats(pairs: Sequence[tuple[str, str]], bands: int, rows: int, k: int = 5,
               num_perm: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each text pair: the exact Jaccard of the k-shingles, the MinHash estimate from the whole
    ``num_perm``-long signatures, and the fraction of LSH trials in which the pair is a candidate.
    The signature is cut into ``num_perm // (bands·rows)`` disjoint blocks, each an independent
    (bands, rows) LSH trial; pair i uses hash seed i. Measures the S-curve with many trials cheaply."""
    n = positive_int("bands", bands) * positive_int("rows", rows)
    trials = positive_int("num_perm", num_perm) // n
    if trials < 1:
        raise ValueError(f"num_perm={num_perm} is smaller than bands*rows={n}")
    out = np.empty((len(pairs), 3))
    for i, (a, b) in enumerate(pairs):
        sa, sb = signature(a, k, num_perm, seed=i), signature(b, k, num_perm, seed=i)
        hits = [band_collision(sa[t * n:(t + 1) * n], sb[t * n:(t + 1) * n], bands, rows) for t in range(trials)]
        out[i] = (jaccard(shingles(a, k), shingles(b, k)), signature_jaccard(sa, sb), np.mean(hits))
    return out[:, 0], out[:, 1], out[:, 2]


def sweep(texts: dict[int, str], truth: Iterable[int], settings: Sequence[tuple[int, int, int]],
          already_removed: Iterable[int] = (), known: dict[int, dict[int, np.ndarray]] | None = None) -> list[dict]:
    """Precision and recall of near-dedup for each ``(k, bands, rows)`` in ``settings`` on the
    pages ``texts`` (in id order), counting ``already_removed`` (e.g. exact duplicates) as removed
    too. Signatures are computed once per k with as many minhashes as the largest bands·rows,
    unless ``known[k]`` already maps every page id to a long enough signature."""
    truth, base = set(truth), set(already_removed)
    n = max(b * r for _, b, r in settings)
    ids = sorted(texts)
    sigs = {}
    for k in sorted({k for k, _, _ in settings}):
        have = (known or {}).get(k, {})
        sigs[k] = [(pid, have[pid] if pid in have and len(have[pid]) >= n else signature(texts[pid], k, n))
                   for pid in ids]
    rows_out = []
    for k, b, r in settings:
        near = near_dedup([(pid, s[:b * r]) for pid, s in sigs[k]], b, r)
        sc = score(base | {pid for pid, d in near.items() if d is not None}, truth)
        rows_out.append({"k": k, "bands": b, "rows": r, "threshold": lsh_threshold(b, r),
                         "precision": sc.precision, "recall": sc.recall, "fp": sc.fp, "fn": sc.fn})
    return rows_out
