"""Checks of the from-scratch FSDP used the way a user's own code uses it, run on real ranks.

``cases_worker(ctx)`` runs every case of :data:`CASES` in one launch (start-up is paid once) and
returns, per case, the largest difference between the FSDP model and a single-process deep copy
trained on the whole batch, plus the facts the case checks; an exception in a case becomes its
``"error"`` entry instead of failing the launch, so one run reports every broken case.
"""
from __future__ import annotations

import copy
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..model import GPT, GPTConfig
from .counting import CountingComm
from .fsdp import FSDP, MixedPrecision

__all__ = ["CASES", "cases_worker", "TinyNet"]

SMALL = GPTConfig(vocab_size=64, seq_len=16, n_layers=2, n_heads=2, d_model=32)
STEPS, BATCH = 3, 4


class TinyNet(nn.Module):
    """An MLP with what GPT lacks: a buffer, a frozen layer and a bf16 layer among fp32 ones."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():              # seeded here, the caller's RNG untouched
            torch.manual_seed(seed)
            self.inp, self.mid, self.out = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)
            self.low = nn.Linear(16, 16).to(torch.bfloat16)
        self.mid.requires_grad_(False)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mid(F.relu(self.inp(x)) * self.scale)
        return self.out(self.low(h.to(torch.bfloat16)).float())


class Recurrent(nn.Module):
    """One layer applied three times in a forward: a unit that runs (and is gathered) repeatedly."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.inp, self.core, self.out = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for _ in range(3):
            h = torch.tanh(self.core(h))
        return self.out(h)


def _gpt_batches(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, SMALL.vocab_size, (n, BATCH, SMALL.seq_len + 1), generator=g)


def _gpt_loss(model, batch):
    return model(batch[:, :-1], batch[:, 1:])[1]


def _tiny_batches(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, BATCH, 12, generator=g)


def _tiny_loss(model, batch):
    return F.mse_loss(model(batch[:, :8]), batch[:, 8:])


def _adamw(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01)


def _diff(a: dict, b: dict, dtype: torch.dtype | None = None) -> tuple[float, str]:
    """Largest absolute difference over the keys of ``b`` (of ``dtype`` only, if given), and where."""
    keys = [k for k in b if dtype is None or b[k].dtype == dtype] or [None]
    gap = {k: float((a[k].float() - b[k].float()).abs().max()) if k else 0.0 for k in keys}
    worst = max(gap, key=gap.get)
    return gap[worst], worst


def _train(ctx, model, units, *, loss=_gpt_loss, batches=None, opt=_adamw, set_to_none=True,
           micro=1, use_no_sync=True, algorithm="ring", **fsdp_kw) -> dict:
    """Train an FSDP copy (this rank's half of each batch) and a single-process copy (the whole
    batch) side by side; return both, the comm's counts, and the largest difference of the full
    states. ``algorithm``: CountingComm's ("ring", "native"), or "group" for the plain group."""
    n, r = ctx.world_size, ctx.rank
    batches = _gpt_batches(STEPS) if batches is None else batches
    ref = copy.deepcopy(model)
    comm = ctx.group if algorithm == "group" else CountingComm(ctx.group, algorithm=algorithm)
    fsdp = FSDP(model, comm, units=units(model), **fsdp_kw)
    comm = fsdp.comm
    o, o_ref = opt(fsdp.parameters()), opt(ref.parameters())
    per = BATCH // n
    for b in batches:
        mine = b[r * per:(r + 1) * per]
        for k, chunk in enumerate(mine.chunk(micro)):
            last = k == micro - 1
            if use_no_sync and not last:
                with fsdp.no_sync():
                    (loss(fsdp, chunk) / micro).backward()
            else:
                (loss(fsdp, chunk) / micro).backward()
        loss(ref, b).backward()
        o.step()
        o_ref.step()
        o.zero_grad(set_to_none=set_to_none)
        o_ref.zero_grad(set_to_none=set_to_none)
    trained = comm.snapshot()
    full = fsdp.full_state_dict()
    diff, worst = _diff(full, ref.state_dict(), torch.float32)
    return {"fsdp": fsdp, "ref": ref, "opt": o, "comm": trained, "full": full, "diff": diff, "worst": worst,
            "diff_bf16": _diff(full, ref.state_dict(), torch.bfloat16)[0]}


def _blocks(m):
    return list(m.blocks)


