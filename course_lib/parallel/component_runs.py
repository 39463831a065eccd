"""Checks that DataParallel and ZeroOptimizer behave like PyTorch's components in a user's own code.

Each check runs on every rank (``course_lib.dist.launch``), wraps a small model of an awkward shape
(frozen parameters, buffers that differ on the ranks before wrapping, tied weights, fp32 next to
bf16, a container with no parameters of its own), trains it a few steps the way a user would —
their own optimizer, their own ``zero_grad`` — on this rank's slice of each batch, and compares
it with a single-process copy trained on the whole batch. A worker loops over many cases in one
launch and returns the mismatches it found as strings (an empty list: everything matched).
"""
from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
import torch.nn as nn

from .counting import CountingComm
from .dp import DataParallel
from .zero import ZeroOptimizer

__all__ = ["MODELS", "build_model", "dp_cases", "zero_cases", "dp_checks_worker", "zero_checks_worker"]

MODELS = ("frozen", "buffers", "tied", "mixed", "container")
GLOBAL_BATCH, D_IN, D_OUT, VOCAB = 8, 8, 4, 12


class _Frozen(nn.Module):
    """A frozen first layer and a second layer whose bias is frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(D_IN, 16), nn.Linear(16, D_OUT)
        self.a.requires_grad_(False)
        self.b.bias.requires_grad_(False)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class _Buffers(nn.Module):
    """A normalising ``shift`` buffer read by forward, and a counter forward increments."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(D_IN, 16), nn.Linear(16, D_OUT)
        self.register_buffer("shift", torch.randn(D_IN) * 0.1)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls += 1
        return self.b(torch.relu(self.a(x - self.shift)))


class _Tied(nn.Module):
    """An embedding whose matrix is also the output layer (GPT's tied unembedding)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.mid, self.out = nn.Embedding(VOCAB, 16), nn.Linear(16, 16), nn.Linear(16, VOCAB)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(torch.tanh(self.mid(self.emb(x).mean(1))))


class _Mixed(nn.Module):
    """An fp32 layer feeding a bf16 layer."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(D_IN, 16), nn.Linear(16, D_OUT).to(torch.bfloat16)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)).to(torch.bfloat16)).float()


