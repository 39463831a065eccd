"""Chapter 11's measurements, each one call: TP/SP/CP exactness and bytes, PyTorch's DTensor TP
beside ours, and the activation memory of one layer under every scheme (measured, with the exact
count for the tiny GPT's architecture beside it).

The workers (``*_worker(ctx, ...)``) run on every rank under :func:`course_lib.dist.launch`; the
demos (``*_demo()``) launch them on gloo CPU ranks and return plain numbers, each in a few seconds.
References: Shoeybi et al. 2019 (arXiv 1909.08053), Korthikanti et al. 2022 (arXiv 2205.05198),
Liu et al. 2023 (arXiv 2310.01889).
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from ..model import GPT, GPTConfig
from .activation_meter import saved_bytes
from ..parallel.counting import CountingComm
from .tensor import RECOMPUTE, ParallelAttention, ParallelBlock, TensorParallelGPT
from . import runs

__all__ = ["dtensor_worker", "activation_worker", "tiny_activation_bytes", "tp_demo", "cp_demo",
           "dtensor_demo", "activation_demo", "torch_context_parallel_error"]


class _DTensorAttention(ParallelAttention):
    """The model's attention reading its local head count from the qkv width (as torchtitan does),
    so PyTorch's ColwiseParallel/RowwiseParallel can shard it; forward is ParallelAttention's."""

    def __init__(self, attn: nn.Module) -> None:
        nn.Module.__init__(self)
        self.qkv, self.proj, self.window, self.recompute = attn.qkv, attn.proj, attn.window, "none"
        self.head_dim = attn.d_model // attn.n_heads


def _dtensor_gpt(gpt: GPT, group) -> GPT:
    """A copy of ``gpt`` tensor-parallel by PyTorch's ``parallelize_module`` over ``group``: qkv
    and up column-wise, proj and down row-wise (embedding and head stay replicated). The qkv rows
    are reordered rank-major ([q_r; k_r; v_r] per rank) so an even row split keeps whole heads."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    model, t = copy.deepcopy(gpt), dist.get_world_size(group)
    D, plan = gpt.cfg.d_model, {}
    order = torch.cat([torch.arange(r * D // t, (r + 1) * D // t) + part * D for r in range(t) for part in range(3)])
    for i, block in enumerate(model.blocks):
        with torch.no_grad():
            block.attn.qkv.weight.copy_(block.attn.qkv.weight[order])
            block.attn.qkv.bias.copy_(block.attn.qkv.bias[order])
        block.attn = _DTensorAttention(block.attn)
        plan |= {f"blocks.{i}.attn.qkv": ColwiseParallel(), f"blocks.{i}.attn.proj": RowwiseParallel(),
                 f"blocks.{i}.mlp.up": ColwiseParallel(), f"blocks.{i}.mlp.down": RowwiseParallel()}
    return parallelize_module(model, DeviceMesh.from_group(group, "cpu"), plan)


def dtensor_worker(ctx, *, steps: int = 4, batch: int = 4, cfg: GPTConfig = runs.TINY) -> dict:
    """Ours (CountingComm ring, and torch.distributed's own all-reduce) and PyTorch's DTensor TP on
    the same GPT, same batches, SGD: largest loss gap to the unsplit GPT and the median step time
    (forward, backward, optimizer step) of each; ``ratio`` = ours (native) / DTensor."""
    ref = GPT(cfg, seed=0)
    models = {"ours_ring": TensorParallelGPT(ref, CountingComm(ctx.group)),
              "ours_native": TensorParallelGPT(ref, ctx.group), "dtensor": _dtensor_gpt(ref, ctx.group),
              "unsplit": copy.deepcopy(ref)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
    losses = {k: [] for k in models}
    seconds = {k: [] for k in models}
    for b in runs.batches(cfg, steps, batch):
        for k, m in models.items():
            dist.barrier(group=ctx.group)
            t0 = time.perf_counter()
            _, loss = m(b[:, :-1], b[:, 1:])
            loss.backward()
            opts[k].step()
            opts[k].zero_grad()
            seconds[k].append(time.perf_counter() - t0)
            losses[k].append(float(loss))
    med = {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in seconds.items()}     # the first step warms up
    gaps = {k: max(abs(a - b) for a, b in zip(losses[k], losses["unsplit"])) for k in models}
    return {"losses": losses["unsplit"], "loss_gap": gaps, "seconds": med,
            "ratio": med["ours_native"] / med["dtensor"]}


def tiny_activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, tp: int = 1, *,
                          sequence_parallel: bool = False, regather: bool = True, recompute: str = "none") -> int:
    """Exact bytes one tiny-GPT layer (fp32, no dropout, "math" attention) saves for its backward,
    per rank: what :func:`activation_worker` measures, counted tensor by tensor. s, b, h, a, t:
    LayerNorm inputs sbh + mean/rstd 2sb each, the two column-linear inputs sbh (sbh/t under SP
    with re-gather), QKV 3sbh/t, the proj input sbh/t, GELU input and output 4sbh/t each, the
    causal mask s² (1 byte) and the softmax probabilities a·s²·b/t."""
    s, b, h, a, t, f = seq_len, micro_batch, d_model, n_heads, tp, 4
    if recompute == "full":                      # only the layer's input (its share under SP)
        return f * s * b * h // (t if sequence_parallel else 1)
    ln_part = t if sequence_parallel else 1
    linear_in = t if sequence_parallel and regather else 1
    total = f * (2 * (s * b * h + 2 * s * b) // ln_part + 2 * s * b * h // linear_in + 12 * s * b * h // t)
    if recompute == "none":
        total += s * s + f * a * s * s * b // t
    return total


def activation_worker(ctx, *, cfg: GPTConfig = runs.TINY, batch: int = 2) -> list[dict]:
    """Bytes one layer saves for backward on this rank, for t = 1, 2, …, world size (explicit
    sub-groups of consecutive ranks), with and without SP (and re-gather), under each
    recomputation. One row per setting, with the exact count beside the measurement."""
    rows, t = [], 1
    while t <= ctx.world_size:
        groups = [dist.new_group(list(range(g, g + t))) for g in range(0, ctx.world_size, t)]
        comm = CountingComm(groups[ctx.rank // t])
        for sp, regather in ((False, True), (True, True), (True, False)):
            if t == 1 and sp:
                continue
            for recompute in RECOMPUTE:
                layer = ParallelBlock(GPT(cfg, seed=0).blocks[0], comm, sequence_parallel=sp,
                                      regather=regather, recompute=recompute)
                x = torch.randn(batch, cfg.seq_len // (t if sp else 1), cfg.d_model, requires_grad=True)
                y, meter = saved_bytes(layer, x, exclude=list(layer.parameters()))
                exact = tiny_activation_bytes(cfg.seq_len, batch, cfg.d_model, cfg.n_heads, t, sequence_parallel=sp,
                                              regather=regather, recompute=recompute)
                rows.append(dict(tp=t, sequence_parallel=sp, regather=regather, recompute=recompute,
                                 measured=meter.live, exact=exact, saved=meter.saved))
                y.sum().backward()               # every rank runs the same collectives
        t *= 2
    return rows


def tp_demo(world_size: int = 2) -> dict:
    """TP and SP GPTs trained 3 steps beside the unsplit GPT, and one layer's counted bytes beside
    the formula (rank 0's view): {"train": {...}, "bytes": {...}, "formula": {...}}."""
    cases = [dict(check="train"), dict(check="train", sequence_parallel=True),
             dict(check="bytes"), dict(check="bytes", sequence_parallel=True)]
    res = _launch(runs.tp_cases_worker, world_size, cases=cases)[0]
    cfg = runs.TINY
    return {"train": {"tp": res[0], "sp": res[1]}, "bytes": {"tp": res[2], "sp": res[3]},
            "formula": {"tp": runs.tp_layer_bytes_formula(cfg.seq_len, 2, cfg.d_model, world_size),
                        "sp": runs.tp_layer_bytes_formula(cfg.seq_len, 2, cfg.d_model, world_size,
                                                               sequence_parallel=True)}}


def cp_demo(world_size: int = 4, seq_len: int = 64) -> dict:
    """Ring attention on ``world_size`` ranks, both splits: per scheme, every rank's gaps to full
    attention, bytes sent forward / backward, and score entries computed (its causal work)."""
    cases = [dict(check="ring", scheme=s, seq_len=seq_len) for s in ("contiguous", "zigzag")]
    by_rank = _launch(runs.tp_cases_worker, world_size, cases=cases)
    return {c["scheme"]: [res[i] for res in by_rank] for i, c in enumerate(cases)}


def dtensor_demo(world_size: int = 2, steps: int = 4) -> dict:
    """Our TP next to PyTorch's ``parallelize_module`` (rank 0's result of :func:`dtensor_worker`)."""
    return _launch(dtensor_worker, world_size, steps=steps)[0]


def activation_demo(world_size: int = 4) -> list[dict]:
    """Rank 0's rows of :func:`activation_worker`: measured bytes per layer beside the exact count."""
    return _launch(activation_worker, world_size)[0]


def torch_context_parallel_error(world_size: int = 2) -> str | None:
    """What PyTorch's ``context_parallel`` raises here (None if it ran and matched full attention)."""
    res = _launch(runs.torch_context_parallel_worker, world_size)[0]
    return None if res["ok"] and res["gap"] < 1e-5 else res.get("error", f"gap {res.get('gap')}")


def _launch(worker, world_size: int, **kwargs):
    from ..dist import launch
    return launch(worker, world_size, threads_per_rank=1, timeout=120, **kwargs)