# ------------------------------------------------------------------------------------ the cases
def case_frozen(ctx) -> dict:
    model = GPT(SMALL, seed=0)
    model.blocks[0].requires_grad_(False)
    model.ln_f.bias.requires_grad_(False)
    before = copy.deepcopy(model.state_dict())
    t = _train(ctx, model, _blocks)
    frozen = [k for k, p in t["ref"].named_parameters() if not p.requires_grad]
    moved = max(float((t["full"][k] - before[k]).abs().max()) for k in frozen)
    shards = dict(t["fsdp"].named_parameters())
    return {"diff": t["diff"], "worst": t["worst"], "frozen_moved": moved,
            "frozen_shards_ok": all(not shards[k].requires_grad and shards[k].grad is None for k in frozen)}


def case_buffer(ctx) -> dict:
    model = TinyNet()
    if ctx.rank:
        model.scale.fill_(7.0)                     # a stale buffer must be overwritten by rank 0's
    t = _train(ctx, model, lambda m: [m.inp, m.out], loss=_tiny_loss, batches=_tiny_batches(STEPS),
               opt=_sgd)
    buf = dict(t["fsdp"].named_buffers())
    return {"diff": t["diff"], "worst": t["worst"], "diff_bf16": t["diff_bf16"],
            "buffer_ok": torch.equal(buf["scale"], TinyNet().scale) and "scale" in t["fsdp"].state_dict()}


def case_tied_split(ctx) -> dict:
    model = GPT(SMALL, seed=0)
    t = _train(ctx, model, lambda m: [m.tok, *m.blocks, m.head])
    return {"diff": t["diff"], "worst": t["worst"], "still_tied": model.tok.weight is model.head.weight}


def case_empty_root(ctx) -> dict:
    model = GPT(SMALL.with_(tie_embeddings=False), seed=0)
    t = _train(ctx, model, lambda m: [m.tok, m.pos, *m.blocks, m.ln_f, m.head], reshard_root=False)
    return {"diff": t["diff"], "worst": t["worst"], "root_groups": len(t["fsdp"].units[-1].groups)}


def case_mixed_dtypes(ctx) -> dict:
    t = _train(ctx, TinyNet(), lambda m: [m.low], loss=_tiny_loss, batches=_tiny_batches(STEPS),
               opt=_sgd)
    dtypes = {k: str(p.dtype) for k, p in t["fsdp"].named_parameters()}
    return {"diff": t["diff"], "worst": t["worst"], "diff_bf16": t["diff_bf16"],
            "low_bf16": dtypes["low.weight"] == "torch.bfloat16"}


def case_reused_unit(ctx) -> dict:
    t = _train(ctx, Recurrent(), lambda m: [m.core], loss=_tiny_loss, batches=_tiny_batches(STEPS), opt=_sgd)
    return {"diff": t["diff"], "worst": t["worst"], "reduce_scatters": t["comm"]["reduce_scatter"]["calls"]}


def case_eval_no_grad(ctx) -> dict:
    """After training (root kept gathered between forward and backward), a no-grad forward gives
    the reference's logits and leaves no full buffer behind."""
    t = _train(ctx, GPT(SMALL, seed=0), _blocks, reshard_root=False)
    x = _gpt_batches(1)[0, :, :-1]
    with torch.no_grad():
        ours, theirs = t["fsdp"](x), t["ref"](x)
    mem = t["fsdp"].memory_bytes()
    shards = sum(p.numel() * p.element_size() for p in t["fsdp"].parameters())
    return {"diff": t["diff"], "worst": t["worst"], "logits_diff": float((ours - theirs).abs().max()),
            "only_shards_held": mem["params"] == shards}


def _optimizer_case(opt, set_to_none, algorithm="ring"):
    def case(ctx) -> dict:
        t = _train(ctx, GPT(SMALL, seed=0), _blocks, opt=opt, set_to_none=set_to_none, algorithm=algorithm)
        return {"diff": t["diff"], "worst": t["worst"]}
    return case


def _accumulation_case(use_no_sync):
    def case(ctx) -> dict:
        t = _train(ctx, GPT(SMALL, seed=0), _blocks, opt=_sgd, micro=2, use_no_sync=use_no_sync)
        rs = t["comm"]["reduce_scatter"]["calls"]
        return {"diff": t["diff"], "worst": t["worst"], "reduce_scatters": rs}
    return case


