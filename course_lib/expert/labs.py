"""The chapter 14 lab's drivers: every real-rank check in one launch (``ep_cases_worker``,
``lab_demo``), and the load-balancing comparison (one process: auxiliary loss, bias balancing,
nothing) the page reads from a cache.

The expert-parallel workers themselves live in :mod:`course_lib.expert.ep_runs` (training against
one process, bytes, the straggler) and :mod:`course_lib.expert.overlap_runs` (the overlapped
dispatch); their public names stay importable from here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from ..report import load_cached
from .. import corpus
from .._validate import choice
from ..model import GPTConfig
from ..moe import MoE
from ..moe.train import moe_gpt, train
from .balance import bias_balance, drop_share, load_imbalance
from .ep_runs import (TINY, balanced_router, hot_router, ep_equivalence_worker, ep_bytes_worker,
                      straggler_worker, equivalence_bounds)
from .overlap_runs import OVERLAP, overlap_worker
from .ulysses import ulysses_worker

__all__ = ["TINY", "balanced_router", "hot_router", "ep_equivalence_worker", "ep_bytes_worker",
           "straggler_worker", "ep_cases_worker", "lab_demo", "equivalence_bounds", "BALANCE_CFG", "BALANCE",
           "METHODS", "balance_run", "balance_summary", "balance_demo", "BALANCE_PATH", "load_balance_cache"]


def ep_cases_worker(ctx, *, cases: list[dict]) -> list[dict]:
    """Several checks in one launch (start-up paid once): each case is ``{"check": name,
    **kwargs}``, name one of "train", "bytes", "straggler", "ulysses", "overlap"."""
    run = {"train": ep_equivalence_worker, "bytes": ep_bytes_worker, "straggler": straggler_worker,
           "ulysses": ulysses_worker, "overlap": overlap_worker}
    return [run[c["check"]](ctx, **{k: v for k, v in c.items() if k != "check"}) for c in cases]


def lab_demo(world_size: int = 2) -> dict:
    """Everything the chapter's lab shows, in one launch of ``world_size`` ranks: EP training
    against one process (dropless and capacity, top-1 and top-2), one layer's counted bytes, the
    hot-expert straggler and a capacity sweep, Ulysses beside ring attention, and the dispatch
    overlapped with the shared expert (``overlap_runs.OVERLAP``; every rank's result)."""
    from ..dist import launch
    train = [dict(n_experts=4, top_k=1, capacity_factor=None), dict(n_experts=4, top_k=2, capacity_factor=1.0)]
    bytes_ = [dict(n_experts=4, top_k=2, capacity_factor=None), dict(n_experts=4, top_k=2, capacity_factor=1.0)]
    cfs = (0.5, 0.75, 1.0, 1.5, 2.0)
    cases = ([dict(check="train", **c) for c in train] + [dict(check="bytes", **c) for c in bytes_]
             + [dict(check="straggler", hot_share=h) for h in (0.0, 1.0)]
             + [dict(check="straggler", hot_share=0.5, capacity_factor=cf, repeats=1) for cf in cfs]
             + [dict(check="ulysses", heads=4, seq_len=32)] + [dict(check="overlap", **OVERLAP)])
    res = launch(ep_cases_worker, world_size, threads_per_rank=1, timeout=300, cases=cases)
    per_case = [list(r) for r in zip(*res)]
    out = {"world_size": world_size, "train": [], "bytes": [], "capacity": [], "cases": cases}
    for c, rs in zip(cases, per_case):
        if c["check"] == "train":
            ok = all(r[k + "_gap"] <= equivalence_bounds(r)[k] for r in rs for k in ("loss", "grad", "param"))
            out["train"].append({**c, "exact": ok, "moved": rs[0]["moved"], "dropped": rs[0]["dropped"],
                                 "gaps": {k: max(r[k + "_gap"] for r in rs) for k in ("loss", "grad", "param")}})
        elif c["check"] == "bytes":
            out["bytes"].append({**c, "forward": rs[0]["forward"]["all_to_all"]["sent_bytes"],
                                 "backward": rs[0]["backward"]["all_to_all"]["sent_bytes"],
                                 "tokens": rs[0]["tokens"]})
        elif c["check"] == "straggler" and "capacity_factor" not in c:
            out["hot" if c["hot_share"] else "balanced"] = rs[0]
        elif c["check"] == "straggler":
            out["capacity"].append({**rs[0], "capacity_factor": c["capacity_factor"]})
        elif c["check"] == "overlap":
            out["overlap"] = rs
        else:
            out["ulysses"] = rs[0]
    return out


# ----------------------------------------------------------------------------- load balancing
BALANCE_CFG = GPTConfig(vocab_size=256, seq_len=32, n_layers=2, n_heads=2, d_model=32)   # chapter 8's lab model
BALANCE = dict(steps=300, n_experts=4, top_k=1, lr=1e-3, alpha=0.1, gamma=5e-3, capacity_factor=1.0,
               batch_size=16, seed=0)
METHODS = ("none", "aux", "bias")
BALANCE_PATH = Path(__file__).resolve().parents[2] / "data" / "expert_balance.json"
BALANCE_COMMAND = "python -m course_lib.expert.labs --out data/expert_balance.json"


def balance_run(method: str, *, steps: int = 300, n_experts: int = 4, top_k: int = 1, lr: float = 1e-3,
                alpha: float = 0.1, gamma: float = 5e-3, capacity_factor: float = 1.0, batch_size: int = 16,
                seed: int = 0, cfg: GPTConfig = BALANCE_CFG) -> dict:
    """Train chapter 8's MoE GPT on the course corpus (dropless top-k token choice) balanced by
    ``method``: "none", "aux" (the Switch loss weighted ``alpha``) or "bias" (a
    :class:`~course_lib.expert.balance.BiasBalancedRouter` per layer, step ``gamma``).

    Every step records each layer's max/mean load and the share of assignments a capacity of
    ``capacity_factor`` (the batch one routing group) would drop, from the routing that step
    trained with; returns them (steps × layers) with the LM losses, the final biases and seconds."""
    choice("method", method, METHODS)
    model = moe_gpt(cfg, n_experts, seed=seed, router="token", top_k=top_k)
    routers = bias_balance(model, gamma) if method == "bias" else []
    imbalance, drop = [], []

    def record(m) -> None:
        counts = [layer.routing.assigned.sum((0, 1)) for layer in m.modules() if isinstance(layer, MoE)]
        imbalance.append([load_imbalance(c) for c in counts])
        drop.append([drop_share(c, capacity_factor, top_k) for c in counts])
        for r in routers:
            r.update()                       # after the optimizer step, from this step's loads

    t0 = time.perf_counter()
    loss = train(model, steps, batch_size, lr, aux_coef=alpha if method == "aux" else 0.0, seed=seed,
                 on_step=record)
    return {"method": method, "imbalance": imbalance, "drop": drop, "loss": loss,
            "bias": [r.bias.tolist() for r in routers], "seconds": time.perf_counter() - t0}


def balance_summary(run: dict, start: int | None = None) -> dict:
    """Means over steps ``start``… (default: the second half) and layers of the max/mean load, the
    dropped share and the LM loss, and the worst step's max/mean load in that window."""
    s = len(run["loss"]) // 2 if start is None else start
    mean = lambda key: float(torch.tensor(run[key][s:], dtype=torch.float64).mean())  # noqa: E731
    return {"imbalance": mean("imbalance"), "drop": mean("drop"), "loss": mean("loss"), "from_step": s,
            "worst": max(max(row) for row in run["imbalance"][s:])}


def balance_demo(**kwargs) -> dict:
    """The three methods on the same model, data and seed (``BALANCE`` overridden by ``kwargs``)."""
    kw = {**BALANCE, **kwargs}
    return {"config": kw, "runs": {m: balance_run(m, **kw) for m in METHODS}}


def load_balance_cache(path: str | Path = BALANCE_PATH) -> dict:
    """The cached comparison the book reads: ``BALANCE`` for seeds 0, 1, 2 (``BALANCE_COMMAND``)."""
    return load_cached(path, BALANCE_COMMAND)


def _main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m course_lib.expert.labs",
                                description="Cache the load-balancing comparison the chapter 14 page reads.")
    p.add_argument("--out", default=str(BALANCE_PATH))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    r4 = lambda v: [[round(x, 4) for x in row] for row in v] if isinstance(v[0], list) else [round(x, 4) for x in v]  # noqa: E731
    doc = {"what": "Chapter 14: load balancing by auxiliary loss, by bias, and none (expert.labs.balance_run); "
                   "per-step traces (steps x layers) for seed 0, summaries for every seed",
           "command": BALANCE_COMMAND, "torch": torch.__version__, "corpus_sha256": corpus.load().sha256,
           "config": BALANCE, "summary": {}}
    for seed in (0, 1, 2):
        runs = balance_demo(seed=seed)["runs"]
        doc["summary"][str(seed)] = {m: balance_summary(r) for m, r in runs.items()}
        if seed == 0:
            doc["trace"] = {m: {"bias": r["bias"], **{k: r4(r[k]) for k in ("imbalance", "drop", "loss")}}
                            for m, r in runs.items()}
        print(seed, doc["summary"][str(seed)], file=sys.stderr)
    Path(a.out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
