"""Chapter 13's lab and page helpers: the planner as a widget, a sweep over the cluster size, and
the published-runs ratios as a figure. Each one only calls ``plan`` or ``check_published``."""
from __future__ import annotations

from .. import hardware, plots
from .._validate import positive, positive_int
from ..i18n import tr
from .planner import plan
from .result import Plan
from .runs import TOLERANCE

__all__ = ["cluster_sweep", "sweep_figure", "ratio_figure", "plan_widget", "step_breakdown", "mfu_sweeps",
           "mfu_figure", "BREAKDOWN_PARTS"]

# The step's parts as the layout planner reports them: compute by op, then what the layout adds.
BREAKDOWN_PARTS = ("gemm", "attention", "memory", "recompute", "optimizer", "bubble", "tp", "cp", "pp", "dp")


def step_breakdown(x) -> dict:
    """A ``layout.Layout``'s step time by part (seconds per step): its compute by op (GEMMs,
    attention, memory-bound ops, recomputation, the optimizer step), the bubble and each level's
    exposed communication. The parts sum to ``x.step_s``."""
    parts = dict(x.breakdown)
    parts.update(bubble=x.bubble_s, tp=x.tp_s, cp=x.cp_s, pp=x.pp_s, dp=x.dp_s)
    return {k: parts.get(k, 0.0) for k in BREAKDOWN_PARTS}