class _Container(nn.Module):
    """No parameters of its own: a ModuleList of children and a nested Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(D_IN, 16), nn.Linear(16, 16)])
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(16, D_OUT))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


_CLASSES = dict(frozen=_Frozen, buffers=_Buffers, tied=_Tied, mixed=_Mixed, container=_Container)


def build_model(name: str, seed: int = 0) -> nn.Module:
    """The model ``name`` (one of :data:`MODELS`), initialised from ``seed`` alone."""
    torch.manual_seed(seed)
    return _CLASSES[name]()


def _batches(name: str, steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed + 1)
    d_out = VOCAB if name == "tied" else D_OUT
    xs = (torch.randint(0, VOCAB, (steps, GLOBAL_BATCH, 3), generator=gen) if name == "tied"
          else torch.randn(steps, GLOBAL_BATCH, D_IN, generator=gen))
    ys = torch.randn(steps, GLOBAL_BATCH, d_out, generator=gen)
    return list(zip(xs, ys))


def _loss(model, x, y) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


def _make_optimizer(kind: str, model: nn.Module, zero: dict | None = None, groups: bool = False):
    """SGD with momentum or AdamW over ``model`` (ZeRO-sharded when ``zero`` holds its options);
    ``groups``: two param groups, the first two parameters at the default lr, the rest at half."""
    cls, hp = ((torch.optim.SGD, dict(lr=0.05, momentum=0.9)) if kind == "sgd"
               else (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.01)))
    params = model if zero is not None else model.parameters()   # ZeRO: a Module brings its buffers
    if groups:
        ps = list(model.parameters())
        params = [{"params": ps[:2]}, {"params": ps[2:], "lr": hp["lr"] / 2}]
    return cls(params, **hp) if zero is None else ZeroOptimizer(params, cls, **zero, **hp)


def _make_scheduler(kind: str | None, opt):
    if kind == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return None


def _disturb(model: nn.Module, rank: int, frozen: bool = True) -> None:
    """Make float buffers (and frozen parameters) differ between ranks (wrapping must undo it)."""
    with torch.no_grad():
        for t in itertools.chain((p for p in model.parameters() if frozen and not p.requires_grad),
                                 model.buffers()):
            if t.is_floating_point():
                t.add_(rank)


def _reference(name, seed, optim, sched, batches, steps, groups=False):
    """The whole batch on one process: grads of the first step, then weights and buffers."""
    model = build_model(name, seed)
    opt = _make_optimizer(optim, model, groups=groups)
    sch = _make_scheduler(sched, opt)
    grads0 = None
    for x, y in batches[:steps]:
        _loss(model, x, y).backward()
        if grads0 is None:
            grads0 = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad()
        if sch:
            sch.step()
    return grads0, model.state_dict()


def _close(tag: str, got: torch.Tensor, want: torch.Tensor, errors: list[str], atol: float = 1e-5) -> None:
    """Record a mismatch beyond ``atol`` (bf16: a few of its ulps). After a bf16 layer, fp32
    weights trained by Adam wander ~1e-4 from the reference: those checks pass ``atol=5e-4``."""
    rtol = 1e-4
    if want.dtype == torch.bfloat16:
        rtol, atol = 3e-2, 2e-2 * float(want.abs().max())
    if got.shape != want.shape or not torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol):
        diff = (got.float() - want.float()).abs().max().item() if got.shape == want.shape else "shape"
        errors.append(f"{tag}: max diff {diff}")


def _same_on_all_ranks(tag: str, model: nn.Module, group, errors: list[str]) -> None:
    flat = torch.cat([t.detach().double().reshape(-1) for t in model.state_dict().values()])
    total = flat.clone()
    dist.all_reduce(total, group=group)
    if not torch.equal(total, flat * dist.get_world_size(group)):
        errors.append(f"{tag}: replicas differ between ranks")


def _comm(ctx, kind: str):
    return CountingComm(ctx.group) if kind == "ring" else ctx.group


ZEROINGS = ("opt_none", "opt_zeros", "module", "bypass")
COMBOS = tuple(itertools.product(("sgd", "adamw"), (False, True)))      # (optimizer, overlap)


def dp_cases() -> list[dict]:
    """Every model × zeroing mode, each pair with one (optimizer, overlap) combination in a Latin
    square (every model and every zeroing mode meets all four), the comm alternating between the
    course's ring and a plain ProcessGroup; plus no_sync accumulation per model."""
    cases = []
    for (i, m), (j, z) in itertools.product(enumerate(MODELS), enumerate(ZEROINGS)):
        optim, overlap = COMBOS[(i + j) % len(COMBOS)]
        cases.append(dict(model=m, zeroing=z, optim=optim, overlap=overlap, comm=("ring", "group")[(i + j // 2) % 2]))
    cases += [dict(model=m, zeroing=z, optim="adamw", overlap=True, comm="ring", microbatches=2)
              for m, z in zip(MODELS, itertools.cycle(("opt_none", "opt_zeros", "module")))]
    return cases


def _dp_case(ctx, model, zeroing, optim, overlap, comm, microbatches=1, steps=3, seed=0) -> list[str]:
    n, r, errors = ctx.world_size, ctx.rank, []
    tag = f"dp[{model}, {zeroing}, {optim}, overlap={overlap}, {comm}, mb={microbatches}]"
    batches = _batches(model, steps, seed)
    grads0, ref = _reference(model, seed, optim, None, batches, steps)
    net = build_model(model, seed)
    _disturb(net, r)
    dp = DataParallel(net, _comm(ctx, comm), bucket_bytes=256 if overlap else None, overlap=overlap)
    if zeroing != "bypass":
        _disturb(net, r, frozen=False)     # after wrapping: each forward must broadcast buffers again
    opt = _make_optimizer(optim, dp)
    fwd = dp.module if zeroing == "bypass" else dp      # bypass: the user calls the inner module
    per = GLOBAL_BATCH // n
    for i, (x, y) in enumerate(batches):
        calls0 = dp.comm.stats["all_reduce"].calls
        x, y = x[r * per:(r + 1) * per], y[r * per:(r + 1) * per]
        for j, (xm, ym) in enumerate(zip(x.chunk(microbatches), y.chunk(microbatches))):
            if j < microbatches - 1:
                with dp.no_sync():
                    (_loss(fwd, xm, ym) / microbatches).backward()
            else:
                (_loss(fwd, xm, ym) / microbatches).backward()
        if dp.comm.stats["all_reduce"].calls - calls0 != len(dp.buckets):
            errors.append(f"{tag} step {i}: {dp.comm.stats['all_reduce'].calls - calls0} all-reduces, "
                          f"expected {len(dp.buckets)}")
        if i == 0:
            for k, p in net.named_parameters():
                if k in grads0:
                    _close(f"{tag} grad {k}", p.grad, grads0[k], errors, atol=1e-6)
        opt.step()
        if zeroing in ("opt_none", "bypass"):
            opt.zero_grad()
        elif zeroing == "opt_zeros":
            opt.zero_grad(set_to_none=False)
        else:
            dp.zero_grad()
    for k, v in ref.items():
        if k != "calls" or microbatches == 1:          # the counter counts forwards
            _close(f"{tag} {k}", net.state_dict()[k], v, errors, 5e-4 if model == "mixed" else 1e-5)
    if set(dp.state_dict()) != {f"module.{k}" for k in ref}:
        errors.append(f"{tag}: state_dict keys {sorted(dp.state_dict())}")
    _same_on_all_ranks(tag, net, ctx.group, errors)
    return errors


def zero_cases() -> list[dict]:
    """Every model × stage × optimizer, cycling through zeroing modes, schedulers and comms, plus
    accumulation over two backwards and a state_dict round trip per model."""
    cases = []
    for i, (m, stage, o) in enumerate(itertools.product(MODELS, (1, 2), ("sgd", "adamw"))):
        cases.append(dict(model=m, stage=stage, optim=o, set_to_none=bool(i % 2),
                          sched=(None, "lambda", "step")[i % 3], comm=("ring", "group")[(i // 2) % 2]))
    cases += [dict(model=m, stage=1 + i % 2, optim="adamw", set_to_none=True, sched=None, comm="ring",
                   microbatches=2) for i, m in enumerate(MODELS)]
    cases += [dict(model=m, stage=2 - i % 2, optim="adamw", set_to_none=False, sched=None, comm="ring",
                   resume=True) for i, m in enumerate(MODELS)]
    cases += [dict(model=m, stage=1 + i % 2, optim=("sgd", "adamw")[i % 2], set_to_none=True, sched="step",
                   comm="ring", groups=True) for i, m in enumerate(MODELS) if m != "buffers"]
    return cases


def _zero_case(ctx, model, stage, optim, set_to_none, sched, comm, microbatches=1, resume=False,
               groups=False, steps=3, seed=0) -> list[str]:
    n, r, errors = ctx.world_size, ctx.rank, []
    tag = (f"zero[{model}, stage {stage}, {optim}, set_to_none={set_to_none}, {sched}, {comm}, "
           f"mb={microbatches}, resume={resume}, groups={groups}]")
    steps += resume
    batches = _batches(model, steps, seed)
    grads0, ref = _reference(model, seed, optim, sched, batches, steps, groups)
    net = build_model(model, seed)
    _disturb(net, r)
    zero = dict(comm=_comm(ctx, comm), stage=stage, bucket_bytes=256)
    opt = _make_optimizer(optim, net, zero, groups)
    sch = _make_scheduler(sched, opt)
    per = GLOBAL_BATCH // n
    for i, (x, y) in enumerate(batches):
        if resume and i == steps - 1:             # rebuild from the saved model and optimizer shard
            saved, model_state = opt.state_dict(), net.state_dict()
            net = build_model(model, seed)
            net.load_state_dict(model_state)
            opt = _make_optimizer(optim, net, zero, groups)
            bad = {**saved, "zero": {**saved["zero"], "rank": 1 - r}}
            try:
                opt.load_state_dict(bad)
                errors.append(f"{tag}: loading another rank's shard did not raise")
            except ValueError:
                pass
            opt.load_state_dict(saved)
        x, y = x[r * per:(r + 1) * per], y[r * per:(r + 1) * per]
        for xm, ym in zip(x.chunk(microbatches), y.chunk(microbatches)):
            (_loss(net, xm, ym) / microbatches).backward()
        opt.step()
        if i == 0:
            full = opt.full_grads()
            for k, p in net.named_parameters():
                if k in grads0:
                    _close(f"{tag} grad {k}", full[p], grads0[k], errors, atol=1e-6)
        opt.zero_grad(set_to_none=set_to_none)
        if sch:
            sch.step()
    for k, v in ref.items():
        if k != "calls" or microbatches == 1:
            _close(f"{tag} {k}", net.state_dict()[k], v, errors, 5e-4 if model == "mixed" else 1e-5)
    _same_on_all_ranks(tag, net, ctx.group, errors)
    return errors


def dp_checks_worker(ctx, cases: list[dict] | None = None) -> list[str]:
    """Run :func:`dp_cases` (or ``cases``) on this rank; return the mismatches found."""
    return [e for case in (cases or dp_cases()) for e in _dp_case(ctx, **case)]


def zero_checks_worker(ctx, cases: list[dict] | None = None) -> list[str]:
    """Run :func:`zero_cases` (or ``cases``) on this rank; return the mismatches found."""
    return [e for case in (cases or zero_cases()) for e in _zero_case(ctx, **case)]
