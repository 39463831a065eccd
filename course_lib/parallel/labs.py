"""The runs behind the data-parallel lab: one worker that trains the tiny GPT under any strategy.

``train_worker(ctx, strategy=...)`` runs on every rank (via ``course_lib.dist.launch``), trains a
few AdamW steps on its slice of a fixed global batch and reports what it measured: bytes it sent
(counted by :class:`~course_lib.parallel.counting.CountingComm`, and by the kernel), seconds in
compute and in communication, memory held per kind of state, and optionally the final weights.

Strategies: ``dp`` (one all-reduce after backward), ``dp_overlap`` (bucketed, overlapped with
backward), ``zero1``, ``zero2``, ``fsdp`` (from scratch, ``course_lib.parallel``), and PyTorch's
own ``torch_ddp`` (DistributedDataParallel) and ``torch_fsdp2`` (``fully_shard``), whose bytes can
only be read from the kernel (gloo on Linux). What every run is checked against is
``course_lib.parallel.dp_reference`` (re-exported here): the demo GPT and its batches,
``reference_run``, the single-process answer every strategy must reproduce, and
``expected_bytes_per_step``, the bytes the theory says each strategy sends.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..model import GPT, GPTConfig
from .counting import CountingComm, os_bytes_written
from .state_bytes import optimizer_state_bytes, storage_bytes
from .dp_reference import (ADAMW, DEMO_CONFIG, STRATEGIES, _loss, expected_bytes_per_step,
                           make_batches, reference_run, root_params)

__all__ = ["DEMO_CONFIG", "STRATEGIES", "root_params", "expected_bytes_per_step", "make_batches", "reference_run", "train_worker",
           "suite_worker", "run_suite", "summarize", "collectives_worker",
           "grad_sync_check_worker"]

# 512 KiB: two buckets for the demo model (DDP's default is 25 MiB). Each bucket costs one ring
# all-reduce, 2(n-1) rounds of messages, and with 4 ranks on 2 cores a round costs milliseconds of
# scheduling: 4 buckets of 256 KiB made overlapped DP 1.6-2.3x slower than DDP, 2 buckets keep some
# overlap at DDP's speed (the bucket-size trade-off of Li et al. 2020, arXiv 2006.15704).
DEFAULT_BUCKET_BYTES = 2**19


@dataclass
class _Run:
    """A wrapped model: ``step(batch) -> loss``, and getters for the full weights, the averaged
    gradients (both collectives: every rank calls them) and the memory held per kind."""

    step: Callable
    weights: Callable
    grads: Callable
    memory: Callable
    comm: CountingComm | None = None


def _torch_memory(model, opt) -> Callable:
    return lambda: {"params": storage_bytes(model.parameters()),
                    "grads": storage_bytes(p.grad for p in model.parameters()),
                    "optimizer": optimizer_state_bytes(opt)}


def _step_fn(model, zero_grad: Callable[[], None], update: Callable[[], None]) -> Callable:
    """One training step of any strategy: ``zero_grad()``, forward and backward through ``model``,
    then ``update()`` (the strategy's gradient synchronisation and optimizer step)."""
    def step(batch):
        zero_grad()
        loss = _loss(model, batch)
        loss.backward()
        update()
        return loss
    return step


def _setup(ctx, strategy: str, model: GPT, lr: float, algorithm: str, bucket_bytes: int | None,
           reshard_root: bool = True) -> _Run:
    """Wrap ``model`` for ``strategy`` (see the module docstring)."""
    from . import dp as dp_mod, fsdp as fsdp_mod, zero as zero_mod
    hp = {**ADAMW, "lr": lr}
    named = lambda get: (lambda: {k: get(p).detach().clone() for k, p in model.named_parameters()})  # noqa: E731
    comm = None if strategy.startswith("torch_") else CountingComm(ctx.group, algorithm=algorithm)
    if strategy in ("dp", "dp_overlap"):
        overlap = strategy == "dp_overlap"
        if overlap and bucket_bytes is None:
            bucket_bytes = DEFAULT_BUCKET_BYTES
        w = dp_mod.DataParallel(model, comm, bucket_bytes=bucket_bytes, overlap=overlap)
        opt = torch.optim.AdamW(w.parameters(), **hp)
        return _Run(_step_fn(w, opt.zero_grad, opt.step), named(lambda p: p), named(lambda p: p.grad),
                    lambda: w.memory_bytes(opt), comm)
    if strategy in ("zero1", "zero2"):
        z = zero_mod.ZeroOptimizer(model.parameters(), torch.optim.AdamW, comm=comm, stage=int(strategy[-1]),
                                   bucket_bytes=bucket_bytes, **hp)

        def zero_grads():
            g = z.full_grads()
            return {k: g[p] for k, p in model.named_parameters()}
        return _Run(_step_fn(model, z.zero_grad, z.step), named(lambda p: p), zero_grads, z.memory_bytes,
                    comm)
    if strategy == "fsdp":
        f = fsdp_mod.FSDP(model, comm, units=list(model.blocks), reshard_root=reshard_root)
        opt = torch.optim.AdamW(f.parameters(), **hp)
        step = _step_fn(model, lambda: opt.zero_grad(set_to_none=False), opt.step)
        return _Run(step, f.full_state, lambda: f.full_state(grads=True), lambda: f.memory_bytes(opt), comm)
    if strategy == "torch_ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        cap = (bucket_bytes if bucket_bytes is not None else DEFAULT_BUCKET_BYTES) / 2**20
        ddp = DDP(model, process_group=ctx.group, bucket_cap_mb=cap)   # same buckets as dp_overlap
        opt = torch.optim.AdamW(ddp.parameters(), **hp)
        return _Run(_step_fn(ddp, opt.zero_grad, opt.step), named(lambda p: p), named(lambda p: p.grad),
                    _torch_memory(model, opt))
    if strategy == "torch_fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), **hp)
        return _Run(_step_fn(model, opt.zero_grad, opt.step), named(lambda p: p.full_tensor()),
                    named(lambda p: p.grad.full_tensor()), _torch_memory(model, opt))
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")


def train_worker(ctx, strategy: str = "dp", config: dict | None = None, global_batch: int = 8,
                 steps: int = 3, seed: int = 0, lr: float = ADAMW["lr"], algorithm: str = "ring",
                 bucket_bytes: int | None = None, warmup: int = 0, return_state: bool = False,
                 reshard_root: bool = True) -> dict:
    """Train ``steps`` steps (plus ``warmup`` unmeasured ones first) with ``strategy`` on this
    rank's slice of each global batch; return per-step measurements (see module docstring)."""
    n, r = ctx.world_size, ctx.rank
    if global_batch % n:
        raise ValueError(f"global_batch ({global_batch}) must be divisible by the world size ({n})")
    cfg = GPTConfig(**(config or DEMO_CONFIG))
    model = GPT(cfg, seed=seed).to(ctx.device)
    n_params = model.n_params()
    element_size = next(model.parameters()).element_size()
    run = _setup(ctx, strategy, model, lr, algorithm, bucket_bytes, reshard_root)
    comm = run.comm
    batches = make_batches(cfg, global_batch, warmup + steps, seed).to(ctx.device)
    per = global_batch // n
    rec: dict[str, list] = {k: [] for k in ("loss", "step_s", "sent", "os_bytes", "comm_s", "exposed_s")}
    for i in range(warmup + steps):
        batch = batches[i, r * per:(r + 1) * per]
        torch.distributed.barrier(group=ctx.group)
        sent0 = {k: v.sent_bytes for k, v in comm.stats.items()} if comm else {}
        c0, w0 = (comm.total("seconds"), comm.wait_seconds) if comm else (0.0, 0.0)
        b0, t0 = os_bytes_written(), time.perf_counter()
        loss = run.step(batch)
        dt, b1 = time.perf_counter() - t0, os_bytes_written()
        if comm:
            sent = {k: v.sent_bytes - sent0[k] for k, v in comm.stats.items()}
            comm_s, exposed_s = comm.total("seconds") - c0, comm.wait_seconds - w0
        if i == 0 and return_state:      # the averaged gradients of the first step (a collective)
            grads0 = run.grads()
        if i < warmup:
            continue
        rec["loss"].append(loss.item())
        rec["step_s"].append(dt)
        kernel_sees_it = ctx.backend == "gloo" and b0 is not None and b1 is not None   # NCCL skips sockets
        rec["os_bytes"].append((b1 - b0) if kernel_sees_it else None)
        if comm:
            rec["sent"].append(sent)
            rec["comm_s"].append(comm_s)
            rec["exposed_s"].append(exposed_s)
    out = {"strategy": strategy, "rank": r, "world_size": n, "n_params": n_params,
           "element_size": element_size, "memory": run.memory(), **rec}
    if return_state:
        full = run.weights()
        out["state"] = {k: v.detach().cpu().clone() for k, v in full.items()} if r == 0 else None
        out["grads0"] = {k: v.cpu() for k, v in grads0.items()} if r == 0 else None
    if comm:
        comm.close()
    return out


def suite_worker(ctx, strategies: tuple[str, ...] | list[str] = STRATEGIES, **kwargs) -> dict:
    """Run :func:`train_worker` for each strategy in turn in the same processes (one launch for
    all of them: same machine state, no start-up cost per strategy)."""
    return {s: train_worker(ctx, strategy=s, **kwargs) for s in strategies}


def run_suite(world_size: int, strategies=STRATEGIES, timeout: float = 300.0,
              threads_per_rank: int = 1, **kwargs) -> dict:
    """Launch :func:`suite_worker` on ``world_size`` ranks; return {strategy: summary}, each summary
    also carrying rank 0's final weights (``state``) and first-step gradients (``grads0``) when
    ``return_state=True``. One intra-op thread per rank by default: ranks then compete for cores
    the way GPUs never do, but no rank's thread pool spins against another's."""
    from ..dist import launch
    res = launch(suite_worker, world_size, timeout=timeout, threads_per_rank=threads_per_rank,
                 strategies=tuple(strategies), **kwargs)
    out = {}
    for s in strategies:
        out[s] = summarize([r[s] for r in res])
        out[s]["state"] = res[0][s].get("state")
        out[s]["grads0"] = res[0][s].get("grads0")
    return out


def summarize(results: list[dict]) -> dict[str, Any]:
    """One run's ranks -> medians over steps: step time (slowest rank), compute and communication
    seconds, bytes sent per rank per step (ring count and kernel count), memory of rank 0."""
    r0 = results[0]
    step = statistics.median(max(res["step_s"][i] for res in results) for i in range(len(r0["step_s"])))
    out = {"strategy": r0["strategy"], "world_size": r0["world_size"], "n_params": r0["n_params"],
           "step_s": step, "loss": statistics.fmean(statistics.fmean(res["loss"]) for res in results),
           "memory": r0["memory"]}
    if r0["os_bytes"] and r0["os_bytes"][0] is not None:
        out["os_bytes"] = statistics.median(statistics.fmean(res["os_bytes"][i] for res in results)
                                            for i in range(len(r0["os_bytes"])))
    if r0["sent"]:
        per_step = [{k: statistics.fmean(res["sent"][i][k] for res in results) for k in r0["sent"][i]}
                    for i in range(len(r0["sent"]))]
        out["sent"] = {k: statistics.median(s[k] for s in per_step) for k in per_step[0]}
        out["sent_bytes"] = sum(out["sent"].values())
        out["comm_s"] = statistics.median(statistics.fmean(res["comm_s"]) for res in results)
        out["exposed_s"] = statistics.median(statistics.fmean(res["exposed_s"]) for res in results)
    return out


def collectives_worker(ctx, numel: int = 2**16, algorithm: str = "ring") -> dict:
    """One all-reduce, one reduce-scatter and one all-gather over a ``numel``-element fp32 buffer;
    returns per kind the bytes this rank sent (ring count and kernel count) and whether the result
    equals the value computed locally."""
    n, r = ctx.world_size, ctx.rank
    comm = CountingComm(ctx.group, algorithm=algorithm)
    base = torch.arange(numel, dtype=torch.float32, device=ctx.device) % 97
    x = base * (r + 1)
    total = base * (n * (n + 1) / 2)                     # the sum over ranks of base·(rank+1)
    ar = x.clone()
    comm.all_reduce(ar)
    rs = torch.empty(numel // n, dtype=torch.float32, device=ctx.device)
    comm.reduce_scatter(rs, x.clone())
    ag = torch.empty(numel, dtype=torch.float32, device=ctx.device)
    comm.all_gather(ag, x.chunk(n)[r].clone())
    gathered = torch.cat([(base * (k + 1)).chunk(n)[k] for k in range(n)])
    ok = {"all_reduce": torch.equal(ar, total), "reduce_scatter": torch.equal(rs, total.chunk(n)[r]),
          "all_gather": torch.equal(ag, gathered)}
    gloo = ctx.backend == "gloo"                          # NCCL traffic never reaches a socket
    out = {k: {"sent": comm.stats[k].sent_bytes, "os": comm.stats[k].os_bytes if gloo else 0,
               "ok": ok[k], "size": numel * 4} for k in ok}
    comm.close()
    return out


def grad_sync_check_worker(ctx, source: str, fn_name: str, config: dict | None = None,
                           global_batch: int = 4, seed: int = 0) -> dict:
    """Grade a student's ``fn(grads, group)``: run it on this rank's local gradients and compare
    with the whole-batch gradients computed here in one process. Returns errors, not a verdict."""
    namespace: dict[str, Any] = {"__name__": "__student__"}
    exec(compile(source, "<student code>", "exec"), namespace)
    fn = namespace[fn_name]
    cfg = GPTConfig(**(config or dict(DEMO_CONFIG, n_layers=2, d_model=32)))
    n, r = ctx.world_size, ctx.rank
    batch = make_batches(cfg, global_batch, 1, seed)[0].to(ctx.device)
    ref = GPT(cfg, seed=seed).to(ctx.device)
    _loss(ref, batch).backward()
    model = GPT(cfg, seed=seed).to(ctx.device)
    per = global_batch // n
    _loss(model, batch[r * per:(r + 1) * per]).backward()
    local = [p.grad.clone() for p in model.parameters()]
    grads = [p.grad for p in model.parameters()]
    fn(grads, ctx.group)
    want = [p.grad for p in ref.parameters()]

    def err(xs):
        return max(float((x - w).abs().max() / (w.abs().max() + 1e-12)) for x, w in zip(xs, want))
    return {"err": err(grads), "err_if_summed": err([g / n for g in grads]),
            "err_local": err(local), "unchanged": all(torch.equal(a, b) for a, b in zip(grads, local)),
            "shapes_ok": all(g.shape == w.shape for g, w in zip(grads, want))}
