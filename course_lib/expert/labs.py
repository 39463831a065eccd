"""Drivers that run chapter 14 on real ranks (the tests and the lab launch them), and the
load-balancing comparison (one process: auxiliary loss, bias balancing, nothing).

Each is a module-level ``worker(ctx, **kwargs)`` for :func:`course_lib.dist.launch`. The reference
is chapter 8's single-process MoE GPT (``course_lib.moe.train.moe_gpt``) trained on every rank on
the whole global batch, beside the expert-parallel copy that sees only this rank's sequences, so
"exact" means loss, gradients and parameters after k steps equal to one process up to fp32
reordering of sums. Bytes are counted by :class:`~course_lib.parallel.counting.CountingComm` (ring
algorithm: exact).
"""
from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..report import load_cached
from .. import corpus
from .._validate import choice
from ..model import GPTConfig
from ..moe import MoE, dropped_tokens, mask_router, token_choice
from ..moe.train import moe_gpt, train
from .balance import bias_balance, drop_share, load_imbalance
from ..parallel.counting import CountingComm
from .ep import ep_groups, expert_parallel, reduce_gradients

__all__ = ["TINY", "balanced_router", "hot_router", "ep_equivalence_worker", "ep_bytes_worker",
           "straggler_worker", "ep_cases_worker", "lab_demo", "equivalence_bounds", "BALANCE_CFG", "BALANCE",
           "METHODS", "balance_run", "balance_summary", "balance_demo", "BALANCE_PATH", "load_balance_cache"]

TINY = GPTConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=2, d_model=32)


def balanced_router(top_k: int):
    """A router that sends flat token n (of this rank's batch) to experts (n·k + j) mod E: every
    expert gets exactly k·T/E pairs when E divides k·T, so the dropless bytes are the formula's."""
    def kept(logits: torch.Tensor) -> torch.Tensor:
        B, S, E = logits.shape
        n = torch.arange(B * S)[:, None] * top_k + torch.arange(top_k)[None, :]
        return torch.zeros(B * S, E, dtype=torch.bool).scatter_(1, n % E, True).reshape(B, S, E)
    return mask_router(kept)


def hot_router(top_k: int, hot_share: float, capacity_factor: float | None = None):
    """A skewed router: the first ``hot_share`` of each rank's tokens send their first choice to
    expert 0 (the hot expert, rank 0's), the others spread as :func:`balanced_router`. The wanted
    experts get +30 on the learned logits, then chapter 8's ``token_choice`` decides, with
    ``capacity_factor`` (per sequence, the ``MoE`` layer's default group) if given, so overflow is
    dropped exactly as in chapter 8."""
    def route(logits: torch.Tensor):
        B, S, E = logits.shape
        n = torch.arange(B * S)[:, None] * top_k + torch.arange(top_k)[None, :]
        e = n % E
        hot = torch.arange(B * S) < round(hot_share * B * S)
        if E > 1:
            e[hot, 1:] = (e[hot, 1:] % (E - 1)) + 1       # the other choices avoid expert 0
        e[hot, 0] = 0
        bias = torch.zeros(B * S, E).scatter_(1, e, 30.0).reshape(B, S, E)
        return token_choice(logits + bias, top_k, capacity_factor, group="sequence")
    return route


def _batches(cfg: GPTConfig, steps: int, batch: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (steps, batch, cfg.seq_len + 1), generator=g)


def _expert_gap(ep_model, ref) -> float:
    """Largest gap between this rank's expert weights (and grads) and the reference's slice."""
    gap = 0.0
    for mine, theirs in zip((m for m in ep_model.modules() if hasattr(m, "local")),
                            (m for m in ref.modules() if isinstance(m, MoE))):
        lo = mine.rank * mine.local
        for a, b in ((mine.up, theirs.up.weight), (mine.down, theirs.down.weight)):
            gap = max(gap, float((a - b[lo:lo + mine.local]).abs().max()))
    return gap


def _gaps(ep_model, ref, grads: bool) -> float:
    """Largest absolute gap over dense parameters (or gradients) and local experts."""
    pick = (lambda p: p.grad) if grads else (lambda p: p)
    mine = {k: pick(p) for k, p in ep_model.named_parameters() if not getattr(p, "expert", False)}
    theirs = {k: pick(p) for k, p in ref.named_parameters()}
    gap = max(float((mine[k] - theirs[k]).abs().max()) for k in mine)
    if grads:
        for a, b in zip((m for m in ep_model.modules() if hasattr(m, "local")),
                        (m for m in ref.modules() if isinstance(m, MoE))):
            lo = a.rank * a.local
            for pa, pb in ((a.up, b.up.weight), (a.down, b.down.weight)):
                gap = max(gap, float((pa.grad - pb.grad[lo:lo + a.local]).abs().max()))
        return gap
    return max(gap, _expert_gap(ep_model, ref))


