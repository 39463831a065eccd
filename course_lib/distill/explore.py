"""Chapter 9's calculator, explored: the distillation bill next to the teacher's pretraining cost.

The pure callback ``distill_calculator`` does the arithmetic with the calculators of
``distill.costs`` (tests and the book's table call it) and ``render_distill`` prints its result;
``distill_widget`` wraps it in the core's ``widgets.interactive`` for the lab, and ``cost_figure``
draws the bill against the number of usable tokens.
"""
from __future__ import annotations

from .._validate import calculator, positive, utilisation
from .costs import (ASSUMED_GPU_HOUR_PRICE, MTOK, PRICES, ApiPrice, _hours, _peak, distillation_cost,
                    pretraining_cost)

__all__ = ["distill_calculator", "render_distill", "cost_figure", "distill_widget"]


@calculator
def distill_calculator(visible_tokens: float = 1e12, price_out_per_mtok: float = 25.0,
                       price_in_per_mtok: float = 5.0, input_per_output: float = 0.2,
                       cached_fraction: float = 0.0, hidden_per_visible: float = 0.0,
                       batch_discount: float = 0.0, teacher_params: float = 405e9,
                       teacher_tokens: float = 15.6e12, gpu_hour_price: float = ASSUMED_GPU_HOUR_PRICE,
                       mfu: float = 0.4, gpu: str = "H100-SXM") -> dict:
    """Callback of the chapter-9 calculator: the distillation bill for ``visible_tokens``, the cost
    of pretraining a teacher of ``teacher_params`` on ``teacher_tokens`` at an assumed GPU-hour
    price, their ratio and the break-even volume. Pure: tests and the book's table call it."""
    bill = distillation_cost(visible_tokens, price_out_per_mtok, price_in_per_mtok,
                             input_per_output=input_per_output, cached_fraction=cached_fraction,
                             hidden_per_visible=hidden_per_visible, batch_discount=batch_discount)
    hours = _hours(positive("teacher_params", teacher_params), positive("teacher_tokens", teacher_tokens),
                   utilisation("mfu", mfu), _peak(gpu), 6.0)
    pre = hours * positive("gpu_hour_price", gpu_hour_price)
    return {**bill, "pretraining_dollars": pre,
            "pretraining_gpu_hours": hours,
            "distill_over_pretrain": bill["total_dollars"] / pre,
            "break_even_tokens": pre / bill["dollars_per_visible_mtok"] * MTOK,
            "gpu_hour_price": float(gpu_hour_price), "gpu": gpu, "mfu": float(mfu),
            "price_out_per_mtok": float(price_out_per_mtok), "price_in_per_mtok": float(price_in_per_mtok),
            "input_per_output": float(input_per_output), "cached_fraction": float(cached_fraction),
            "hidden_per_visible": float(hidden_per_visible), "batch_discount": float(batch_discount),
            "teacher_params": float(teacher_params), "teacher_tokens": float(teacher_tokens)}


