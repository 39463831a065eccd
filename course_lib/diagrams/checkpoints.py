"""Chapter 12's mechanism: checkpoint every τ, a failure throws away the work since the last
complete checkpoint, a restart, and the goodput that is left — drawn from ``course_lib.faults``."""
from __future__ import annotations

from typing import NamedTuple

from .. import faults, plots
from .._validate import positive, positive_int

__all__ = ["Segment", "llama3_job_mtbf", "checkpoint_timeline", "goodput_shares", "checkpoint_restart"]

_KINDS = ("train", "save", "lost", "restart")


class Segment(NamedTuple):
    """One stretch of wall time: ``kind`` in train/save/lost/restart, wall-clock ``start``/``end``
    (s), and the training progress kept (seconds of compute a restart can resume from) at its
    ``start`` and ``end``. A "lost" segment is training that the failure at its end throws away."""
    kind: str
    start: float
    end: float
    kept_start: float
    kept_end: float


def llama3_job_mtbf() -> float:
    """Chapter 12's job MTBF: Llama 3's unexpected interruptions charged to one GPU each
    (``faults.LLAMA3_GPU_MTBF_S``), then the job of the same GPU count (``faults.cluster_mtbf``)."""
    return faults.cluster_mtbf(faults.LLAMA3_GPU_MTBF_S, faults.LLAMA3["n_gpus"])


def checkpoint_timeline(interval_seconds: float, save_seconds: float, restart_seconds: float,
                        mtbf_seconds: float, failed_period: int = 2) -> list[Segment]:
    """One MTBF of wall time under the lost-work model of ``faults.goodput``: periods of τ compute
    and a blocking save δ, and one failure — the failure an MTBF brings on average — that strikes
    ``failed_period`` whole periods in, half a period after the last complete checkpoint, so it
    loses ``faults.expected_lost_seconds(τ, δ)``. A restart of R follows, and training resumes from
    that checkpoint until the MTBF has passed. Returns the segments in time order."""
    tau = positive("interval_seconds", interval_seconds)
    d = positive("save_seconds", save_seconds)
    r = positive("restart_seconds", restart_seconds, allow_zero=True)
    m = positive("mtbf_seconds", mtbf_seconds)
    k = positive_int("failed_period", failed_period, minimum=0)
    lost = faults.expected_lost_seconds(tau, d)
    period = tau + d
    if k * period + lost + r >= m:
        raise ValueError(f"failed_period={failed_period!r}: the failure and its restart must fall within "
                         f"the MTBF ({m:g} s) drawn; take an earlier period or a shorter interval")
    out: list[Segment] = []
    t = kept = 0.0

    def run(until: float, progress_kept: bool = True) -> None:
        """Train and save from ``t`` to ``until`` in whole periods, the last one cut off at ``until``."""
        nonlocal t, kept
        while t < until - 1e-9:
            train_end = min(t + tau, until)
            out.append(Segment("train" if progress_kept else "lost", t, train_end, kept, kept + train_end - t))
            kept, t = kept + train_end - t, train_end
            if t >= until - 1e-9:
                break
            save_end = min(t + d, until)
            out.append(Segment("save" if progress_kept else "lost", t, save_end, kept, kept))
            t = save_end

    run(k * period)
    checkpoint = kept
    run(t + lost, progress_kept=False)          # done, then thrown away at the failure
    out.append(Segment("restart", t, t + r, checkpoint, checkpoint))
    t, kept = t + r, checkpoint
    run(m)
    return out


def goodput_shares(interval_seconds: float, save_seconds: float, restart_seconds: float,
                   mtbf_seconds: float) -> dict[str, float]:
    """Where the wall time goes, in ``faults.goodput``'s first-order model: a share
    (R + (τ+δ)/2)/M to failures (the restart and the lost half period), the rest split τ : δ
    between training and saves. ``train`` is ``faults.goodput`` itself; the four sum to 1."""
    tau = positive("interval_seconds", interval_seconds)
    d = positive("save_seconds", save_seconds)
    r = positive("restart_seconds", restart_seconds, allow_zero=True)
    m = positive("mtbf_seconds", mtbf_seconds)
    lost = faults.expected_lost_seconds(tau, d) / m
    restart = r / m
    if lost + restart >= 1:
        raise ValueError(f"mtbf_seconds={mtbf_seconds!r}: the restart and the lost work fill the whole MTBF")
    left = 1 - lost - restart
    return {"train": faults.goodput(tau, d, r, m), "save": left * d / (tau + d), "lost": lost, "restart": restart}


_STYLE = {"train": (plots.THEORY, None, "training (kept)"), "save": (plots.ACCENT, "///", "blocking save δ"),
          "lost": (plots.MEASURED, "xx", "work lost to the failure"), "restart": ("#bbbbbb", "..", "restart R")}


