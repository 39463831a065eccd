"""The record of one RL run, real or simulated: ``Trace``, its metrics, and ``draw``, its timeline.

A ``Trace`` is what both the real actor/learner processes (``course_lib.rl.actors``) and the
simulator (``course_lib.rl.simulate``) return, so every metric and every figure treats them the
same way (``MODES`` names the three ways a run is organised). Its metrics:

* actor utilisation = Σ (decode-step time × busy slots / slots) / (actors × wall time): the share
  of the generators' slot-seconds that produced a token (idle waits and finished-but-padded
  slots both count as waste);
* tokens/s = generated response tokens / wall time; the wall time is the window from the first
  weight publication to the end of the last optimizer step;
* lag of a token = learner version when it is trained − policy version that sampled it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._validate import positive

__all__ = ["MODES", "Trace", "draw", "timeline_legend"]

IDLE_SHADE = "#e3eef0"   # an actor step with no slot busy; the map runs from here to plots.THEORY

MODES = ("sync", "async", "pipeline")


@dataclass
class Trace:
    """One RL run. ``gen[a]`` rows are (t0, t1, busy slots, decode steps) of actor ``a``;
    ``train`` rows are (t0, t1) of the learner's optimizer steps; ``lag_tokens[k]`` counts
    trained tokens that were k versions old and ``seq_lag`` is the mean lag of each trained
    sequence's tokens; times are seconds from the first publication."""

    mode: str
    n_actors: int
    slots: int
    batch: int
    window: tuple[float, float]
    gen: list[np.ndarray]
    train: np.ndarray
    rewards: np.ndarray
    lag_tokens: np.ndarray
    seq_versions: np.ndarray
    seq_lengths: np.ndarray
    seq_lag: np.ndarray
    stats: dict = field(default_factory=dict)

    @property
    def wall(self) -> float:
        return self.window[1] - self.window[0]

    def _clipped(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: seconds inside the window, and the fraction of the row that is inside."""
        if len(g) == 0:
            return np.zeros(0), np.zeros(0)
        t0, t1 = np.maximum(g[:, 0], self.window[0]), np.minimum(g[:, 1], self.window[1])
        inside = np.clip(t1 - t0, 0.0, None)
        return inside, np.divide(inside, g[:, 1] - g[:, 0], out=np.zeros(len(g)), where=g[:, 1] > g[:, 0])

    def utilisation(self) -> float:
        """Share of the actors' slot-seconds that produced tokens."""
        busy = sum(float((self._clipped(g)[0] * g[:, 2]).sum()) for g in self.gen if len(g))
        return busy / (self.slots * self.n_actors * self.wall)

    def slot_utilisation(self) -> float:
        """Busy slot-steps / all slot-steps while decoding (ignores time spent not decoding)."""
        steps = sum(float(g[:, 3].sum()) for g in self.gen if len(g))
        busy = sum(float((g[:, 2] * g[:, 3]).sum()) for g in self.gen if len(g))
        return busy / (self.slots * steps)

    def tokens_per_s(self) -> float:
        """Response tokens generated per second inside the window, all actors together."""
        return sum(float((self._clipped(g)[1] * g[:, 2] * g[:, 3]).sum()) for g in self.gen if len(g)) / self.wall

    def steps_per_s(self) -> float:
        return len(self.train) / self.wall

    def decode_steps_per_update(self) -> float:
        """Decode steps per actor per optimizer step (steps started inside the window): the
        machine-independent cost of one update on the generators' critical path."""
        steps = sum(float(g[g[:, 0] < self.window[1], 3].sum()) for g in self.gen if len(g))
        return steps / (self.n_actors * len(self.train))

    def mean_lag(self) -> float:
        """Token-weighted mean lag (versions)."""
        k = np.arange(len(self.lag_tokens))
        return float((k * self.lag_tokens).sum() / self.lag_tokens.sum())

    def time_to_reward(self, threshold: float, smooth: int = 5) -> float:
        """Seconds until the running mean of ``smooth`` step rewards first reaches ``threshold``
        (inf if never)."""
        r = np.convolve(self.rewards, np.ones(smooth) / smooth, mode="valid")
        hit = np.nonzero(r >= threshold)[0]
        return float(self.train[hit[0] + smooth - 1, 1] - self.window[0]) if len(hit) else math.inf

    def summary(self) -> dict:
        """The headline numbers, rounded for printing."""
        return {"mode": self.mode, "wall_s": round(self.wall, 2), "steps": len(self.train),
                "utilisation": round(self.utilisation(), 3), "tokens_per_s": round(self.tokens_per_s()),
                "mean_lag": round(self.mean_lag(), 2),
                "multi_version_seqs": round(float((self.seq_versions > 1).mean()), 3),
                "final_reward": round(float(self.rewards[-5:].mean()), 3)}


def _busy_map():
    from matplotlib.colors import LinearSegmentedColormap
    from .. import plots
    return LinearSegmentedColormap.from_list("busy", [IDLE_SHADE, plots.THEORY])


def timeline_legend(fig, slots: int = 4, ncol: int = 3, lang: str = "en"):
    """The key to :func:`draw`'s timelines, once per figure: the learner's steps, an actor's decode
    steps at a few shares of busy slots, and blank for waiting (``lang="zh"``: in Chinese)."""
    from matplotlib.patches import Patch
    from .. import plots
    from ..i18n import tr as say
    busy = _busy_map()
    shades = [(plots.ACCENT, say("learner: optimizer step", lang))] + [
        (busy(k / slots), say("actor decoding, {k} of {slots} slots busy", lang, k=k, slots=slots))
        for k in sorted({slots, slots // 2, 1}, reverse=True)]
    handles = [Patch(facecolor=c, edgecolor="#999999", lw=0.5, label=s) for c, s in shades]
    handles.append(Patch(facecolor="white", edgecolor="#999999", lw=0.5, label=say("blank: waiting for weights", lang)))
    return fig.legend(handles=handles, loc="outside upper center", ncol=ncol, fontsize=8)


def draw(trace: Trace, ax=None, t_max: float | None = None, title: str | None = None, lang: str = "en"):
    """Timeline of a trace: the learner's optimizer steps on top, then one row per actor whose
    decode steps are shaded by the share of busy slots (dark = all busy, pale = stragglers
    only, blank = waiting). Returns the axes. ``lang="zh"`` labels the rows and the time axis in
    Chinese (the title is the caller's)."""
    from .. import plots
    from ..i18n import tr as say
    if ax is None:
        _, ax = plots.figure(figsize=(7.2, 0.5 * trace.n_actors + 1.6), lang=lang)
    t_max = trace.window[1] if t_max is None else positive("t_max", t_max)
    cmap = _busy_map()
    n = trace.n_actors
    for a, g in enumerate(trace.gen):
        g = g[g[:, 0] < t_max]
        if len(g) == 0:
            continue
        # merge consecutive steps with the same number of busy slots, for a light figure
        cut = np.nonzero((np.diff(g[:, 2]) != 0) | (g[1:, 0] - g[:-1, 1] > 1e-3))[0] + 1
        for seg in np.split(g, cut):
            t0, t1 = seg[0, 0], min(seg[-1, 1], t_max)
            ax.broken_barh([(t0, t1 - t0)], (n - 1 - a - 0.4, 0.8), facecolors=cmap(seg[0, 2] / trace.slots),
                           linewidth=0)
    tr = trace.train[trace.train[:, 0] < t_max]
    ax.broken_barh([(t0, min(t1, t_max) - t0) for t0, t1 in tr], (n - 0.4, 0.8), facecolors=plots.ACCENT,
                   edgecolors="white", linewidth=0.3)
    ax.set_yticks(range(n + 1), [say("actor {k}", lang, k=n - i) for i in range(n)] + [say("learner", lang)])
    ax.set_xlim(0, t_max)
    ax.set_ylim(-0.6, n + 0.6)
    ax.set_xlabel(say("time (s)", lang))
    ax.grid(False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
