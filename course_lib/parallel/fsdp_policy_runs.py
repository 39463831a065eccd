"""Checks of FSDP's wrap policy (``FSDP(model, shard=...)``, :mod:`course_lib.parallel.fsdp_policy`)
on real ranks, against one process trained on the whole batch and against PyTorch's FSDP2.

``policy_worker(ctx)`` runs every case of :data:`CASES` in one launch; each case returns the facts
it checks (largest differences, shapes, dtypes) or ``{"error": traceback}``, so one run reports
every broken case:

* ``cs336``: the contract of CS336 assignment 2's FSDP tests on a user's own Linear, Embedding and
  RMSNorm types: 3 SGD steps equal one process; after backward every gradient is shaped like its
  parameter, in its dtype, and each replicated gradient is the same on every rank (read with
  ``dist.all_gather``, as the tests do); with fp16 compute too. Also what sharding everything does
  to that all-gather: the norm gains' pieces differ in size between ranks;
* ``gpt``: the course GPT (tied embedding), every Linear and Embedding sharded, LayerNorms
  replicated: loss, clipped gradients and parameters each step with AdamW and ``clip_grad_norm_``,
  both ``zero_grad`` modes; full and sharded state dicts and the full optimizer state;
* ``user``: a user's model with a tied weight between a sharded and a replicated module, a frozen
  Linear, a bf16 Linear, given as a predicate and as torch's ``ModuleWrapPolicy``;
* ``fsdp2``: PyTorch's ``fully_shard`` on each ``nn.Linear`` (none at the root) with the root under
  ``torch.distributed._composable.replicate`` (DDP for the rest), against ``shard={nn.Linear}``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..model import GPT, GPTConfig
from .counting import CountingComm
from .fsdp import FSDP, MixedPrecision
from .fsdp_runs import run_cases

__all__ = ["CASES", "policy_worker", "ToyModel", "UserNet"]

SMALL = GPTConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=2, d_model=32)
STEPS, BATCH, MAX_NORM = 3, 4, 0.05


class Linear(nn.Module):
    """A user's own linear layer (not ``nn.Linear``): y = x Wᵀ, no bias."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) / d_in ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t().to(x.dtype)


class Embedding(nn.Module):
    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.weight[idx]


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return h.to(x.dtype)


class ToyModel(nn.Module):
    """The shape of CS336's FSDP test model: embedding, two norms, three projections."""

    def __init__(self, vocab: int = 100, d: int = 64, ff: int = 128, seed: int = 42) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.embedding, self.norm1 = Embedding(vocab, d), RMSNorm(d)
            self.linear1, self.norm2 = Linear(d, ff), RMSNorm(ff)
            self.linear2, self.lm_head = Linear(ff, d), Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.linear1(self.norm1(self.embedding(idx)))
        return self.lm_head(self.linear2(self.norm2(torch.relu(x))))


