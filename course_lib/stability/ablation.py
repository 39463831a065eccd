"""The chapter's cached experiments: the spike zoo, a guarded run, and the precision ablation grid.

The book page must build in seconds, and FP16/BF16 matmuls on a CPU are several times slower than
FP32, so the 16-run grid (precision × warmup × clipping) and the spike runs the book plots are
computed once by this command and stored with their provenance::

    python -m course_lib.stability.ablation --out data/stability_ablation.json

The runs are chaotic: a one-ulp difference between two CPUs' matmul kernels grows to a different
loss curve within a hundred steps. So what the lab checks and ``tests/test_stability.py``
compares with the file are the robust outcomes (which perturbation the detector caught, whether a
run overflowed), never exact losses or spike indices; :func:`spike_windows` and
:func:`overflow_experiment` compute them.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..report import load_cached
from .. import corpus
from .loop import TINY, StabilityConfig, Trainer, forward_loss, train_run
from .scaler import DTYPES, gradient_probe
from .spikes import GuardConfig, detect_spikes, guarded_run

__all__ = ["COMMAND", "DEFAULT_PATH", "GRID_BASE", "SPIKE_BASE", "PRECISIONS", "PROBE_MODES", "spike_configs",
           "grid_configs", "run_point", "trained_model", "probe_rows", "log2_histogram", "generate", "load", "find",
           "OVERFLOW", "FP16_MAX", "spike_windows", "overflow_experiment"]

COMMAND = "python -m course_lib.stability.ablation --out data/stability_ablation.json"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "stability_ablation.json"

# Spikes: an ordinary learning rate; the grid: a peak LR high enough that warmup matters here.
SPIKE_BASE = StabilityConfig(steps=160, lr=1e-2, warmup_steps=20)
GRID_BASE = StabilityConfig(steps=120, lr=0.4, warmup_steps=30)
PRECISIONS = (("fp32", False), ("bf16", False), ("fp16", False), ("fp16", True))
CORRUPT = (100, 115)
LR_JUMP = (100, 50.0, 3)
# FP16's overflow must not be a coin toss: at the grid's LR 0.4 the attention scores of the FP16 run
# peak near 65504 (14k to 67k at step 35 on different CPUs), so it overflows on some CPUs and not
# on others. At 4x that LR they pass 65504 by step 14-16 of 120 on every kernel path we tried
# (AVX-512, AVX2, scalar; two MKL settings), while the BF16 run's peak goes past 10^6.
OVERFLOW = replace(GRID_BASE, lr=4 * GRID_BASE.lr)
FP16_MAX = 65504.0
AFTER = 20                    # steps after a perturbation in which a detector flag still counts


def spike_configs() -> dict[str, StabilityConfig]:
    """The runs of the spike figure: clean, a corrupted data window, an LR jump, and the high-LR
    pair with and without warmup; ``exercise`` has both a corrupted window and an LR jump."""
    hi = replace(SPIKE_BASE, lr=GRID_BASE.lr, steps=80, warmup_steps=GRID_BASE.warmup_steps)
    return {"clean": SPIKE_BASE, "corrupt": replace(SPIKE_BASE, corrupt=CORRUPT),
            "lr_jump": replace(SPIKE_BASE, lr_jump=LR_JUMP),
            "warmup": hi, "no_warmup": replace(hi, warmup_steps=0),
            "exercise": replace(SPIKE_BASE, seed=3, corrupt=(120, 130), lr_jump=(50, 40.0, 3))}


def grid_configs(base: StabilityConfig = GRID_BASE) -> list[StabilityConfig]:
    """precision (FP32, BF16, FP16, FP16 + dynamic loss scaling) × warmup on/off × clipping on/off."""
    return [replace(base, precision=p, loss_scaling=ls, warmup_steps=w, grad_clip=c)
            for p, ls in PRECISIONS for w in (base.warmup_steps, 0) for c in (1.0, None)]


def _round(xs: list, digits: int) -> list:
    """Floats rounded for a stable file; non-finite values (a diverged step) become null."""
    return [round(float(x), digits) if math.isfinite(x) else None for x in xs]


def run_point(cfg: StabilityConfig, split: corpus.CorpusSplit, peak_every: int = 5) -> dict:
    """One unguarded run, reduced to what the cache stores (losses to 4 decimals)."""
    r = train_run(TINY, cfg, split, peak_every=peak_every)
    return {"config": asdict(cfg), "status": r["status"], "stopped_at": r["stopped_at"],
            "val_loss": round(r["val_loss"], 4) if r["status"] == "ok" else None,
            "skipped": int(sum(r["skipped"])), "loss": _round(r["loss"], 4),
            "scale": [float(s) for s in r["scale"]],
            "peaks": [[int(s), round(a, 1), round(b, 1)] for s, a, b in r["peaks"]],
            "failures": [[int(s), round(a, 1), round(b, 1)] for s, a, b in r["failures"]]}


def spike_windows(losses: list, cfg: StabilityConfig) -> dict[str, bool]:
    """What the spike detector caught in a run of ``cfg``, in terms no CPU difference can flip: for
    each perturbation (``"corrupt"``, ``"lr_jump"``), whether it flagged a step from the start of
    the perturbation to ``AFTER`` steps past its end, and ``"false_alarm"``: whether it flagged a
    step before the first perturbation (any step, for a run without one)."""
    spans = {}
    if cfg.corrupt is not None:
        spans["corrupt"] = (cfg.corrupt[0], cfg.corrupt[1] + AFTER)
    if cfg.lr_jump is not None:
        spans["lr_jump"] = (cfg.lr_jump[0], cfg.lr_jump[0] + cfg.lr_jump[2] + AFTER)
    flags = detect_spikes([float("nan") if v is None else v for v in losses])
    first = min((a for a, _ in spans.values()), default=len(losses))
    out = {name: any(a <= f < b for f in flags) for name, (a, b) in spans.items()}
    out["false_alarm"] = any(f < first for f in flags)
    return out


def overflow_experiment(split: corpus.CorpusSplit, cfg: StabilityConfig = OVERFLOW, peak_every: int = 5) -> dict:
    """FP16 without a loss scaler and BF16, trained with the same settings (default
    :data:`OVERFLOW`), the largest raw attention score every ``peak_every`` steps, and FP16's first
    failing step replayed: the FP32 weights that met that batch, forward in each format.

    Returns ``runs`` (``"fp16"``, ``"bf16"``: :func:`~course_lib.stability.loop.train_run` dicts
    without models), ``failure`` (None when FP16 never produced a non-finite loss, else ``step``,
    ``attn_logits``, ``residual`` and ``loss`` per format) and ``verdict``, the robust outcomes:
    FP16 failed in the first half of the run, its forward pass overflowed where BF16's and FP32's
    did not, the attention scores (at least half of 65504, twice the residual stream) are what
    reached the limit, BF16 finished, and BF16's scores went beyond 4 × 65504."""
    runs = {p: train_run(TINY, replace(cfg, precision=p, loss_scaling=False), split, peak_every=peak_every,
                         keep_model=(p == "fp16")) for p in ("fp16", "bf16")}
    fp16, failure = runs["fp16"], None
    fp16.pop("model")
    if "failure_model" in fp16:
        step, attn, resid = fp16["failures"][0]
        model, (x, y) = fp16.pop("failure_model"), fp16.pop("failure_batch")
        failure = {"step": step, "attn_logits": attn, "residual": resid,
                   "loss": {p: forward_loss(model, x, y, p) for p in DTYPES}}
    bf16_peak = max((a for _, a, _ in runs["bf16"]["peaks"]), default=0.0)
    loss = failure["loss"] if failure else {}
    verdict = {
        "fp16_failed_early": fp16["status"] != "ok" and fp16["stopped_at"] < cfg.steps // 2,
        "fp16_forward_overflowed": bool(loss) and not math.isfinite(loss["fp16"])
        and math.isfinite(loss["bf16"]) and math.isfinite(loss["fp32"]),
        "attention_scores_hit_the_limit": failure is not None and failure["attn_logits"] > FP16_MAX / 2
        and failure["attn_logits"] > 2 * failure["residual"],
        "bf16_finished": runs["bf16"]["status"] == "ok",
        "bf16_scores_beyond_fp16_range": bf16_peak > 4 * FP16_MAX}
    return {"config": cfg, "runs": runs, "failure": failure, "verdict": verdict}


