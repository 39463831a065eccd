"""Chapter 8's mechanisms: token-choice top-k routing under a capacity limit (who is dropped), and
why expert choice leaks the future (a later token changes an earlier token's routing) — drawn
from the routers themselves, ``moe.token_choice`` and ``moe.expert_choice``."""
from __future__ import annotations

import torch

from .. import moe, plots
from .._validate import positive, positive_int

__all__ = ["routing_example", "moe_routing"]


def routing_example(n_tokens: int = 8, n_experts: int = 4, top_k: int = 2, capacity_factor: float = 1.0,
                    seed: int = 2, scale: float = 2.0) -> dict:
    """One sequence of ``n_tokens`` routed to ``n_experts`` by the chapter's routers, on seeded
    random logits (``scale`` × standard normal: decisive, not balanced).

    Token choice (``moe.token_choice``, first come first served, capacity ``expert_capacity``):
    ``assigned`` and ``kept`` as (T, E) lists of bools, ``capacity``, ``dropped`` (count). Expert
    choice (``moe.expert_choice``, same capacity factor and k): ``ec_before`` (T, E) picks; then
    the last token's logit for one expert (``pushed``: of the experts it is not in, the one whose
    weakest pick is earliest) is raised a quarter at a time until it enters that expert's top C
    (``logits_after``); ``ec_after`` holds the picks again and ``changed`` the earlier positions
    whose picks moved. Token choice
    on ``logits_after`` (``tc_after_kept``) is the control: its earlier positions cannot move."""
    t = positive_int("n_tokens", n_tokens, minimum=2)
    e = positive_int("n_experts", n_experts)
    k = positive_int("top_k", top_k)
    cf = positive("capacity_factor", capacity_factor)
    logits = torch.randn(1, t, e, generator=torch.Generator().manual_seed(positive_int("seed", seed, minimum=0)))
    logits = logits * positive("scale", scale)
    tc = moe.token_choice(logits, top_k=k, capacity_factor=cf)
    ec = moe.expert_choice(logits, capacity_factor=cf, top_k=k)
    probs = logits.softmax(-1)[0]
    # the expert whose weakest pick is the earliest token among those the last token is not in
    candidates = [(int(probs[:, x].masked_fill(~ec.kept[0, :, x], 2.0).argmin()), x)
                  for x in range(e) if not bool(ec.kept[0, -1, x])]
    if not candidates:
        raise ValueError(f"seed={seed!r}: the last token is in every expert's top C already; take another seed")
    _, pushed = min(candidates)
    after = logits.clone()
    ec2 = ec
    while not bool(ec2.kept[0, -1, pushed]):       # the later token's match grows, a quarter at a time
        after[0, -1, pushed] += 0.25
        ec2 = moe.expert_choice(after, capacity_factor=cf, top_k=k)
    changed = [i for i in range(t - 1) if not torch.equal(ec.kept[0, i], ec2.kept[0, i])]
    tc2 = moe.token_choice(after, top_k=k, capacity_factor=cf)
    return {"logits": logits[0].tolist(), "logits_after": after[0].tolist(), "probs": probs.tolist(),
            "assigned": tc.assigned[0].tolist(), "kept": tc.kept[0].tolist(), "capacity": tc.capacity,
            "dropped": int((tc.assigned & ~tc.kept).sum()), "ec_capacity": ec.capacity,
            "ec_before": ec.kept[0].tolist(), "ec_after": ec2.kept[0].tolist(), "changed": changed,
            "pushed": pushed, "tc_after_kept": tc2.kept[0].tolist()}


