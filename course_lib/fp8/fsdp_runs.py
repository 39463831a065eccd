"""The chapter's FP8 all-gather on real ranks: bytes counted, numerics compared, torchao beside it.

``worker`` runs on every rank (``course_lib.dist.launch``, gloo): the block weights of the tiny
GPT are sharded by rows, as FSDP2 shards them, and gathered three ways through a counting ring
(:mod:`course_lib.fp8.allgather`): BF16 then cast, FP8 with the global amax, FP8 with each shard's
own amax. Every rank checks its gathered weights against the one-process cast of the full FP32
weight. Then torchao's FSDP2 FP8 all-gather (``Float8LinearConfig(enable_fsdp_float8_all_gather=
True)`` under ``fully_shard``) gathers the same weights, and its FP8 codes and scales are
compared with the course's bit for bit; last, the case gloo refuses (a unit whose every
all-gather input is FP8) is run and its error recorded as text.

``allgather(world_size)`` launches it and returns what the page, the lab and the tests read.
"""
from __future__ import annotations

import hashlib
import logging
import math

import torch

__all__ = ["worker", "allgather", "block_weights"]


def block_weights(model) -> dict[str, torch.Tensor]:
    """The weights of every ``nn.Linear`` inside ``model.blocks`` (the ones FP8 training casts)."""
    return {f"blocks.{n}": m.weight.detach().clone() for n, m in model.blocks.named_modules()
            if isinstance(m, torch.nn.Linear)}


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def _snr(approx: torch.Tensor, exact: torch.Tensor) -> float:
    e = exact.double()
    noise = float((approx.double() - e).square().sum())
    return math.inf if noise == 0 else 10 * math.log10(float(e.square().sum()) / noise)


def _quiet_torchao() -> None:
    """torchao 0.18's import logs CUDA-kernel and pytree notices on a CPU build; not for the lab."""
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _course_paths(ctx, weights: dict[str, torch.Tensor]) -> dict:
    from ..parallel.counting import CountingComm
    from .allgather import dequantize_gathered, gather_weights, shard_rows
    from .recipes import quantize
    names, full = list(weights), list(weights.values())
    shards = [shard_rows(w, ctx.rank, ctx.world_size) for w in full]
    shapes = [tuple(w.shape) for w in full]
    ref = [quantize(w, "tensor") for w in full]
    out = {"names": names, "numel": sum(w.numel() for w in full), "paths": {}}
    for scaling in ("bf16", "global", "local"):
        comm = CountingComm(ctx.group)
        got = gather_weights(comm, shards, shapes, scaling=scaling)
        st = comm.stats["all_gather"]
        rows = []
        for (v, s), (rv, rs), w in zip(got, ref, full):
            codes, want = v.view(torch.uint8), rv.view(torch.uint8)
            rows.append({"codes_differ": float((codes != want).float().mean()),
                         "equal_to_one_process": bool(torch.equal(codes, want) and torch.equal(s, rs)),
                         "snr_db": _snr(dequantize_gathered(v, s), w),
                         "digest": _digest(v) + _digest(s.float())})
        path = {"sent_bytes": st.sent_bytes, "os_bytes": st.os_bytes, "calls": st.calls, "weights": rows}
        if scaling == "local":        # the bug: values gathered without their scales, read with this rank's own
            own = [v.float() / s[ctx.rank] for v, s in got]
            path["own_scale_rel_error"] = [float((o - w).norm() / w.norm()) for o, w in zip(own, full)]
        if scaling == "global":
            path["gathered"] = [(v.view(torch.uint8).clone(), s.clone()) for v, s in got]
        out["paths"][scaling] = path
        comm.close()
    return out


def _torchao_path(ctx, cfg, seed: int) -> dict:
    """torchao's FP8 all-gather under FSDP2 on the same weights: the FP8 weight each Float8Linear
    receives in forward, captured by a pre-hook (FSDP's unshard of the block has run by then)."""
    _quiet_torchao()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from ..model import GPT
    model = GPT(cfg, seed=seed)
    convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                               module_filter_fn=lambda mod, fqn: fqn.startswith("blocks."))
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    seen: dict[str, tuple] = {}

    def hook(name):
        def record(mod, args):
            w = mod.weight
            seen[name] = (type(w).__name__, w._data.view(torch.uint8).clone(), w._scale.detach().clone())
        return record
    handles = [m.register_forward_pre_hook(hook(f"blocks.{n}")) for n, m in model.blocks.named_modules()
               if type(m).__name__ == "Float8Linear"]
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len), generator=torch.Generator().manual_seed(seed))
    _, loss = model(idx, idx)
    loss.backward()
    for h in handles:
        h.remove()
    return {"seen": seen, "error": _torchao_refused(mesh, cfg.d_model)}


def _torchao_refused(mesh, d: int) -> str:
    """A unit whose only all-gather input is an FP8 weight (a bias-free Float8Linear): FSDP2 then
    gathers in float8_e4m3fn itself, which gloo has no type for. Returns the error, or ''."""
    from torch.distributed.fsdp import fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    lone = torch.nn.Sequential(torch.nn.Linear(d, d, bias=False))
    convert_to_float8_training(lone, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True))
    fully_shard(lone, mesh=mesh)
    try:
        lone(torch.randn(4, d))
    except RuntimeError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return ""


def worker(ctx, seed: int = 0, torchao: bool = True) -> dict:
    """One rank: the course's three gathers, then torchao's (see the module docstring)."""
    from ..model import GPT
    from .runs import TRAIN_CONFIG
    torch.set_num_threads(1)
    weights = block_weights(GPT(TRAIN_CONFIG, seed=seed))
    out = _course_paths(ctx, weights)
    gathered = out["paths"]["global"].pop("gathered")
    if torchao:
        ao = _torchao_path(ctx, TRAIN_CONFIG, seed)
        out["torchao_types"] = sorted({ao["seen"][n][0] for n in out["names"]})
        out["torchao_equal"] = [bool(torch.equal(ao["seen"][n][1], v) and torch.equal(ao["seen"][n][2], s))
                                for n, (v, s) in zip(out["names"], gathered)]
        out["torchao_error"] = ao["error"]
    return out


def allgather(world_size: int = 2, seed: int = 0, *, torchao: bool = True, timeout: float = 120.0) -> dict:
    """Launch :func:`worker` on ``world_size`` gloo ranks and summarise: per path the bytes each
    rank sent in all-gathers, whether every rank holds the same weights, and rank 0's numerics."""
    from ..dist import launch
    ranks = launch(worker, world_size=world_size, timeout=timeout, threads_per_rank=1, seed=seed, torchao=torchao)
    r0 = ranks[0]
    for name, path in r0["paths"].items():
        path["ranks_agree"] = all([w["digest"] for w in r["paths"][name]["weights"]]
                                  == [w["digest"] for w in path["weights"]] for r in ranks)
    local = [r["paths"]["local"]["own_scale_rel_error"] for r in ranks]
    r0["paths"]["local"]["own_scale_ranks_differ"] = any(a != b for a, b in zip(local[0], local[-1]))
    r0["world_size"] = world_size
    return r0
