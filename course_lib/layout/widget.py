"""Chapter 11's layout calculator: the widget and its pure callback (the ``course_lib.widgets``
pattern)."""
from __future__ import annotations

from .explanation import gb
from .search import layout

__all__ = ["layout_calculator", "render_layout", "layout_widget"]


def layout_calculator(n_params: float = 405e9, n_layers: int = 126, d_model: int = 16384,
                      n_heads: int = 128, kv_heads: int = 8, seq_len: int = 8192,
                      global_batch_tokens: float = 16 * 2 ** 20, n_gpus: int = 16384,
                      gpu: str = "H100-SXM") -> dict:
    """The widget's pure callback: the planner's best layout as a dict of plain numbers plus its
    explanation (tests and the book call it directly; ``course_lib.widgets`` pattern)."""
    from dataclasses import asdict

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

    from .. import hardware
    from ..widgets import interactive
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
