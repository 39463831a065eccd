"""Chapter 10's mechanism: PipelineRL's in-flight weight updates, sequence by sequence — which
version of the weights wrote which tokens of each slot's sequences, and how stale each stretch is
when it is trained — from the chapter's own simulator, ``rl.simulate.simulate(record=True)``."""
from __future__ import annotations

from .. import plots
from .._validate import positive_int
from ..rl import simulate as sim
from ..rl.task import LengthDist

__all__ = ["inflight_sequences", "inflight_run", "pipeline_rl_inflight"]


def inflight_sequences(trace) -> list[dict]:
    """Each trained sequence of a ``simulate(..., record=True)`` PipelineRL trace: ``slot`` (actor
    × slots + slot), ``start`` and ``end`` (global decode steps), ``trained_by`` (the optimizer
    step that trained it) and ``spans``, (version, first step, end step, lag) for each stretch
    written by one version — the simulator's own ``_token_lags`` split, lag = trained_by − version."""
    if trace.mode != "pipeline" or "sequences" not in trace.stats:
        raise ValueError("trace must be a PipelineRL simulation run with record=True")
    cs, cv = trace.stats["versions"]
    out = []
    for slot, s0, s1, step in trace.stats["sequences"]:
        spans, a = [], s0
        for lag, tokens in sim._token_lags(s0, s1, step, cs, cv):
            spans.append((step - lag, a, a + tokens, lag))
            a += tokens
        out.append({"slot": slot, "start": s0, "end": s1, "trained_by": step, "spans": spans})
    return out


def inflight_run(n_actors: int = 2, slots: int = 4, batch: int = 8, steps: int = 6,
                 lengths: LengthDist | None = None, t_decode: float = 1.0, t_train: float = 4.0,
                 t_publish: float = 0.0, t_swap: float = 0.0, max_lag: int | None = 4, seed: int = 0) -> dict:
    """What ``pipeline_rl_inflight`` draws: a recorded PipelineRL simulation (``trace``, run a few
    optimizer steps past ``steps`` so every sequence begun in the window is trained), ``x_max``
    (the decode step at which optimizer step ``steps`` takes its batch: the window's end), the
    sequences begun before it (``sequences``, as ``inflight_sequences``) and among them the one
    written by the most versions (``longest``)."""
    steps = positive_int("steps", steps)
    lengths = LengthDist.lab() if lengths is None else lengths
    trace = sim.simulate("pipeline", lengths, n_actors, slots, batch, steps + 8, t_decode, t_train,
                         t_publish, t_swap, max_lag=max_lag, seed=seed, record=True)
    x_max = trace.stats["batches"][steps]
    seqs = [s for s in inflight_sequences(trace) if s["start"] < x_max]
    return {"trace": trace, "x_max": x_max, "sequences": seqs,
            "longest": max(seqs, key=lambda s: (len(s["spans"]), s["end"] - s["start"]))}


def pipeline_rl_inflight(n_actors: int = 2, slots: int = 4, batch: int = 8, steps: int = 6,
                         lengths: LengthDist | None = None, t_decode: float = 1.0, t_train: float = 4.0,
                         t_publish: float = 0.0, t_swap: float = 0.0, max_lag: int | None = 4, seed: int = 0,
                         run: dict | None = None):
    """The first ``steps`` optimizer steps of PipelineRL, one row per generator slot: each
    sequence a bar from its first to its last decode step, cut where new weights arrived in flight
    (dashed lines), each stretch labelled with the version that wrote it and shaded by its lag when
    trained; the learner's steps on top, from taking a batch to its weights arriving. Lengths
    default to the lab's (``LengthDist.lab``); times are in seconds as ``simulate`` takes them
    (by default in units of one decode step), the x axis counts decode steps. ``run`` is an
    ``inflight_run`` of the same arguments, if the caller has it already."""
    import matplotlib.patches as mpatches
    if run is None:
        run = inflight_run(n_actors, slots, batch, steps, lengths, t_decode, t_train, t_publish, t_swap, max_lag, seed)
    trace, seqs, x_max = run["trace"], run["sequences"], run["x_max"]
    cs, cv = trace.stats["versions"]
    taken = trace.stats["batches"]
    n_rows = n_actors * slots
    max_shown = max(lag for s in seqs for *_, lag in s["spans"])
    shades = [plots.THEORY, "#56B4E9", "#a6d4ef", "#cfe7f6", "#e4f2fa", "#f4fafd"]
    hatches = [None, None, "..", "//", "xx", "++"]

    def look(lag: int):
        return shades[min(lag, len(shades) - 1)], hatches[min(lag, len(hatches) - 1)]

    fig, ax = plots.figure(figsize=(6.4, 4.4))
    for s in seqs:
        y = n_rows - 1 - s["slot"]
        for version, a, b, lag in s["spans"]:
            if a >= x_max:
                continue
            b = min(b, x_max)
            colour, hatch = look(lag)
            ax.add_patch(mpatches.Rectangle((a, y - 0.38), b - a, 0.76, facecolor=colour, hatch=hatch,
                                            edgecolor="grey", linewidth=0.4))
            if b - a >= 3:
                ax.text((a + b) / 2, y, str(version), ha="center", va="center", fontsize=8,
                        color="white" if lag == 0 else "black")
        ax.plot([s["start"] + 0.15, s["start"] + 0.15], [y - 0.38, y + 0.38], color="black", lw=0.8)
    top = n_rows
    for k in range(steps):                                     # the learner: batch taken → weights in use
        a = taken[k]
        b = cs[cv.index(k + 1)] if k + 1 in cv else x_max
        ax.add_patch(mpatches.Rectangle((a, top - 0.38), max(b - a, 0.5), 0.76, facecolor=plots.ACCENT,
                                        edgecolor="white", linewidth=0.5))
        ax.text((a + b) / 2, top, str(k), ha="center", va="center", fontsize=8)
    for c, v in zip(cs, cv):
        if 0 < c < x_max:
            ax.axvline(c, ymax=(top - 0.45 + 0.6) / (top + 1.6), color=plots.MEASURED, ls="--", lw=0.9)
            ax.text(c, -1.0, f"v{v}", ha="center", va="top", fontsize=8, color=plots.MEASURED)
    ax.set_xlim(0, x_max)
    ax.set_ylim(-1.6, top + 0.6)
    ax.set_yticks(range(top + 1), [f"actor {s // slots}, slot {s % slots}" for s in reversed(range(n_rows))]
                  + ["learner step"], fontsize=8)
    ax.set_xlabel("decode step (every slot writes one token per step)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(False)
    ax.set_title(f"PipelineRL, {n_actors} actors × {slots} slots, batches of {batch}: weights swap in mid-sequence\n"
                 f"(dashed: version v arrives); a trained token is on average {trace.mean_lag():.2f} versions old",
                 fontsize=9)
    handles = [mpatches.Patch(facecolor=look(k)[0], hatch=look(k)[1], edgecolor="grey",
                              label=(f"lag {k}" if k < len(shades) - 1 or k == max_shown else f"lag ≥ {k}")
                              + (" (trained on the weights that wrote it)" if k == 0 else ""))
               for k in range(min(max_shown, len(shades) - 1) + 1)]
    handles.append(mpatches.Patch(facecolor=plots.ACCENT, label="optimizer step → weights in use"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    return fig
