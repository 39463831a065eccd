"""A layout's ranks over nodes (chapters 11 and 13) and the expert-parallel all-to-all (chapter 14)."""
from __future__ import annotations

import torch

from .. import comm, moe, plots
from .._validate import positive_int

__all__ = ["DIMS", "mesh_coords", "mesh_groups", "layout_mesh", "ep_send_counts", "ep_all_to_all"]

DIMS = ("TP", "CP", "PP", "DP")     # course_lib.layout's order: TP fastest, then CP, PP, DP


def mesh_coords(tp: int, cp: int, pp: int, dp: int) -> list[tuple[int, int, int, int]]:
    """Each rank's (TP, CP, PP, DP) coordinates, numbered as ``course_lib.layout`` numbers them:
    TP fastest, then CP, PP, DP (Llama 3's order, arXiv 2407.21783 §3.3.2)."""
    sizes = tuple(positive_int(n, x) for n, x in zip(("tp", "cp", "pp", "dp"), (tp, cp, pp, dp)))
    out = []
    for rank in range(tp * cp * pp * dp):
        c, rest = [], rank
        for size in sizes:
            c.append(rest % size)
            rest //= size
        out.append(tuple(c))
    return out


def mesh_groups(tp: int, cp: int, pp: int, dp: int) -> dict[str, list[list[int]]]:
    """For each of TP, CP, PP, DP, its process groups: ranks that differ only in that coordinate."""
    coords = mesh_coords(tp, cp, pp, dp)
    groups: dict[str, list[list[int]]] = {}
    for d, name in enumerate(DIMS):
        by_rest: dict[tuple, list[int]] = {}
        for rank, c in enumerate(coords):
            by_rest.setdefault(c[:d] + c[d + 1:], []).append(rank)
        groups[name] = sorted(by_rest.values())
    return groups


