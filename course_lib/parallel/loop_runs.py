"""Lab and test drivers: DP, ZeRO and FSDP in a real training loop (issue #31), on real ranks.

Each worker trains course_lib's tiny GPT on this rank's slice of every global batch and compares
with one process that sees the whole batch (and with PyTorch's DDP or FSDP2 on the same model in
the same run), returning plain numbers — largest differences, norms, facts — for a test or a lab
to judge:

* :func:`clip_cases` — gradient clipping by the global norm (``max_norm`` far below the norm, so
  clipping acts at every step) with DataParallel, ZeroOptimizer stages 1 and 2 and FSDP, each with
  its ``clip_grad_norm_`` (through ``course_lib.train.clip_gradients``), SGD and AdamW, 2- and
  ∞-norm; DDP and FSDP2 with torch's own function; and what torch's function does on ZeRO's
  parameters (it must raise, naming the method).
* :func:`replicate_cases` — FSDP sharding the Linear and Embedding layers and replicating the rest.
* :func:`loop_stage` — a user's loop: FSDP with activation checkpointing inside each block, AdamW,
  a learning-rate schedule, clipping; resumed from full state dicts on another world size.

Checkpointing patterns against FSDP2 are in :mod:`course_lib.parallel.checkpoint_runs`.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..model import GPT, GPTConfig
from ..train import clip_gradients
from .counting import CountingComm
from .dp import DataParallel
from .fsdp import FSDP
from .zero import ZeroOptimizer

__all__ = ["SMALL", "GLOBAL_BATCH", "batches", "clip_cases", "replicate_cases", "loop_stage",
           "loop_reference", "CheckpointedBlock"]

SMALL = GPTConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=2, d_model=32)
GLOBAL_BATCH = 4                                 # divisible by 1, 2 and 4 ranks
MAX_NORM = 0.05                                  # the first gradient's 2-norm is ~2: always clipped


def batches(steps: int, seed: int = 1) -> torch.Tensor:
    """``steps`` global batches of token windows, (steps, GLOBAL_BATCH, seq_len + 1)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, SMALL.vocab_size, (steps, GLOBAL_BATCH, SMALL.seq_len + 1), generator=g)


def _loss(model, b):
    return model(b[:, :-1], b[:, 1:])[1]


def _opt(kind: str, params, zero: dict | None = None):
    cls, hp = ((torch.optim.SGD, dict(lr=0.05, momentum=0.9)) if kind == "sgd"
               else (torch.optim.AdamW, dict(lr=1e-3, weight_decay=0.1)))
    return cls(params, **hp) if zero is None else ZeroOptimizer(params, cls, **zero, **hp)


def _diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _mine(ctx, b):
    per = GLOBAL_BATCH // ctx.world_size
    return b[ctx.rank * per:(ctx.rank + 1) * per]


def _reference(optim: str, steps: int, norm_type: float = 2.0):
    """One process, whole batches, torch's clip: (state_dict, norms)."""
    model = GPT(SMALL, seed=0)
    opt, norms = _opt(optim, model.parameters()), []
    for b in batches(steps):
        _loss(model, b).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, norm_type)))
        opt.step()
        opt.zero_grad()
    return model.state_dict(), norms


def _wrap(ctx, kind: str, optim: str, model: GPT):
    """(what forward goes through, optimizer, full state getter, clip(norm_type) -> norm)."""
    if kind == "dp":
        dp = DataParallel(model, CountingComm(ctx.group))
        opt = _opt(optim, dp.parameters())
        return dp, opt, model.state_dict, lambda t: dp.clip_grad_norm_(MAX_NORM, t)
    if kind in ("zero1", "zero2"):
        opt = _opt(optim, model, dict(comm=CountingComm(ctx.group), stage=int(kind[-1]), bucket_bytes=4096))
        return model, opt, model.state_dict, lambda t: opt.clip_grad_norm_(MAX_NORM, t)
    if kind in ("fsdp", "fsdp_replicate"):
        f = FSDP(model, CountingComm(ctx.group), units=list(model.blocks), replicate=kind == "fsdp_replicate")
        opt = _opt(optim, f.parameters())
        return f, opt, f.full_state_dict, lambda t: f.clip_grad_norm_(MAX_NORM, t)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp = DDP(model, process_group=ctx.group)
        opt = _opt(optim, ddp.parameters())
        return ddp, opt, model.state_dict, lambda t: torch.nn.utils.clip_grad_norm_(ddp.parameters(), MAX_NORM, t)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = _opt(optim, model.parameters())
    return (model, opt, lambda: {k: v.full_tensor() for k, v in model.state_dict().items()},
            lambda t: torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, t).full_tensor())


