"""Reading the layout planner's answer: why the chosen layout wins over the best layout that
changes each choice."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .job import Layout

__all__ = ["explain", "gb"]


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
