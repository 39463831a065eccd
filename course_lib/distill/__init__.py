"""The economics of distillation: what buying a teacher's outputs costs, next to training a model.

A distiller pays per token: output tokens at the output price, prompts at the input price,
minus whatever discounts apply (a batch API, cached prompt prefixes), plus reasoning tokens that
are billed but never returned. A lab that trains the teacher pays for GPU-hours. This module
prices both in dollars so they can be compared, and finds the break-even volume.

Prices are facts with a date; GPU-hour prices are not facts at all but market rates that vary by
provider, contract and year. ``ASSUMED_GPU_HOUR_PRICE`` is therefore an explicit **assumption**
(change it), never a sourced number.

Also here: entropy, cross-entropy and KL divergence of discrete distributions (in nats), the
quantities distillation losses are made of (``course_lib.distill.train`` trains with them).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .. import hardware
from .._validate import calculator, positive, utilisation

__all__ = ["MTOK", "ASSUMED_GPU_HOUR_PRICE", "ApiPrice", "PRICES", "PUBLISHED_RUNS", "api_cost",
           "distillation_cost", "gpu_hours", "pretraining_cost", "inference_cost", "break_even_tokens",
           "entropy", "cross_entropy", "kl_divergence", "distill_calculator", "render_distill",
           "cost_figure", "distill_widget"]

MTOK = 1e6
ASSUMED_GPU_HOUR_PRICE = 2.00   # dollars per H100-hour: an ASSUMPTION (market rates vary) — change it


@dataclass(frozen=True)
class ApiPrice:
    """A provider's list price in dollars per million tokens, with its discounts and source."""

    name: str
    input_per_mtok: float
    output_per_mtok: float
    batch_discount: float
    cache_read_multiplier: float
    source: str


PRICES = {
    "Claude Opus 4.6": ApiPrice(
        "Claude Opus 4.6", 5.0, 25.0, 0.5, 0.1,
        "Anthropic pricing page (platform.claude.com), model released 5 Feb 2026: $5/MTok input, "
        "$25/MTok output; Batch API 50% off; prompt-cache reads 0.1x the input price"),
}

# Final-run GPU-hours that developers published: (params used per token, tokens, GPU-hours, chip, source).
PUBLISHED_RUNS = {
    "Llama 3.1 405B": (405e9, 15.6e12, 30.84e6, "H100-SXM",
                       "Llama 3.1 model card (Meta, 2024): 30.84M H100-80GB GPU-hours"),
    "DeepSeek-V3 (37B active)": (37e9, 14.8e12, 2.788e6, "H800",
                                 "DeepSeek-V3 report, arXiv 2412.19437, Table 1: 2.788M H800 GPU-hours"),
}


def _discount(name: str, value: object) -> float:
    d = positive(name, value, allow_zero=True)
    if d >= 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r} (50% off is 0.5, not 50)")
    return d


def _share(name: str, value: object) -> float:
    v = positive(name, value, allow_zero=True)
    if v > 1:
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return v


@calculator
def api_cost(output_tokens: float, price_out_per_mtok: float, input_tokens: float = 0,
             price_in_per_mtok: float = 0.0, batch_discount: float = 0.0) -> float:
    """Dollars for ``output_tokens`` and ``input_tokens`` at prices per **million** tokens, after a
    ``batch_discount`` (0.5 = 50 % off) applied to the whole bill.

    1e12 output tokens at $25/MTok are $25M; with the 50 % batch discount, $12.5M.
    """
    out = positive("output_tokens", output_tokens)
    p_out = positive("price_out_per_mtok", price_out_per_mtok)
    inp = positive("input_tokens", input_tokens, allow_zero=True)
    p_in = positive("price_in_per_mtok", price_in_per_mtok, allow_zero=True)
    d = _discount("batch_discount", batch_discount)
    return (out * p_out + inp * p_in) / MTOK * (1.0 - d)


