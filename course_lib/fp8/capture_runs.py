"""The chapter's per-layer capture: the tiny GPT trained on the course corpus, its tensors scored.

``capture_training`` trains the course's tiny GPT (``course_lib.model``) on the course corpus
(``course_lib.corpus``) with the course's schedule and clipping (``course_lib.train.lr_at``,
``clip_gradients``), and records, at the chosen steps, every Linear's input, weight and output
gradient (:class:`course_lib.fp8.capture.LinearCapture`). ``recipe_rows`` scores each captured
tensor under each recipe whose groups its shape tiles: SNR, overflow (saturated) and underflow
(flushed to zero) shares, activations and weights in E4M3, gradients in E5M2.
``outlier_sweep`` grows outliers into a captured activation (``capture.grow_outliers``) and
scores the recipes on the untouched entries as the outliers grow.

The full run (a few hundred steps) is cached in ``data/fp8_capture.json`` by
``python -m course_lib.fp8.capture_runs`` (:data:`COMMAND`); the page reads it, and the tests and
the lab rerun a short run and compare.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from pathlib import Path

import torch

from .. import corpus
from .._validate import positive_int
from ..model import GPT, GPTConfig
from ..train import clip_gradients, lr_at
from .capture import FORMAT_OF, KINDS, LinearCapture, grow_outliers
from .recipes import scale_shape
from .runs import error_stats

__all__ = ["CAPTURE_CONFIG", "CAPTURE_RECIPES", "CACHE", "COMMAND", "OUTLIER_LAYER", "capture_training",
           "recipe_rows", "summary", "outlier_sweep", "sweep", "load_cached"]

# vocab 256: the corpus's bytes; d_model 128 and 4·64 = 256 tokens a step: every GEMM operand tiles
# into 128-wide tiles and 128x128 blocks, so each recipe applies to each tensor.
CAPTURE_CONFIG = GPTConfig(vocab_size=256, seq_len=64, n_layers=2, n_heads=4, d_model=128)
CAPTURE_RECIPES = ("tensor", "row", "block_1x128", "block_128x128", "mx")
OUTLIER_LAYER = "blocks.1.mlp.down"       # its input is the MLP's hidden activation, where SwiGLU's output sits
OUTLIER_FACTORS = (1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6)
CACHE = Path(__file__).resolve().parents[2] / "data" / "fp8_capture.json"
COMMAND = "python -m course_lib.fp8.capture_runs --out data/fp8_capture.json"
FULL_RUN = {"steps": 300, "capture_at": (1, 30, 300)}


@contextlib.contextmanager
def _one_thread():
    """Tensors this small: extra threads only spin on a busy 2-core machine (6x slower measured)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def capture_training(steps: int = 300, capture_at: tuple[int, ...] = (1, 30, 300), *, batch: int = 4,
                     lr: float = 3e-3, seed: int = 0, cfg: GPTConfig = CAPTURE_CONFIG) -> dict:
    """Train ``GPT(cfg, seed)`` for ``steps`` AdamW steps on the corpus (warmup + cosine, clipping
    at 1.0) and capture every Linear's tensors at the 1-based steps ``capture_at``. Returns
    ``{"records": {step: {layer: {kind: tensor}}}, "losses": [...], "layers": [...]}``."""
    steps = positive_int("steps", steps, maximum=100_000)
    batch = positive_int("batch", batch, maximum=4096)
    at = sorted({positive_int("capture_at", s, maximum=steps) for s in capture_at})
    split = corpus.load()
    model = GPT(cfg, seed=seed)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    with _one_thread():
        with LinearCapture(model) as cap:
            for step in range(1, steps + 1):
                for group in opt.param_groups:
                    group["lr"] = lr_at(step - 1, steps, lr)
                x, y = corpus.get_batch(split.train, batch, cfg.seq_len, gen)
                if step in at:
                    cap.arm(step)
                _, loss = model(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                cap.disarm()
                clip_gradients(model, opt, 1.0)
                opt.step()
                losses.append(float(loss.detach()))
    return {"records": cap.records, "losses": losses, "layers": cap.layers}


def _fits(shape, recipe: str) -> bool:
    try:
        scale_shape(shape, recipe)
    except ValueError:
        return False
    return True


def recipe_rows(records: dict, recipes: tuple[str, ...] = CAPTURE_RECIPES) -> list[dict]:
    """One row per (step, layer, kind, recipe) whose shape the recipe tiles: ``snr_db``,
    ``overflow`` (share saturated at the format's max), ``underflow`` (share of nonzero values
    flushed to zero), in the format FP8 training uses for that kind."""
    rows = []
    with _one_thread():
        _score(records, recipes, rows)
    return rows


def _score(records: dict, recipes: tuple[str, ...], rows: list[dict]) -> None:
    for step, layers in sorted(records.items()):
        for layer, kinds in layers.items():
            for kind in KINDS:
                t = kinds[kind]
                for recipe in recipes:
                    if not _fits(t.shape, recipe):
                        continue
                    s = error_stats(t, recipe, FORMAT_OF[kind])
                    rows.append({"step": step, "layer": layer, "kind": kind, "recipe": recipe, "fmt": FORMAT_OF[kind],
                                 "shape": list(t.shape), "snr_db": s["snr_db"], "overflow": s["saturated"],
                                 "underflow": s["underflow"]})


def summary(rows: list[dict], step: int) -> dict:
    """Per (kind, recipe) at ``step``: the lowest and the median SNR over layers, the largest
    overflow and underflow shares. Keys are ``"kind/recipe"``."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["step"] == step:
            out.setdefault(f"{r['kind']}/{r['recipe']}", []).append(r)
    return {k: {"snr_min": min(r["snr_db"] for r in v), "snr_median": statistics.median(r["snr_db"] for r in v),
                "overflow_max": max(r["overflow"] for r in v), "underflow_max": max(r["underflow"] for r in v),
                "layers": len(v)} for k, v in out.items()}


def outlier_sweep(x: torch.Tensor, factors: tuple[float, ...] = OUTLIER_FACTORS,
                  recipes: tuple[str, ...] = CAPTURE_RECIPES, *, channels: int = 3, tokens: int = 4) -> dict:
    """Grow ``channels`` outlier channels on ``tokens`` tokens each into ``x`` by each factor and
    score every recipe (E4M3) on the untouched entries (``snr_rest``, ``underflow_rest``) and on
    the whole tensor (``snr_all``). Returns ``{"rows": [...], "where": ...}``."""
    rows, where = [], None
    with _one_thread():
        for f in factors:
            grown, rest, where = grow_outliers(x, channels=channels, tokens=tokens, factor=f)
            for recipe in (r for r in recipes if _fits(grown.shape, r)):
                part, whole = error_stats(grown, recipe, mask=rest), error_stats(grown, recipe)
                rows.append({"factor": f, "recipe": recipe, "snr_rest": part["snr_db"],
                             "underflow_rest": part["underflow"], "snr_all": whole["snr_db"]})
    return {"rows": rows, "where": where, "channels": channels, "tokens": tokens}


def sweep(steps: int = FULL_RUN["steps"], capture_at: tuple[int, ...] = FULL_RUN["capture_at"], seed: int = 0) -> dict:
    """The cached experiment: the capture run, every recipe on every tensor, the outlier sweep on
    the last step's input of :data:`OUTLIER_LAYER`."""
    run = capture_training(steps, capture_at, seed=seed)
    last = max(run["records"])
    return {"what": "Chapter 15: per-layer FP8 quantization of the tiny GPT's activations, weights and "
                    "gradients in training (fp8.capture_runs), and outliers grown into a captured activation",
            "command": COMMAND, "torch": torch.__version__, "corpus_sha256": corpus.load().sha256,
            "config": {"model": {k: getattr(CAPTURE_CONFIG, k) for k in ("vocab_size", "seq_len", "n_layers",
                                                                        "n_heads", "d_model")},
                       "steps": steps, "capture_at": list(capture_at), "seed": seed, "batch": 4},
            "losses": run["losses"], "layers": run["layers"], "rows": recipe_rows(run["records"]),
            "outlier_layer": OUTLIER_LAYER,
            "outlier": outlier_sweep(run["records"][last][OUTLIER_LAYER]["activation"])}


def load_cached(path: str | Path = CACHE) -> dict:
    """The cached :func:`sweep` (regenerate with :data:`COMMAND`)."""
    with open(path) as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(CACHE))
    args = parser.parse_args(argv)
    result = sweep()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
