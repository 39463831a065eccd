"""Chapter 11's mechanisms: Megatron's column→row split with f and g, sequence parallelism's
regions, and the context-parallel ring with its contiguous and zig-zag splits."""
from __future__ import annotations

import math
from fractions import Fraction

from .. import comm, plots
from .._validate import choice, positive_int
from ..tensor_context.context import SCHEMES, chunk_ids

__all__ = ["tp_stages", "tp_split", "cp_work", "cp_ring"]


def _cols(t: int) -> str:
    """4h/t as a reader writes it: 2h, h, h/2, 3h/4 …"""
    q = Fraction(4, t)
    top = "h" if q.numerator == 1 else f"{q.numerator}h"
    return top if q.denominator == 1 else f"{top}/{q.denominator}"


def _rows(t: int) -> str:
    return "s" if t == 1 else f"s/{t}"


def tp_stages(t: int, sequence_parallel: bool) -> list[tuple[str, str, str]]:
    """The MLP block of one rank of ``t`` as (step, shape of what the rank holds, region): region
    "seq" where the rank holds s/t of the tokens (sequence parallelism), "tp" where it holds all
    tokens and 1/t of the hidden units, "full" where it holds everything, "op" for f and g."""
    t = positive_int("t", t)
    edge = ("seq", f"{_rows(t)} × h") if sequence_parallel else ("full", "s × h")
    f_name = "f = all-gather\n(bwd: RS)" if sequence_parallel else "f = identity\n(bwd: AR)"
    g_name = "g = reduce-scatter\n(bwd: AG)" if sequence_parallel else "g = all-reduce\n(bwd: identity)"
    return [("LayerNorm", edge[1], edge[0]), (f_name, "", "op"),
            ("X·A_r\n(A by columns)", f"A_{{r}}: h × {_cols(t)}", "tp"), ("GeLU", f"s × {_cols(t)}", "tp"),
            ("·B_r\n(B by rows)", f"B_{{r}}: {_cols(t)} × h", "tp"), (g_name, "", "op"),
            ("dropout", edge[1], edge[0])]


def tp_split(t: int = 2):
    """Megatron's MLP on ``t`` ranks, without and with sequence parallelism: one row per rank, one
    column per step, each cell the shape that rank holds; f and g are the only communication, and
    each title gives the values a rank sends per layer (``comm.tp_bytes_per_layer``, attention
    and MLP, forward and backward, in units of s·b·h)."""
    import matplotlib.patches as mpatches
    t = positive_int("t", t)
    fills = {"full": "#eeeeee", "seq": "#cfe3f3", "tp": "#fbe3c0", "op": plots.MEASURED}
    fig, axes = plots.figure(nrows=2, figsize=(6.4, 4.4))
    per_layer = comm.tp_bytes_per_layer(1, 1, 1, t, bytes_per_value=1)
    for ax, sp in zip(axes, (False, True)):
        stages = tp_stages(t, sp)
        for c, (name, shape, region) in enumerate(stages):
            if region == "op":
                ax.add_patch(mpatches.FancyBboxPatch((c + 0.32, -0.45), 0.36, t - 0.1, boxstyle="round,pad=0.02",
                                                     facecolor=fills["op"], edgecolor="none"))
                ax.text(c + 0.5, t - 0.35, name, ha="center", va="bottom", fontsize=8)
                continue
            for r in range(t):
                y = t - 1 - r
                ax.add_patch(mpatches.Rectangle((c + 0.05, y - 0.4), 0.9, 0.8, facecolor=fills[region],
                                                edgecolor="grey", linewidth=0.5))
                text = shape.replace("{r}", str(r))
                ax.text(c + 0.5, y, text if r else f"{name}\n{text}", ha="center", va="center", fontsize=8)
        ax.set_xlim(0, len(stages))
        ax.set_ylim(-0.6, t + 0.5)
        ax.set_yticks(range(t), [f"rank {t - 1 - i}" for i in range(t)], fontsize=8)
        ax.set_xticks([])
        ax.grid(False)
        ax.spines[["bottom", "left"]].set_visible(False)
        label = "with sequence parallelism" if sp else "tensor parallelism alone"
        ax.set_title(f"{label}, t = {t}: the MLP half of a layer; with attention's half a layer\n"
                     f"sends {per_layer:g}·sbh values per rank, forward and backward", fontsize=9)
    handles = [mpatches.Patch(facecolor=fills[k], edgecolor="grey", label=lab) for k, lab in
               (("full", "every rank: all tokens, all of h"), ("seq", "SP region: s/t of the tokens"),
                ("tp", "TP region: 1/t of the hidden units"), ("op", "communication (f, g)"))]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
    return fig


