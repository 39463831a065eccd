"""The economics of distillation: what buying a teacher's outputs costs, next to training a model.

A distiller pays per token: output tokens at the output price, prompts at the input price,
minus whatever discounts apply (a batch API, cached prompt prefixes), plus reasoning tokens that
are billed but never returned. A lab that trains the teacher pays for GPU-hours. This module
prices both in dollars so they can be compared, and finds the break-even volume.

Prices are facts with a date; GPU-hour prices are not facts at all but market rates that vary by
provider, contract and year. ``ASSUMED_GPU_HOUR_PRICE`` is therefore an explicit **assumption**
(change it), never a sourced number.

``distill.explore`` puts these calculators into the chapter's calculator widget and cost figure;
``distill.information`` holds the information measures distillation losses are made of.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import hardware
from .._validate import calculator, positive, utilisation

__all__ = ["MTOK", "ASSUMED_GPU_HOUR_PRICE", "ApiPrice", "PRICES", "PUBLISHED_RUNS", "api_cost",
           "distillation_cost", "gpu_hours", "pretraining_cost", "inference_cost", "break_even_tokens"]

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