def _ink(colour: str) -> str:
    """Black or white text, whichever reads better on ``colour`` (a "#rrggbb")."""
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def layout_mesh(tp: int = 2, cp: int = 2, pp: int = 4, dp: int = 2, gpus_per_node: int = 8):
    """Four panels of the same cluster, one per dimension: each row a node of ``gpus_per_node``
    GPUs, each cell a rank (its number written in it), coloured by its coordinate along that
    dimension; rank 0's group is outlined. The title says how many of the group share rank 0's
    node: TP's never leave it, DP's spread over the nodes."""
    import matplotlib.patches as mpatches
    g = positive_int("gpus_per_node", gpus_per_node)
    coords = mesh_coords(tp, cp, pp, dp)
    groups = mesh_groups(tp, cp, pp, dp)
    n = len(coords)
    if n % g:
        raise ValueError(f"gpus_per_node ({gpus_per_node!r}) must divide the {n} ranks: whole nodes")
    nodes = n // g
    fig, axes = plots.figure(ncols=2, nrows=2, figsize=(6.4, 1.3 + 0.8 * nodes))
    for d, (ax, name) in enumerate(zip(axes.flat, DIMS)):
        mine = next(grp for grp in groups[name] if 0 in grp)
        for rank, c in enumerate(coords):
            x, y = rank % g, nodes - 1 - rank // g
            fill = plots.PALETTE[c[d] % len(plots.PALETTE)]
            ax.add_patch(mpatches.Rectangle((x + 0.05, y + 0.05), 0.9, 0.9, facecolor=fill,
                                            edgecolor="black" if rank in mine else "white",
                                            linewidth=2.0 if rank in mine else 0.5))
            ax.text(x + 0.5, y + 0.5, str(rank), ha="center", va="center", fontsize=8, color=_ink(fill))
        in_node = sum(1 for r in mine if r // g == 0)
        size = (tp, cp, pp, dp)[d]
        ax.set_title(f"{name} {size}: rank 0's group {{{', '.join(map(str, mine))}}}\n"
                     f"{in_node} of {size} in its node", fontsize=8)
        ax.set(xlim=(0, g), ylim=(0, nodes), aspect="equal", xticks=[])
        ax.set_yticks([nodes - 0.5 - i for i in range(nodes)], [f"node {i}" for i in range(nodes)], fontsize=8)
        ax.tick_params(length=0)
        ax.grid(False)
        ax.spines[["bottom", "left"]].set_visible(False)
    fig.suptitle(f"TP {tp} · CP {cp} · PP {pp} · DP {dp} on {nodes} nodes of {g} GPUs; colour = coordinate, "
                 "outline = rank 0's group", fontsize=8)
    return fig


def ep_send_counts(ep: int = 4, tokens: int = 64, n_experts: int = 8, top_k: int = 2,
                   seed: int = 0) -> list[list[int]]:
    """``counts[i][j]``: (token, expert) pairs rank i sends to rank j in one dispatch all-to-all,
    each of ``ep`` ranks routing its own ``tokens`` tokens with chapter 8's ``moe.token_choice``
    (top-``top_k``, dropless) on seeded random router logits; experts are spread evenly, rank j
    holding experts [j·E/ep, (j+1)·E/ep), as ``expert.ep.ExpertParallelMoE`` places them."""
    e, t, n, k = (positive_int(a, x) for a, x in (("ep", ep), ("tokens", tokens), ("n_experts", n_experts), ("top_k", top_k)))
    if n % e:
        raise ValueError(f"ep ({ep}) must divide n_experts ({n_experts})")
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(e, t, n, generator=gen)          # one routing group (sequence) per rank
    kept = moe.token_choice(logits, top_k=k).kept          # (ep, tokens, experts)
    per_expert = kept.sum(1)                               # (ep, experts)
    return per_expert.reshape(e, e, n // e).sum(-1).tolist()


def ep_all_to_all(ep: int = 4, tokens: int = 64, n_experts: int = 8, top_k: int = 2, seed: int = 0):
    """The dispatch all-to-all of one MoE layer: left, each rank's (token, expert) pairs drawn as
    bands to the rank holding the expert (width ∝ count, the band to itself stays local); right,
    the pairs each rank sends off-rank beside the balanced expectation k·T·(ep−1)/ep that
    ``comm.ep_bytes_per_layer`` counts (in pairs: its bytes over 4·d·bytes per value). The combine
    all-to-all sends the same pairs back."""
    import matplotlib.patches as mpatches
    from matplotlib.path import Path
    counts = ep_send_counts(ep, tokens, n_experts, top_k, seed)
    fig, (ax, axb) = plots.figure(ncols=2, figsize=(6.4, 3.2), width_ratios=[1.5, 1])
    total = tokens * top_k
    colours = [plots.PALETTE[i % len(plots.PALETTE)] for i in range(ep)]
    y_out = [0.0] * ep
    y_in = [0.0] * ep
    for i in range(ep):
        for j in range(ep):
            w = counts[i][j] / total * 0.8
            a0 = ep - 1 - i + 0.4 - y_out[i]
            y_out[i] += w
            share = counts[i][j] / max(1, sum(counts[x][j] for x in range(ep))) * 0.8
            b0 = ep - 1 - j + 0.4 - y_in[j]
            y_in[j] += share
            verts = [(0.1, a0), (0.5, a0), (0.5, b0), (0.9, b0), (0.9, b0 - share), (0.5, b0 - share),
                     (0.5, a0 - w), (0.1, a0 - w), (0.1, a0)]
            codes = [Path.MOVETO, Path.CURVE4, Path.CURVE4, Path.CURVE4, Path.LINETO, Path.CURVE4, Path.CURVE4,
                     Path.CURVE4, Path.CLOSEPOLY]
            ax.add_patch(mpatches.PathPatch(Path(verts, codes), facecolor=colours[i], alpha=0.35 if i == j else 0.75,
                                            edgecolor="white", linewidth=0.4))
    for r in range(ep):
        ax.text(0.08, ep - 1 - r, f"rank {r}", ha="right", va="center", fontsize=8)
        ax.text(0.92, ep - 1 - r, f"rank {r}:\nexperts {r * n_experts // ep}–{(r + 1) * n_experts // ep - 1}",
                ha="left", va="center", fontsize=8)
    ax.set(xlim=(-0.3, 1.3), ylim=(-0.6, ep - 0.4), xticks=[], yticks=[])
    ax.grid(False)
    ax.spines[["bottom", "left"]].set_visible(False)
    ax.set_title(f"dispatch: {tokens} tokens a rank, top-{top_k}", fontsize=9)
    sent = [sum(row) - row[i] for i, row in enumerate(counts)]
    expected = comm.ep_bytes_per_layer(tokens, 1, top_k, ep, bytes_per_value=1) / 4
    axb.barh([f"rank {r}" for r in range(ep)][::-1], sent[::-1], color=colours[::-1])
    for y, x in enumerate(sent[::-1]):
        axb.text(x, y, f" {x}", va="center", fontsize=8)
    axb.axvline(expected, color="black", ls="--", lw=1)
    axb.text(expected, ep - 0.45, f" balanced: {expected:g}", fontsize=8, va="bottom")
    axb.set_xlabel("pairs sent to other ranks", fontsize=8)
    axb.tick_params(labelsize=8)
    axb.set_ylim(-0.6, ep - 0.1)
    axb.set_title("pairs leaving each rank", fontsize=9)
    return fig
