"""Lab driver: bit flips injected into one data-parallel rank, and three detectors measured on them.

``sdc_sweep(trials=...)`` launches ``world_size`` gloo ranks holding replicas of a small MLP with
Adam. After a few clean steps the state is snapshotted; each trial restores it, draws (from a seed
every rank shares) a target — ``none`` (a clean step, for false alarms), ``gemm`` (the first
layer's GEMM output, forward), ``grad`` (a local gradient, before the all-reduce) or ``optimizer``
(Adam's first moment, before the update) — a victim rank, an element and a bit, and runs one step
with the flip on the victim. Then, on every trial:

* ``fingerprint`` — the replicas' parameter CRCs all-gathered: any difference is a detection;
* ``recompute`` — rank ``r+1`` recomputes rank ``r``'s local gradient on ``r``'s batch and compares
  its CRC with the one ``r`` computed (bitwise: the same kernels on the same inputs);
* ``anomaly`` — the step's loss or global gradient norm more than ``z`` standard deviations from
  clean calibration steps (or not finite).

Each trial also records whether the flip did harm: whether any replica's parameters after the step
differ from a clean step's. Returns one row per trial and each detector's seconds per step.
``python -m course_lib.triage.sdc_runs`` writes the stored sweep (``data/triage_sdc.json``).
"""
from __future__ import annotations

import json
import sys

__all__ = ["TARGETS", "sdc_sweep", "rates"]

TARGETS = ("none", "gemm", "grad", "optimizer")


def _sdc_worker(ctx, trials: int, seed: int, z: float, batch: int, warmup: int) -> dict:
    import random
    import time

    import torch

    from course_lib.triage.sdc_runs import TARGETS
    import torch.distributed as dist

    from course_lib.triage.sdc import Anomaly, fingerprint, flip_bit
    g, W, rank = ctx.group, ctx.world_size, ctx.rank
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    params = list(model.parameters())
    wt = torch.randn(32, 1)

    def data(key: int, r: int):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + key * 101 + r)
        x = torch.randn(batch, 32, generator=gen)
        return x, x @ wt + 0.1 * torch.randn(batch, 1, generator=gen)

    def local_grads(x, y, flip=None):
        hook = None
        if flip is not None:
            def hook(mod, inp, out):
                bad = out.detach().clone()
                flip_bit(bad, *flip)
                return out + (bad - out.detach())
            hook = model[0].register_forward_hook(hook)
        for p in params:
            p.grad = None
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if hook is not None:
            hook.remove()
        return loss.detach(), [p.grad for p in params]

    def step(key: int, plan=None) -> dict:
        target, victim, bit, pick = plan or ("none", -1, 0, 0.0)
        me = rank == victim
        x, y = data(key, rank)
        t0 = time.perf_counter()
        loss, grads = local_grads(x, y, (int(pick * batch * 64), bit) if me and target == "gemm" else None)
        if me and target == "grad":
            flip_bit(grads[0], int(pick * grads[0].numel()), bit)
        local_fp = fingerprint(grads)
        flat = torch.cat([gr.view(-1) for gr in grads] + [loss.view(1)])
        dist.all_reduce(flat, group=g)
        flat /= W
        off = 0
        for gr in grads:
            gr.copy_(flat[off:off + gr.numel()].view_as(gr))
            off += gr.numel()
        if me and target == "optimizer":
            flip_bit(opt.state[params[0]]["exp_avg"], int(pick * params[0].numel()), bit)
        opt.step()
        t_step = time.perf_counter() - t0
        t0 = time.perf_counter()
        fps = [None] * W
        dist.all_gather_object(fps, fingerprint(params), group=g)
        t_fp = time.perf_counter() - t0
        return {"loss": float(flat[-1]), "gnorm": float(flat[:-1].norm()), "local_fp": local_fp,
                "fps": fps, "t_step": t_step, "t_fp": t_fp}

    for k in range(warmup):                           # clean steps, then the state every trial starts from
        step(-1 - k)
    snap = ({k: v.clone() for k, v in model.state_dict().items()},
            {id(p): {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[p].items()} for p in params})

    def restore():
        model.load_state_dict(snap[0])
        for p in params:
            for k, v in snap[1][id(p)].items():
                opt.state[p][k] = v.clone() if torch.is_tensor(v) else v

    calib = []
    for k in range(16):                               # clean steps from the snapshot: the anomaly check's baseline
        restore()
        s = step(10_000 + k)
        calib.append((s["loss"], s["gnorm"]))
    loss_chk = Anomaly(z).calibrate([c[0] for c in calib])
    norm_chk = Anomaly(z).calibrate([c[1] for c in calib])
    rng = random.Random(seed)
    rows, t_steps, t_fps, t_recs = [], [], [], []
    for t in range(trials):
        plan = (TARGETS[t % len(TARGETS)], rng.randrange(W), rng.randrange(32), rng.random())
        restore()
        clean_fp = None
        if plan[0] != "none":                          # the same step without the flip: was there harm?
            clean_fp = step(t)["fps"][0]
            restore()
        s = step(t, plan)
        t0 = time.perf_counter()                       # recompute the left neighbour's local gradient
        left = (rank - 1) % W
        restore()
        _, gr = local_grads(*data(t, left))
        mine = fingerprint(gr)
        claimed = [None] * W
        dist.all_gather_object(claimed, (s["local_fp"], mine), group=g)
        recompute = any(claimed[r][0] != claimed[(r + 1) % W][1] for r in range(W))
        t_recs.append(time.perf_counter() - t0)
        t_steps.append(s["t_step"])
        t_fps.append(s["t_fp"])
        rows.append({"target": plan[0], "victim": plan[1] if plan[0] != "none" else None, "bit": plan[2],
                     "harm": plan[0] != "none" and any(f != clean_fp for f in s["fps"]),
                     "fingerprint": len(set(s["fps"])) > 1, "recompute": recompute,
                     "anomaly": loss_chk(s["loss"]) or norm_chk(s["gnorm"])})
    return {"rows": rows, "t_step": sum(t_steps) / trials, "t_fingerprint": sum(t_fps) / trials,
            "t_recompute": sum(t_recs) / trials}


