"""The overlap of chapter 14 on real ranks: one MoE layer's forward, serial and overlapped, traced.

``overlap_worker`` (for :func:`course_lib.dist.launch`, or as a case of ``labs.ep_cases_worker``)
builds one expert-parallel MoE layer with a shared expert, runs :func:`course_lib.expert.overlap.forward`
alternately serial and overlapped (barrier-aligned repeats, so other jobs on the machine hit both
alike), and returns every rank's events, the checks (outputs bitwise equal to the layer's own
forward, bytes) and the times. ``timeline`` turns one repeat into a ``gantt.Timeline`` with two
rows per rank (its compute thread, its all-to-all in flight) and ``draw`` draws it.

Definitions (``summary``), each time the least over the repeats (the least disturbed one):

* window = from issuing the dispatch to having both its rows and the shared expert's output (the
  part of the forward the overlap can shorten; the slowest rank's);
* hidden fraction (wall clock) = (serial window − overlapped window) / serial dispatch: the share
  of the dispatch's serial cost the overlap removed; equal to 1 − (overlapped − compute) / (serial −
  compute) with compute = serial window − serial dispatch;
* hidden in the trace = 1 − (time waiting for the dispatch) / (dispatch in flight), overlapped:
  how much of the exchange the compute thread did not wait for. Larger than the wall-clock
  fraction when the communication slows the compute down (on CPU it shares the cores).
"""
from __future__ import annotations

import copy
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from ..i18n import tr
from ..report import load_cached
from .. import plots
from ..moe import MoE
from ..parallel.counting import CountingComm
from ..pipeline import gantt
from . import overlap
from .ep import expert_parallel
from .ep_runs import balanced_router

__all__ = ["OVERLAP", "overlap_worker", "timeline", "draw", "draw_both", "summary", "OVERLAP_PATH", "OVERLAP_COMMAND",
           "load_overlap_cache"]

#: The lab's sizes: 2048 tokens a rank of d = 1024 in fp32, top-2 of 4 experts (2 a rank), every
#: token's two copies on one rank, so half the tokens leave: 8 MB dispatched per rank. The shared
#: expert's d_ff is chosen so its compute takes about as long as the exchange on this CPU.
OVERLAP = dict(tokens=2048, d_model=1024, d_ff=64, n_experts=4, top_k=2, repeats=5)
OVERLAP_PATH = Path(__file__).resolve().parents[2] / "data" / "expert_overlap.json"
OVERLAP_COMMAND = "python -m course_lib.expert.overlap_runs --out data/expert_overlap.json"
COLORS = {"route": "#c9ced6", "shared": "#009E73", "experts": plots.NEUTRAL, "dispatch": plots.THEORY,
          "combine": "#56B4E9", "recv": "#8d96a3"}
NAMES = {"route": "route", "shared": "shared\nexpert", "experts": "routed\nexperts", "dispatch": "dispatch\nin flight",
         "combine": "combine\nin flight", "recv": "waiting"}


def _paired_router(top_k: int):
    """Token n goes to experts (n·k + j) mod E, j < k: equal loads, each token's copies adjacent."""
    return balanced_router(top_k)


def overlap_worker(ctx, *, tokens: int = 2048, d_model: int = 1024, d_ff: int = 64, n_experts: int = 4,
                   top_k: int = 2, repeats: int = 5, seed: int = 0) -> dict:
    """Serial and overlapped forwards of one EP MoE layer with a shared expert, ``repeats`` each
    (after one untimed warm-up of each), alternating. Returns this rank's events (tuples of
    ``gantt.Event`` fields; ``step`` = 2·repeat + overlapped), whether both outputs equal the layer's
    own forward bitwise, and the bytes the dispatch sent (counted by the comm)."""
    torch.manual_seed(seed)
    layer = MoE(d_model, d_ff, n_experts, top_k=top_k, router=_paired_router(top_k), shared_expert=True)
    comm = CountingComm(ctx.group)
    ep_layer = expert_parallel(torch.nn.Sequential(copy.deepcopy(layer)), comm)[0]
    x = torch.randn(1, tokens, d_model, generator=torch.Generator().manual_seed(seed + 1 + ctx.rank))
    with torch.no_grad():
        own = ep_layer(x)
    comm.reset()
    serial = overlap.forward(ep_layer, x, overlap=False)
    dispatch_bytes = comm.stats["all_to_all"].sent_bytes // 2          # dispatch + combine, equal here
    same = bool(torch.equal(serial, own)) and bool(torch.equal(overlap.forward(ep_layer, x, overlap=True), own))
    events: list = []
    for i in range(repeats):
        for mode in (False, True):
            dist.barrier(group=ctx.group)
            y = overlap.forward(ep_layer, x, overlap=mode, events=events, step=2 * i + mode)
            same = same and bool(torch.equal(y, own))
    return {"rank": ctx.rank, "bitwise": same, "dispatch_bytes": dispatch_bytes,
            "events": [(e.rank, e.kind, e.mb, e.start, e.end, e.chunk, e.step, e.cpu) for e in events]}


def _events(per_rank: list[dict]) -> list[gantt.Event]:
    return [gantt.Event(*e) for r in per_rank for e in r["events"]]


def timeline(per_rank: list[dict], step: int) -> gantt.Timeline:
    """One repeat (``step``) as a ``Timeline`` of 2 rows a rank: row 2r its compute thread, row 2r+1
    its all-to-alls in flight; clock from the repeat's first event."""
    ev = [replace(e, rank=2 * e.rank + (e.kind in overlap.COMM_KINDS))
          for e in _events(per_rank) if e.step == step]
    return gantt.Timeline(2 * len(per_rank), ev).shifted()


