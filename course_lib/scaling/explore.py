"""Chapter 2's calculator, explored: compute budget → compute-optimal N and D, loss and days.

The pure callback ``scaling_calculator`` does the arithmetic (tests and the book's static tables
call it); ``scaling_widget`` wraps it in the core's ``widgets.interactive`` for the lab, with
``isoflop_figure`` drawn beside it.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import flops, hardware, scaling
from .._validate import choice, positive
from ..report import si
from ..widgets import interactive

__all__ = ["scaling_calculator", "render_scaling", "isoflop_figure", "scaling_widget"]


def scaling_calculator(compute: float, fit: str = "besiroglu", gpu: str = "H100-SXM",
                       n_gpus: float = 1024, mfu: float = 0.40) -> dict:
    """Compute budget → compute-optimal N and D, predicted loss and wall-clock days.

    ``fit`` is one of ``scaling.FIT_NAMES``; the rule of thumb has no loss model, so its loss
    is reported under the Besiroglu fit (marked in ``loss_fit``). Days come from
    ``flops.training_days`` on ``n_gpus`` chips of type ``gpu`` at ``mfu``.
    """
    c = positive("compute", compute)
    choice("fit", fit, scaling.FIT_NAMES)
    try:
        hardware.get_accelerator(gpu)
    except ValueError as e:
        raise ValueError(f"gpu: {e}") from None
    n, d = scaling.compute_optimal(c, fit)
    loss_fit = "besiroglu" if fit == "tokens_per_param" else fit
    return {"compute": c, "fit": fit, "n_params": n, "n_tokens": d, "tokens_per_param": d / n,
            "loss": scaling.loss(n, d, loss_fit), "loss_fit": loss_fit,
            "days": flops.training_days(n, d, n_gpus, mfu, gpu), "gpu": gpu,
            "n_gpus": float(n_gpus), "mfu": float(mfu)}


def render_scaling(result: Mapping) -> str:
    """A few aligned lines describing a ``scaling_calculator`` result."""
    return "\n".join([
        f"compute budget      {result['compute']:.3g} FLOP   (fit: {result['fit']})",
        f"parameters N*       {si(result['n_params'])}",
        f"tokens D*           {si(result['n_tokens'])}   ({result['tokens_per_param']:.1f} tokens/param)",
        f"predicted loss      {result['loss']:.3f} nats/token   ({result['loss_fit']} fit)",
        f"training time       {result['days']:.1f} days on {result['n_gpus']:.0f} × {result['gpu']} "
        f"at {100 * result['mfu']:.0f}% MFU",
    ])


def isoflop_figure(compute: float, fits: Iterable[str] = ("hoffmann", "besiroglu"), span: float = 10.0,
                   lang: str = "en"):
    """Predicted loss along the IsoFLOP line C = 6ND for each fit, N from N*/span to N*·span,
    with each fit's optimum and the 20-tokens/param point marked. Returns a matplotlib figure
    (``lang="zh"``: its words in Chinese, from ``course_lib.i18n``)."""
    import numpy as np

    from .. import plots
    from ..i18n import tr
    c = positive("compute", compute)
    span = positive("span", span)
    fig, ax = plots.figure(lang=lang)
    for fit, color in zip(fits, (plots.THEORY, plots.NEUTRAL, plots.ACCENT)):
        lf = scaling.get_fit(fit)
        n_star, _ = scaling.compute_optimal(c, fit)
        n = np.geomspace(n_star / span, n_star * span, 200)
        ax.plot(n, lf.loss(n, c / (6 * n)), color=color, label=f"{fit}: N* = {si(n_star)}")
        ax.plot([n_star], [lf.loss(n_star, c / (6 * n_star))], "o", color=color)
    n20, _ = scaling.compute_optimal(c, "tokens_per_param")
    ax.axvline(n20, color="grey", ls=":", lw=1, label=tr("20 tokens/param: {n}", lang, n=si(n20)))
    ax.set(xscale="log", xlabel=tr("parameters N (D = C/6N)", lang), ylabel=tr("predicted loss", lang),
           title=tr("IsoFLOP line, C = {c:.2g} FLOP", lang, c=c))
    ax.legend()
    return fig


def scaling_widget(compute: float = 5.76e23, fit: str = "besiroglu", gpu: str = "H100-SXM",
                   n_gpus: int = 1024, mfu: float = 0.40):
    """The chapter-2 calculator: a compute slider, the fit, the cluster → N*, D*, loss, days."""
    import ipywidgets as w
    controls = {
        "compute": w.FloatLogSlider(value=compute, base=10, min=18, max=27, step=0.1, description="C (FLOP)",
                                    readout_format=".2e"),
        "fit": w.Dropdown(options=list(scaling.FIT_NAMES), value=fit, description="fit"),
        "gpu": w.Dropdown(options=list(hardware.accelerator_names()), value=gpu, description="GPU"),
        "n_gpus": w.IntText(value=n_gpus, description="GPUs"),
        "mfu": w.FloatSlider(value=mfu, min=0.05, max=0.8, step=0.05, description="MFU"),
    }
    return interactive(scaling_calculator, controls, render=render_scaling,
                       figure=lambda r: isoflop_figure(r["compute"]))