def cp_work(p: int, scheme: str) -> dict:
    """The causal score blocks each of ``p`` context-parallel ranks computes under ``scheme``.

    The sequence is cut into 2p chunks (a "quarter block" is one chunk's queries against one
    chunk's keys). A rank holds the chunks ``tensor_context.context.chunk_ids`` gives it; it computes
    every block of its own query chunks against key chunks at or before them, at the granularity
    of its split (a contiguous rank's one chunk of s/p is a 2×2 group of quarter blocks, its
    diagonal group computed whole under the mask). Returns ``owner`` (2p query rows → rank),
    ``computed`` (rank → set of (q, k) quarter blocks) and ``work`` (rank → their count)."""
    p = positive_int("p", p)
    choice("scheme", scheme, SCHEMES)
    owner, computed = {}, {}
    for r in range(p):
        ids = chunk_ids(r, p, scheme)
        blocks = set()
        if scheme == "contiguous":          # one chunk of s/p = quarter rows 2i, 2i+1
            (i,) = ids
            rows = (2 * i, 2 * i + 1)
            blocks = {(q, k) for q in rows for k in range(2 * i + 2)}
        else:
            rows = tuple(ids)
            blocks = {(q, k) for q in rows for k in range(q + 1)}
        owner.update({q: r for q in rows})
        computed[r] = blocks
    return {"owner": owner, "computed": computed, "work": {r: len(b) for r, b in computed.items()}}


def cp_ring(p: int = 4):
    """The ring of ``p`` context-parallel ranks passing K/V blocks, beside the causal score matrix
    (2p × 2p quarter blocks) coloured by the rank whose queries own each row, for the contiguous
    and the zig-zag split; hatched blocks are computed and then masked. Each panel's title gives
    the most and fewest blocks a rank computes (``cp_work``)."""
    import matplotlib.patches as mpatches
    p = positive_int("p", p)
    colours = [plots.PALETTE[i % len(plots.PALETTE)] for i in range(p)]
    fig, axes = plots.figure(ncols=3, figsize=(6.4, 2.9), width_ratios=[1, 1.1, 1.1])
    ring = axes[0]
    for r in range(p):
        a = math.pi / 2 - 2 * math.pi * r / p
        b = math.pi / 2 - 2 * math.pi * (r + 1) / p
        ring.add_patch(mpatches.Circle((math.cos(a), math.sin(a)), 0.28, color=colours[r]))
        ring.text(math.cos(a), math.sin(a), str(r), ha="center", va="center", fontsize=9, color="white")
        ring.annotate("", xy=(0.72 * math.cos(b) + 0.2 * math.cos(a), 0.72 * math.sin(b) + 0.2 * math.sin(a)),
                      xytext=(0.72 * math.cos(a) + 0.2 * math.cos(b), 0.72 * math.sin(a) + 0.2 * math.sin(b)),
                      arrowprops={"arrowstyle": "->", "color": "grey", "lw": 1.2})
    ring.text(0, 0, f"K, V\n{p - 1} hops", ha="center", va="center", fontsize=8)
    ring.set(xlim=(-1.4, 1.4), ylim=(-1.4, 1.4), aspect="equal", xticks=[], yticks=[])
    ring.set_title("the ring of ranks", fontsize=9)
    ring.grid(False)
    ring.spines[["bottom", "left"]].set_visible(False)
    n = 2 * p
    for ax, scheme in zip(axes[1:], SCHEMES):
        w = cp_work(p, scheme)
        for r, blocks in w["computed"].items():
            for q, k in blocks:
                masked = k > q
                ax.add_patch(mpatches.Rectangle((k, n - 1 - q), 1, 1, facecolor="white" if masked else colours[r],
                                                edgecolor=colours[r], hatch="///" if masked else None, linewidth=0.5))
        ax.set(xlim=(0, n), ylim=(0, n), aspect="equal", xticks=[])
        ax.set_yticks([n - 0.5 - q for q in range(n)], [str(w["owner"][q]) for q in range(n)], fontsize=8)
        ax.tick_params(length=0)
        ax.set_xlabel("keys →", fontsize=8)
        ax.set_ylabel("query chunks, by rank", fontsize=8)
        ax.grid(False)
        work = w["work"].values()
        spread = f"every rank {max(work)}" if max(work) == min(work) else f"{min(work)} to {max(work)}"
        ax.set_title(f"{scheme.replace('zigzag', 'zig-zag')}: {spread}\nblocks a rank", fontsize=9)
    return fig
