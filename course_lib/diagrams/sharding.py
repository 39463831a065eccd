"""Chapter 4's mechanisms: who owns what under DP and ZeRO, and an FSDP unit's gather–compute–free."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import comm, memory, plots
from .._validate import positive_int, zero_stage

__all__ = ["STATES", "zero_ownership", "zero_stages", "FsdpEvent", "fsdp_events", "whole_intervals", "fsdp_unit"]

# the three model states of mixed-precision Adam, with their bytes per parameter (memory's defaults)
STATES = (("weights", 2.0), ("gradients", 2.0), ("optimizer state", 12.0))
STATE_COLORS = (plots.THEORY, plots.ACCENT, plots.PALETTE[4])


def zero_ownership(n: int, stage: int) -> dict[str, list[list[int]]]:
    """For each model state, the shards (of ``n``) that each rank keeps under ZeRO ``stage``.

    Read from ``memory.zero_memory_breakdown``: a state whose bytes per rank are its whole size is
    replicated (every rank keeps every shard), one whose bytes are 1/n of it is sharded (rank r
    keeps shard r)."""
    n = positive_int("n", n)
    stage = zero_stage("stage", stage)
    m = memory.zero_memory_breakdown(1.0, n, stage)
    held = dict(zip((s for s, _ in STATES), (m.params, m.grads, m.optimizer)))
    out = {}
    for name, size in STATES:
        share = held[name] / size
        if math.isclose(share, 1.0):
            out[name] = [list(range(n)) for _ in range(n)]
        elif math.isclose(share, 1.0 / n):
            out[name] = [[r] for r in range(n)]
        else:   # pragma: no cover - memory would have to change its model
            raise ValueError(f"stage {stage}: {name} held {share:g} of its size, neither 1 nor 1/n")
    return out


def zero_stages(n: int = 4):
    """Four panels, stage 0 (DP) to ZeRO-3: one row per rank, the 16 bytes of a parameter laid out
    along x (2 of weights, 2 of gradients, 12 of optimizer state), each cut into ``n`` shards; a
    filled shard is one the rank keeps. The filled width of a row is the rank's bytes per
    parameter (``memory.zero_memory_per_gpu``); each title also gives the values one rank sends
    per step (``comm.zero_bytes_per_step``)."""
    import matplotlib.patches as mpatches
    n = positive_int("n", n)
    fig, axes = plots.figure(ncols=2, nrows=2, figsize=(6.4, 4.6), sharex=True, sharey=True)
    what = ["AR grads", "RS grads, AG weights", "RS grads, AG weights", "AG twice, RS grads"]
    for stage, ax in enumerate(axes.flat):
        own = zero_ownership(n, stage)
        x0 = 0.0
        for (name, size), colour in zip(STATES, STATE_COLORS):
            w = size / n
            for rank in range(n):
                for shard in range(n):
                    keep = shard in own[name][rank]
                    ax.add_patch(mpatches.Rectangle((x0 + shard * w, n - 1 - rank - 0.4), w, 0.8,
                                                    facecolor=colour if keep else "white",
                                                    edgecolor=colour, linewidth=0.6))
            x0 += size
        per_rank = memory.zero_memory_per_gpu(1.0, n, stage)
        sent = comm.zero_bytes_per_step(1.0, n, stage, bytes_per_value=1)
        ax.set_title(f"{'DP' if stage == 0 else f'ZeRO-{stage}'}: keeps {per_rank:g} B/param\n"
                     f"sends {sent:g}Ψ values: {what[stage]}", fontsize=8)
        ax.set_xlim(0, 16)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_yticks(range(n), [f"rank {n - 1 - i}" for i in range(n)], fontsize=8)
        ax.set_xticks([0, 2, 4, 16])
        ax.tick_params(labelsize=8)
        ax.grid(False)
    for ax in axes[-1]:
        ax.set_xlabel("bytes of one parameter", fontsize=8)
    handles = [mpatches.Patch(color=c, label=f"{name} ({size:g} B)") for (name, size), c in zip(STATES, STATE_COLORS)]
    handles.append(mpatches.Patch(facecolor="white", edgecolor="grey", label="shard not kept"))
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, title_fontsize=8,
               title="AR all-reduce · RS reduce-scatter · AG all-gather; Ψ parameters")
    return fig


@dataclass(frozen=True)
class FsdpEvent:
    """One interval of an FSDP step on one stream ("comm" or "compute"), for one unit."""

    unit: int
    kind: str       # "AG" (all-gather), "F", "B", "RS" (reduce-scatter), "opt"
    start: float
    end: float

    @property
    def stream(self) -> str:
        return "comm" if self.kind in ("AG", "RS") else "compute"


def fsdp_events(n_units: int = 4, *, t_gather: float = 1.0, t_forward: float = 1.0,
                t_backward: float = 2.0, t_reduce: float = 1.0) -> list[FsdpEvent]:
    """One FSDP step over ``n_units`` units on two streams, as ``parallel.fsdp`` runs it with
    prefetching: a unit's all-gather runs while the previous unit computes (one unit ahead), its
    forward needs its gather, its parameters are freed when its forward ends; backward walks the
    units in reverse, gathering each again (prefetched one ahead of the backward before the
    previous unit's reduce-scatter), and reduce-scatters its gradient; the optimizer steps the
    shards last, with no communication."""
    u = positive_int("n_units", n_units)
    ev: list[FsdpEvent] = []
    comm_free = comp_free = 0.0

    def put(unit: int, kind: str, start: float, length: float) -> float:
        ev.append(FsdpEvent(unit, kind, start, start + length))
        return start + length

    gathered = {0: put(0, "AG", 0.0, t_gather)}
    comm_free = gathered[0]
    for i in range(u):                       # forward: gather i+1 while unit i computes
        start = max(comp_free, gathered[i])
        comp_free = put(i, "F", start, t_forward)
        if i + 1 < u:
            gathered[i + 1] = comm_free = put(i + 1, "AG", max(comm_free, start), t_gather)
    last = u - 1                             # backward starts after the loss: nothing to prefetch yet
    gathered = {last: put(last, "AG", max(comm_free, comp_free), t_gather)}
    comm_free = gathered[last]
    for i in range(last, -1, -1):            # backward: gather i-1 while unit i computes, then RS(i)
        start = max(comp_free, gathered[i])
        comp_free = put(i, "B", start, t_backward)
        if i > 0:
            gathered[i - 1] = comm_free = put(i - 1, "AG", max(comm_free, start), t_gather)
        comm_free = put(i, "RS", max(comm_free, comp_free), t_reduce)
    put(-1, "opt", max(comm_free, comp_free), t_forward)
    return ev


def whole_intervals(events: list[FsdpEvent]) -> list[tuple[int, float, float]]:
    """(unit, from, to) for each time a unit's full parameters are in memory: from the start of
    its all-gather to the end of the forward or backward (and reduce-scatter) that used them."""
    out = []
    for e in events:
        if e.kind != "AG":
            continue
        uses = [x for x in events if x.unit == e.unit and x.kind in ("F", "B", "RS") and x.start >= e.start]
        first = min(uses, key=lambda x: x.start)
        end = first.end if first.kind == "F" else max(x.end for x in uses if x.kind in ("B", "RS"))
        out.append((e.unit, e.start, end))
    return out


def fsdp_unit(n_units: int = 4, n: int = 4):
    """An FSDP step over ``n_units`` units: one row per unit with its all-gathers, forward,
    backward and reduce-scatter, a light band while its full parameters are in memory, and a
    bottom panel counting the units whole at each moment (never more than two). The title sums
    the gathers and the reduce-scatter of ``n`` ranks in values per parameter, as
    ``comm.fsdp_bytes_per_step`` counts them."""
    import matplotlib.patches as mpatches
    ev = fsdp_events(n_units)
    whole = whole_intervals(ev)
    colours = {"AG": plots.THEORY, "F": plots.NEUTRAL, "B": plots.ACCENT, "RS": plots.PALETTE[4], "opt": "#8d96a3"}
    fig, (ax, axm) = plots.figure(nrows=2, figsize=(6.4, 3.9), sharex=True, height_ratios=[3, 1])
    rows = n_units + 1
    for unit, a, b in whole:
        ax.add_patch(mpatches.Rectangle((a, rows - 1 - unit - 0.45), b - a, 0.9, facecolor="#e8eef5",
                                        edgecolor="none", zorder=0))
    for e in ev:
        y = 0 if e.unit < 0 else rows - 1 - e.unit
        h = 0.55 if e.stream == "comm" else 0.8
        off = 0.1 if e.stream == "comm" else 0.0
        ax.add_patch(mpatches.Rectangle((e.start, y - h / 2 - off), e.end - e.start, h, facecolor=colours[e.kind],
                                        edgecolor="white", linewidth=0.6, zorder=2))
        ax.text((e.start + e.end) / 2, y - off, e.kind, ha="center", va="center", fontsize=8, zorder=3,
                color="white" if e.kind in ("AG", "opt") else "black")
    t_end = max(e.end for e in ev)
    ax.set_xlim(0, t_end)
    ax.set_ylim(-0.6, rows - 0.4)
    ax.set_yticks(range(rows), ["step on\nshards"] + [f"unit {rows - 1 - y}" for y in range(1, rows)], fontsize=8)
    ax.grid(False)
    sent = comm.fsdp_bytes_per_step(1.0, n, bytes_per_value=1)
    ax.set_title(f"FSDP step, {n_units} units: each gathered twice, reduce-scattered once\n"
                 f"= {sent:g}Ψ values sent per rank on {n} ranks (DP: "
                 f"{comm.dp_bytes_per_step(1.0, n, bytes_per_value=1):g}Ψ)", fontsize=9)
    ts = sorted({t for _, a, b in whole for t in (a, b)} | {0.0, t_end})
    counts = [sum(a <= t < b for _, a, b in whole) for t in ts]
    axm.step(ts, counts, where="post", color=plots.THEORY)
    axm.set_ylim(0, max(counts) + 0.8)
    axm.set_yticks(range(max(counts) + 1))
    axm.set_ylabel("units whole", fontsize=8)
    axm.set_xlabel("time (one all-gather = 1)", fontsize=8)
    axm.tick_params(labelsize=8)
    handles = [mpatches.Patch(color=colours[k], label=lab) for k, lab in
               (("AG", "AG: all-gather"), ("F", "F: forward"), ("B", "B: backward"),
                ("RS", "RS: reduce-scatter"), ("opt", "optimizer step"))]
    handles.append(mpatches.Patch(color="#e8eef5", label="parameters whole"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    return fig