@calculator
def distillation_cost(visible_tokens: float, price_out_per_mtok: float, price_in_per_mtok: float = 0.0, *,
                      input_per_output: float = 0.0, cached_fraction: float = 0.0,
                      cache_read_multiplier: float = 0.1, hidden_per_visible: float = 0.0,
                      batch_discount: float = 0.0) -> dict:
    """The full bill for ``visible_tokens`` of returned teacher output (the tokens you can train on).

    - ``hidden_per_visible``: reasoning tokens billed as output but not returned, per returned
      token (the billed output is ``visible · (1 + hidden_per_visible)``);
    - ``input_per_output``: prompt tokens sent per returned token;
    - ``cached_fraction`` of those prompt tokens are prompt-cache reads, billed at
      ``cache_read_multiplier`` × the input price (one-off cache writes are ignored);
    - ``batch_discount`` applies to everything (providers' modifiers multiply).

    Returns a dict of token counts and dollars; ``dollars_per_visible_mtok`` is the effective price.
    """
    vis = positive("visible_tokens", visible_tokens)
    p_out = positive("price_out_per_mtok", price_out_per_mtok)
    p_in = positive("price_in_per_mtok", price_in_per_mtok, allow_zero=True)
    ipo = positive("input_per_output", input_per_output, allow_zero=True)
    cached = _share("cached_fraction", cached_fraction)
    mult = _share("cache_read_multiplier", cache_read_multiplier)
    hidden = positive("hidden_per_visible", hidden_per_visible, allow_zero=True)
    keep = 1.0 - _discount("batch_discount", batch_discount)
    billed_out = vis * (1.0 + hidden)
    inp = vis * ipo
    out_dollars = billed_out * p_out / MTOK * keep
    in_dollars = inp * p_in * ((1.0 - cached) + cached * mult) / MTOK * keep
    total = out_dollars + in_dollars
    return {"visible_output_tokens": vis, "billed_output_tokens": billed_out, "input_tokens": inp,
            "cached_input_tokens": inp * cached, "output_dollars": out_dollars, "input_dollars": in_dollars,
            "total_dollars": total, "dollars_per_visible_mtok": total / vis * MTOK}


def _peak(gpu: object) -> float:
    if gpu == "H800":   # export variant of the H100 SXM: same tensor-core peak, slower NVLink
        gpu = "H100-SXM"
    return hardware.lookup("gpu", gpu).peak("bf16")


def _hours(n: float, d: float, u: float, peak: float, k: float) -> float:
    """GPU-hours of k·N·D FLOP at ``u`` of ``peak``, on inputs already checked by the caller."""
    return k * n * d / (peak * u) / 3600.0


@calculator
def gpu_hours(n_params: float, n_tokens: float, mfu: float = 0.4, gpu: str = "H100-SXM",
              flops_per_param_token: float = 6.0) -> float:
    """GPU-hours to process ``n_tokens`` through ``n_params`` at ``mfu`` of the dense BF16 peak:
    ``flops_per_param_token`` = 6 for training (6ND), 2 for generating or scoring tokens."""
    n = positive("n_params", n_params)
    d = positive("n_tokens", n_tokens)
    u = utilisation("mfu", mfu)
    k = positive("flops_per_param_token", flops_per_param_token)
    return _hours(n, d, u, _peak(gpu), k)


@calculator
def pretraining_cost(n_params: float, n_tokens: float, gpu_hour_price: float = ASSUMED_GPU_HOUR_PRICE,
                     mfu: float = 0.4, gpu: str = "H100-SXM") -> float:
    """Dollars of GPU time for one training run, 6ND / (peak · MFU) GPU-hours × ``gpu_hour_price``.
    Only the final run's compute: no experiments, failed runs, data, staff or post-training."""
    price = positive("gpu_hour_price", gpu_hour_price)
    return gpu_hours(n_params, n_tokens, mfu, gpu, 6.0) * price


@calculator
def inference_cost(n_params: float, n_tokens: float, gpu_hour_price: float = ASSUMED_GPU_HOUR_PRICE,
                   mfu: float = 0.2, gpu: str = "H100-SXM") -> float:
    """Dollars of GPU time to generate (or score) ``n_tokens`` with a model you hold the weights of:
    2N FLOP per token at ``mfu`` (decoding is memory-bound, so lower than training). This is what
    white-box, full-logit distillation costs: you need the teacher, and you pay for its compute."""
    price = positive("gpu_hour_price", gpu_hour_price)
    return gpu_hours(n_params, n_tokens, mfu, gpu, 2.0) * price


