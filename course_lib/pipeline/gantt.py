"""Per-rank timelines and their Gantt charts, shared by real runs and simulated schedules.

A ``Timeline`` is a list of ``Event``s (which rank did what, for which microbatch, from when to
when) plus the number of ranks. A real pipeline run records one event per forward, backward,
blocking receive and optimizer step (``course_lib.pipeline.run``); the exact schedule
simulator (``course_lib.pipeline.simulate``) produces the same objects, so ``draw`` shows both
the same way and ``bubble_fraction`` measures both with the same definition:

    bubble = 1 − (time spent computing, summed over ranks) / (ranks × wall time)

i.e. the share of the ranks' wall time in which they did no forward or backward work.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from .. import plots
from ..i18n import tr

__all__ = ["Event", "Timeline", "COLORS", "draw"]

COMPUTE = ("F", "B", "W")
COLORS = {"F": plots.NEUTRAL, "B": plots.ACCENT, "W": "#009E73", "recv": "#c9ced6", "opt": "#66a182",
          "send": "#8d96a3"}


@dataclass(frozen=True)
class Event:
    """One interval on one rank: ``kind`` in F/B/recv/opt, microbatch ``mb`` (−1 if none)."""

    rank: int
    kind: str
    mb: int
    start: float
    end: float
    chunk: int = 0
    step: int = 0
    cpu: float | None = None   # CPU seconds the rank's thread used during the event, if recorded

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    """Events of ``p`` ranks on one clock (seconds for real runs, abstract units when simulated)."""

    p: int
    events: list[Event] = field(default_factory=list)
    peak_in_flight: list[float] | None = None   # per rank, when the producer knows it

    def of(self, rank: int | None = None, kinds: tuple[str, ...] | None = None,
           step: int | None = None) -> list[Event]:
        """Events filtered by rank, kinds and step, in start order."""
        return sorted((e for e in self.events
                       if (rank is None or e.rank == rank) and (kinds is None or e.kind in kinds)
                       and (step is None or e.step == step)), key=lambda e: (e.start, e.rank))

    def span(self, step: int | None = None, kinds: tuple[str, ...] = COMPUTE) -> tuple[float, float]:
        """(first start, last end) of the ``kinds`` events (of one ``step`` if given)."""
        ev = self.of(kinds=kinds, step=step)
        if not ev:
            raise ValueError("timeline has no events of the requested kinds")
        return min(e.start for e in ev), max(e.end for e in ev)

    def makespan(self, step: int | None = None) -> float:
        """Wall time from the first forward to the last backward."""
        t0, t1 = self.span(step)
        return t1 - t0

    def busy(self, rank: int, step: int | None = None) -> float:
        """Seconds (units) ``rank`` spent in forward and backward passes."""
        return sum(e.duration for e in self.of(rank, COMPUTE, step))

    def bubble_fraction(self, step: int | None = None) -> float:
        """Idle share of the ranks' wall time: 1 − Σ busy / (p · makespan)."""
        wall = self.makespan(step)
        return 1.0 - sum(self.busy(r, step) for r in range(self.p)) / (self.p * wall)

    def cpu_share(self, step: int | None = None) -> float:
        """CPU time / wall time of the forward and backward passes (real runs only). Close to 1
        on a quiet machine; well below 1 when other programs took the cores, and then the
        measured timings (and bubble) include their time slices."""
        ev = [e for e in self.of(kinds=COMPUTE, step=step) if e.cpu is not None]
        if not ev:
            raise ValueError("timeline has no CPU times (simulated, or recorded without them)")
        return sum(e.cpu for e in ev) / sum(e.duration for e in ev)

    def shifted(self, t0: float | None = None) -> Timeline:
        """A copy whose clock starts at ``t0`` (default: the first event) = 0."""
        t0 = min(e.start for e in self.events) if t0 is None else t0
        return Timeline(self.p, [replace(e, start=e.start - t0, end=e.end - t0) for e in self.events],
                        self.peak_in_flight)


def draw(timeline: Timeline, ax=None, *, title: str | None = None, unit: str = "s",
         scale: float = 1.0, labels: bool = True, legend: bool = True,
         kinds: tuple[str, ...] = ("F", "B", "W", "recv", "opt"), rows: Sequence[str] | None = None,
         names: Mapping[str, str] | None = None, colors: Mapping[str, str] | None = None, lang: str = "en"):
    """Draw ``timeline`` as a Gantt chart, rank 0 on top; returns the axes.

    Forward passes are reddish purple, backward passes amber (a split backward's weight-gradient half, W,
    bluish green), blocking receives (time spent waiting for a
    neighbour) light grey, optimizer steps green. Boxes wide enough carry the microbatch number. ``scale`` multiplies times for display (e.g. 1e3
    with ``unit="ms"``). Chunks > 0 are drawn hatched so interleaving is visible. The legend
    sits to the right of the axes (``legend=False`` leaves it out, e.g. for stacked panels).
    Other kinds of events can be drawn too: ``colors`` and ``names`` give their colours and legend
    labels (and may override the defaults), ``rows`` labels the rows top-down when an event's
    ``rank`` is a row rather than a rank (a rank's compute thread and its communication in flight).
    ``lang`` writes the chart's own words (rank rows, the time axis with its ``unit``, the default
    legend labels) in that language (``course_lib.i18n``); ``title``, ``rows`` and ``names`` are the
    caller's, already in it.
    """
    import matplotlib.patches as mpatches
    colour = {**COLORS, **(colors or {})}
    if rows is not None and len(rows) != timeline.p:
        raise ValueError(f"rows has {len(rows)} labels for a timeline of {timeline.p} rows")
    if ax is None:
        _, ax = plots.figure(figsize=(7.2, 0.55 * timeline.p + 1.4))
    ev = [e for e in timeline.events if e.kind in kinds]
    if not ev:
        raise ValueError("timeline has no events to draw")
    t0 = min(e.start for e in ev)
    t1 = max(e.end for e in ev)
    min_text = 0.025 * (t1 - t0)
    for e in ev:
        y = timeline.p - 1 - e.rank
        h = 0.8 if e.kind in COMPUTE else (0.35 if e.kind == "recv" else 0.8)
        x, w = (e.start - t0) * scale, e.duration * scale
        ax.broken_barh([(x, w)], (y - h / 2, h), facecolors=colour.get(e.kind, "#999999"),
                       edgecolors="white", linewidth=0.4, hatch="///" if e.chunk else None)
        if labels and e.kind in COMPUTE and e.duration >= min_text:
            ax.text(x + w / 2, y, str(e.mb), ha="center", va="center", fontsize=7, color="black")
    ylabels = list(rows) if rows is not None else [tr("rank {r}", lang, r=i) for i in range(timeline.p)]
    ax.set_yticks(range(timeline.p), ylabels[::-1])
    ax.set_ylim(-0.6, timeline.p - 0.4)
    ax.set_xlim(0, (t1 - t0) * scale)
    ax.set_xlabel(tr("time ({unit})", lang, unit=tr(unit, lang)))
    ax.grid(False)
    if legend:
        label = {k: tr(v, lang) for k, v in {"F": "forward", "B": "backward", "W": "weight\ngradient",
                                             "recv": "waiting\nin recv", "opt": "optimizer\nstep"}.items()}
        label.update(names or {})
        handles = [mpatches.Patch(color=colour.get(k, "#999999"), label=label.get(k, k))
                   for k in dict.fromkeys(kinds) if any(e.kind == k for e in ev)]
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
