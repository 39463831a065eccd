"""The chapter-2 scaling sweep: train the tiny GPT at several sizes on several IsoFLOP budgets.

Regenerate the shipped results (about 10 minutes on 2 busy CPU cores; resumable)::

    python -m course_lib.scaling.sweep --out data/scaling_sweep.json

For each compute budget C in ``BUDGETS`` and each model shape in ``LADDER`` whose
tokens-per-parameter ratio D/N = C/(6N²) falls inside ``RATIO_RANGE``, one run trains a fresh
``GPT`` on D = C/(6N) tokens of the course corpus (``course_lib.corpus``) with the loop in
``course_lib.train`` (cosine schedule over exactly that run) and records the final validation
loss on the whole validation split. The JSON file stores the full configuration, the software
and machine, the corpus fingerprint and every run, and is rewritten after each run: rerunning
the command skips runs already in the file (their key includes every setting that matters), so
an interrupted sweep resumes and a changed setting reruns only what it changes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from .. import corpus
from ..model import GPT, GPTConfig
from ..train import TrainConfig, train

__all__ = ["LADDER", "BUDGETS", "RATIO_RANGE", "TRAIN", "SEQ_LEN", "DEFAULT_PATH", "plan", "run_point",
           "run_sweep", "load_results", "as_arrays", "isoflop_minima", "main"]

SEQ_LEN = 64
# (n_layers, d_model, n_heads): about ×1.4 apart in parameters, from 3.4k to 340k.
LADDER: tuple[tuple[int, int, int], ...] = (
    (1, 8, 1), (1, 12, 1), (2, 12, 1), (1, 16, 1), (2, 16, 1), (2, 20, 1), (2, 24, 2), (2, 28, 2), (2, 32, 2), (3, 32, 2),
    (3, 40, 2), (3, 48, 3), (4, 48, 3), (3, 64, 4), (4, 64, 4), (4, 80, 5),
)
BUDGETS: tuple[float, ...] = (1e10, 3e10, 1e11, 3e11)
RATIO_RANGE = (1.9, 600.0)   # tokens per parameter kept on each IsoFLOP curve
TRAIN = dict(batch_size=16, lr=3e-3, warmup_frac=0.05, min_lr_ratio=0.1, weight_decay=0.1,
             grad_clip=1.0, seed=0)
COMMAND = "python -m course_lib.scaling.sweep --out data/scaling_sweep.json"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "scaling_sweep.json"


def _model_cfg(shape: tuple[int, int, int]) -> GPTConfig:
    L, d, h = shape
    return GPTConfig(vocab_size=corpus.VOCAB_SIZE, seq_len=SEQ_LEN, n_layers=L, d_model=d, n_heads=h)


def plan(budgets=BUDGETS, ladder=LADDER, ratio_range=RATIO_RANGE) -> list[dict]:
    """The runs of the sweep, smallest budget first: budget, shape, N and D = C/(6N) rounded to
    whole steps, and a key that names every setting the result depends on."""
    runs = []
    tokens_per_step = TRAIN["batch_size"] * SEQ_LEN
    for c in budgets:
        for shape in ladder:
            n = GPT(_model_cfg(shape)).n_params()
            d = c / (6.0 * n)
            if not ratio_range[0] <= d / n <= ratio_range[1]:
                continue
            steps = max(1, round(d / tokens_per_step))
            spec = {"budget": c, "n_layers": shape[0], "d_model": shape[1], "n_heads": shape[2],
                    "seq_len": SEQ_LEN, "n_params": n, "n_tokens": steps * tokens_per_step,
                    "steps": steps, **TRAIN}
            spec["key"] = json.dumps({k: spec[k] for k in sorted(spec)}, sort_keys=True)
            runs.append(spec)
    return runs


def run_point(spec: dict, split: corpus.CorpusSplit | None = None, progress=None) -> dict:
    """Train one planned run and return its record (spec + losses + wall time)."""
    cfg = TrainConfig(n_tokens=spec["n_tokens"], eval_every=-(-spec["steps"] // 4),
                      **{k: spec[k] for k in TRAIN})
    hist = train(_model_cfg((spec["n_layers"], spec["d_model"], spec["n_heads"])), cfg, split, progress)
    if hist.n_params != spec["n_params"]:
        raise RuntimeError(f"model has {hist.n_params} parameters, plan said {spec['n_params']}")
    return {**spec, "final_val_loss": hist.final_val_loss, "final_train_loss": hist.train_loss[-1],
            "compute": hist.compute, "wall_s": round(hist.wall_s, 2),
            "curve": {"tokens": hist.tokens, "val_loss": hist.val_loss, "train_loss": hist.train_loss}}


def _environment(threads: int) -> dict:
    import numpy
    return {"torch": torch.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor() or "unknown",
            "system": platform.system(), "cpu_count": os.cpu_count(), "torch_threads": threads}


def load_results(path: str | Path = DEFAULT_PATH) -> dict:
    """Read a sweep file (default: the shipped ``data/scaling_sweep.json`` of the repository)."""
    return json.loads(Path(path).read_text())


def as_arrays(doc: dict) -> dict:
    """The runs as numpy arrays: budget, n_params, n_tokens, compute (6ND), loss (validation),
    train_loss, epochs (passes over the training split), sorted by budget then size."""
    import numpy as np
    runs = sorted(doc["runs"], key=lambda r: (r["budget"], r["n_params"]))
    out = {k: np.array([float(r[k]) for r in runs]) for k in ("budget", "n_params", "n_tokens")}
    out["compute"] = 6.0 * out["n_params"] * out["n_tokens"]
    out["loss"] = np.array([r["final_val_loss"] for r in runs])
    out["train_loss"] = np.array([r["final_train_loss"] for r in runs])
    out["epochs"] = out["n_tokens"] / doc["corpus"]["train_tokens"]
    return out


def isoflop_minima(doc: dict, width: int = 5) -> list[dict]:
    """Hoffmann's Approach 2 on the sweep: for each budget, fit a parabola in log N to the
    ``width`` runs around the lowest loss and return its vertex. ``interior`` is False when the
    lowest loss is the smallest or largest model of that budget (the minimum is not bracketed,
    and the vertex is an extrapolation)."""
    import numpy as np

    from . import isoflop_minimum
    arr = as_arrays(doc)
    out = []
    for c in np.unique(arr["budget"]):
        sel = arr["budget"] == c
        n, loss = arr["n_params"][sel], arr["loss"][sel]
        i = int(np.argmin(loss))
        lo = max(0, min(i - width // 2, n.size - width))
        window = slice(lo, lo + width)
        try:
            n_opt = isoflop_minimum(n[window], loss[window])
        except ValueError:
            n_opt = float("nan")
        out.append({"budget": float(c), "n_opt": n_opt, "d_opt": float(c) / (6 * n_opt),
                    "best_n": float(n[i]), "best_loss": float(loss[i]),
                    "interior": 0 < i < n.size - 1})
    return out


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


def run_sweep(out: str | Path, threads: int = 1, limit: int | None = None, show_progress: bool = True) -> dict:
    """Run every planned point not yet in ``out`` (resumable), rewriting ``out`` after each run."""
    from tqdm.auto import tqdm
    torch.set_num_threads(threads)
    path = Path(out)
    split = corpus.load()
    doc = load_results(path) if path.exists() else {}
    if doc.get("corpus", {}).get("sha256", split.sha256) != split.sha256:
        raise RuntimeError(f"{path} was made on a different corpus (Python release); use a new --out")
    done = {r["key"]: r for r in doc.get("runs", [])}
    todo = [s for s in plan() if s["key"] not in done]
    if limit is not None:
        todo = todo[:limit]
    doc.update({
        "about": "IsoFLOP sweep of the course's tiny GPT on the course corpus (chapter 2).",
        "command": COMMAND,
        "config": {"budgets": list(BUDGETS), "ladder": [list(s) for s in LADDER],
                   "ratio_range": list(RATIO_RANGE), "seq_len": SEQ_LEN, "train": TRAIN,
                   "eval": "mean cross-entropy (nats/byte) over every 64-byte window of the validation split",
                   "model": asdict(_model_cfg(LADDER[0])) | {"n_layers": "ladder", "d_model": "ladder",
                                                             "n_heads": "ladder", "extra": None}},
        "environment": _environment(threads),
        "corpus": split.describe(),
    })
    doc.setdefault("runs", list(done.values()))
    bar = tqdm(todo, desc="sweep", unit="run", disable=not show_progress)
    for spec in bar:
        bar.set_postfix_str(f"C={spec['budget']:.0e} N={spec['n_params']}")
        doc["runs"].append(run_point(spec, split))
        doc["runs"].sort(key=lambda r: (r["budget"], r["n_params"]))
        _write(path, doc)
    _write(path, doc)
    return doc


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="data/scaling_sweep.json", help="results file (resumed if it exists)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core box)")
    p.add_argument("--limit", type=int, default=None, help="run at most this many missing points")
    p.add_argument("--plan", action="store_true", help="print the planned runs and exit")
    args = p.parse_args(argv)
    if args.plan:
        for s in plan():
            print(f"C={s['budget']:.0e}  N={s['n_params']:>7}  D={s['n_tokens']:>9}  "
                  f"D/N={s['n_tokens'] / s['n_params']:6.1f}  steps={s['steps']}")
        return
    doc = run_sweep(args.out, threads=args.threads, limit=args.limit)
    print(f"{len(doc['runs'])} runs in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
