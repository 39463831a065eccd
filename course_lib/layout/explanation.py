"""Reading the layout planner's answer: why the chosen layout wins over the best layout that
changes each choice, in the book's two languages (``lang``: course_lib.i18n; English by default)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..i18n import tr

if TYPE_CHECKING:
    from .job import Layout

__all__ = ["explain", "gb"]

_RIVAL = "layout rival"      # i18n context of the rivals' names (a phrase of the sentence "With ...:")
_TERM = "layout term"        # and of the step's terms


def gb(x: float) -> str:
    """Bytes as whole GB (1e9), the unit of the explanations."""
    return f"{x / 1e9:.0f} GB"


def explain(plans: list[Layout], everything: list[Layout] | None = None, lang: str = "en") -> str:
    """Why the first of ``plans`` wins: its memory and time budget, and the best layout that
    changes each choice (smaller TP, no PP, no CP, no recomputation, another ZeRO stage), with
    what it costs or why it does not fit. ``everything`` may add the layouts that do not fit.
    ``lang`` is the language of the words ("en" or "zh")."""
    if not plans:
        return tr("no layout fits", lang)
    best, pool = plans[0], everything if everything is not None else plans
    lines = [tr("{shape}, ZeRO-{zero}, recompute={recompute}, m={m} microbatches per pipeline: {memory} of "
                "{usable} usable per GPU (states {states}, activations {activations}); step {step:.2f} s = "
                "compute {compute:.2f} + bubble {bubble:.2f} + exposed TP {tp:.2f}, CP {cp:.2f}, PP {pp:.2f}, "
                "DP {dp:.2f}; MFU {mfu:.0f}%.", lang,
                shape=best.shape(), zero=best.zero, recompute=best.recompute, m=best.microbatches,
                memory=gb(best.memory_bytes), usable=gb(best.usable_bytes), states=gb(best.states_bytes),
                activations=gb(best.activation_bytes), step=best.step_s, compute=best.compute_s,
                bubble=best.bubble_s, tp=best.tp_s, cp=best.cp_s, pp=best.pp_s, dp=best.dp_s, mfu=100 * best.mfu)]
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
            lines.append(tr("With {name}: {shape}, ZeRO-{zero}, recompute={recompute} takes {change:+.0%} per "
                            "step ({why}).", lang, name=tr(name, lang, context=_RIVAL), shape=r.shape(),
                            zero=r.zero, recompute=r.recompute, change=r.step_s / best.step_s - 1,
                            why=_why(r, best, lang)))
        elif any(keep(x) for x in pool):
            r = min((x for x in pool if keep(x)), key=lambda x: x.memory_bytes)
            lines.append(tr("With {name}: nothing fits (the smallest, {shape}, needs {memory} per GPU).", lang,
                            name=tr(name, lang, context=_RIVAL), shape=r.shape(), memory=gb(r.memory_bytes)))
    return "\n".join(lines)


def _why(r: Layout, best: Layout, lang: str = "en") -> str:
    """The term of the step that grew most from ``best`` to ``r``."""
    terms = ("compute_s", "bubble_s", "tp_s", "cp_s", "pp_s", "dp_s")
    grow = {t: getattr(r, t) - getattr(best, t) for t in terms}
    t = max(grow, key=grow.get)
    names = {"compute_s": "recomputed forward", "bubble_s": "pipeline bubble", "tp_s": "TP all-reduces",
             "cp_s": "exposed K/V ring", "pp_s": "pipeline messages", "dp_s": "exposed DP/ZeRO traffic"}
    if grow[t] > 0:
        return tr("mostly {term}, {grow:+.2f} s", lang, term=tr(names[t], lang, context=_TERM), grow=grow[t])
    return tr("same terms, all a little slower", lang)
