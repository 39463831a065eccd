"""Zero-bubble schedules on real ranks, checked and measured (chapter 5's lab driver).

* ``one_process`` — the exact reference: the same stages chained in one process, each
  microbatch's whole backward in turn (loss/m, gradients accumulated in microbatch order), SGD.
  Every pipeline schedule computes exactly this, so its losses, first-step gradients and
  parameters after k steps must equal it bit for bit (``check_exact``); the unsplit GPT on the
  full batch (``run.reference_step``) agrees only to float rounding (another summation order).
* ``split_check`` — B then W (``split_backward``) against the whole backward, stage by stage.
* ``stage_times`` — T_F : T_B : T_W of one middle stage measured, and the share of the backward
  that has no W part (attention's score and softmax products: they touch no weight).
* ``bubble_points`` — schedules at one (p, m) on real ranks, compute real or paced (emulated
  op durations, real order and messages): measured bubble against the simulator's prediction,
  its replay of the measured op times and the paper's formula; microbatches in flight measured
  against the schedule's promise.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F

from ..model import GPTConfig
from . import peak_in_flight, simulate
from .executor import default_sizes
from .gantt import Timeline
from .partition import build_stage, make_batch
from .run import run_pipeline
from .schedules import schedule
from .split_backward import backward_input, backward_weight

__all__ = ["ZB", "v_sizes", "one_process", "check_exact", "split_check", "stage_times", "paper_bubble",
           "bubble_points", "overlap_runs"]

#: A GPT for the V schedules on up to 4 ranks: 6 blocks, so embed, blocks and head make 8 stages.
ZB = GPTConfig(vocab_size=64, seq_len=16, n_layers=6, n_heads=2, d_model=32, tie_embeddings=False)


def v_sizes(cfg: GPTConfig, n_stages: int) -> list[int]:
    """Layers per stage for ``n_stages`` stages: the default cut, or one layer each when the
    stages are as many as the layers (embedding, each block, head)."""
    if n_stages == cfg.n_layers + 2:
        return [1] * n_stages
    return default_sizes(cfg, n_stages)


def one_process(cfg: GPTConfig, sizes: Sequence[int], m: int, mb_size: int = 2, steps: int = 1,
                lr: float = 0.05, seed: int = 0) -> tuple[dict, dict, list[float]]:
    """(first-step gradients, parameters after ``steps``, losses) of the stages chained in one
    process, microbatch after microbatch, with the executor's arithmetic (loss/m, SGD) and, as
    its ranks, one thread (a kernel may split a sum differently over more threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _one_process(cfg, sizes, m, mb_size, steps, lr, seed)
    finally:
        torch.set_num_threads(threads)


def _one_process(cfg: GPTConfig, sizes: Sequence[int], m: int, mb_size: int, steps: int, lr: float,
                 seed: int) -> tuple[dict, dict, list[float]]:
    stages = [build_stage(cfg, sizes, s, seed) for s in range(len(sizes))]
    params = [q for st in stages for q in st.parameters()]
    first, losses = None, []
    for step in range(steps):
        x, y = make_batch(cfg, m * mb_size, seed + step)
        total = 0.0
        for xb, yb in zip((t.clone() for t in x.chunk(m)), (t.clone() for t in y.chunk(m))):
            h = xb
            for st in stages:
                h = st(h)
            loss = F.cross_entropy(h.flatten(0, 1), yb.flatten()) / m
            loss.backward()
            total += loss.item()
        losses.append(total)
        if first is None:
            first = {n: q.grad.clone() for st in stages for n, q in st.named_full_parameters().items()}
        with torch.no_grad():
            for q in params:
                q.add_(q.grad, alpha=-lr)
                q.grad = None
    return first, {n: q.detach().clone() for st in stages for n, q in st.named_full_parameters().items()}, losses


def check_exact(names: Sequence[str], p: int, m: int, cfg: GPTConfig = ZB, steps: int = 2,
                mb_size: int = 2, timeout: float = 120.0) -> dict[str, dict]:
    """Run each schedule of ``names`` on ``p`` gloo ranks (one launch) and compare with
    ``one_process`` on the same stages: per name, whether losses, first-step gradients and
    parameters after ``steps`` are bitwise equal, and the run."""
    runs, refs = [], {}
    for name in names:
        v = 2 if schedule(name, p, m).placement == "v" else 1
        sizes = v_sizes(cfg, p * v)
        runs.append({"schedule": name, "m": m, "steps": steps, "sizes": sizes, "memory": True})
        if len(sizes) not in refs:
            refs[len(sizes)] = one_process(cfg, sizes, m, mb_size, steps)
    res = run_pipeline(cfg, p, runs, mb_size=mb_size, grads=True, params=True, timeout=timeout)
    out = {}
    for run, r in zip(runs, res):
        g, prm, losses = refs[len(run["sizes"])]
        out[r.schedule] = {"grads": g.keys() == r.grads.keys() and all(torch.equal(g[k], r.grads[k]) for k in g),
                           "params": all(torch.equal(prm[k], r.params[k]) for k in prm),
                           "loss": r.loss == losses, "run": r}
    return out


def split_check(cfg: GPTConfig = ZB, n_stages: int = 4, m: int = 2, mb_size: int = 2) -> list[dict]:
    """Per stage: B then W against the whole backward over ``m`` microbatches — whether the
    input gradient and every weight gradient are bitwise equal, and the largest difference."""
    sizes, rows = v_sizes(cfg, n_stages), []
    x, y = make_batch(cfg, m * mb_size, 0)
    gen = torch.Generator().manual_seed(1)
    for s in range(n_stages):
        grads = []
        for split in (False, True):
            st = build_stage(cfg, sizes, s)
            ins = []
            for i in range(m):
                inp = x[i * mb_size:(i + 1) * mb_size]
                if s:
                    inp = torch.randn(mb_size, cfg.seq_len, cfg.d_model, generator=gen.manual_seed(i)).requires_grad_()
                out = st(inp)
                g = torch.randn(out.shape, generator=gen.manual_seed(100 + i)) if s < n_stages - 1 else None
                if s == n_stages - 1:
                    out = F.cross_entropy(out.flatten(0, 1), y[i * mb_size:(i + 1) * mb_size].flatten()) / m
                if split:
                    backward_weight(backward_input(out, g, inp, list(st.parameters())), list(st.parameters()))
                else:
                    torch.autograd.backward(out, g)
                ins.append(inp.grad)
            grads.append(([q.grad for q in st.parameters()], ins))
        (w0, i0), (w1, i1) = grads
        diff = max(float((a - b).abs().max()) for a, b in zip(w0, w1))
        rows.append({"stage": s, "weights_equal": all(torch.equal(a, b) for a, b in zip(w0, w1)),
                    "input_equal": s == 0 or all(torch.equal(a, b) for a, b in zip(i0, i1)), "max_diff": diff})
    return rows


def stage_times(cfg: GPTConfig, sizes: Sequence[int], stage: int, mb_size: int = 8,
                repeats: int = 7) -> dict:
    """Median T_F, T_B (input gradient), T_W (weight gradient) and the whole backward of
    ``stage`` on one thread, in CPU seconds of that thread (``time.thread_time``: the time slices
    other programs take on a busy machine are not counted), and their ratio to T_F."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    st = build_stage(cfg, sizes, stage)
    params = list(st.parameters())
    inp0 = torch.randn(mb_size, cfg.seq_len, cfg.d_model)
    g = torch.randn(mb_size, cfg.seq_len, cfg.d_model)
    rows, clock = [], time.thread_time
    for _ in range(repeats):
        t = [clock()]
        inp = inp0.clone().requires_grad_()
        out = st(inp)
        t.append(clock())
        pend = backward_input(out, g, inp, params)
        t.append(clock())
        backward_weight(pend, params)
        t.append(clock())
        out = st(inp0.clone().requires_grad_())
        t0 = clock()
        torch.autograd.backward(out, g)
        rows.append((t[1] - t[0], t[2] - t[1], t[3] - t[2], clock() - t0))
    torch.set_num_threads(threads)
    med = [sorted(c)[len(c) // 2] for c in zip(*rows)]
    return {"F": med[0], "B": med[1], "W": med[2], "whole": med[3],
            "ratio": (1.0, med[1] / med[0], med[2] / med[0])}


def paper_bubble(name: str, p: int, m: int, tf: float, tb: float, tw: float) -> float | None:
    """The papers' idle time as a share of the step, from per-op times (per chunk for the V
    schedules): 1F1B (p−1)(T_F+T_B+T_W), ZB-H1 (p−1)(T_F+T_B−T_W) (arXiv 2401.10241, a third
    of 1F1B's when the three are equal; the DualPipe table's (PP−1)(F+B−2W) with B whole);
    DualPipeV the DualPipe table's (PP/2−1)(F&B+B−3W) with PP = 2p stages, B a whole backward
    and F&B = F+B (this executor does not overlap the pair's compute). ZB-V's paper gives no
    closed form, only "zero when T_F = T_B = T_W" for steps run back to back without a barrier
    (``layout.bubble.idle_back_to_back``), not for this synchronous step: None. Clamped at 0."""
    idle = {"1f1b": (p - 1) * (tf + tb + tw), "zb-h1": (p - 1) * (tf + tb - tw),
            "dualpipev": (p - 1) * (tf + 2 * tb - tw)}.get(name)
    if idle is None:
        return None
    v = 2 if name == "dualpipev" else 1
    idle = max(idle, 0.0)
    return idle / (idle + v * m * (tf + tb + tw))


def _pace(name: str, p: int, m: int, times: Sequence[float]) -> dict[str, float]:
    """Per-op durations that emulate a stage's T_F, T_B, T_W (a V chunk is half a stage; a
    schedule without W runs B and W as one backward)."""
    tf, tb, tw = times
    v = 2 if schedule(name, p, m).placement == "v" else 1
    if name in ("gpipe", "1f1b", "interleaved"):
        return {"F": tf / v, "B": (tb + tw) / v, "W": 0.0}
    return {"F": tf / v, "B": tb / v, "W": tw / v}


def bubble_points(names: Sequence[str], p: int, m: int, times: Sequence[float] | None = None,
                  cfg: GPTConfig = ZB, mb_size: int = 8, steps: int = 3, warmup: int = 1,
                  timeout: float = 240.0) -> list[dict]:
    """Each schedule of ``names`` measured on ``p`` real ranks (one launch). ``times`` = (T_F,
    T_B, T_W) of one stage in seconds paces the compute (``execute_step``'s ``pace``: order,
    messages and arithmetic real, op durations emulated); None runs the real compute. Per
    schedule: the measured bubble (median step), the simulator's prediction at the paced
    times, its replay of the median step's own op times, the paper's formula, and the
    microbatches in flight measured (graphs held) against the schedule's promise."""
    runs = []
    for name in names:
        v = 2 if schedule(name, p, m).placement == "v" else 1
        run = {"schedule": name, "m": m, "steps": steps, "warmup": warmup, "sizes": v_sizes(cfg, p * v)}
        if times is not None:
            run["pace"] = _pace(name, p, m, times)
        runs.append(run)
    out = []
    for r in run_pipeline(cfg, p, runs, mb_size=mb_size, timeout=timeout):
        name = r.schedule
        b = r.bubbles()
        s = sorted(range(r.steps), key=lambda k: b[k])[r.steps // 2]
        ev = r.timeline.of(step=s)
        mean = {k: sum(e.duration for e in ev if e.kind == k) / max(1, sum(e.kind == k for e in ev)) for k in "FBW"}
        if times is not None:
            tf, tb, tw = times
        else:
            v = 2 if schedule(name, p, m).placement == "v" else 1
            tf, tb, tw = v * mean["F"], v * mean["B"], v * mean["W"]
        split = name not in ("gpipe", "1f1b", "interleaved")
        sim = simulate(schedule(name, p, m), t_forward=tf, t_backward=tb + tw,
                       w_share=tw / (tb + tw) if split else 0.5)
        out.append({"schedule": name, "p": p, "m": m, "paced": times is not None, "times": (tf, tb, tw),
                    "measured": b[s], "simulated": sim.bubble_fraction(), "replayed": r.replay(s).bubble_fraction(),
                    "paper": paper_bubble(name, p, m, tf, tb, tw) if name != "dualpipev"
                    else paper_bubble(name, p, m, tf / 2, tb / 2, tw / 2),
                    "in_flight": r.in_flight, "promised": [peak_in_flight(name, p, m, q) for q in range(p)],
                    "timeline": r.step_timeline(s)})
    return out


def overlap_runs(names: Sequence[str], p: int, m: int, times: Sequence[float], link: float,
                 cfg: GPTConfig = ZB, mb_size: int = 8, steps: int = 3, lookahead: int = 2,
                 timeout: float = 240.0) -> list[dict]:
    """Schedules on ``p`` real ranks with paced compute and an emulated slow link (every
    message handed over ``link`` s after it was sent; ``execute_step``): per schedule, the
    share of the messages' flight hidden under compute (1 − Σ exposed / Σ flight) over the
    median step, its bubble and step time, the simulator's bubble with ``t_comm = link``, and a
    two-rows-per-rank timeline (compute; messages in flight to that rank, their exposed part)."""
    runs = [{"schedule": n, "m": m, "steps": steps, "warmup": 1, "link": link, "lookahead": lookahead,
             "pace": _pace(n, p, m, times), "sizes": v_sizes(cfg, p * (2 if schedule(n, p, m).placement == "v" else 1))}
            for n in names]
    out = []
    tf, tb, tw = times
    for r in run_pipeline(cfg, p, runs, mb_size=mb_size, timeout=timeout):
        b = r.bubbles()
        s = sorted(range(r.steps), key=lambda k: b[k])[r.steps // 2]
        tl = r.step_timeline(s)
        flight = sum(e.duration for e in tl.events if e.kind == "link")
        exposed = sum(e.duration for e in tl.events if e.kind == "exposed")
        split = r.schedule not in ("gpipe", "1f1b", "interleaved")
        sim = simulate(schedule(r.schedule, p, m), t_forward=tf, t_backward=tb + tw, t_comm=link,
                       w_share=tw / (tb + tw) if split else 0.5)
        rows = Timeline(2 * p, [replace(e, rank=2 * e.rank + (e.kind in ("link", "exposed")))
                                for e in tl.events])
        out.append({"schedule": r.schedule, "hidden": 1.0 - exposed / flight, "messages": sum(
            e.kind == "link" for e in tl.events), "bubble": b[s], "simulated": sim.bubble_fraction(),
            "step_s": tl.makespan(), "simulated_s": sim.makespan(), "timeline": tl, "rows": rows})
    return out


def sweep(path: str = "data/zero_bubble_sweep.json") -> dict:
    """Chapter 5's stored measurements (minutes; the lab and tests rerun one small point):
    T_F:T_B:T_W of a middle DEMO stage; paced bubbles at several (p, m); real-compute bubbles
    on 2 ranks; DualPipeV's hidden communication; PyTorch's zero-bubble schedules side by side.
    Reproduce with ``python -m course_lib.pipeline.zb_runs``."""
    import json
    from .partition import DEMO
    from .torch_pipelining import TORCH_TWO_STAGE, compare_with_torch
    names = ["1f1b", "zb-h1", "zb-v", "dualpipev"]
    st = stage_times(DEMO, default_sizes(DEMO, 4), 1)
    times = (0.1, 0.1 * st["ratio"][1], 0.1 * st["ratio"][2])
    keep = ("schedule", "p", "m", "measured", "simulated", "replayed", "paper", "in_flight", "promised")
    out: dict = {"command": "python -m course_lib.pipeline.zb_runs", "stage_times": st, "paced_times": times,
                 "paced": [], "real": [], "overlap": [], "torch": []}
    for p, m in [(2, 4), (2, 8), (4, 8), (4, 12)]:
        out["paced"] += [{k: row[k] for k in keep} for row in bubble_points(names, p, m, times)]
    out["real"] = [{k: row[k] for k in keep + ("times",)}
                   for row in bubble_points(names, 2, 8, None, cfg=DEMO, mb_size=8, steps=5)]
    for p, m in [(2, 4), (4, 8)]:
        out["overlap"] += [{"p": p, "m": m, "link": 0.01, **{k: row[k] for k in (
            "schedule", "hidden", "messages", "bubble", "simulated", "step_s", "simulated_s")}}
            for row in overlap_runs(["1f1b", "zb-h1", "dualpipev"], p, m, times, 0.01)]
    for p in (2, 4):
        for cls in TORCH_TWO_STAGE:
            row = compare_with_torch(ZB, p, cls, m=2 * p, repeats=5, sizes=v_sizes(ZB, 2 * p), timeout=120)
            out["torch"].append({"class": cls, "ours": TORCH_TWO_STAGE[cls], "p": p, "m": 2 * p, **row})
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    sweep()