def sdc_sweep(*, trials: int = 64, world_size: int = 2, seed: int = 0, z: float = 6.0, batch: int = 16,
              warmup: int = 5) -> dict:
    """Run ``trials`` trials (targets in turn: none, gemm, grad, optimizer) on real ranks; rank 0's
    rows (every rank sees the same verdicts) and the mean seconds of a step and of each detector."""
    from course_lib._validate import positive_int
    from course_lib.dist import launch
    trials = positive_int("trials", trials)
    res = launch(_sdc_worker, world_size, timeout=30.0 + 0.5 * trials, trials=trials, seed=seed, z=z, batch=batch,
                 warmup=warmup)
    return {"rows": res[0]["rows"], "cost": {k: res[0][k] for k in ("t_step", "t_fingerprint", "t_recompute")},
            "args": {"trials": trials, "world_size": world_size, "seed": seed, "z": z, "batch": batch}}


def rates(rows: list[dict]) -> dict:
    """Per target: trials, flips that did harm, and each detector's rate (on ``none``: false alarms)."""
    out = {}
    for target in TARGETS:
        sel = [r for r in rows if r["target"] == target]
        if sel:
            out[target] = {"trials": len(sel), "harmful": sum(r["harm"] for r in sel) / len(sel),
                           **{d: sum(r[d] for r in sel) / len(sel) for d in ("fingerprint", "recompute", "anomaly")},
                           "any": sum(r["fingerprint"] or r["recompute"] or r["anomaly"] for r in sel) / len(sel)}
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.triage.sdc_runs OUT.json [TRIALS]``: the stored sweep."""
    argv = sys.argv[1:] if argv is None else argv
    from course_lib.triage import sdc_runs   # the module by its name: the ranks import the worker from it
    trials = int(argv[1]) if len(argv) > 1 else 800
    res = sdc_runs.sdc_sweep(trials=trials)
    res["command"] = f"python -m course_lib.triage.sdc_runs data/triage_sdc.json {trials}"
    res["rates"] = rates(res["rows"])
    with open(argv[0], "w") as f:
        json.dump(res, f, indent=0)
        f.write("\n")
    print(json.dumps(res["rates"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
