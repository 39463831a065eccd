"""Interactive calculators for the labs, built so that the arithmetic is testable without a browser.

The pattern every chapter reuses:

1. a **pure callback** ``f(**inputs) -> dict`` that does all the work (validated inputs, plain
   SI outputs) — tests call it directly, and the book renders a static table from it;
2. ``interactive(callback, controls, render=...)``: a thin ipywidgets wrapper that calls the
   callback whenever a control changes and shows ``render(result)`` (text and/or a figure).

The book never embeds live widgets (the site must work offline and without a kernel); it shows
``static_table(callback, rows)`` instead. A lab's widget cell, rendered without a widget frontend
(the website, nbconvert, a terminal), shows the calculator's output at the starting values
(``CalculatorBox``'s text/plain), not the ``VBox(children=...)`` repr.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping

from . import flops, hardware, scaling
from ._validate import choice, positive
from .report import si

__all__ = ["scaling_calculator", "render_scaling", "isoflop_figure", "static_table", "interactive",
           "calculator_box", "scaling_widget"]

STATIC_NOTE = "(static view at the starting values: the controls need a running Jupyter kernel)"


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


def isoflop_figure(compute: float, fits: Iterable[str] = ("hoffmann", "besiroglu"), span: float = 10.0):
    """Predicted loss along the IsoFLOP line C = 6ND for each fit, N from N*/span to N*·span,
    with each fit's optimum and the 20-tokens/param point marked. Returns a matplotlib figure."""
    import numpy as np

    from . import plots
    c = positive("compute", compute)
    span = positive("span", span)
    fig, ax = plots.figure()
    for fit, color in zip(fits, (plots.THEORY, plots.NEUTRAL, plots.ACCENT)):
        lf = scaling.get_fit(fit)
        n_star, _ = scaling.compute_optimal(c, fit)
        n = np.geomspace(n_star / span, n_star * span, 200)
        ax.plot(n, lf.loss(n, c / (6 * n)), color=color, label=f"{fit}: N* = {si(n_star)}")
        ax.plot([n_star], [lf.loss(n_star, c / (6 * n_star))], "o", color=color)
    n20, _ = scaling.compute_optimal(c, "tokens_per_param")
    ax.axvline(n20, color="grey", ls=":", lw=1, label=f"20 tokens/param: {si(n20)}")
    ax.set(xscale="log", xlabel="parameters N (D = C/6N)", ylabel="predicted loss",
           title=f"IsoFLOP line, C = {c:.2g} FLOP")
    ax.legend()
    return fig


def static_table(callback: Callable[..., dict], rows: Iterable[Mapping], columns: Mapping[str, object]) -> str:
    """Static fallback for the book: call ``callback(**row)`` for each row and format the chosen
    ``columns`` as a Markdown table. ``columns`` maps a result key to a header, or to
    ``(header, format_spec)``; by default counts get k/M/B/T suffixes and floats 3 digits."""
    def cell(v, spec) -> str:
        if spec:
            return format(v, spec)
        if isinstance(v, float):
            return si(v) if abs(v) >= 1e3 and math.isfinite(v) else f"{v:.3g}"
        return str(v)
    cols = {k: (c, "") if isinstance(c, str) else tuple(c) for k, c in columns.items()}
    results = [callback(**row) for row in rows]
    lines = ["| " + " | ".join(h for h, _ in cols.values()) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[k], spec) for k, (_, spec) in cols.items()) + " |" for r in results]
    return "\n".join(lines)


@functools.cache
def _calculator_box_class():
    """``CalculatorBox``, defined on first use so that importing this module needs no ipywidgets."""
    import ipywidgets as w

    class CalculatorBox(w.VBox):
        """A ``VBox`` whose plain-text form is ``fallback`` instead of its repr. A live frontend
        draws the widget (its widget-view MIME type wins); everywhere else, the site included,
        readers see the calculator's output."""

        def __init__(self, children, fallback: str, **kwargs):
            super().__init__(children, **kwargs)
            self.fallback = fallback

        def _repr_mimebundle_(self, **kwargs):
            return super()._repr_mimebundle_(**kwargs) | {"text/plain": self.fallback}

    return CalculatorBox


def calculator_box(children, fallback: str):
    """An ipywidgets ``VBox`` of ``children`` that shows the text ``fallback`` where no widget
    frontend is present (the website, nbconvert, a terminal)."""
    return _calculator_box_class()(list(children), fallback)


def interactive(callback: Callable[..., dict], controls: Mapping, render: Callable[[dict], str] = str,
                figure: Callable[[dict], object] | None = None, per_row: int = 3):
    """Wire ipywidgets ``controls`` (name → widget) to ``callback``: on every change, show
    ``render(result)`` and, if given, ``figure(result)``. Errors (bad input) are shown, not raised.
    Controls are laid out ``per_row`` to a row; without a widget frontend the box shows
    ``render(callback(**starting values))`` (see ``calculator_box``)."""
    import ipywidgets as w
    from IPython.display import display

    out = w.Output()

    def text(values: Mapping) -> str:
        try:
            return render(callback(**values))
        except ValueError as e:
            return f"input error: {e}"

    def update(**values):
        import matplotlib.pyplot as plt
        out.clear_output(wait=True)
        with out:
            try:
                result = callback(**values)
            except ValueError as e:
                print(f"input error: {e}")
                return
            print(render(result))
            if figure is not None:
                fig = figure(result)
                display(fig)
                plt.close(fig)

    w.interactive_output(update, dict(controls))
    boxes = list(controls.values())
    rows = [w.HBox(boxes[i:i + per_row]) for i in range(0, len(boxes), per_row)]
    start = {name: control.value for name, control in controls.items()}
    return calculator_box(rows + [out], f"{text(start)}\n\n{STATIC_NOTE}")


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