PROBE_MODES = (("fp16", 1.0), ("fp16", 2.0 ** 16), ("bf16", 1.0))
LOG2_BINS = (-44, 4)          # histogram range of log2|g|, one bin per binade


def trained_model(split: corpus.CorpusSplit) -> torch.nn.Module:
    """The tiny GPT at the end of the clean spike run (``SPIKE_BASE``, FP32): a model whose
    predictions are already peaked, so most of its per-token gradients are tiny."""
    return train_run(TINY, SPIKE_BASE, split, keep_model=True)["model"]


def log2_histogram(values: torch.Tensor) -> list[int]:
    """Counts of log2|v| per binade over ``LOG2_BINS``, plus a first bin for exact zeros."""
    v = values.abs().double()
    lo, hi = LOG2_BINS
    e = torch.floor(torch.log2(v[v > 0])).clamp(lo, hi - 1)
    return [int((v == 0).sum())] + torch.bincount((e - lo).long(), minlength=hi - lo).tolist()


def probe_rows(model: torch.nn.Module, split: corpus.CorpusSplit, batch_sizes=(16, 64, 256),
               seed: int = 5) -> list[dict]:
    """Backpropagate one batch of each size in each of ``PROBE_MODES`` (dtype, loss scale) and
    report the underflow measured against the prediction from the FP32 gradients, the weight
    gradient error, and log2 histograms of the logit gradients (as stored, i.e. still scaled)."""
    rows = []
    for bs in batch_sizes:
        x, y = corpus.get_batch(split.train, bs, TINY.seq_len, torch.Generator().manual_seed(seed))
        for dtype, scale in PROBE_MODES:
            p = gradient_probe(model, x, y, dtype, scale)
            rows.append({"tokens": bs * TINY.seq_len, "dtype": dtype, "scale": scale,
                         "flushed": p.flushed_fraction, "predicted": p.predicted_flushed_fraction,
                         "subnormal": p.subnormal_fraction, "weight_rel_error": p.weight_rel_error,
                         "overflow": p.overflow, "hist": log2_histogram(p.logit * scale),
                         "hist_ref": log2_histogram(p.logit_ref * scale)})
    return rows


