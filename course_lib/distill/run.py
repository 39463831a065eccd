"""Chapter 9's experiment: train the teacher once, then distill students at several teacher-token budgets.

Regenerate the shipped files (resumable; on 2 busy CPU cores about 15, 40 and 20 minutes)::

    python -m course_lib.distill.run teacher --out data/distill_teacher.pt
    python -m course_lib.distill.run sweep --design fixed_compute --out data/distill_results.json
    python -m course_lib.distill.run sweep --design one_pass --out data/distill_onepass.json

``teacher`` pretrains ``TEACHER_SHAPE`` on the course corpus (``course_lib.corpus``) with the
recipe of ``course_lib.train`` and stores its weights in float16 (0.7 MB): the float16 weights,
loaded back into float32, *are* the teacher every result was computed with.

``sweep`` runs ``course_lib.distill.train.distill`` once per budget: four students of
``STUDENT_SHAPE`` (text / top-k / full logits / real corpus text) trained in lock-step on the same
teacher samples. Design ``fixed_compute`` (the chapter's result) buys ``POOLS[i]`` batches and
trains every student ``FIXED_STEPS`` steps on them (many epochs on a small purchase): only the
tokens bought vary. Design ``one_pass`` buys a fresh batch every step for ``STEPS[i]`` steps, so
compute grows with the purchase. Each run has its own cosine schedule. The JSON file stores the
configuration, software, machine, corpus and teacher fingerprints and every run, and is rewritten
after each budget; rerunning skips budgets already in the file (their key names every setting).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from .. import corpus
from .train import MODES, DistillConfig, distill
from ..model import GPT, GPTConfig
from ..train import History, TrainConfig, evaluate, train_model

__all__ = ["TEACHER_SHAPE", "STUDENT_SHAPE", "TEACHER_TRAIN", "DISTILL", "POOLS", "FIXED_STEPS", "STEPS",
           "DESIGNS", "TEACHER_PATH", "RESULTS_PATH", "ONEPASS_PATH", "train_teacher", "teacher_config", "student_config", "save_teacher", "load_teacher",
           "weights_sha256", "plan", "run_point", "run_sweep", "load_results", "curves",
           "equivalent_text_tokens", "gap_closed", "main"]

SEQ_LEN = 64
TEACHER_SHAPE = (3, 96, 3)          # n_layers, d_model, n_heads: 366k parameters
STUDENT_SHAPE = (2, 48, 2)          # 72k parameters, 5x smaller
TEACHER_TRAIN = dict(n_tokens=3_000_000, batch_size=32, lr=2e-3, warmup_frac=0.05, min_lr_ratio=0.1,
                     weight_decay=0.1, grad_clip=1.0, seed=0)
DISTILL = dict(batch_size=32, prompt_len=16, gen_len=48, k=5, tail="renormalise", lr=3e-3,
               warmup_frac=0.05, min_lr_ratio=0.1, weight_decay=0.1, grad_clip=1.0, seed=0)
# Design "fixed_compute" (the chapter's main result): buy POOLS[i] batches, train FIXED_STEPS steps.
POOLS: tuple[int, ...] = (8, 16, 32, 64, 128)          # teacher tokens = pool · 32 · 48
FIXED_STEPS = 768
EVAL_EVERY = 64
# Design "one_pass": a fresh batch every step, so tokens bought and compute grow together.
STEPS: tuple[int, ...] = (16, 32, 64, 128, 256, 512)   # teacher tokens = steps · 32 · 48
DESIGNS = ("fixed_compute", "one_pass")
ROOT = Path(__file__).resolve().parents[2]
TEACHER_PATH = ROOT / "data" / "distill_teacher.pt"
RESULTS_PATH = ROOT / "data" / "distill_results.json"
ONEPASS_PATH = ROOT / "data" / "distill_onepass.json"
TEACHER_COMMAND = "python -m course_lib.distill.run teacher --out data/distill_teacher.pt"
SWEEP_COMMANDS = {
    "fixed_compute": "python -m course_lib.distill.run sweep --design fixed_compute --out data/distill_results.json",
    "one_pass": "python -m course_lib.distill.run sweep --design one_pass --out data/distill_onepass.json"}


def _cfg(shape: tuple[int, int, int]) -> GPTConfig:
    L, d, h = shape
    return GPTConfig(vocab_size=corpus.VOCAB_SIZE, seq_len=SEQ_LEN, n_layers=L, d_model=d, n_heads=h)


def teacher_config() -> GPTConfig:
    return _cfg(TEACHER_SHAPE)


def student_config() -> GPTConfig:
    return _cfg(STUDENT_SHAPE)


def weights_sha256(model: GPT) -> str:
    """Fingerprint of a model's weights (float32 values in state-dict order)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def train_teacher(model_cfg: GPTConfig, cfg: TrainConfig, split: corpus.CorpusSplit | None = None,
                  progress: Callable[[int, int], None] | None = None) -> tuple[GPT, History]:
    """Pretrain the teacher with exactly the recipe of ``course_lib.train.train`` (same optimiser,
    schedule, batches and evaluation) and return the trained model with its ``History``
    (``train.train`` returns only the history)."""
    model, hist = train_model(model_cfg, cfg, split, progress, eval_batch_size=64)
    model.eval()
    return model, hist


