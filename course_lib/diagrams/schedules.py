"""Chapter 5's schedules, drawn from the exact simulator: boxes are ``pipeline.simulate``'s events."""
from __future__ import annotations

from .. import pipeline, plots
from ..pipeline import gantt

__all__ = ["pipeline_schedules", "stash_curve"]


def stash_curve(timeline, rank: int = 0) -> tuple[list[float], list[float]]:
    """(times, stashed) for ``rank``: microbatches whose activations it holds, in whole-stage units
    (a chunk counts 1/v). A forward stashes when it starts, a backward frees when it ends."""
    v = 1 + max(e.chunk for e in timeline.events)
    steps = sorted([(e.start, 1.0 / v) for e in timeline.of(rank, ("F",))]
                   + [(e.end, -1.0 / v) for e in timeline.of(rank, ("B",))])
    ts, ys, live = [0.0], [0.0], 0.0
    for t, d in steps:
        live += d
        if t == ts[-1]:          # a backward that ends as the next forward starts: one step
            ys[-1] = live
        else:
            ts.append(t)
            ys.append(live)
    return ts, ys


def _gantt(ax, timeline, min_label: float = 0.9) -> int:
    """One box per forward/backward event of ``timeline`` (rank 0 on top, chunk > 0 hatched), the
    microbatch written in boxes at least ``min_label`` wide; returns the number of boxes."""
    groups: dict[tuple[int, str, int], list[tuple[float, float]]] = {}
    for e in timeline.of(kinds=("F", "B")):
        groups.setdefault((e.rank, e.kind, e.chunk), []).append((e.start, e.duration))
        if e.duration >= min_label:
            ax.text(e.start + e.duration / 2, timeline.p - 1 - e.rank, str(e.mb), ha="center", va="center", fontsize=8)
    for (rank, kind, chunk), spans in groups.items():
        y = timeline.p - 1 - rank
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=gantt.COLORS[kind], edgecolors="white",
                       linewidth=0.5, hatch="///" if chunk else None)
    boxes = sum(len(s) for s in groups.values())
    ax.set_yticks(range(timeline.p), [f"rank {timeline.p - 1 - i}" for i in range(timeline.p)], fontsize=8)
    ax.set_ylim(-0.6, timeline.p - 0.4)
    ax.grid(False)
    return boxes


def pipeline_schedules(p: int = 4, m: int = 8, v: int = 2, *, t_forward: float = 1.0, t_backward: float = 2.0):
    """GPipe, 1F1B and interleaved 1F1B (``v`` chunks) for ``p`` stages and ``m`` microbatches on
    one clock, each a Gantt chart of the simulator's events with its bubble in the title, and
    below them rank 0's stash of activations under each: the three schedules idle about as long,
    but GPipe's stash grows to m, 1F1B's stops at p."""
    runs = [("GPipe", pipeline.simulate("gpipe", p, m, t_forward=t_forward, t_backward=t_backward)),
            ("1F1B", pipeline.simulate("1f1b", p, m, t_forward=t_forward, t_backward=t_backward)),
            (f"interleaved, v={v}", pipeline.simulate("interleaved", p, m, v=v, t_forward=t_forward,
                                                      t_backward=t_backward))]
    fig, axes = plots.figure(nrows=4, figsize=(6.4, 6.8), sharex=True, height_ratios=[p, p, p, 0.8 * p])
    for ax, (name, tl) in zip(axes, runs):
        _gantt(ax, tl)
        ax.set_title(f"{name}: bubble {tl.bubble_fraction():.0%} of the step, rank 0 stashes up to "
                     f"{tl.peak_in_flight[0]:g}", fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].set_xlim(0, max(tl.makespan() for _, tl in runs))
    styles = [(plots.THEORY, "-"), (plots.MEASURED, "--"), (plots.PALETTE[4], ":")]
    for (name, tl), (colour, ls) in zip(runs, styles):
        ts, ys = stash_curve(tl, 0)
        axes[-1].step(ts, ys, where="post", color=colour, ls=ls, lw=1.6, label=name)
    axes[-1].set_ylabel("rank 0 stash\n(microbatches)", fontsize=8)
    axes[-1].set_xlabel("time (units of one stage's forward, t_b = 2 t_f)", fontsize=8)
    axes[-1].tick_params(labelsize=8)
    axes[-1].yaxis.get_major_locator().set_params(integer=True)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    import matplotlib.patches as mpatches
    fig.legend(handles=[mpatches.Patch(color=gantt.COLORS["F"], label="forward (number: microbatch)"),
                        mpatches.Patch(color=gantt.COLORS["B"], label="backward"),
                        mpatches.Patch(facecolor="white", edgecolor="black", hatch="///", label="chunk 1")],
               loc="outside lower center", ncols=3, fontsize=8)
    return fig
