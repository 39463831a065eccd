"""Reading the layout planner's answer: why the chosen layout wins, and the published runs the
chapter compares it with (Llama 3 405B, Megatron-LM's 1T model), as planner inputs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._validate import positive_int

if TYPE_CHECKING:
    from .layout import Layout

__all__ = ["explain", "gb", "mfu_counting_attention", "LLAMA3_TABLE4_MFU", "llama3_405b", "megatron_1t", "MEGATRON_2021", "layout_calculator",
           "render_layout", "layout_widget"]


def gb(x: float) -> str:
    """Bytes as whole GB (1e9), the unit of the explanations."""
    return f"{x / 1e9:.0f} GB"


def explain(plans: list[Layout], everything: list[Layout] | None = None) -> str:
    """Why the first of ``plans`` wins: its memory and time budget, and the best layout that
    changes each choice (smaller TP, no PP, no CP, no recomputation, another ZeRO stage), with
    what it costs or why it does not fit. ``everything`` may add the layouts that do not fit."""
    if not plans:
        return "no layout fits"
    best, pool = plans[0], everything if everything is not None else plans
    lines = [f"{best.shape()}, ZeRO-{best.zero}, recompute={best.recompute}, m={best.microbatches} "
             f"microbatches per pipeline: {gb(best.memory_bytes)} of {gb(best.usable_bytes)} usable "
             f"per GPU (states {gb(best.states_bytes)}, activations {gb(best.activation_bytes)}); "
             f"step {best.step_s:.2f} s = compute {best.compute_s:.2f} + bubble {best.bubble_s:.2f} + "
             f"exposed TP {best.tp_s:.2f}, CP {best.cp_s:.2f}, PP {best.pp_s:.2f}, DP {best.dp_s:.2f}; "
             f"MFU {100 * best.mfu:.0f}%."]
    rivals = [("a smaller TP", lambda x: x.tp < best.tp), ("a larger TP", lambda x: x.tp > best.tp),
              ("no pipeline", lambda x: x.pp == 1 and best.pp > 1),
              ("a pipeline", lambda x: x.pp > 1 and best.pp == 1),
              ("no context parallelism", lambda x: x.cp == 1 and best.cp > 1),
              ("context parallelism", lambda x: x.cp > 1 and best.cp == 1),
              ("no recomputation", lambda x: x.recompute == "none" and best.recompute != "none"),
              ("full recomputation", lambda x: x.recompute == "full" and best.recompute != "full"),
              ("another ZeRO stage", lambda x: x.zero != best.zero and x.shape() == best.shape()
               and x.recompute == best.recompute)]
    for name, keep in rivals:
        fitting = [x for x in plans if keep(x)]
        if fitting:
            r = fitting[0]
            lines.append(f"With {name}: {r.shape()}, ZeRO-{r.zero}, recompute={r.recompute} takes "
                         f"{r.step_s / best.step_s - 1:+.0%} per step ({_why(r, best)}).")
        elif any(keep(x) for x in pool):
            r = min((x for x in pool if keep(x)), key=lambda x: x.memory_bytes)
            lines.append(f"With {name}: nothing fits (the smallest, {r.shape()}, needs "
                         f"{gb(r.memory_bytes)} per GPU).")
    return "\n".join(lines)


def _why(r: Layout, best: Layout) -> str:
    """The term of the step that grew most from ``best`` to ``r``."""
    terms = ("compute_s", "bubble_s", "tp_s", "cp_s", "pp_s", "dp_s")
    grow = {t: getattr(r, t) - getattr(best, t) for t in terms}
    t = max(grow, key=grow.get)
    names = {"compute_s": "recomputed forward", "bubble_s": "pipeline bubble", "tp_s": "TP all-reduces",
             "cp_s": "exposed K/V ring", "pp_s": "pipeline messages", "dp_s": "exposed DP/ZeRO traffic"}
    return f"mostly {names[t]}, {grow[t]:+.2f} s" if grow[t] > 0 else "same terms, all a little slower"


# Published shapes the chapter compares with (architecture from the papers).
def llama3_405b(seq_len: int = 8192) -> dict:
    """Llama 3 405B's shape and cluster (arXiv 2407.21783, Tables 3 and 4): 126 layers, d 16384,
    128 heads (8 KV heads), 16M-token batches on 16,384 H100s; published TP 8 · CP 1 · PP 16 · DP 128
    at 8K and TP 8 · CP 16 · PP 16 · DP 8 at 128K."""
    return dict(n_params=405e9, n_layers=126, d_model=16384, n_heads=128, kv_heads=8,
                seq_len=positive_int("seq_len", seq_len),
                global_batch_tokens=16 * 2 ** 20, n_gpus=16384, gpu="H100-SXM")


def megatron_1t() -> dict:
    """Megatron-LM's 1T model (arXiv 2104.04473, Table 1): 128 layers, d 25600, 160 heads, seq 2048,
    batch 3072 sequences on 3072 A100s (8 per node, 8 HDR 200 Gb/s NICs); published TP 8 · PP 64 · DP 6."""
    return dict(n_params=1008e9, n_layers=128, d_model=25600, n_heads=160, seq_len=2048,
                global_batch_tokens=3072 * 2048, n_gpus=3072, gpu="A100", nics_per_node=8,
                nic_bits_per_s=200e9)


# Llama 3 405B's BF16 MFU on 16,384 H100s (arXiv 2407.21783 Table 4): 41 % at 8K (TP 8 · CP 1 ·
# PP 16 · DP 128), 38 % at 128K (TP 8 · CP 16 · PP 16 · DP 8).
LLAMA3_TABLE4_MFU = {8192: 0.41, 131072: 0.38}


def mfu_counting_attention(mfu: float, n_params: float, n_layers: int, d_model: int, seq_len: int) -> float:
    """An MFU over 6Ψ FLOP per token (the planner's) restated as Megatron-LM and Llama 3 count it,
    with the causal attention-score FLOPs added: 3 · 2·L·s·h per token (forward and backward) on
    top of 6Ψ. Llama 3's 38 % at 128K needs them: without, it would mean ~63 % of the peak counting
    them, far above any published run."""
    return mfu * (1.0 + 3 * 2.0 * n_layers * seq_len * d_model / (6.0 * n_params))


# What Megatron-LM had in 2021 (arXiv 2104.04473): no FlashAttention, no context parallelism, no
# sharded optimizer, and neither sequence parallelism nor selective recomputation (both 2022,
# arXiv 2205.05198): activations were recomputed in full or not at all.
MEGATRON_2021 = dict(flash_attention=False, max_cp=1, max_zero=0, sequence_parallel=False,
                     selective_recompute=False)


def layout_calculator(n_params: float = 405e9, n_layers: int = 126, d_model: int = 16384,
                      n_heads: int = 128, kv_heads: int = 8, seq_len: int = 8192,
                      global_batch_tokens: float = 16 * 2 ** 20, n_gpus: int = 16384,
                      gpu: str = "H100-SXM") -> dict:
    """The widget's pure callback: the planner's best layout as a dict of plain numbers plus its
    explanation (tests and the book call it directly; ``course_lib.widgets`` pattern)."""
    from dataclasses import asdict

    from .layout import layout
    best = layout(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu=gpu,
                  kv_heads=kv_heads)
    return asdict(best) | {"shape": best.shape()}


def render_layout(result: dict) -> str:
    """A few lines: the shape, memory, step time and the explanation."""
    return (f"{result['shape']}, ZeRO-{result['zero']}, recompute={result['recompute']}\n"
            f"memory {gb(result['memory_bytes'])} of {gb(result['usable_bytes'])} usable, step "
            f"{result['step_s']:.2f} s, MFU {100 * result['mfu']:.0f}%\n\n{result['explanation']}")


def layout_widget(**start):
    """Chapter 11's calculator: model shape, sequence, batch and cluster → the planner's layout."""
    import ipywidgets as w

    from . import hardware
    from .widgets import interactive
    v = {"n_params": 405e9, "n_layers": 126, "d_model": 16384, "n_heads": 128, "kv_heads": 8,
         "seq_len": 8192, "global_batch_tokens": 16 * 2 ** 20, "n_gpus": 16384, "gpu": "H100-SXM"} | start
    controls = {
        "n_params": w.FloatLogSlider(value=v["n_params"], base=10, min=9, max=12.5, step=0.05,
                                     description="params", readout_format=".3g"),
        "n_layers": w.IntText(value=v["n_layers"], description="layers"),
        "d_model": w.IntText(value=v["d_model"], description="d_model"),
        "n_heads": w.IntText(value=v["n_heads"], description="heads"),
        "kv_heads": w.IntText(value=v["kv_heads"], description="KV heads"),
        "seq_len": w.Dropdown(options=[2 ** i for i in range(11, 18)], value=v["seq_len"], description="seq"),
        "global_batch_tokens": w.FloatLogSlider(value=v["global_batch_tokens"], base=2, min=20, max=26,
                                                step=1, description="batch tok", readout_format=".3g"),
        "n_gpus": w.IntText(value=v["n_gpus"], description="GPUs"),
        "gpu": w.Dropdown(options=list(hardware.accelerator_names()), value=v["gpu"], description="GPU"),
    }
    return interactive(layout_calculator, controls, render=render_layout)
