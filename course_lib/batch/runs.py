"""Chapter 16's runs: the tiny GPT trained at many batch sizes, learning rates and widths.

The sweeps take CPU-minutes, so they run once and are stored (data/batch_*.json, each with the
command that regenerates it); the lab and the tests rerun a small slice and compare.

    python -m course_lib.batch.runs noise      # B_simple along one training run
    python -m course_lib.batch.runs critical   # steps to target losses across batch sizes and LRs
    python -m course_lib.batch.runs ramp       # a batch ramp against a fixed large batch
    python -m course_lib.batch.runs mup        # LR sweeps at several widths, SP and µP
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from .. import corpus
from . import muparam, noise, pareto

__all__ = ["val_set", "train_curve", "noise_run", "critical_sweep", "critical_summary", "ramp_run",
           "mup_sweep", "DATA"]

DATA = Path(__file__).resolve().parents[2] / "data"
WIDTH, BASE_WIDTH, SEQ = 32, 16, 32


def val_set(split: corpus.CorpusSplit, n: int = 128, seq_len: int = SEQ, seed: int = 1234):
    """A fixed validation batch: the same windows for every run, so curves compare."""
    return corpus.get_batch(split.val, n, seq_len, torch.Generator().manual_seed(seed))


@torch.no_grad()
def _val_loss(model, val) -> float:
    return float(model(*val)[1])


def train_curve(batch: int | list[int], lr: float, steps: int, width: int = WIDTH, seed: int = 0,
                eval_every: int = 1, parametrization: str = "sp", base_width: int = BASE_WIDTH,
                stop_below: float | None = None, split=None, val=None, on_step=None) -> dict:
    """Train the tiny GPT with constant-LR Adam for ``steps`` steps; ``batch`` is one batch size
    or one per step (a ramp). Returns the validation curve ``{"step", "examples", "loss"}``;
    stops early once the loss is below ``stop_below``. ``on_step(model, step)`` is called first
    at each step (the noise-scale probe)."""
    split = split if split is not None else corpus.load()
    val = val if val is not None else val_set(split)
    cfg, base = muparam.width_config(width), muparam.width_config(base_width)
    model = muparam.build(cfg, base, seed, parametrization)
    opt = muparam.optimizer(model, base, lr, parametrization)
    gen = torch.Generator().manual_seed(seed + 1)
    sizes = batch if isinstance(batch, list) else [batch] * steps
    out = {"step": [0], "examples": [0], "loss": [_val_loss(model, val)]}
    seen = 0
    for step in range(1, steps + 1):
        if on_step is not None:
            on_step(model, step - 1)
        x, y = corpus.get_batch(split.train, sizes[step - 1], cfg.seq_len, gen)
        opt.zero_grad()
        loss = model(x, y)[1]
        if not math.isfinite(loss.item()):
            out["diverged"] = step
            break
        loss.backward()
        opt.step()
        seen += sizes[step - 1]
        if step % eval_every == 0 or step == steps:
            out["step"].append(step)
            out["examples"].append(seen)
            out["loss"].append(_val_loss(model, val))
            if stop_below is not None and out["loss"][-1] <= stop_below:
                break
    return out


def noise_run(batch: int = 16, lr: float = 4e-3, steps: int = 1500, probe_every: int = 150,
              batch_small: int = 4, batch_big: int = 64, draws: int = 32, seed: int = 0) -> dict:
    """B_simple (in sequences) measured every ``probe_every`` steps of one training run, from
    ``draws`` paired squared norms at ``batch_small`` and ``batch_big``, with its standard error."""
    split = corpus.load()
    probes = []
    gen = torch.Generator().manual_seed(seed + 7)

    def probe(model, step):
        if step % probe_every:
            return
        small, big = [], []
        for _ in range(draws):
            x, y = corpus.get_batch(split.train, batch_big, SEQ, gen)
            s, b = noise.grad_sq_norms(model, x, y, batch_small)
            small.append(s)
            big.append(b)
        st = noise.noise_scale_stats(small, batch_small, big, batch_big)
        with torch.no_grad():
            st["loss"] = _val_loss(model, val_set(split))
        probes.append({"step": step, **st})

    curve = train_curve(batch, lr, steps, seed=seed, on_step=probe, eval_every=probe_every, split=split)
    return {"batch": batch, "lr": lr, "batch_small": batch_small, "batch_big": batch_big,
            "draws": draws, "probes": probes, "curve": curve}


def critical_sweep(batches=(4, 8, 16, 32, 64, 128, 256), lrs=(2e-3, 4e-3, 8e-3, 1.6e-2),
                   target: float = 2.4, max_examples: int = 24576, width: int = WIDTH, seed: int = 0) -> dict:
    """Every (batch, lr) trained until its validation loss reaches ``target`` or it has seen
    ``max_examples`` sequences; the curves are stored, the summary reads targets off them."""
    split = corpus.load()
    val = val_set(split)
    runs = []
    for b in batches:
        for lr in lrs:
            steps = max(1, max_examples // b)
            c = train_curve(b, lr, steps, width=width, seed=seed, eval_every=max(1, 64 // b),
                            stop_below=target, split=split, val=val)
            runs.append({"batch": b, "lr": lr, **c})
    return {"width": width, "seq_len": SEQ, "n_params": muparam.build(
        muparam.width_config(width), muparam.width_config(BASE_WIDTH), 0, "sp").n_params(),
        "target_floor": target, "max_examples": max_examples, "runs": runs}


def critical_summary(sweep: dict, targets) -> list[dict]:
    """Per target loss: each batch's fewest steps over the learning rates, and the Pareto fit."""
    out = []
    for t in targets:
        best: dict[int, tuple[float, float]] = {}
        for r in sweep["runs"]:
            s = pareto.steps_to_target(r["step"], r["loss"], t)
            if s is not None and (r["batch"] not in best or s < best[r["batch"]][0]):
                best[r["batch"]] = (s, r["lr"])
        bs = sorted(best)
        row = {"target": t, "batches": bs, "steps": [best[b][0] for b in bs], "lrs": [best[b][1] for b in bs]}
        if len(bs) >= 3:
            row["s_min"], row["e_min"], row["b_crit"] = pareto.pareto_fit(bs, row["steps"])
        out.append(row)
    return out