def generate(path: str | Path = DEFAULT_PATH, progress=print) -> dict:
    """Run everything and write ``path`` (JSON). Takes a few minutes on two CPU cores."""
    split = corpus.load()
    t0 = time.perf_counter()
    doc = {"what": "Chapter 6 cached runs: spike zoo, guarded run, precision x warmup x clipping grid",
           "command": COMMAND, "torch": torch.__version__, "corpus": split.describe(),
           "model": {k: v for k, v in asdict(TINY).items() if k != "extra"},
           "spikes": {}, "grid": []}
    for name, cfg in spike_configs().items():
        doc["spikes"][name] = run_point(cfg, split, peak_every=0)
        progress(f"spikes/{name}: {doc['spikes'][name]['status']}")
    with tempfile.TemporaryDirectory() as d:
        g = guarded_run(Trainer(TINY, spike_configs()["corrupt"], split), d, GuardConfig())
    doc["guarded"] = {"guard": asdict(GuardConfig()), "val_loss": round(g.val_loss, 4),
                      "steps": [r.step for r in g.records], "positions": [r.position for r in g.records],
                      "loss": _round([r.loss for r in g.records], 4),
                      "abandoned": g.abandoned, "rollbacks": g.rollbacks,
                      # checksums cover Python's per-process random state: drop them for a stable file
                      "events": [re.sub(r", sha256 [0-9a-f]+", "", e) for e in g.events]}
    doc["probe"] = [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}
                    for row in probe_rows(trained_model(split), split)]
    progress("probe: done")
    for cfg in grid_configs():
        doc["grid"].append(run_point(cfg, split))
        p = doc["grid"][-1]
        progress(f"grid {cfg.precision}{'+scaling' if cfg.loss_scaling else ''} warmup={cfg.warmup_steps} "
                 f"clip={cfg.grad_clip}: {p['status']} val={p['val_loss']}")
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def load(path: str | Path = DEFAULT_PATH) -> dict:
    """The cached results (default: the repository's ``data/stability_ablation.json``)."""
    return load_cached(path, COMMAND)


def find(doc: dict, precision: str, loss_scaling: bool, warmup: bool, clip: bool) -> dict:
    """The grid point with these settings."""
    for p in doc["grid"]:
        c = p["config"]
        if (c["precision"], c["loss_scaling"], c["warmup_steps"] > 0, c["grad_clip"] is not None) == \
                (precision, loss_scaling, warmup, clip):
            return p
    raise ValueError(f"no grid point precision={precision!r}, loss_scaling={loss_scaling}, "
                     f"warmup={warmup}, clip={clip}")


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m course_lib.stability.ablation", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(DEFAULT_PATH), help="output JSON (default: data/stability_ablation.json)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    generate(a.out, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