class UserNet(nn.Module):
    """Tied weight between ``emb`` (replicated under ``shard={nn.Linear}``) and ``out`` (sharded),
    a frozen Linear, a bf16 Linear, a LayerNorm, a free-standing parameter."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.emb, self.norm = nn.Embedding(32, 16), nn.LayerNorm(16)
            self.inp, self.frozen, self.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 32)
            self.low = nn.Linear(16, 16).to(torch.bfloat16)
            self.gate = nn.Parameter(torch.rand(16))
        self.out.weight = self.emb.weight
        self.frozen.requires_grad_(False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.frozen(torch.relu(self.inp(self.norm(self.emb(idx)))))
        h = self.low(h.to(torch.bfloat16)).float() * self.gate
        return self.out(h)


def _diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def _mine(ctx, batch: torch.Tensor) -> torch.Tensor:
    per = batch.shape[0] // ctx.world_size
    return batch[ctx.rank * per:(ctx.rank + 1) * per]


def _batches(n: int, vocab: int, seq: int, batch: int = BATCH) -> torch.Tensor:
    return torch.randint(0, vocab, (n, batch, seq + 1), generator=torch.Generator().manual_seed(1))


def _lm_loss(model, b):
    logits = model(b[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), b[:, 1:].reshape(-1))


# ------------------------------------------------------------------------------------ the cases
def case_cs336(ctx) -> dict:
    out = {}
    for tag, dtype in (("fp32", None), ("fp16", torch.float16)):
        ref, model = ToyModel(), ToyModel()
        mp = MixedPrecision(param_dtype=dtype) if dtype is not None else None
        fsdp = FSDP(model, ctx.group, shard={Linear, Embedding}, mixed_precision=mp)
        o, o_ref = torch.optim.SGD(fsdp.parameters(), lr=0.01), torch.optim.SGD(ref.parameters(), lr=0.01)
        shapes_ok = same = True
        for b in _batches(STEPS, 100, 8, batch=20):
            _lm_loss(ref, b).backward()
            _lm_loss(fsdp, _mine(ctx, b)).backward()
            for p in fsdp.module.parameters():
                shapes_ok &= p.grad is not None and p.grad.shape == p.shape and p.grad.dtype == p.dtype
                if any(p is q for q in fsdp.replicated):
                    got = [torch.zeros_like(p.grad) for _ in range(ctx.world_size)]
                    dist.all_gather(got, p.grad, group=ctx.group)
                    same &= all(torch.equal(got[0], g) for g in got)
            for opt in (o, o_ref):
                opt.step()
                opt.zero_grad(set_to_none=True)
        out[tag] = {"diff": _diff(fsdp.full_state(), dict(ref.named_parameters())), "grads_shaped": shapes_ok,
                    "replicated_equal": same, "replicated": sorted(k for k, p in fsdp.module.named_parameters()
                                                                    if any(p is q for q in fsdp.replicated))}
    everything = FSDP(ToyModel(), ctx.group)
    sizes = torch.tensor([p.numel() for p in everything.module.parameters()])
    got = [torch.zeros_like(sizes) for _ in range(ctx.world_size)]
    dist.all_gather(got, sizes, group=ctx.group)
    out["shard_all_piece_sizes"] = dict(zip([k for k, _ in everything.module.named_parameters()],
                                            torch.stack(got, 1).tolist()))
    return out


def _steps(ctx, fsdp, ref, batches, *, clip=True) -> dict:
    """AdamW on both, ``zero_grad`` alternating set_to_none; per step the loss (mean over the
    ranks) and clipped gradients against the reference; the parameters at the end."""
    o, o_ref = torch.optim.AdamW(fsdp.parameters(), lr=1e-3), torch.optim.AdamW(ref.parameters(), lr=1e-3)
    loss_d = grad_d = norm_d = 0.0
    smallest = float("inf")                              # the smallest norm clipped: > MAX_NORM, it bit
    for k, b in enumerate(batches):
        loss, loss_ref = _lm_loss(fsdp, _mine(ctx, b)), _lm_loss(ref, b)
        loss.backward()
        loss_ref.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=ctx.group)
        loss_d = max(loss_d, abs(float(mean) / ctx.world_size - float(loss_ref)))
        if clip:
            n, n_ref = fsdp.clip_grad_norm_(MAX_NORM), torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
            norm_d = max(norm_d, abs(float(n) - float(n_ref)) / float(n_ref))
            smallest = min(smallest, float(n_ref))
        grads = {k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in ref.named_parameters()}
        grad_d = max(grad_d, _diff(fsdp.full_state(grads=True), grads))
        for opt in (o, o_ref):
            opt.step()
            opt.zero_grad(set_to_none=k % 2 == 0)
    want = ref.state_dict()
    return {"opt": o, "opt_ref": o_ref, "loss_diff": loss_d, "grad_diff": grad_d, "norm_rel_diff": norm_d,
            "smallest_norm": smallest, "diff": _diff(fsdp.full_state_dict(), want),
            "diff_fp32": _diff(fsdp.full_state_dict(), {k: v for k, v in want.items() if v.dtype == torch.float32})}


FACTS = ("loss_diff", "grad_diff", "norm_rel_diff", "smallest_norm", "diff", "diff_fp32")


def case_gpt(ctx) -> dict:
    ref, model = GPT(SMALL, seed=0), GPT(SMALL, seed=0)
    fsdp = FSDP(model, CountingComm(ctx.group), shard={nn.Linear, nn.Embedding})
    t = _steps(ctx, fsdp, ref, _batches(STEPS, SMALL.vocab_size, SMALL.seq_len))
    shards = dict(fsdp.named_parameters())
    full = fsdp.full_state_dict()
    plain = GPT(SMALL, seed=3)
    plain.load_state_dict(full)
    again = GPT(SMALL, seed=5)
    reload = FSDP(again, CountingComm(ctx.group), shard={nn.Linear, nn.Embedding})
    reload.load_full_state_dict(full)
    sharded = {k: v.clone() for k, v in fsdp.state_dict().items()}
    third = GPT(SMALL, seed=7)
    third_f = FSDP(third, CountingComm(ctx.group), shard={nn.Linear, nn.Embedding})
    third_f.load_state_dict(sharded)
    o_state, ref_state = fsdp.full_optim_state_dict(t["opt"]), t["opt_ref"].state_dict()
    opt_d = max(float((o_state["state"][i][k] - v).abs().max()) for i, st in ref_state["state"].items()
                for k, v in st.items() if k != "step")
    return {k: t[k] for k in FACTS} | {
        "replicated": sorted(k for k, p in model.named_parameters() if any(p is q for q in fsdp.replicated)),
        "tok_shard": tuple(shards["tok.weight"].shape), "tok_full": tuple(ref.tok.weight.shape),
        "still_tied": model.tok.weight is model.head.weight,
        "plain_diff": _diff(plain.state_dict(), ref.state_dict()),
        "reload_diff": _diff(reload.full_state_dict(), ref.state_dict()),
        "sharded_diff": _diff(third_f.full_state_dict(), ref.state_dict()), "optim_diff": opt_d}


def case_user(ctx) -> dict:
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    out = {}
    for tag, shard in (("predicate", lambda m: isinstance(m, nn.Linear)),
                       ("module_wrap_policy", ModuleWrapPolicy({nn.Linear}))):
        ref, model = UserNet(), UserNet()
        frozen_before = model.frozen.weight.detach().clone()
        fsdp = FSDP(model, CountingComm(ctx.group), shard=shard)
        t = _steps(ctx, fsdp, ref, _batches(STEPS, 32, 8))
        full = fsdp.full_state_dict()
        out[tag] = {k: t[k] for k in FACTS} | {
            "tied_sharded": tuple(dict(fsdp.named_parameters())["emb.weight"].shape),
            "frozen_moved": float((full["frozen.weight"] - frozen_before).abs().max()),
            "low_dtype": str(dict(fsdp.named_parameters())["low.weight"].dtype),
            "replicated": sorted(k for k, p in model.named_parameters() if any(p is q for q in fsdp.replicated)),
            "still_tied": model.emb.weight is model.out.weight}
    return out


def case_fsdp2(ctx) -> dict:
    """PyTorch's own: ``fully_shard`` on each nn.Linear, none at the root, and the root under
    ``torch.distributed._composable.replicate`` (DDP; it leaves the fully_shard parameters alone)."""
    from torch.distributed._composable import replicate
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    cfg = SMALL.with_(tie_embeddings=False)
    ours, theirs = GPT(cfg, seed=0), GPT(cfg, seed=0)
    fsdp = FSDP(ours, ctx.group, shard={nn.Linear})
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    for m in [m for m in theirs.modules() if isinstance(m, nn.Linear)]:
        fully_shard(m, mesh=mesh)
    replicate(theirs)
    o, o2 = torch.optim.AdamW(fsdp.parameters(), lr=1e-3), torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    grad_d, equal = 0.0, True
    for b in _batches(STEPS, cfg.vocab_size, cfg.seq_len):
        _lm_loss(fsdp, _mine(ctx, b)).backward()
        _lm_loss(theirs, _mine(ctx, b)).backward()
        g2 = {k: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for k, p in theirs.named_parameters()}
        g = fsdp.full_state(grads=True)
        grad_d = max(grad_d, _diff(g, g2))
        equal &= all(torch.equal(g[k], g2[k]) for k in g2)
        for opt in (o, o2):
            opt.step()
            opt.zero_grad()
    full2 = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in theirs.state_dict().items()}
    full = fsdp.full_state_dict()
    alone = GPT(cfg, seed=0)                             # fully_shard alone: the rest is not synchronised
    for m in [m for m in alone.modules() if isinstance(m, nn.Linear)]:
        fully_shard(m, mesh=mesh)
    _lm_loss(alone, _mine(ctx, _batches(1, cfg.vocab_size, cfg.seq_len)[0])).backward()
    got = [torch.zeros_like(alone.ln_f.weight.grad) for _ in range(ctx.world_size)]
    dist.all_gather(got, alone.ln_f.weight.grad, group=ctx.group)
    return {"alone_ln_f_grads_differ": not torch.equal(got[0], got[1]), "grad_diff": grad_d, "diff": _diff(full, full2), "bitwise": equal and all(torch.equal(full[k], full2[k]) for k in full2),
            "keys_equal": sorted(full) == sorted(full2), "replicated_count": len(fsdp.replicated),
            "fsdp2_sharded": sum(isinstance(p, DTensor) for p in theirs.parameters())}


CASES = {"cs336": case_cs336, "gpt": case_gpt, "user": case_user, "fsdp2": case_fsdp2}


def policy_worker(ctx, names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Run the named cases of this module (all by default), as chapter 4's FSDP cases run."""
    return run_cases(ctx, CASES, names)
