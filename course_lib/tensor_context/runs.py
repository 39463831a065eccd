"""Workers that check tensor, sequence and context parallelism on real ranks (tests and the lab launch
them), PyTorch's DTensor TP beside ours, and one layer's activation bytes measured beside the count.

Each is a module-level ``worker(ctx, **kwargs)`` for :func:`course_lib.dist.launch`. The tensor-
parallel model is made from an ordinary :class:`~course_lib.model.GPT`, and the same GPT, unsplit,
trains beside it on every rank on the same batches, so "exact" means: loss, every gradient and
every parameter after k optimizer steps equal to the single-process model's (fp32 rounding).
Bytes are counted by :class:`~course_lib.parallel.counting.CountingComm` (ring algorithm).
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from ..model import GPT, GPTConfig
from ..parallel.counting import CountingComm
from .activation_meter import saved_bytes
from .tensor import RECOMPUTE, ParallelAttention, ParallelBlock, TensorParallelGPT

__all__ = ["TINY", "unshard", "tp_equivalence_worker", "tp_cases_worker", "tp_layer_bytes_worker", "tp_layer_bytes_formula",
           "ring_attention_worker", "cp_equivalence_worker", "torch_context_parallel_worker", "batches", "timed",
           "dtensor_worker", "activation_worker", "tiny_activation_bytes"]

TINY = GPTConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=4, d_model=32)


def unshard(model: nn.Module, group, *, grads: bool = False) -> dict[str, torch.Tensor]:
    """Every parameter (or its gradient) of a tensor-parallel ``model`` reassembled to full size,
    by name, on every rank (uncounted ``all_gather`` on ``group``: a check, not training)."""
    out = {}
    for name, p in model.named_parameters():
        local = (p.grad if grads else p).detach()
        if not hasattr(p, "tp_dim"):
            out[name] = local.clone()
            continue
        t = dist.get_world_size(group)
        parts, idx = [torch.empty_like(local) for _ in range(t)], [torch.empty_like(p.tp_index) for _ in range(t)]
        dist.all_gather(parts, local.contiguous(), group=group)
        dist.all_gather(idx, p.tp_index, group=group)
        shape = list(local.shape)
        shape[p.tp_dim] *= t
        out[name] = torch.empty(shape, dtype=local.dtype).index_copy_(p.tp_dim, torch.cat(idx), torch.cat(parts, p.tp_dim))
    return out


def batches(cfg: GPTConfig, steps: int, batch: int, seed: int = 1) -> torch.Tensor:
    """``steps`` batches of ``batch`` random token sequences of ``cfg.seq_len + 1`` (inputs + next)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (steps, batch, cfg.seq_len + 1), generator=g)


def _gap(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in b)


def tp_equivalence_worker(ctx, *, sequence_parallel: bool = False, regather: bool = True,
                          recompute: str = "none", steps: int = 3, batch: int = 2,
                          cfg: GPTConfig = TINY, tied: bool = True, optim: str = "sgd") -> dict:
    """Train a TensorParallelGPT over ``ctx.group`` and the unsplit GPT side by side.

    ``optim``: "sgd" (momentum 0.9) or "adamw" (whose division by √v amplifies the rounding of
    near-zero gradients, so its parameter gap is ~1e-5 rather than ~1e-7).
    Returns the largest per-step loss gap, the largest gradient gap after the first backward, the
    largest parameter gap after ``steps`` steps (all absolute), the reference losses, how far the
    reference's parameters moved (so a gap of 0 means something), and this rank's counted bytes."""
    cfg = cfg.with_(tie_embeddings=tied)
    ref = GPT(cfg, seed=0)
    start = {k: p.detach().clone() for k, p in ref.named_parameters()}
    comm = CountingComm(ctx.group)
    tp = TensorParallelGPT(copy.deepcopy(ref), comm, sequence_parallel=sequence_parallel,
                           regather=regather, recompute=recompute)
    make = ((lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)) if optim == "sgd"
            else (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)))
    opt, opt_ref = make(tp.parameters()), make(ref.parameters())
    loss_gap, grad_gap, losses = 0.0, 0.0, []
    for step, b in enumerate(batches(cfg, steps, batch)):
        _, loss = tp(b[:, :-1], b[:, 1:])
        loss.backward()
        if sequence_parallel:
            tp.reduce_sequence_parallel_grads()
        _, loss_ref = ref(b[:, :-1], b[:, 1:])
        loss_ref.backward()
        if step == 0:
            grads = unshard(tp, ctx.group, grads=True)
            grad_gap = _gap(grads, {k: p.grad for k, p in ref.named_parameters()})
        loss_gap = max(loss_gap, abs(float(loss) - float(loss_ref)))
        losses.append(float(loss_ref))
        for o in (opt, opt_ref):
            o.step()
            o.zero_grad()
    param_gap = _gap(unshard(tp, ctx.group), dict(ref.named_parameters()))
    return {"loss_gap": loss_gap, "grad_gap": grad_gap, "param_gap": param_gap, "losses": losses,
            "moved": _gap(dict(ref.named_parameters()), start),
            "bytes": comm.snapshot()}


