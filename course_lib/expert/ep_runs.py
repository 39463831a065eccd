"""The expert-parallel drivers on real ranks: training against one process, the counted bytes of
one layer, the hot-expert straggler. Each is a module-level ``worker(ctx, **kwargs)`` for
:func:`course_lib.dist.launch` (``labs.ep_cases_worker`` runs several in one launch).

The reference is chapter 8's single-process MoE GPT (``course_lib.moe.train.moe_gpt``) trained on
every rank on the whole global batch, beside the expert-parallel copy that sees only this rank's
sequences, so "exact" means loss, gradients and parameters after k steps equal to one process up to
fp32 reordering of sums. Bytes are counted by :class:`~course_lib.parallel.counting.CountingComm`
(ring algorithm: exact).
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist

from ..model import GPTConfig
from ..moe import MoE, dropped_tokens, mask_router, token_choice
from ..moe.train import moe_gpt
from ..parallel.counting import CountingComm
from .ep import ep_groups, expert_parallel, reduce_gradients

__all__ = ["TINY", "balanced_router", "hot_router", "ep_equivalence_worker", "ep_bytes_worker",
           "straggler_worker", "equivalence_bounds"]


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
                          cfg: GPTConfig = TINY, seed: int = 0, group: str = "sequence", router: str = "token",
                          routing: str | None = None) -> dict:
    """Train an expert-parallel MoE GPT (EP groups of ``ep`` ranks carved from ``ctx.group``'s
    data-parallel ranks, default all of them) and the single-process MoE GPT on the global batch.

    Each rank feeds its own ``batch`` sequences; the reference sees all world·batch of them.
    Routing is per sequence by default (``group="sequence"``), so a token's experts do not depend
    on which rank holds its neighbours; with ``group="batch"`` and a capacity (or ``router=
    "expert"``) they do, and ``routing`` is the layer's ``routing_group``: ``"dp"`` (the
    data-parallel group: the global batch, as one process), ``"local"`` (each rank's tokens alone)
    or None (the layer refuses). SGD with momentum (Adam's division by √v would amplify rounding of
    near-zero gradients). Returns the largest loss gap over steps, the gradient gap after the first
    backward, the parameter gap after ``steps`` steps, how far the reference moved, the largest
    reference gradient and parameter (to scale rounding bounds), the reference's drop fraction
    summed over layers at step 0, and this rank's counted all-to-all bytes of the first step."""
    w, r = ctx.world_size, ctx.rank
    ep = ep or w
    ep_group, edp_group = ep_groups(w, ep, r)
    kw = {"top_k": top_k, "capacity_factor": capacity_factor, "group": group, "router": router}
    ref = moe_gpt(cfg, n_experts, seed=seed, **kw)
    start = {k: p.detach().clone() for k, p in ref.named_parameters()}
    comm = CountingComm(ep_group)
    model = expert_parallel(copy.deepcopy(ref), comm, routing_group=ctx.group if routing == "dp" else routing)
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


def equivalence_bounds(r: dict) -> dict:
    """The fp32 bounds a training result must meet (derived in tests/test_expert_parallel.py):
    n·eps·|loss| for the loss, n·eps·max|grad| for a gradient, lr·(1 + 1.9 + 2.71) gradient bounds
    plus 3 roundings of the largest parameter after 3 SGD steps (lr 0.1, momentum 0.9)."""
    eps, n = torch.finfo(torch.float32).eps, r["tokens"]
    grad = n * eps * r["grad_scale"]
    return {"loss": n * eps * 4.5, "grad": grad, "param": 0.1 * 5.61 * grad + 3 * eps * r["param_scale"]}