def checkpoint_restart(save_seconds: float = 120.0, restart_seconds: float = 600.0,
                       mtbf_seconds: float | None = None, interval_seconds: float | None = None,
                       failed_period: int = 2):
    """One MTBF of a run drawn as a strip (training, saves, the work a failure loses, the restart),
    the progress a restart can resume from beneath it (it falls back to the last checkpoint at the
    failure), and the expected shares of wall time of ``goodput_shares`` as one bar. By default M
    is chapter 12's job MTBF (``llama3_job_mtbf``) and τ Young's ``faults.optimal_checkpoint_interval``."""
    import matplotlib.patches as mpatches
    m = llama3_job_mtbf() if mtbf_seconds is None else positive("mtbf_seconds", mtbf_seconds)
    tau = faults.optimal_checkpoint_interval(save_seconds, m) if interval_seconds is None else interval_seconds
    segs = checkpoint_timeline(tau, save_seconds, restart_seconds, m, failed_period)
    shares = goodput_shares(tau, save_seconds, restart_seconds, m)
    hour = 3600.0
    fig, (strip, prog, bar) = plots.figure(nrows=3, figsize=(6.4, 4.6), height_ratios=[1, 2.2, 1])
    for s in segs:
        colour, hatch, _ = _STYLE[s.kind]
        strip.add_patch(mpatches.Rectangle((s.start / hour, 0), (s.end - s.start) / hour, 1, facecolor=colour,
                                           hatch=hatch, edgecolor="white" if s.kind == "train" else "black",
                                           linewidth=0.4))
    fail = next(s.start for s in segs if s.kind == "restart")
    lost = faults.expected_lost_seconds(tau, save_seconds)
    strip.annotate("failure", xy=(fail / hour, 1.0), xytext=(fail / hour, 1.9), ha="center", fontsize=8,
                   arrowprops={"arrowstyle": "->", "color": "black", "lw": 1})
    strip.set(xlim=(0, m / hour), ylim=(0, 2.3), yticks=[])
    strip.set_title(f"checkpoint every τ = {tau / 60:.0f} min (Young's √(2δM)), save δ = {save_seconds / 60:g} min, "
                    f"restart R = {restart_seconds / 60:g} min,\none failure in one MTBF M = {m / hour:.1f} h; "
                    f"it loses (τ + δ)/2 = {lost / 60:.0f} min", fontsize=9)
    strip.grid(False)
    strip.spines[["left"]].set_visible(False)
    strip.tick_params(labelsize=8)
    xs, ys = [0.0], [0.0]
    for s in segs:
        if s.kind == "restart":
            xs.append(s.start)
            ys.append(s.kept_start)                 # the fall back to the checkpoint
        xs.append(s.end)
        ys.append(s.kept_end)
    prog.plot([x / hour for x in xs], [y / hour for y in ys], color=plots.THEORY, lw=1.6)
    prog.plot([0, m / hour], [0, m / hour], color="grey", ls=":", lw=1)
    prog.text(0.03 * m / hour, 0.95 * m / hour, "dotted: no saves, no failures", ha="left", va="top", fontsize=8,
              color="grey")
    back = next(s.kept_start for s in segs if s.kind == "restart")
    prog.annotate("back to the last\ncheckpoint", xy=(fail / hour, back / hour), xytext=(fail / hour + 0.12 * m / hour,
                  0.12 * m / hour), fontsize=8, arrowprops={"arrowstyle": "->", "color": "black", "lw": 1})
    for s in segs:
        if s.kind == "lost":
            prog.axvspan(s.start / hour, s.end / hour, facecolor=plots.MEASURED, alpha=0.25, hatch="xx",
                         edgecolor=plots.MEASURED, linewidth=0)
    prog.set(xlim=(0, m / hour), ylim=(0, m / hour))
    prog.set_xlabel("wall time (hours)", fontsize=8)
    prog.set_ylabel("compute kept\n(hours)", fontsize=8)
    prog.tick_params(labelsize=8)
    left = 0.0
    for kind in _KINDS:
        colour, hatch, _ = _STYLE[kind]
        w = shares[kind]
        bar.barh(0, w, left=left, color=colour, hatch=hatch, edgecolor="white" if kind == "train" else "black",
                 linewidth=0.4)
        if kind == "train":
            bar.text(w / 2, 0, f"goodput {w:.1%}", ha="center", va="center", fontsize=9, color="white")
        left += w
    bar.set(xlim=(0, 1), yticks=[])
    bar.set_xlabel("expected share of wall time (faults.goodput, first order)", fontsize=8)
    bar.xaxis.set_major_formatter(lambda x, _: f"{x:.0%}")
    bar.tick_params(labelsize=8)
    bar.grid(False)
    bar.spines[["left"]].set_visible(False)
    fig.legend(handles=[mpatches.Patch(facecolor=_STYLE[k][0], hatch=_STYLE[k][1], edgecolor="black",
                                       label=_STYLE[k][2]) for k in _KINDS],
               loc="outside lower center", ncols=4, fontsize=8)
    return fig