@calculator
def break_even_tokens(budget_dollars: float, price_out_per_mtok: float, price_in_per_mtok: float = 0.0, *,
                      input_per_output: float = 0.0, cached_fraction: float = 0.0,
                      cache_read_multiplier: float = 0.1, hidden_per_visible: float = 0.0,
                      batch_discount: float = 0.0) -> float:
    """Visible teacher tokens whose distillation bill equals ``budget_dollars`` (e.g. the
    ``pretraining_cost`` of the teacher): the bill is linear in tokens, so budget / effective price."""
    budget = positive("budget_dollars", budget_dollars)
    per_mtok = distillation_cost(MTOK, price_out_per_mtok, price_in_per_mtok, input_per_output=input_per_output,
                                 cached_fraction=cached_fraction, cache_read_multiplier=cache_read_multiplier,
                                 hidden_per_visible=hidden_per_visible,
                                 batch_discount=batch_discount)["total_dollars"]
    return budget / per_mtok * MTOK


# ------------------------------------------------------------------------ information measures
def _dist(name: str, p: Sequence[float]) -> list[float]:
    try:
        values = [float(x) for x in p]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of probabilities, got {p!r}") from None
    if not values or any(math.isnan(x) or x < 0 for x in values):
        raise ValueError(f"{name} must be non-empty with non-negative entries, got {p!r}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1, sums to {sum(values):.6g}")
    return values


def entropy(p: Sequence[float]) -> float:
    """H(p) = −Σ p log p in nats (0 log 0 = 0)."""
    return -sum(x * math.log(x) for x in _dist("p", p) if x > 0)


def cross_entropy(p: Sequence[float], q: Sequence[float]) -> float:
    """H(p, q) = −Σ p log q in nats: the loss of predicting q when the truth is drawn from p.
    Infinite if q puts zero mass where p does not."""
    pv, qv = _dist("p", p), _dist("q", q)
    if len(pv) != len(qv):
        raise ValueError(f"q must have the same length as p ({len(pv)}), got {len(qv)}")
    if any(a > 0 and b == 0 for a, b in zip(pv, qv)):
        return math.inf
    return -sum(a * math.log(b) for a, b in zip(pv, qv) if a > 0)


def kl_divergence(p: Sequence[float], q: Sequence[float]) -> float:
    """KL(p ‖ q) = Σ p log(p/q) = H(p, q) − H(p) in nats; ≥ 0, zero only when q = p."""
    return cross_entropy(p, q) - entropy(p)


# ----------------------------------------------------------------------------- the calculator
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
                gpu_hour_price: float = ASSUMED_GPU_HOUR_PRICE, mfu: float = 0.4):
    """Static figure: distillation bill vs usable tokens for list price, batch, and hidden
    reasoning (3 hidden per visible), against the teacher's pretraining cost. Returns the figure."""
    import numpy as np

    from .. import plots
    t = np.logspace(9, 14, 60)
    fig, ax = plots.figure()
    cases = [("list price", 0.0, 0.0, plots.THEORY, "-"),
             (f"batch ({100 * price.batch_discount:.0f}% off)", price.batch_discount, 0.0, plots.NEUTRAL, "--"),
             ("list, 3 hidden reasoning tokens per visible", 0.0, 3.0, plots.ACCENT, "-.")]
    for label, disc, hidden, color, ls in cases:
        per = distillation_cost(MTOK, price.output_per_mtok, price.input_per_mtok, input_per_output=input_per_output,
                                hidden_per_visible=hidden, batch_discount=disc)["total_dollars"]
        ax.plot(t, t / MTOK * per, ls, color=color, label=label)
    pre = pretraining_cost(teacher_params, teacher_tokens, gpu_hour_price, mfu)
    ax.axhline(pre, color="black", lw=1, ls=":")
    label = (f"pretraining {teacher_params / 1e9:.0f}B on {teacher_tokens / 1e12:.3g}T tokens (6ND at "
             f"{100 * mfu:.0f}% MFU): {_money(pre)} at an assumed ${gpu_hour_price:.2f}/GPU-h")
    ax.text(1.3e9, pre * 1.3, label.replace("$", r"\$"), fontsize=8)   # a literal $, not mathtext
    ax.axvline(1e12, color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="teacher tokens you can train on",
           ylabel="dollars", title=f"Buying {price.name} outputs ({input_per_output:g} input tokens per output)")
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