def mfu_sweeps(gpu: str = "H100-SXM") -> dict[str, list[tuple[float, float]]]:
    """The planner's MFU (best layout) as one thing changes at a time, on 4M-token batches:
    width (a 32-layer model of d_model 1024 … 8192 on 512 GPUs), sequence length (a 7B model,
    2K … 64K tokens, on 512 GPUs) and cluster size (the same 7B at 4K, 128 … 8192 GPUs)."""
    from ..layout import layout
    batch = 4 * 2 ** 20
    width = [(d, layout(12.0 * 32 * d * d, 32, d, d // 128, 4096, batch, 512, gpu=gpu).mfu)
             for d in (1024, 2048, 4096, 8192)]
    seq = [(s, layout(7e9, 32, 4096, 32, s, batch, 512, gpu=gpu, kv_heads=8).mfu)
           for s in (2048, 8192, 32768, 65536)]
    cluster = [(n, layout(7e9, 32, 4096, 32, 4096, batch, n, gpu=gpu, kv_heads=8).mfu)
               for n in (128, 512, 2048, 8192)]
    return {"width": width, "seq_len": seq, "n_gpus": cluster}


def mfu_figure(sweeps: dict[str, list[tuple[float, float]]], lang: str = "en"):
    """Three panels of ``mfu_sweeps``: MFU against width, sequence length and GPU count, the words
    in ``lang`` (course_lib.i18n)."""
    fig, axes = plots.figure(3, figsize=(10.0, 3.4), lang=lang)
    labels = {"width": ("d_model (32 layers, 512 GPUs)", "wider: bigger GEMMs"),
              "seq_len": ("sequence length (7B, 512 GPUs)", "longer: more attention"),
              "n_gpus": ("GPUs (7B at 4K, 4M-token batch)", "more GPUs: less work each")}
    for ax, (key, points) in zip(axes, sweeps.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, "o-", color=plots.THEORY)
        ax.set(xscale="log", xlabel=tr(labels[key][0], lang), ylabel=tr("MFU (planner)", lang),
               title=tr(labels[key][1], lang), ylim=(0, 0.6))
        # ticks at the plotted points only (a log axis's own decades and minor ticks marked none of
        # them and their labels overlapped); sequence lengths in K tokens
        ax.minorticks_off()
        ax.set_xticks(xs, [f"{x // 1024:g}K" if key == "seq_len" else f"{x:g}" for x in xs])
    return fig


def cluster_sweep(gpu_counts, **kwargs) -> list[dict]:
    """``plan(n_gpus=n, **kwargs)`` for each count, as rows: GPUs, layout, MFU estimate, days,
    goodput, wall days, GPU-hours and cost (more GPUs: fewer days, a lower MFU, more failures)."""
    rows = []
    for n in gpu_counts:
        p = plan(n_gpus=positive_int("gpu_counts", n), **kwargs)
        rows.append({"n_gpus": p.n_gpus, "layout": p.layout_shape, "zero": p.zero_stage, "mfu": p.mfu,
                     "days": p.days, "goodput": p.goodput, "wall_days": p.wall_days,
                     "gpu_hours": p.gpu_hours, "cost": p.cost})
    return rows


def sweep_figure(rows: list[dict], title: str = ""):
    """Wall days (left) and MFU and goodput (right) against the GPU count of ``cluster_sweep``."""
    fig, (left, right) = plots.figure(2, figsize=(9.0, 3.6))
    n = [r["n_gpus"] for r in rows]
    left.plot(n, [r["days"] for r in rows], "o-", color=plots.THEORY, label="compute days")
    left.plot(n, [r["wall_days"] for r in rows], "s--", color=plots.MEASURED, label="wall days (with failures)")
    left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="days", title=title or "time to train")
    left.legend()
    right.plot(n, [r["mfu"] for r in rows], "o-", color=plots.THEORY, label="MFU (layout estimate)")
    right.plot(n, [r["goodput"] for r in rows], "s--", color=plots.ACCENT, label="goodput")
    right.set(xscale="log", ylim=(0, 1.05), xlabel="GPUs", ylabel="fraction", title="what each GPU-hour yields")
    right.legend(loc="lower left")
    return fig


def ratio_figure(rows: list[dict], lang: str = "en"):
    """The planner over the published figure per run (``check_published`` rows with a ratio),
    with the ±``TOLERANCE`` band: inside it the arithmetic agrees, outside a named effect explains.
    The axis's words in ``lang`` (the runs keep their names)."""
    shown = [r for r in rows if r["ratio"] is not None]
    fig, ax = plots.figure(figsize=(6.4, 0.38 * len(shown) + 1.2), lang=lang)
    y = list(range(len(shown)))[::-1]
    colors = [plots.THEORY if r["within"] else plots.MEASURED for r in shown]
    ax.barh(y, [r["ratio"] for r in shown], color=colors, height=0.6)
    ax.axvspan(1 - TOLERANCE, 1 + TOLERANCE, color="grey", alpha=0.15, lw=0)
    ax.axvline(1, color="black", lw=0.8)
    ax.set_yticks(y, [r["name"] for r in shown])
    ax.set(xlabel=tr("planner / published (grey: ±15 %; vermillion: outside, explained in the text)", lang),
           xlim=(0, max(1.3, max(r["ratio"] for r in shown) * 1.1)))
    ax.grid(axis="y", visible=False)
    return fig


def plan_widget(n_params: float = 70e9, n_tokens: float = 15e12, gpu: str = "H100-SXM", n_gpus: int = 2048):
    """The planner in the lab: size, tokens, GPU type and count, MFU (the layout's estimate or a
    given figure) and price → the full plan, each line naming its chapter."""
    import ipywidgets as w

    from ..widgets import interactive
    controls = {
        "n_params": w.FloatLogSlider(value=positive("n_params", n_params), base=10, min=9, max=12.5, step=0.05,
                                     description="params", readout_format=".3g"),
        "n_tokens": w.FloatLogSlider(value=positive("n_tokens", n_tokens), base=10, min=11, max=14, step=0.05,
                                     description="tokens", readout_format=".3g"),
        "gpu": w.Dropdown(options=list(hardware.accelerator_names()), value=gpu, description="GPU"),
        "n_gpus": w.IntText(value=positive_int("n_gpus", n_gpus), description="GPUs"),
        "mfu": w.Dropdown(options=[("layout estimate", None)] + [(f"{m:.0%}", m) for m in (0.3, 0.35, 0.4, 0.45, 0.5, 0.55)],
                          value=None, description="MFU"),
        "price_per_gpu_hour": w.FloatText(value=2.0, description="$/GPU-h"),
    }
    return interactive(plan, controls, render=Plan.render, per_row=3)