def tp_layer_bytes_worker(ctx, *, sequence_parallel: bool = False, regather: bool = True,
                          recompute: str = "none", batch: int = 2, cfg: GPTConfig = TINY) -> dict:
    """One transformer layer, forward and backward, on this rank's share: the collectives it called,
    split into forward and backward (CountingComm snapshots, ring algorithm, fp32 values)."""
    block = GPT(cfg, seed=0).blocks[0]
    comm = CountingComm(ctx.group)
    layer = ParallelBlock(block, comm, sequence_parallel=sequence_parallel, regather=regather, recompute=recompute)
    s = cfg.seq_len // ctx.world_size if sequence_parallel else cfg.seq_len
    x = torch.randn(batch, s, cfg.d_model, generator=torch.Generator().manual_seed(ctx.rank if sequence_parallel else 0),
                    requires_grad=True)
    y = layer(x)
    forward = comm.snapshot()
    comm.reset()
    y.sum().backward()
    return {"forward": forward, "backward": comm.snapshot()}


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


def dtensor_worker(ctx, *, steps: int = 4, batch: int = 4, cfg: GPTConfig = TINY) -> dict:
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
    for b in batches(cfg, steps, batch):
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


def activation_worker(ctx, *, cfg: GPTConfig = TINY, batch: int = 2) -> list[dict]:
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


def tp_cases_worker(ctx, *, cases: list[dict]) -> list[dict]:
    """Run several checks in one launch (start-up paid once): each case is ``{"check": name,
    **kwargs}``, name one of "train", "bytes", "ring", "cp_train", "torch_cp", "dtensor",
    "activation"."""
    run = {"train": tp_equivalence_worker, "bytes": tp_layer_bytes_worker, "ring": ring_attention_worker,
           "torch_cp": torch_context_parallel_worker, "dtensor": dtensor_worker, "activation": activation_worker,
           "cp_train": cp_equivalence_worker}
    return [run[c["check"]](ctx, **{k: v for k, v in c.items() if k != "check"}) for c in cases]


def tp_layer_bytes_formula(seq_len: int, micro_batch: int, d_model: int, tp: int, bytes_per_value: int = 4,
                           *, sequence_parallel: bool = False, regather: bool = True) -> dict:
    """What :func:`tp_layer_bytes_worker` should count, per rank: {direction: {kind: (calls, sent)}}.

    Tensor parallelism: 2 all-reduces of s·b·h values forward, 2 backward, each sending 2(t−1)/t
    of them (ring). Sequence parallelism: each all-reduce becomes a reduce-scatter + an
    all-gather, (t−1)/t each — the same bytes; ``regather`` adds 2 all-gathers backward."""
    n = seq_len * micro_batch * d_model * bytes_per_value
    half = n * (tp - 1) // tp
    if not sequence_parallel:
        return {d: {"all_reduce": (2, 4 * half)} for d in ("forward", "backward")}
    return {"forward": {"all_gather": (2, 2 * half), "reduce_scatter": (2, 2 * half)},
            "backward": {"all_gather": (4 if regather else 2, (4 if regather else 2) * half),
                         "reduce_scatter": (2, 2 * half)}}