def _grid(ax, picks: list[list[bool]], title: str, *, dropped=None, moved=(), marks=None, last: str = "") -> None:
    """Tokens as columns, experts as rows (expert 0 on top); a filled cell is a processed pair,
    a hatched cell with a cross a dropped one; the (token, expert) cells in ``moved`` are outlined
    and ``last`` is written under the last token's number."""
    import matplotlib.patches as mpatches
    t, e = len(picks), len(picks[0])
    for i in range(t):
        for x in range(e):
            y = e - 1 - x
            if picks[i][x]:
                ax.add_patch(mpatches.Rectangle((i + 0.08, y + 0.08), 0.84, 0.84, facecolor=plots.THEORY,
                                                edgecolor="none"))
                if marks is not None:
                    ax.text(i + 0.5, y + 0.5, marks[i][x], ha="center", va="center", fontsize=8, color="white")
            elif dropped is not None and dropped[i][x]:
                ax.add_patch(mpatches.Rectangle((i + 0.08, y + 0.08), 0.84, 0.84, facecolor="white", hatch="///",
                                                edgecolor=plots.MEASURED, linewidth=1.2))
                ax.text(i + 0.5, y + 0.5, "×", ha="center", va="center", fontsize=12, color=plots.MEASURED)
            else:
                ax.add_patch(mpatches.Rectangle((i + 0.08, y + 0.08), 0.84, 0.84, facecolor="#f2f2f2",
                                                edgecolor="none"))
        if not any(picks[i]):
            ax.text(i + 0.5, -0.35, "none", ha="center", va="center", fontsize=8, color=plots.MEASURED)
    for i, x in moved:
        ax.add_patch(mpatches.Rectangle((i + 0.02, e - 1 - x + 0.02), 0.96, 0.96, facecolor="none",
                                        edgecolor=plots.MEASURED, linewidth=2.2, linestyle="--"))
    ax.set(xlim=(0, t), ylim=(-0.7, e), aspect="equal")
    ax.set_xticks([i + 0.5 for i in range(t)], [str(i) for i in range(t - 1)] + [f"{t - 1}\n{last}".strip()], fontsize=8)
    ax.set_yticks([e - 0.5 - x for x in range(e)], [f"expert {x}" for x in range(e)], fontsize=8)
    ax.tick_params(length=0)
    ax.grid(False)
    ax.spines[["bottom", "left"]].set_visible(False)
    ax.set_title(title, fontsize=9)


def moe_routing(n_tokens: int = 8, n_experts: int = 4, top_k: int = 2, capacity_factor: float = 1.0,
                seed: int = 2):
    """Three grids of one sequence (tokens left to right, experts top to bottom): token-choice
    top-k with its capacity C, each kept pair numbered by the slot it took in arrival order and the
    overflow dropped; expert choice on the same logits; and expert choice again after only the
    last token changed, the earlier tokens whose routing moved outlined (``routing_example``)."""
    ex = routing_example(n_tokens, n_experts, top_k, capacity_factor, seed)
    t, e = n_tokens, n_experts
    slots, used = [[""] * e for _ in range(t)], [0] * e
    for i in range(t):                                  # first come, first served: the slot each pair took
        for x in range(e):
            if ex["kept"][i][x]:
                used[x] += 1
                slots[i][x] = str(used[x])
    dropped = [[a and not kp for a, kp in zip(ra, rk)] for ra, rk in zip(ex["assigned"], ex["kept"])]
    fig, axes = plots.figure(nrows=3, figsize=(6.4, 6.2))
    _grid(axes[0], ex["kept"], f"token choice, top-{top_k}, capacity C = {ex['capacity']} per expert "
          f"(first come, first served):\n{ex['dropped']} pairs dropped; a token left with no expert passes on the residual",
          dropped=dropped, marks=slots)
    _grid(axes[1], ex["ec_before"], f"expert choice on the same logits: each expert takes its top "
          f"{ex['ec_capacity']} tokens of the sequence")
    names = " and ".join(map(str, ex["changed"]))
    moved = [(i, x) for i in ex["changed"] for x in range(e) if ex["ec_before"][i][x] != ex["ec_after"][i][x]]
    _grid(axes[2], ex["ec_after"], f"expert choice after only token {t - 1} changed (it leans more to expert "
          f"{ex['pushed']}):\nthe routing of earlier token{'s' if len(ex['changed']) > 1 else ''} {names} "
          f"moved (dashed)", moved=moved, last="changed")
    axes[2].set_xlabel("token position in the sequence", fontsize=8)
    import matplotlib.patches as mpatches
    fig.legend(handles=[mpatches.Patch(facecolor=plots.THEORY, label="processed (number: slot taken)"),
                        mpatches.Patch(facecolor="white", edgecolor=plots.MEASURED, hatch="///",
                                       label="dropped: expert full"),
                        mpatches.Patch(facecolor="white", edgecolor=plots.MEASURED, linestyle="--",
                                       linewidth=2, label="routing moved")],
               loc="outside lower center", ncols=3, fontsize=8)
    return fig