def case_state_dict(ctx) -> dict:
    t = _train(ctx, GPT(SMALL, seed=0), _blocks)
    fresh = GPT(SMALL, seed=5)                     # plain, single-process model
    fresh.load_state_dict(t["full"])
    plain_diff, _ = _diff(fresh.state_dict(), t["ref"].state_dict())
    plain = GPT(SMALL, seed=7)
    again = FSDP(plain, CountingComm(ctx.group), units=_blocks(plain))
    again.load_full_state_dict(t["fsdp"].full_state_dict())
    reload_diff, _ = _diff(again.full_state_dict(), t["ref"].state_dict())
    sharded = {k: v.clone() for k, v in t["fsdp"].state_dict().items()}
    plain = GPT(SMALL, seed=9)
    third = FSDP(plain, CountingComm(ctx.group), units=_blocks(plain))
    third.load_state_dict(sharded)
    sharded_diff, _ = _diff(third.full_state_dict(), t["ref"].state_dict())
    try:
        third.load_full_state_dict({k: v for k, v in t["full"].items() if k != "ln_f.bias"})
        refused = False
    except ValueError as e:
        refused = "ln_f.bias" in str(e)
    rank0 = t["fsdp"].full_state_dict(rank0_only=True)
    return {"diff": t["diff"], "worst": t["worst"], "plain_diff": plain_diff, "reload_diff": reload_diff,
            "sharded_diff": sharded_diff, "keys_ok": list(sharded) == list(fresh.state_dict()),
            "rank0_only_ok": (len(rank0) > 0) == (ctx.rank == 0), "missing_key_refused": refused}


def case_mixed_precision(ctx) -> dict:
    """bf16 compute and gathers, fp32 reduce, against the fp32 reference and PyTorch's FSDP2."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = dict(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = GPT(SMALL, seed=0)
    torch_model = copy.deepcopy(model)
    t = _train(ctx, model, _blocks, mixed_precision=MixedPrecision(**policy))
    mesh = init_device_mesh("cpu", (ctx.world_size,))
    for block in torch_model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=MixedPrecisionPolicy(**policy))
    fully_shard(torch_model, mesh=mesh, mp_policy=MixedPrecisionPolicy(**policy))
    opt, per, r = _adamw(torch_model.parameters()), BATCH // ctx.world_size, ctx.rank
    for b in _gpt_batches(STEPS):
        _gpt_loss(torch_model, b[r * per:(r + 1) * per]).backward()
        opt.step()
        opt.zero_grad()
    theirs = {k: v.full_tensor() for k, v in torch_model.state_dict().items()}
    st = [v for s in t["opt"].state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    gathered = 2 * STEPS * sum(g.numel for u in t["fsdp"].units for g in u.groups)   # forward + backward
    return {"diff": t["diff"], "worst": t["worst"], "vs_fsdp2": _diff(t["full"], theirs)[0],
            "fsdp2_vs_fp32": _diff(theirs, t["ref"].state_dict())[0],
            "master_fp32": all(p.dtype == torch.float32 for p in t["fsdp"].parameters()),
            "state_fp32": bool(st) and all(v.dtype == torch.float32 for v in st),
            "gather_bytes_per_value": t["comm"]["all_gather"]["payload_bytes"] / gathered}


CASES = {
    "frozen": case_frozen, "buffer": case_buffer, "tied_split": case_tied_split,
    "empty_root": case_empty_root, "mixed_dtypes": case_mixed_dtypes,
    "adamw_set_to_none": _optimizer_case(_adamw, True), "adamw_zeros": _optimizer_case(_adamw, False),
    "sgd_momentum_set_to_none": _optimizer_case(_sgd, True),
    "sgd_momentum_zeros": _optimizer_case(_sgd, False),
    "gloo_collectives": _optimizer_case(_sgd, True, "native"),
    "process_group": _optimizer_case(_sgd, False, "group"),
    "no_sync": _accumulation_case(True), "accumulate_synced": _accumulation_case(False),
    "reused_unit": case_reused_unit, "eval_no_grad": case_eval_no_grad,
    "state_dict": case_state_dict, "mixed_precision": case_mixed_precision,
}


def run_cases(ctx, cases: dict, names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Run the named ``cases`` (all by default) in turn, each a ``case(ctx)`` returning its facts, or
    ``{"error": traceback}`` when it raises; the ranks meet after each, so one case's failure does not
    leave a peer inside the next case's collectives."""
    out = {}
    for name in names or tuple(cases):
        try:
            out[name] = cases[name](ctx)
        except Exception:                                                    # noqa: BLE001
            out[name] = {"error": traceback.format_exc()}
        torch.distributed.barrier(group=ctx.group)
    return out


def cases_worker(ctx, names: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Run the named cases of this module (all by default): :func:`run_cases` over ``CASES``."""
    return run_cases(ctx, CASES, names)
