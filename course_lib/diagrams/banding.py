"""Chapter 3's mechanism: MinHash signatures cut into LSH bands, and the S-curve that banding makes
— two real pairs of the chapter's edited documents, banded as the pipeline bands them."""
from __future__ import annotations

import inspect

import numpy as np

from .. import plots
from .._validate import fraction, positive_int
from ..data import crawl, dedup, parallel

__all__ = ["pipeline_banding", "banded_pairs", "lsh_banding"]


def pipeline_banding() -> tuple[int, int, int, int]:
    """(bands, rows, num_perm, k) that chapter 3's pipeline uses: the defaults of
    ``data.parallel.run_pipeline``, read from its signature so the picture follows the code."""
    p = inspect.signature(parallel.run_pipeline).parameters
    return p["bands"].default, p["rows"].default, p["num_perm"].default, p["k"].default


def banded_pairs(targets: tuple[float, ...] = (0.9, 0.6), n_pairs: int = 24, seed: int = 0,
                 bands: int | None = None, rows: int | None = None) -> list[dict]:
    """For each similarity in ``targets``, the pair of ``crawl.edited_pairs(n_pairs, 0.3, seed)``
    whose exact Jaccard is nearest, with: ``jaccard`` (of its word k-shingles), ``agree`` (a bands ×
    rows array: where the two MinHash signatures agree, first bands·rows minhashes), ``hits`` (the
    bands whose rows all agree), ``candidate`` (``dedup.band_collision``), ``estimate``
    (``dedup.signature_jaccard`` over the whole signature) and ``p_candidate`` (``dedup.s_curve``
    at its Jaccard). Bands and rows default to the pipeline's (``pipeline_banding``)."""
    b0, r0, num_perm, k = pipeline_banding()
    b = b0 if bands is None else positive_int("bands", bands)
    r = r0 if rows is None else positive_int("rows", rows)
    if b * r > num_perm:
        raise ValueError(f"bands*rows={b * r} exceeds the pipeline's {num_perm} minhashes")
    targets = tuple(fraction(f"targets[{i}]", t) for i, t in enumerate(targets))
    pairs = crawl.edited_pairs(positive_int("n_pairs", n_pairs), max_rate=0.3, seed=positive_int("seed", seed, minimum=0))
    js = [dedup.jaccard(dedup.shingles(a, k), dedup.shingles(c, k)) for a, c in pairs]
    out = []
    for t in targets:
        i = int(np.argmin([abs(j - t) for j in js]))
        sa, sc = dedup.signature(pairs[i][0], k, num_perm), dedup.signature(pairs[i][1], k, num_perm)
        agree = (sa[:b * r] == sc[:b * r]).reshape(b, r)
        out.append({"index": i, "jaccard": js[i], "agree": agree, "hits": [int(x) for x in np.flatnonzero(agree.all(1))],
                    "candidate": dedup.band_collision(sa, sc, b, r), "estimate": dedup.signature_jaccard(sa, sc),
                    "p_candidate": dedup.s_curve(js[i], b, r), "bands": b, "rows": r})
    return out


def lsh_banding(targets: tuple[float, ...] = (0.9, 0.6), seed: int = 0, pairs: list[dict] | None = None):
    """Two edited pairs' signatures banded as the pipeline bands them (one row per band, a filled
    cell where the two minhashes agree, a band whose rows all agree outlined: it makes the pair a
    candidate), beside the S-curve 1 − (1 − J^r)^b of the same b and r with its threshold
    (1/b)^(1/r) and the two pairs on it (``banded_pairs(targets, seed=seed)``, or ``pairs`` if
    the caller has them already)."""
    import matplotlib.patches as mpatches
    pairs = banded_pairs(targets, seed=seed) if pairs is None else pairs
    b, r = pairs[0]["bands"], pairs[0]["rows"]
    fig, axes = plots.figure(ncols=len(pairs) + 1, figsize=(6.4, 3.6), width_ratios=[1] * len(pairs) + [1.5])
    names = "ABCDEFGH"
    for ax, pair, name in zip(axes, pairs, names):
        for band in range(b):
            y = b - 1 - band
            for row in range(r):
                ax.add_patch(mpatches.Rectangle((row + 0.1, y + 0.1), 0.8, 0.8, linewidth=0,
                                                facecolor=plots.THEORY if pair["agree"][band, row] else "#e6e6e6"))
            if band in pair["hits"]:
                ax.add_patch(mpatches.Rectangle((0.02, y + 0.02), r - 0.04, 0.96, facecolor="none",
                                                edgecolor=plots.MEASURED, linewidth=2))
        ax.set(xlim=(0, r), ylim=(0, b), aspect="equal", xticks=[])
        ax.set_yticks([b - 0.5 - i for i in range(b)], [str(i + 1) if i % 2 == 0 else "" for i in range(b)], fontsize=8)
        ax.tick_params(length=0)
        ax.grid(False)
        ax.spines[["bottom", "left"]].set_visible(False)
        verdict = "candidate" if pair["candidate"] else "not a candidate"
        ax.set_title(f"pair {name}: J = {pair['jaccard']:.2f}\n{verdict}", fontsize=9)
        ax.set_xlabel(f"{r} rows per band", fontsize=8)
    axes[0].set_ylabel(f"band (of {b})", fontsize=8)
    curve = axes[-1]
    grid = np.linspace(0, 1, 201)
    curve.plot(grid, dedup.s_curve(grid, b, r), color=plots.THEORY, lw=1.6)
    thr = dedup.lsh_threshold(b, r)
    curve.axvline(thr, color="grey", ls=":", lw=1)
    curve.text(thr - 0.02, 0.9, f"$J^* ≈ (1/b)^{{1/r}}$\n= {thr:.2f}", ha="right", va="top", fontsize=8)
    for pair, name, marker in zip(pairs, names, "os^D"):
        curve.plot([pair["jaccard"]], [pair["p_candidate"]], marker, color=plots.MEASURED, ms=7)
        curve.annotate(name, (pair["jaccard"], pair["p_candidate"]), xytext=(6, -10), textcoords="offset points",
                       fontsize=9, color=plots.MEASURED)
    curve.set(xlim=(0, 1), ylim=(0, 1.02))
    curve.set_xlabel("Jaccard similarity J", fontsize=8)
    curve.set_ylabel("P(candidate)", fontsize=8)
    curve.tick_params(labelsize=8)
    curve.set_title(f"b = {b} bands × r = {r} rows:\n$P = 1 - (1 - J^r)^b$", fontsize=9)
    fig.legend(handles=[mpatches.Patch(facecolor=plots.THEORY, label="minhashes agree"),
                        mpatches.Patch(facecolor="#e6e6e6", label="differ"),
                        mpatches.Patch(facecolor="none", edgecolor=plots.MEASURED, linewidth=2,
                                       label="whole band agrees: candidate")],
               loc="outside lower center", ncols=3, fontsize=8)
    return fig