def _windows(per_rank: list[dict]) -> dict[int, dict]:
    """Per repeat, the slowest rank's: dispatch window (from issuing the dispatch to having both its
    rows and the shared expert's output), dispatch in flight, wait for it, and shared expert."""
    out: dict[int, dict] = {}
    by: dict[tuple[int, int], dict] = {}
    for e in _events(per_rank):
        k = by.setdefault((e.step, e.rank), {})
        if e.kind == "recv":                          # the first wait of a forward is the dispatch's
            if "recv" not in k or e.start < k["recv"].start:
                k["recv"] = e
        else:
            k[e.kind] = e
    for (step, _), k in by.items():
        w = {"window": max(k["shared"].end, k["recv"].end) - k["dispatch"].start,
             "dispatch": k["dispatch"].duration, "wait": k["recv"].duration, "shared": k["shared"].duration}
        s = out.setdefault(step, dict.fromkeys(w, 0.0))
        for key, v in w.items():
            s[key] = max(s[key], v)
    return out


def summary(per_rank: list[dict]) -> dict:
    """The times and fractions of the module docstring (seconds), the least over the repeats."""
    win = _windows(per_rank)
    ser = {k: v for k, v in win.items() if k % 2 == 0}
    ovl = {k: v for k, v in win.items() if k % 2 == 1}
    least = lambda d, key: min(v[key] for v in d.values())     # noqa: E731
    best_s = min(ser, key=lambda k: ser[k]["window"])
    best_o = min(ovl, key=lambda k: ovl[k]["window"])
    dispatch = least(ser, "dispatch")
    return {"serial_window": least(ser, "window"), "overlap_window": least(ovl, "window"), "dispatch": dispatch,
            "flight": least(ovl, "dispatch"), "shared_serial": least(ser, "shared"),
            "shared_overlap": least(ovl, "shared"),
            "hidden_wall": (least(ser, "window") - least(ovl, "window")) / dispatch,
            "hidden_trace": 1 - ovl[best_o]["wait"] / ovl[best_o]["dispatch"],
            "serial_repeat": best_s, "overlap_repeat": best_o}


def draw(per_rank: list[dict], step: int, ax=None, *, title: str | None = None, legend: bool = True,
         lang: str = "en"):
    """Gantt chart of one repeat in milliseconds (``gantt.draw`` with this module's kinds), its words
    in ``lang`` (course_lib.i18n; English by default)."""
    tl = timeline(per_rank, step)
    rows = [tr("rank {r} {lane}", lang, r=r, lane=tr(lane, lang, context="timeline lane"))
            for r in range(len(per_rank)) for lane in ("compute", "all-to-all")]
    names = {k: tr(v, lang) for k, v in NAMES.items()}
    return gantt.draw(tl, ax, title=title, unit="ms", scale=1e3, labels=False, legend=legend, rows=rows,
                      kinds=tuple(COLORS), names=names, colors=COLORS, lang=lang)


def draw_both(per_rank: list[dict], *, titles: tuple[str, str] = ("serial", "overlapped"), lang: str = "en"):
    """The least disturbed serial and overlapped repeats stacked on one time axis; ``(fig, axes)``,
    its words (the titles included) in ``lang``."""
    s = summary(per_rank)
    fig, ax = plots.figure(1, 2, figsize=(9, 5.6), lang=lang)
    draw(per_rank, s["serial_repeat"], ax[0], title=tr(titles[0], lang), lang=lang)
    draw(per_rank, s["overlap_repeat"], ax[1], title=tr(titles[1], lang), legend=False, lang=lang)
    hi = max(a.get_xlim()[1] for a in ax)
    for a in ax:
        a.set_xlim(0, hi)
    return fig, ax


def run(world_size: int = 2, **kwargs) -> list[dict]:
    """One launch of ``overlap_worker`` (``OVERLAP`` overridden by ``kwargs``); every rank's result."""
    from ..dist import launch
    from . import overlap_runs        # the worker by its module's name, also under ``python -m``
    return launch(overlap_runs.overlap_worker, world_size, threads_per_rank=1, timeout=300, **{**OVERLAP, **kwargs})


def load_overlap_cache(path: str | Path = OVERLAP_PATH) -> dict:
    """The cached run the book reads (``OVERLAP_COMMAND``)."""
    return load_cached(path, OVERLAP_COMMAND)


def _main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m course_lib.expert.overlap_runs",
                                description="Cache the overlap timelines the chapter 14 page reads.")
    p.add_argument("--out", default=str(OVERLAP_PATH))
    p.add_argument("--launches", type=int, default=3, help="independent launches (the first is drawn)")
    a = p.parse_args(argv)
    runs = [run() for _ in range(a.launches)]
    doc = {"what": "Chapter 14: one EP MoE layer's forward on 2 gloo ranks, dispatch serial vs overlapped "
                   "with the shared expert (expert.overlap_runs.overlap_worker); events in seconds of the "
                   "first launch, the summary of every launch",
           "command": OVERLAP_COMMAND, "torch": torch.__version__, "config": OVERLAP,
           "when": time.strftime("%Y-%m-%d", time.gmtime()), "ranks": runs[0], "summary": summary(runs[0]),
           "summaries": [summary(r) for r in runs]}
    Path(a.out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(doc["summaries"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