def save_teacher(model: GPT, hist, path: str | Path, split: corpus.CorpusSplit) -> dict:
    """Write the teacher (float16 weights) with its recipe and history; return the metadata."""
    cfg = asdict(model.cfg) | {"extra": None}
    half = GPT(model.cfg)
    half.load_state_dict(model.state_dict())
    half.half()
    reloaded = GPT(model.cfg)
    reloaded.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    meta = {"config": cfg, "train": TEACHER_TRAIN, "command": TEACHER_COMMAND,
            "n_params": model.n_params(), "history": hist.to_dict(), "corpus_sha256": split.sha256,
            "val_loss_fp16": evaluate(reloaded, split.val, 64, None),
            "weights_sha256": weights_sha256(reloaded)}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"meta": meta, "state_dict": half.state_dict()}, path)
    return meta


def load_teacher(path: str | Path = TEACHER_PATH) -> tuple[GPT, dict]:
    """The shipped teacher in float32 (eval mode) and its metadata (recipe, history, val loss)."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    meta = blob["meta"]
    cfg = GPTConfig(**{k: (tuple(v) if isinstance(v, list) else v)
                       for k, v in meta["config"].items() if k != "extra"})
    model = GPT(cfg)
    model.load_state_dict({k: v.float() for k, v in blob["state_dict"].items()})
    model.eval()
    return model, meta


def plan(design: str = "fixed_compute") -> list[dict]:
    """The sweep's runs for ``design``: one per budget, with a key naming every setting the result
    depends on (so a changed setting reruns only what it changes)."""
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    runs = []
    budgets = POOLS if design == "fixed_compute" else STEPS
    for b in budgets:
        spec = {"steps": FIXED_STEPS if design == "fixed_compute" else b, **DISTILL,
                "student_shape": list(STUDENT_SHAPE), "modes": list(MODES)}
        if design == "fixed_compute":
            spec |= {"pool_batches": b, "eval_every": EVAL_EVERY}
        cfg = _distill_cfg(spec)
        spec |= {"output_tokens": cfg.output_tokens, "input_tokens": cfg.input_tokens}
        spec["key"] = json.dumps({k: spec[k] for k in sorted(spec)}, sort_keys=True)
        runs.append(spec)
    return runs


def _distill_cfg(spec: dict) -> DistillConfig:
    return DistillConfig(steps=spec["steps"], pool_batches=spec.get("pool_batches"),
                         eval_every=spec.get("eval_every", 0), **{k: spec[k] for k in DISTILL})


def run_point(spec: dict, teacher: GPT, split: corpus.CorpusSplit | None = None, progress=None,
              modes=None, stop_after: int | None = None) -> dict:
    """Run one planned budget (all modes, or only ``modes``; ``stop_after`` steps) and return its record."""
    res = distill(teacher, student_config(), _distill_cfg(spec), modes or spec["modes"], split, progress,
                  stop_after)
    res["wall_s"] = round(res["wall_s"], 1)
    return {**spec, **res}


def _environment(threads: int) -> dict:
    import numpy
    return {"torch": torch.__version__, "numpy": numpy.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "system": platform.system(), "cpu_count": os.cpu_count(),
            "torch_threads": threads}


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """Read a sweep file (default: the shipped ``data/distill_results.json``)."""
    return json.loads(Path(path).read_text())


def _write(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def run_sweep(out: str | Path, design: str = "fixed_compute", teacher_path: str | Path = TEACHER_PATH,
              threads: int = 1, limit: int | None = None, show_progress: bool = True) -> dict:
    """Run every budget of ``design`` not yet in ``out`` (resumable), rewriting ``out`` after each."""
    from tqdm.auto import tqdm
    torch.set_num_threads(threads)
    path = Path(out)
    split = corpus.load()
    teacher, meta = load_teacher(teacher_path)
    doc = load_results(path) if path.exists() else {}
    if doc.get("teacher", {}).get("weights_sha256", meta["weights_sha256"]) != meta["weights_sha256"]:
        raise RuntimeError(f"{path} was made with a different teacher; use a new --out")
    if doc.get("corpus", {}).get("sha256", split.sha256) != split.sha256:
        raise RuntimeError(f"{path} was made on a different corpus (Python release); use a new --out")
    done = {r["key"]: r for r in doc.get("runs", [])}
    todo = [s for s in plan(design) if s["key"] not in done]
    if limit is not None:
        todo = todo[:limit]
    doc.update({
        "about": "Distillation of the course's tiny GPT at several teacher-token budgets (chapter 9), "
                 f"design {design!r}.",
        "design": design,
        "commands": [TEACHER_COMMAND, SWEEP_COMMANDS[design]],
        "config": {"budgets": list(POOLS if design == "fixed_compute" else STEPS),
                   "budget_unit": "teacher batches bought" if design == "fixed_compute" else "steps",
                   "steps": FIXED_STEPS if design == "fixed_compute" else "= budget",
                   "distill": DISTILL, "student_shape": list(STUDENT_SHAPE),
                   "teacher_shape": list(TEACHER_SHAPE), "seq_len": SEQ_LEN,
                   "student_params": GPT(student_config()).n_params(),
                   "eval": "mean cross-entropy (nats/byte) over every 64-byte window of the validation "
                           "split; kl_to_teacher: mean KL(teacher||student) on the first 128 windows"},
        "teacher": {k: meta[k] for k in ("n_params", "train", "val_loss_fp16", "weights_sha256", "command")},
        "environment": _environment(threads),
        "corpus": split.describe(),
    })
    doc.setdefault("runs", list(done.values()))
    for spec in todo:
        bar = tqdm(total=spec["steps"], desc=f"{design}: {spec['output_tokens']:,} teacher tokens",
                   disable=not show_progress)
        rec = run_point(spec, teacher, split, progress=lambda i, n, b=bar: b.update(1))
        bar.close()
        doc["runs"].append(rec)
        doc["runs"].sort(key=lambda r: r["output_tokens"])
        _write(path, doc)
    _write(path, doc)
    return doc


def curves(doc: dict) -> dict:
    """Per mode, numpy arrays over budgets: ``mode`` the final validation loss, ``mode_best`` the
    lowest one along the run (early stopping; the final one when no curve was recorded) and
    ``mode_kl`` the KL to the teacher; plus ``tokens`` bought (output) and ``input_tokens``."""
    import numpy as np
    runs = sorted(doc["runs"], key=lambda r: r["output_tokens"])
    out = {"tokens": np.array([float(r["output_tokens"]) for r in runs]),
           "input_tokens": np.array([float(r["input_tokens"]) for r in runs])}
    for m in MODES:
        out[m] = np.array([r["modes"][m]["val_loss"] for r in runs])
        out[m + "_best"] = np.array([min(r["curve"]["val_loss"][m]) if "curve" in r else r["modes"][m]["val_loss"]
                                     for r in runs])
        out[m + "_kl"] = np.array([r["modes"][m]["kl_to_teacher"] for r in runs])
    return out


def equivalent_text_tokens(doc: dict, loss: float, best: bool = True) -> float:
    """Teacher tokens the text-only student needs to reach validation ``loss`` (its best checkpoint,
    or its final one with ``best=False``), interpolating its measured curve linearly in
    log(tokens); ``inf`` if it never gets there within the sweep."""
    import numpy as np
    c = curves(doc)
    t, l_text = c["tokens"], c["text_best" if best else "text"]
    if loss < l_text.min():
        return float("inf")
    if loss >= l_text[0]:
        return float(t[0]) if loss == l_text[0] else float("nan")
    i = int(np.argmax(l_text <= loss))
    f = (l_text[i - 1] - loss) / (l_text[i - 1] - l_text[i])
    return float(np.exp(np.log(t[i - 1]) + f * (np.log(t[i]) - np.log(t[i - 1]))))


def gap_closed(doc: dict, mode: str, teacher_loss: float, best: bool = True):
    """Per budget, the share of the text-only student's gap to the teacher that ``mode`` closes:
    (L_text − L_mode) / (L_text − L_teacher), on best checkpoints (or final ones with
    ``best=False``). 0 = no better than text; 1 = as good as the teacher."""
    c = curves(doc)
    sfx = "_best" if best else ""
    return (c["text" + sfx] - c[mode + sfx]) / (c["text" + sfx] - teacher_loss)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("teacher", help="pretrain the teacher and save it")
    t.add_argument("--out", default="data/distill_teacher.pt")
    t.add_argument("--threads", type=int, default=1)
    s = sub.add_parser("sweep", help="distill students at every budget (resumable)")
    s.add_argument("--design", choices=DESIGNS, default="fixed_compute")
    s.add_argument("--teacher", default="data/distill_teacher.pt")
    s.add_argument("--out", default=None, help="default: data/distill_results.json (fixed_compute) or "
                                               "data/distill_onepass.json (one_pass)")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--limit", type=int, default=None, help="run at most this many missing budgets")
    args = p.parse_args(argv)
    if args.command == "teacher":
        from tqdm.auto import tqdm
        torch.set_num_threads(args.threads)
        split = corpus.load()
        cfg = TrainConfig(**TEACHER_TRAIN, eval_every=100)
        bar = tqdm(total=cfg.steps(SEQ_LEN), desc="teacher")
        model, hist = train_teacher(teacher_config(), cfg, split, progress=lambda i, n: bar.update(1))
        bar.close()
        meta = save_teacher(model, hist, args.out, split)
        print(f"teacher: {meta['n_params']:,} parameters, val loss {meta['val_loss_fp16']:.4f} "
              f"(fp16 weights) -> {args.out}", file=sys.stderr)
    else:
        out = args.out or ("data/distill_results.json" if args.design == "fixed_compute"
                           else "data/distill_onepass.json")
        doc = run_sweep(out, args.design, args.teacher, threads=args.threads, limit=args.limit)
        print(f"{len(doc['runs'])} budgets in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
