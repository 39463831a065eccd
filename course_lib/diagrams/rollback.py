"""Chapter 6's mechanism: a loss spike, the rollback to a checkpoint from before it and the skip
past its data — the step counter and the data position part ways — drawn from the chapter's
cached guarded run (``stability.ablation.load()["guarded"]``) and ``stability.spikes.plan_rollback``."""
from __future__ import annotations

import numpy as np

from .. import plots
from ..stability import ablation, spikes

__all__ = ["rollback_trace", "rollback_and_skip"]


def rollback_trace(guarded: dict | None = None) -> dict:
    """The first rollback of a guarded run (the cached one by default), read back from its
    records: ``steps``, ``positions``, ``loss`` and ``abandoned`` of every executed step in
    execution order; ``spike`` (the index of the step that spiked); ``checkpoints`` as (index
    after which it was written, step, data position), by ``guarded_run``'s rule (at the start and
    whenever a step that did not spike brings the counter to a multiple of ``ckpt_every``);
    ``plan``, what ``spikes.plan_rollback`` decides from those checkpoints and the run's
    ``GuardConfig``; ``corrupt``, the corrupted data positions of the chapter's run."""
    g = ablation.load()["guarded"] if guarded is None else guarded
    guard = spikes.GuardConfig(**g["guard"])
    steps, positions = list(g["steps"]), list(g["positions"])
    spike = next(i for i in range(len(steps) - 1) if steps[i + 1] <= steps[i])
    ckpts = [(-1, 0, 0)]
    for i in range(len(steps)):
        if i != spike and (steps[i] + 1) % guard.ckpt_every == 0:
            ckpts.append((i, steps[i] + 1, positions[i] + 1))
    before = [(s, p) for i, s, p in ckpts if i < spike]
    plan = spikes.plan_rollback(before, steps[spike], positions[spike], guard.min_distance, guard.skip_margin)
    return {"steps": steps, "positions": positions, "abandoned": list(g["abandoned"]),
            "loss": [np.nan if v is None else v for v in g["loss"]], "spike": spike, "checkpoints": ckpts,
            "plan": plan, "guard": guard, "corrupt": ablation.CORRUPT}


def rollback_and_skip(before: int = 22, after: int = 40):
    """Around the first spike of the cached guarded run (``before`` and ``after`` executed steps
    either side): the training loss (kept dots, crosses for the steps the rollback undid), the
    step counter falling back to the restored checkpoint, and the data position jumping past the
    skipped batches, which cover the corrupted window (``rollback_trace``)."""
    import matplotlib.patches as mpatches
    tr = rollback_trace()
    k, plan = tr["spike"], tr["plan"]
    lo, hi = max(0, k - before), min(len(tr["steps"]), k + after)
    xs = np.arange(lo, hi)
    dead = np.array(tr["abandoned"][lo:hi])
    loss = np.array(tr["loss"][lo:hi])
    fig, (ax_l, ax_s, ax_p) = plots.figure(nrows=3, figsize=(6.4, 5.2), sharex=True, height_ratios=[1, 1.3, 1.3])
    ax_l.plot(xs[~dead], loss[~dead], ".", color=plots.THEORY, ms=4, label="kept")
    ax_l.plot(xs[dead], loss[dead], "x", color=plots.MEASURED, ms=5, label="undone by the rollback")
    ax_l.set_ylabel("loss (nats)", fontsize=8)
    ax_l.legend(fontsize=8, loc="upper right", ncols=2)
    ax_l.set_title(f"spike at step {tr['steps'][k]} (data position {tr['positions'][k]}) → roll back to the checkpoint "
                   f"of step {plan.restore_step},\nskip data positions {plan.restore_position}–"
                   f"{plan.resume_position - 1} ({plan.skipped_batches} batches), continue", fontsize=9)
    for ax, key, label in ((ax_s, "steps", "step counter"), (ax_p, "positions", "data position")):
        ys = np.array(tr[key][lo:hi])
        ax.plot(xs[~dead], ys[~dead], ".", color=plots.THEORY, ms=3)
        ax.plot(xs[dead], ys[dead], "x", color=plots.MEASURED, ms=4)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=8)
    ax_l.tick_params(labelsize=8)
    for i, s, _ in tr["checkpoints"]:
        if lo <= i + 0.5 <= hi:
            ax_s.plot([i + 0.5], [s], "D", color=plots.ACCENT, ms=6, mec="black", mew=0.5, zorder=3)
    ax_s.annotate(f"restore step {plan.restore_step}", xy=(k + 1, plan.restore_step), xytext=(k + 6, plan.restore_step - 12),
                  fontsize=8, arrowprops={"arrowstyle": "->", "lw": 1})
    c0, c1 = tr["corrupt"]
    ax_p.axhspan(c0, c1, color=plots.ACCENT, alpha=0.35, lw=0)
    ax_p.axhspan(plan.restore_position, plan.resume_position, facecolor="none", edgecolor="grey", hatch="///", lw=0)
    ax_p.annotate(f"resume at position {plan.resume_position}", xy=(k + 1, plan.resume_position),
                  xytext=(k - before + 2, plan.resume_position + 22), fontsize=8,
                  arrowprops={"arrowstyle": "->", "lw": 1})
    for ax in (ax_l, ax_s, ax_p):
        ax.axvline(k, color=plots.MEASURED, lw=0.8, ls=":")
    ax_p.set_xlabel("steps executed (wall-clock order)", fontsize=8)
    ax_p.set_xlim(lo - 0.5, hi - 0.5)
    from matplotlib.lines import Line2D
    fig.legend(handles=[Line2D([], [], marker="D", ls="none", color=plots.ACCENT, mec="black", mew=0.5,
                               label="checkpoint written"),
                        mpatches.Patch(facecolor=plots.ACCENT, alpha=0.35, label="corrupted batches"),
                        mpatches.Patch(facecolor="white", edgecolor="grey", hatch="///", label="batches skipped")],
               loc="outside lower center", ncols=3, fontsize=8)
    return fig