CLIP_CASES = (("dp", "sgd", 2.0), ("zero1", "sgd", 2.0), ("zero2", "adamw", 2.0), ("zero1", "adamw", "inf"),
              ("fsdp", "sgd", 2.0), ("fsdp", "adamw", "inf"), ("fsdp_replicate", "adamw", 2.0),
              ("ddp", "sgd", 2.0), ("fsdp2", "adamw", 2.0))


def clip_cases(ctx, steps: int = 3, cases=CLIP_CASES) -> dict[str, dict]:
    """Every (component, optimizer, norm) of ``cases``: ``diff`` (largest weight difference from
    one process), ``norms`` and the reference's ``ref_norms`` (each step's norm before clipping)."""
    out, refs = {}, {}
    for kind, optim, norm in cases:
        t = float(norm)
        if (optim, t) not in refs:
            refs[optim, t] = _reference(optim, steps, t)
        ref, ref_norms = refs[optim, t]
        model = GPT(SMALL, seed=0)
        fwd, opt, full, clip = _wrap(ctx, kind, optim, model)
        norms = []
        for b in batches(steps):
            _loss(fwd, _mine(ctx, b)).backward()
            norms.append(float(clip(t) if t != 2.0 else clip_gradients(fwd, opt, MAX_NORM)))
            opt.step()
            opt.zero_grad()
        out[f"{kind}/{optim}/{norm}"] = {"diff": _diff(full(), ref), "norms": norms, "ref_norms": ref_norms}
        torch.distributed.barrier(group=ctx.group)
    out["torch_clip_on_zero"] = _torch_clip_on_zero(ctx)
    out["torch_clip_on_fsdp"] = _torch_clip_on_fsdp(ctx)
    return out


def _torch_clip(params) -> str:
    try:
        torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
        return "no error"
    except RuntimeError as e:
        return str(e)


def _torch_clip_on_zero(ctx) -> str:
    """What ``torch.nn.utils.clip_grad_norm_`` says on ZeroOptimizer's parameters after backward."""
    model = GPT(SMALL, seed=0)
    opt = _opt("sgd", model, dict(comm=CountingComm(ctx.group), stage=2))
    _loss(model, _mine(ctx, batches(1)[0])).backward()
    said = _torch_clip(model.parameters())
    opt.zero_grad()                                       # and the optimizer still works after it
    _loss(model, _mine(ctx, batches(1)[0])).backward()
    opt.step()
    return said


def _torch_clip_on_fsdp(ctx) -> dict:
    """torch's clip on FSDP's shards raises (with ``foreach`` left to torch, and forced on); the same
    gradients then still clip with FSDP's method and step, in both ``zero_grad`` modes, matching
    one process: ``diff`` after 2 steps."""
    model = GPT(SMALL, seed=0)
    f = FSDP(model, CountingComm(ctx.group), units=list(model.blocks))
    opt = _opt("adamw", f.parameters())
    said = []
    for step, b in enumerate(batches(2)):
        _loss(f, _mine(ctx, b)).backward()
        said.append(_torch_clip(f.parameters()))
        try:
            torch.nn.utils.clip_grad_norm_(f.parameters(), MAX_NORM, foreach=True)
            said.append("no error")
        except RuntimeError as e:
            said.append(str(e))
        f.clip_grad_norm_(MAX_NORM)
        opt.step()
        opt.zero_grad(set_to_none=step == 0)
    ref, _ = _reference("adamw", 2)
    return {"said": said, "diff": _diff(f.full_state_dict(), ref)}


def _shard_linear_and_embedding(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding))]