def _money(x: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"${x / scale:.3g}{unit}"
    return f"${x:.3g}"


def render_distill(r: dict) -> str:
    """A few aligned lines describing a ``distill_calculator`` result."""
    return "\n".join([
        f"tokens you can train on   {r['visible_output_tokens']:.3g} (billed output {r['billed_output_tokens']:.3g}, "
        f"input {r['input_tokens']:.3g})",
        f"distillation bill         {_money(r['total_dollars'])}  (output {_money(r['output_dollars'])}, "
        f"input {_money(r['input_dollars'])}; {_money(r['dollars_per_visible_mtok'])} per usable MTok)",
        f"teacher pretraining       {_money(r['pretraining_dollars'])}  = {r['pretraining_gpu_hours']:.3g} "
        f"{r['gpu']}-hours at {100 * r['mfu']:.0f}% MFU x ${r['gpu_hour_price']:.2f}/h (ASSUMED price)",
        f"bill / pretraining        {r['distill_over_pretrain']:.3g}",
        f"break-even volume         {r['break_even_tokens']:.3g} usable tokens",
    ])


def cost_figure(price: ApiPrice = PRICES["Claude Opus 4.6"], input_per_output: float = 0.2,
                teacher_params: float = 405e9, teacher_tokens: float = 15.6e12,
                gpu_hour_price: float = ASSUMED_GPU_HOUR_PRICE, mfu: float = 0.4, lang: str = "en"):
    """Static figure: distillation bill vs usable tokens for list price, batch, and hidden
    reasoning (3 hidden per visible), against the teacher's pretraining cost. Returns the figure
    (``lang="zh"``: its words in Chinese, from ``course_lib.i18n``)."""
    import numpy as np

    from .. import plots
    from ..i18n import tr
    t = np.logspace(9, 14, 60)
    fig, ax = plots.figure(lang=lang)
    cases = [(tr("list price", lang), 0.0, 0.0, plots.THEORY, "-"),
             (tr("batch ({off:.0f}% off)", lang, off=100 * price.batch_discount), price.batch_discount, 0.0,
              plots.NEUTRAL, "--"),
             (tr("list, 3 hidden reasoning tokens per visible", lang), 0.0, 3.0, plots.ACCENT, "-.")]
    for label, disc, hidden, color, ls in cases:
        per = distillation_cost(MTOK, price.output_per_mtok, price.input_per_mtok, input_per_output=input_per_output,
                                hidden_per_visible=hidden, batch_discount=disc)["total_dollars"]
        ax.plot(t, t / MTOK * per, ls, color=color, label=label)
    pre = pretraining_cost(teacher_params, teacher_tokens, gpu_hour_price, mfu)
    ax.axhline(pre, color="black", lw=1, ls=":")
    label = tr("pretraining {n:.0f}B on {d:.3g}T tokens (6ND at {mfu:.0f}% MFU): {cost} at an assumed "
               "${price:.2f}/GPU-h", lang, n=teacher_params / 1e9, d=teacher_tokens / 1e12, mfu=100 * mfu,
               cost=_money(pre), price=gpu_hour_price)
    ax.text(1.3e9, pre * 1.3, label.replace("$", r"\$"), fontsize=8)   # a literal $, not mathtext
    ax.axvline(1e12, color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel=tr("teacher tokens you can train on", lang),
           ylabel=tr("dollars", lang), title=tr("Buying {name} outputs ({r:g} input tokens per output)", lang,
                                                 name=price.name, r=input_per_output))
    ax.legend(fontsize=8, loc="lower right")
    return fig


def distill_widget(**defaults):
    """ipywidgets front end of ``distill_calculator`` (sliders for volume, prices, discounts), laid
    out three controls per row; ``defaults`` override the starting values."""
    import ipywidgets as w
    d = {"visible_tokens": 1e12, "price_out_per_mtok": 25.0, "price_in_per_mtok": 5.0, "input_per_output": 0.2,
         "cached_fraction": 0.0, "hidden_per_visible": 0.0, "batch_discount": 0.0, "teacher_params": 405e9,
         "teacher_tokens": 15.6e12, "gpu_hour_price": ASSUMED_GPU_HOUR_PRICE, "mfu": 0.4} | defaults
    controls = {
        "visible_tokens": w.FloatLogSlider(value=d["visible_tokens"], base=10, min=8, max=14, step=0.1,
                                           description="tokens", readout_format=".2e"),
        "price_out_per_mtok": w.FloatText(value=d["price_out_per_mtok"], description="$/MTok out"),
        "price_in_per_mtok": w.FloatText(value=d["price_in_per_mtok"], description="$/MTok in"),
        "input_per_output": w.FloatSlider(value=d["input_per_output"], min=0, max=10, step=0.1, description="in/out"),
        "cached_fraction": w.FloatSlider(value=d["cached_fraction"], min=0, max=1, step=0.05, description="cached"),
        "hidden_per_visible": w.FloatSlider(value=d["hidden_per_visible"], min=0, max=20, step=0.5,
                                            description="hidden/vis"),
        "batch_discount": w.FloatSlider(value=d["batch_discount"], min=0, max=0.9, step=0.05, description="batch off"),
        "teacher_params": w.FloatLogSlider(value=d["teacher_params"], base=10, min=9, max=13, step=0.05,
                                           description="teacher N", readout_format=".2e"),
        "teacher_tokens": w.FloatLogSlider(value=d["teacher_tokens"], base=10, min=11, max=14, step=0.05,
                                           description="teacher D", readout_format=".2e"),
        "gpu_hour_price": w.FloatText(value=d["gpu_hour_price"], description="$/GPU-h (assumed)"),
        "mfu": w.FloatSlider(value=d["mfu"], min=0.05, max=0.8, step=0.05, description="MFU"),
    }
    from ..widgets import interactive  # bad input is shown, not raised; static text off-kernel
    return interactive(distill_calculator, controls, render=render_distill)