def critical_law(summary: list[dict], seq_len: int = SEQ) -> dict:
    """B_crit(L) = B_* / L^(1/α_B) (Kaplan et al.'s form, in tokens) fitted in log space to the
    summary's rows: the tiny GPT's own law, with the loss range it was fitted on."""
    rows = [r for r in summary if "b_crit" in r]
    if len(rows) < 2:
        raise ValueError(f"summary has {len(rows)} fitted targets; the law needs at least two")
    xs = [math.log(r["target"]) for r in rows]
    ys = [math.log(r["b_crit"] * seq_len) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {"b_star": math.exp(my - slope * mx), "alpha_b": -1 / slope,
            "loss_min": min(r["target"] for r in rows), "loss_max": max(r["target"] for r in rows)}


TARGETS = (3.0, 2.9, 2.8, 2.7, 2.6, 2.5, 2.4)


def finish_critical(result: dict, targets=TARGETS) -> dict:
    """Add the per-target summary and the fitted law to a stored critical sweep."""
    result["summary"] = critical_summary(result, targets)
    result["law"] = {**critical_law(result["summary"], result["seq_len"]), "n_params": result["n_params"],
                     "command": result["command"]}
    return result


def ramp_run(budget_examples: int = 8192, big: int = 64, start: int = 8, lr: float = 8e-3,
             seeds=(0, 1), width: int = WIDTH) -> dict:
    """A doubling ramp from ``start`` to ``big`` sequences (each size for an equal share of the
    examples) against ``big`` throughout, same examples, same LR; final validation losses."""
    split = corpus.load()
    val = val_set(split)
    sizes, b = [], start
    stages = int(math.log2(big // start)) + 1
    for _ in range(stages):
        n = budget_examples // stages // b
        sizes += [b] * n
        b *= 2
    sizes += [big] * ((budget_examples - sum(sizes)) // big)
    out = {"budget_examples": budget_examples, "big": big, "start": start, "lr": lr,
           "ramp_sizes": sizes, "ramp": [], "fixed": []}
    for s in seeds:
        r = train_curve(list(sizes), lr, len(sizes), width=width, seed=s, eval_every=8, split=split, val=val)
        f = train_curve(big, lr, budget_examples // big, width=width, seed=s, eval_every=8, split=split, val=val)
        out["ramp"].append(r)
        out["fixed"].append(f)
    return out


def mup_sweep(widths=(16, 32, 64, 128), lrs=tuple(2.0 ** k for k in range(-12, -4)), steps: int = 150,
              batch: int = 16, seed: int = 0) -> dict:
    """Final validation loss after ``steps`` steps for each width × learning rate, SP and µP."""
    split = corpus.load()
    val = val_set(split)
    out = {"widths": list(widths), "lrs": list(lrs), "steps": steps, "batch": batch,
           "base_width": widths[0], "loss": {"sp": [], "mup": []}}
    for p in ("sp", "mup"):
        for w in widths:
            row = []
            for lr in lrs:
                c = train_curve(batch, lr, steps, width=w, seed=seed, eval_every=steps, parametrization=p,
                                base_width=widths[0], split=split, val=val)
                row.append(c["loss"][-1] if "diverged" not in c else float("nan"))
            out["loss"][p].append(row)
    return out


def _main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m course_lib.batch.runs", description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=("noise", "critical", "ramp", "mup"))
    ap.add_argument("--width", type=int, default=WIDTH, help="critical only: the model's width (another "
                    "width is stored as batch_critical_w<width>.json, with a smaller grid)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    fn = {"noise": noise_run, "critical": critical_sweep, "ramp": ramp_run, "mup": mup_sweep}[args.which]
    kw, name = {}, args.which
    if args.which == "critical" and args.width != WIDTH:
        kw, name = dict(width=args.width, batches=(4, 16, 64, 256), lrs=(2e-3, 4e-3, 8e-3)), f"critical_w{args.width}"
    command = f"python -m course_lib.batch.runs {args.which}" + (f" --width {args.width}" if kw else "")
    result = {"command": command, "torch": torch.__version__, "corpus": corpus.load().describe(), **fn(**kw)}
    if args.which == "critical":
        finish_critical(result)
    path = DATA / f"batch_{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    _main()