def replicate_cases(ctx, steps: int = 3) -> dict[str, dict]:
    """FSDP over every Linear and Embedding with ``replicate=True`` (LayerNorms whole on every
    rank), and with ``replicate=[ln_f]`` next to block units; 2 micro-batches under ``no_sync``."""
    out = {}
    ref, _ = _reference("adamw", steps)
    for name, units, replicate in (("linear_embedding", _shard_linear_and_embedding, True),
                                   ("ln_f", lambda m: list(m.blocks), lambda m: [m.ln_f])):
        model = GPT(SMALL.with_(tie_embeddings=False) if name == "linear_embedding" else SMALL, seed=0)
        if name == "linear_embedding":
            ref_m = GPT(SMALL.with_(tie_embeddings=False), seed=0)
            o = _opt("adamw", ref_m.parameters())
            for b in batches(steps):
                _loss(ref_m, b).backward()
                torch.nn.utils.clip_grad_norm_(ref_m.parameters(), MAX_NORM)
                o.step()
                o.zero_grad()
            want = ref_m.state_dict()
        else:
            want = ref
        rep = replicate if replicate is True else replicate(model)
        f = FSDP(model, CountingComm(ctx.group), units=units(model), replicate=rep)
        opt = _opt("adamw", f.parameters())
        same_grads = True
        for b in batches(steps):
            first, second = _mine(ctx, b).chunk(2) if _mine(ctx, b).shape[0] > 1 else (None, _mine(ctx, b))
            if first is not None:
                with f.no_sync():
                    (_loss(f, first) / 2).backward()
                (_loss(f, second) / 2).backward()
            else:
                _loss(f, second).backward()
            grads = torch.cat([p.grad.reshape(-1) for p in f.replicated])
            total = grads.clone()
            torch.distributed.all_reduce(total, group=ctx.group)
            same_grads &= torch.allclose(total, grads * ctx.world_size, rtol=0, atol=1e-7)
            f.clip_grad_norm_(MAX_NORM)
            opt.step()
            opt.zero_grad()
        out[name] = {"diff": _diff(f.full_state_dict(), want), "same_grads": bool(same_grads),
                     "replicated": sorted(k for k, p in model.named_parameters() if any(p is q for q in f.replicated)),
                     "full_shapes": all(p.shape == want[k].shape for k, p in model.named_parameters()
                                        if any(p is q for q in f.replicated))}
        torch.distributed.barrier(group=ctx.group)
    return out


class CheckpointedBlock(nn.Module):
    """``block`` run under ``torch.utils.checkpoint`` (its activations recomputed in backward)."""

    def __init__(self, block: nn.Module, use_reentrant: bool = False) -> None:
        super().__init__()
        self.block, self.use_reentrant = block, use_reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=self.use_reentrant)


def _loop_model() -> GPT:
    model = GPT(SMALL, seed=0)
    model.blocks = nn.ModuleList(CheckpointedBlock(b) for b in model.blocks)
    return model


def _lr(step: int) -> float:
    return 1e-3 * (0.5 + 0.5 * step / 8)                  # a schedule: resuming must restore the step


def _loop_steps(model, fwd, opt, step0: int, steps: int, rank_slice) -> list[float]:
    losses = []
    for i in range(step0, step0 + steps):
        for g in opt.param_groups:
            g["lr"] = _lr(i)
        loss = _loss(fwd, rank_slice(batches(i + 1)[i]))
        loss.backward()
        clip_gradients(fwd, opt, MAX_NORM)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def loop_reference(steps: int, saved: dict | None = None, step0: int = 0) -> dict:
    """The same loop on one process with a plain AdamW, from scratch or from ``saved`` (the full
    model and optimizer states a distributed run saved at step ``step0``)."""
    model = _loop_model()
    opt = _opt("adamw", model.parameters())
    if saved is not None:                                 # a copy: torch's load keeps ``step`` tensors
        model.load_state_dict(saved["model"])            # as given and the steps would count them up
        opt.load_state_dict(copy.deepcopy(saved["optim"]))
    _loop_steps(model, model, opt, step0, steps, lambda b: b)
    return {"model": copy.deepcopy(model.state_dict()), "optim": copy.deepcopy(opt.state_dict())}


def loop_stage(ctx, steps: int, saved: dict | None = None, step0: int = 0) -> dict:
    """The loop under FSDP (one unit per checkpointed block, the rest replicated) on this world
    size, from scratch or from ``saved`` (full states from any world size); returns the full model
    and optimizer states (rank 0; {} elsewhere) to compare and to resume from."""
    model = _loop_model()
    f = FSDP(model, CountingComm(ctx.group), units=[b.block for b in model.blocks], replicate=True)
    opt = _opt("adamw", f.parameters())
    if saved is not None:
        f.load_full_state_dict(saved["model"])
        f.load_full_optim_state_dict(opt, saved["optim"])
    _loop_steps(model, f, opt, step0, steps, lambda b: _mine(ctx, b))
    full = f.full_state_dict(rank0_only=True)
    optim = f.full_optim_state_dict(opt, rank0_only=True)
    everywhere = f.full_optim_state_dict(opt)            # gathered on every rank: the same dict
    digest = [float(v.double().sum()) for st in everywhere["state"].values() for v in st.values()]
    try:                                                  # a rank's own (sharded) state is refused
        f.load_full_optim_state_dict(opt, opt.state_dict())
        refused = ""
    except ValueError as e:
        refused = str(e)
    mine = {"sharded_refused": refused, "digest": digest}
    return {"model": full, "optim": optim, **mine} if ctx.rank == 0 else mine