def timed(fn, repeats: int = 3) -> float:
    """Best wall time of ``fn()`` over ``repeats`` calls (seconds)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def ring_attention_worker(ctx, *, scheme: str = "contiguous", batch: int = 1, heads: int = 2,
                          seq_len: int = 32, head_dim: int = 8, dtype: torch.dtype = torch.float32) -> dict:
    """Ring attention over ``ctx.group`` against full causal attention on one process.

    Every rank draws the same full Q, K, V and output gradient, runs the reference on all of it and
    ring attention on its part (``scheme`` split). Returns the largest gap of the outputs and of
    the gradients dQ, dK, dV (this rank's part), the ring's counters forward and backward, and the
    bytes of the whole K and V (to compare the forward's (p−1)/p with)."""
    from .context import RingComm, causal_attention, ring_attention, split_sequence
    p, r = ctx.world_size, ctx.rank
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(batch, heads, seq_len, head_dim, generator=g, dtype=dtype) for _ in range(4)]
    ref = [x.clone().requires_grad_() for x in full[:3]]
    out_ref = causal_attention(*ref)
    out_ref.backward(full[3])
    mine = [split_sequence(x, r, p, scheme).requires_grad_() for x in full[:3]]
    comm = RingComm(ctx.group)
    out = ring_attention(*mine, comm, scheme)
    forward = comm.snapshot()
    comm.reset()
    out.backward(split_sequence(full[3], r, p, scheme))
    cut = lambda x: split_sequence(x, r, p, scheme)  # noqa: E731
    return {"out_gap": float((out - cut(out_ref)).abs().max()),
            "grad_gap": max(float((a.grad - cut(b.grad)).abs().max()) for a, b in zip(mine, ref)),
            "forward": forward, "backward": comm.snapshot(),
            "kv_bytes": 2 * full[1].numel() * full[1].element_size()}


def torch_context_parallel_worker(ctx, *, seq_len: int = 32) -> dict:
    """Try PyTorch's own ``torch.distributed.tensor.experimental.context_parallel`` (a ring
    attention that patches ``scaled_dot_product_attention``) on this run's devices. Returns
    ``{"ok": True, "gap": ...}`` against full attention where it runs, else ``{"ok": False,
    "error": "<ExceptionType>: <first line>"}`` — on CPU it has no CPU attention strategy."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.experimental import context_parallel
    mesh = DeviceMesh.from_group(ctx.group, ctx.device.type)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, seq_len, 8, generator=g).to(ctx.device) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:
        with context_parallel(mesh, buffers=[q, k, v, want], buffer_seq_dims=[2, 2, 2, 2]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            gap = float((out - want).abs().max())
    except Exception as exc:  # noqa: BLE001 - the point is to report what it raises
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    return {"ok": True, "gap": gap}


def cp_equivalence_worker(ctx, *, scheme: str = "contiguous", steps: int = 3, batch: int = 2,
                          cfg: GPTConfig = TINY) -> dict:
    """A ContextParallelGPT (this rank's part of every sequence) trained with SGD beside the
    unsplit GPT on the whole batches: largest global-loss gap, gradient gap and parameter gap."""
    from .context import ContextParallelGPT, RingComm, split_sequence
    ref = GPT(cfg, seed=0)
    start = {k: p.detach().clone() for k, p in ref.named_parameters()}
    cp = ContextParallelGPT(ref, RingComm(ctx.group), scheme)
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cp, ref))
    cut = lambda x: split_sequence(x, ctx.rank, ctx.world_size, scheme, dim=1)  # noqa: E731
    loss_gap = grad_gap = 0.0
    for step, b in enumerate(batches(cfg, steps, batch)):
        _, loss = cp(cut(b[:, :-1]), cut(b[:, 1:]))
        loss.backward()
        cp.average_grads()
        total = loss.detach().clone()
        dist.all_reduce(total, group=ctx.group)
        _, loss_ref = ref(b[:, :-1], b[:, 1:])
        loss_ref.backward()
        loss_gap = max(loss_gap, abs(float(total) / ctx.world_size - float(loss_ref)))
        if step == 0:
            grad_gap = _gap({k: p.grad for k, p in cp.gpt.named_parameters()},
                            {k: p.grad for k, p in ref.named_parameters()})
        for o in (opt, opt_ref):
            o.step()
            o.zero_grad()
    return {"loss_gap": loss_gap, "grad_gap": grad_gap, "moved": _gap(dict(ref.named_parameters()), start),
            "param_gap": _gap(dict(cp.gpt.named_parameters()), dict(ref.named_parameters()))}