def ep_equivalence_worker(ctx, *, ep: int | None = None, n_experts: int = 4, top_k: int = 1,
                          capacity_factor: float | None = None, steps: int = 3, batch: int = 2,
                          cfg: GPTConfig = TINY, seed: int = 0) -> dict:
    """Train an expert-parallel MoE GPT (EP groups of ``ep`` ranks carved from ``ctx.group``'s
    data-parallel ranks, default all of them) and the single-process MoE GPT on the global batch.

    Each rank feeds its own ``batch`` sequences; the reference sees all world·batch of them.
    Routing is per sequence (``group="sequence"``), so a token's experts do not depend on which
    rank holds its neighbours. SGD with momentum (Adam's division by √v would amplify rounding of
    near-zero gradients). Returns the largest loss gap over steps, the gradient gap after the first
    backward, the parameter gap after ``steps`` steps, how far the reference moved, the largest
    reference gradient and parameter (to scale rounding bounds), the reference's drop fraction
    summed over layers at step 0, and this rank's counted all-to-all bytes of the first step."""
    w, r = ctx.world_size, ctx.rank
    ep = ep or w
    ep_group, edp_group = ep_groups(w, ep, r)
    kw = {"top_k": top_k, "capacity_factor": capacity_factor, "group": "sequence", "router": "token"}
    ref = moe_gpt(cfg, n_experts, seed=seed, **kw)
    start = {k: p.detach().clone() for k, p in ref.named_parameters()}
    comm = CountingComm(ep_group)
    model = expert_parallel(copy.deepcopy(ref), comm)
    dp, edp = CountingComm(ctx.group), CountingComm(edp_group)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    loss_gap = grad_gap = grad_scale = dropped = 0.0
    first = None
    for step, b in enumerate(_batches(cfg, steps, batch * w)):
        mine = b[r * batch:(r + 1) * batch]
        _, loss = model(mine[:, :-1], mine[:, 1:])
        loss.backward()
        reduce_gradients(model, dp, edp)
        if step == 0:
            first = comm.snapshot()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, group=ctx.group)        # a check, not training: uncounted
        _, loss_ref = ref(b[:, :-1], b[:, 1:])
        loss_ref.backward()
        loss_gap = max(loss_gap, abs(float(global_loss) / w - float(loss_ref)))
        if step == 0:
            grad_gap = _gaps(model, ref, grads=True)
            grad_scale = max(float(p.grad.abs().max()) for p in ref.parameters())
            dropped = sum(m.stats["drop_fraction"] for m in ref.modules() if isinstance(m, MoE))
        for o in (opt, opt_ref):
            o.step()
            o.zero_grad()
    return {"loss_gap": loss_gap, "grad_gap": grad_gap, "param_gap": _gaps(model, ref, grads=False),
            "moved": max(float((p - start[k]).abs().max()) for k, p in ref.named_parameters()),
            "grad_scale": grad_scale, "param_scale": max(float(p.abs().max()) for p in ref.parameters()),
            "tokens": batch * w * cfg.seq_len, "dropped": dropped, "bytes": first}


def ep_bytes_worker(ctx, *, n_experts: int = 4, top_k: int = 1, capacity_factor: float | None = None,
                    batch: int = 2, cfg: GPTConfig = TINY) -> dict:
    """One MoE layer, forward and backward, on this rank's ``batch`` sequences (fp32): the counted
    all-to-all bytes split into forward and backward, and the kept pairs that left this rank.
    Dropless runs :func:`balanced_router`; with a capacity, chapter 8's learned token-choice
    router (padded buffers cost the same whatever the routing)."""
    router = balanced_router(top_k) if capacity_factor is None else "token"
    layer = MoE(cfg.d_model, cfg.ff, n_experts, top_k=top_k, capacity_factor=capacity_factor, router=router)
    comm = CountingComm(ctx.group)
    ep_layer = expert_parallel(torch.nn.Sequential(layer), comm)[0]
    g = torch.Generator().manual_seed(ctx.rank)
    x = torch.randn(batch, cfg.seq_len, cfg.d_model, generator=g, requires_grad=True)
    y = ep_layer(x)
    forward = comm.snapshot()
    comm.reset()
    y.sum().backward()
    kept = ep_layer.routing.kept.reshape(-1, n_experts)
    owner = torch.arange(n_experts) // ep_layer.local
    away = int(kept[:, owner != ep_layer.rank].sum())
    return {"forward": forward, "backward": comm.snapshot(), "pairs_away": away,
            "tokens": batch * cfg.seq_len}


def straggler_worker(ctx, *, hot_share: float, capacity_factor: float | None = None, top_k: int = 1,
                     tokens: int = 2048, d_model: int = 64, d_ff: int = 2048, repeats: int = 5) -> dict:
    """One expert-parallel MoE layer (one expert per rank), forward and backward, timed on every
    rank, with :func:`hot_router` sending ``hot_share`` of every rank's first choices to expert 0.

    Each repeat starts and ends with a barrier, so the step time is the busiest rank's: the
    all-to-all cannot finish before the rank with the most rows has computed them. Returns the
    median step seconds (wall clock: on a shared machine other jobs add to it), every rank's least
    CPU seconds for the step over the repeats (what its own work cost: the busiest rank's is the robust measure of
    the straggler on a loaded machine), every expert's rows (kept pairs over all ranks), the dropped share of the
    pairs (measured, and from ``moe.dropped_tokens`` on the wanted counts), and the counted bytes
    this rank sent per step."""
    e = ctx.world_size
    layer = MoE(d_model, d_ff, e, top_k=top_k, router=hot_router(top_k, hot_share, capacity_factor))
    comm = CountingComm(ctx.group)
    ep_layer = expert_parallel(torch.nn.Sequential(layer), comm)[0]
    x = torch.randn(1, tokens, d_model, generator=torch.Generator().manual_seed(ctx.rank), requires_grad=True)
    times, cpu = [], []
    for _ in range(repeats + 1):
        comm.reset()
        dist.barrier(group=ctx.group)
        t0, c0 = time.perf_counter(), time.process_time()
        ep_layer(x).sum().backward()
        c1 = time.process_time()
        dist.barrier(group=ctx.group)
        times.append(time.perf_counter() - t0)
        cpu.append(c1 - c0)
    r = ep_layer.routing
    counts = torch.stack([r.kept.reshape(-1, e).sum(0), r.assigned.reshape(-1, e).sum(0)])
    dist.all_reduce(counts, group=ctx.group)        # over ranks: a check, not the layer's traffic
    kept, wanted = counts.tolist()
    cap = r.capacity
    theory = sum(dropped_tokens(cnt, cap) for cnt in _per_rank_wanted(r, e, ctx.group)) if cap else 0
    times, cpu = sorted(times[1:]), sorted(cpu[1:])
    busy = torch.tensor([cpu[0]], dtype=torch.float64)       # the least disturbed repeat
    every = [torch.empty_like(busy) for _ in range(ctx.world_size)]
    dist.all_gather(every, busy, group=ctx.group)
    return {"step_s": times[len(times) // 2], "cpu_s": [float(t) for t in every], "rows": kept, "wanted": wanted,
            "drop_fraction": 1 - sum(kept) / sum(wanted), "drop_theory": theory / sum(wanted),
            "sent_bytes": comm.stats["all_to_all"].sent_bytes, "capacity": cap}


def _per_rank_wanted(r, e: int, group) -> list[list[int]]:
    """Every rank's wanted counts per expert (capacity applies per rank's routing group)."""
    mine = r.assigned.reshape(-1, e).sum(0)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    return [t.tolist() for t in every]


def ep_cases_worker(ctx, *, cases: list[dict]) -> list[dict]:
    """Several checks in one launch (start-up paid once): each case is ``{"check": name,
    **kwargs}``, name one of "train", "bytes", "straggler", "ulysses", "overlap"."""
    from .overlap_runs import overlap_worker
    from .ulysses import ulysses_worker
    run = {"train": ep_equivalence_worker, "bytes": ep_bytes_worker, "straggler": straggler_worker,
           "ulysses": ulysses_worker, "overlap": overlap_worker}
    return [run[c["check"]](ctx, **{k: v for k, v in c.items() if k != "check"}) for c in cases]


def equivalence_bounds(r: dict) -> dict:
    """The fp32 bounds a training result must meet (derived in tests/test_expert_parallel.py):
    n·eps·|loss| for the loss, n·eps·max|grad| for a gradient, lr·(1 + 1.9 + 2.71) gradient bounds
    plus 3 roundings of the largest parameter after 3 SGD steps (lr 0.1, momentum 0.9)."""
    eps, n = torch.finfo(torch.float32).eps, r["tokens"]
    grad = n * eps * r["grad_scale"]
    return {"loss": n * eps * 4.5, "grad": grad, "param": 0.1 * 5.61 * grad + 3 * eps * r["param_scale"]}


def lab_demo(world_size: int = 2) -> dict:
    """Everything the chapter's lab shows, in one launch of ``world_size`` ranks: EP training
    against one process (dropless and capacity, top-1 and top-2), one layer's counted bytes, the
    hot-expert straggler and a capacity sweep, Ulysses beside ring attention, and the dispatch
    overlapped with the shared expert (``overlap_runs.OVERLAP``; every rank's result)."""
    from ..dist import launch
    from .overlap_runs import OVERLAP
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
