"""The course corpus, the reusable training loop, and the shipped chapter-2 sweep."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from course_lib import corpus
from course_lib.scaling import sweep as scaling_sweep
from course_lib.model import GPTConfig
from course_lib.train import TrainConfig, evaluate, lr_at, train


@pytest.fixture(scope="module")
def split():
    return corpus.load()


# ------------------------------------------------------------------------------ corpus
def test_corpus_is_real_text_split_deterministically(split):
    raw = corpus.token_bytes()
    assert split.n_tokens == len(raw) > 300_000
    assert split.train.dtype == split.val.dtype == torch.uint8
    assert 0.08 < split.val.numel() / split.n_tokens < 0.12
    # every 10th 4096-byte block is validation, in order
    blocks = [raw[i: i + 4096] for i in range(0, len(raw), 4096)]
    assert bytes(split.val.tolist()) == b"".join(b for i, b in enumerate(blocks) if i % 10 == 9)
    assert bytes(split.train.tolist()) == b"".join(b for i, b in enumerate(blocks) if i % 10 != 9)
    again = corpus.load()
    assert again.sha256 == split.sha256 and torch.equal(again.val, split.val)
    assert "the" in corpus.decode(split.train[:5000]).lower()


def test_get_batch_deterministic_and_shifted(split):
    x1, y1 = corpus.get_batch(split.train, 4, 32, torch.Generator().manual_seed(7))
    x2, y2 = corpus.get_batch(split.train, 4, 32, torch.Generator().manual_seed(7))
    assert x1.shape == y1.shape == (4, 32) and x1.dtype == torch.int64
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    assert int(x1.max()) < corpus.VOCAB_SIZE


@pytest.mark.parametrize("call, name", [
    (lambda s: corpus.get_batch(s.train, 0, 8, torch.Generator()), "batch_size"),
    (lambda s: corpus.get_batch(s.train, 2, -1, torch.Generator()), "seq_len"),
    (lambda s: corpus.get_batch(s.train[:10], 2, 64, torch.Generator()), "seq_len"),
    (lambda s: corpus.get_batch(s.train.view(-1, 2), 2, 8, torch.Generator()), "1-D"),
    (lambda s: corpus.load(block_bytes=1), "block_bytes"),
    (lambda s: corpus.bpe_bytes_per_token(100, s), "vocab_size"),
])
def test_corpus_bad_input(split, call, name):
    with pytest.raises(ValueError, match=name):
        call(split)


# ------------------------------------------------------------------------------ train
def test_lr_schedule_warmup_then_cosine():
    total, peak = 200, 1e-3
    lrs = [lr_at(s, total, peak, 0.05, 0.1) for s in range(total)]
    assert lrs[0] == pytest.approx(peak / 10)          # 10 warmup steps, linear
    assert max(lrs) == pytest.approx(peak) and lrs[9] == pytest.approx(peak)
    assert lrs[-1] == pytest.approx(0.1 * peak)         # ends exactly at min_lr_ratio · peak
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lr_at(0, 1, peak, 0.0, 0.1) == pytest.approx(peak)


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_tokens=0), "n_tokens"), (dict(n_tokens=100, lr=-1), "lr"),
    (dict(n_tokens=100, warmup_frac=1.0), "warmup_frac"), (dict(n_tokens=100, batch_size=0), "batch_size"),
    (dict(n_tokens=100, min_lr_ratio=2), "min_lr_ratio"), (dict(n_tokens=100, eval_batches=0), "eval_batches"),
])
def test_train_config_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TrainConfig(**kwargs)


def test_training_learns_and_is_deterministic(split):
    torch.set_num_threads(1)
    cfg = GPTConfig(seq_len=32, n_layers=1, d_model=16, n_heads=1)
    tc = TrainConfig(n_tokens=40 * 8 * 32, batch_size=8, eval_every=20, eval_batches=4, seed=3)
    h1, h2 = train(cfg, tc, split), train(cfg, tc, split)
    assert h1.steps == [20, 40] and h1.tokens[-1] == 40 * 8 * 32
    assert h1.val_loss == h2.val_loss and h1.train_loss == h2.train_loss
    assert h1.val_loss[-1] < h1.val_loss[0] < math.log(256)      # learns beyond uniform bytes
    assert h1.compute == pytest.approx(6 * h1.n_params * h1.n_tokens)


def test_full_evaluation_covers_every_window(split):
    from course_lib.model import GPT
    model = GPT(GPTConfig(seq_len=32, n_layers=1, d_model=16, n_heads=1), seed=0)
    data = split.val[:32 * 10 + 1]
    full = evaluate(model, data, batch_size=3)
    x = data[:-1].long().view(10, 32)
    y = data[1:].long().view(10, 32)
    with torch.no_grad():
        ref = model(x, y)[1].item()
    assert full == pytest.approx(ref, rel=1e-5)


# ------------------------------------------------------------------------------ sweep
def test_sweep_plan_is_consistent():
    specs = scaling_sweep.plan()
    assert len({s["key"] for s in specs}) == len(specs)
    lo, hi = scaling_sweep.RATIO_RANGE
    for s in specs:
        assert lo * 0.95 <= s["n_tokens"] / s["n_params"] <= hi * 1.05
        assert 6 * s["n_params"] * s["n_tokens"] == pytest.approx(s["budget"], rel=0.01)


def _shipped_or_skip() -> dict:
    """The shipped sweep; skipped (with the reason) when this Python ships a different corpus,
    because pydoc_data is regenerated for every Python release."""
    doc = scaling_sweep.load_results()
    here = corpus.load()
    if doc["corpus"]["sha256"] != here.sha256:
        pytest.skip(f"data/scaling_sweep.json was made on the corpus of Python {doc['corpus']['python']}; "
                    f"this is Python {here.python}, whose pydoc topics differ: regenerate the sweep")
    return doc


def test_shipped_sweep_matches_plan_and_provenance():
    doc = _shipped_or_skip()
    assert doc["command"] == "python -m course_lib.scaling.sweep --out data/scaling_sweep.json"
    assert {r["key"] for r in doc["runs"]} == {s["key"] for s in scaling_sweep.plan()}
    for key in ("torch", "python", "machine", "cpu_count", "torch_threads"):
        assert key in doc["environment"]
    minima = scaling_sweep.isoflop_minima(doc)
    assert len(minima) == len(scaling_sweep.BUDGETS)


RERUN_TOLERANCE = 0.01   # nats/byte; same seed and data, only floating-point reduction order may differ


def test_sweep_resumes_and_reruns_one_point(tmp_path):
    """Delete the cheapest run from a copy of the shipped file: the sweep command reruns exactly
    that point, reproduces its loss within RERUN_TOLERANCE, and leaves every other run untouched."""
    src = _shipped_or_skip()
    cheapest = min(src["runs"], key=lambda r: r["steps"] * (r["n_params"] + 20_000))
    doc = dict(src, runs=[r for r in src["runs"] if r["key"] != cheapest["key"]])
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    threads = torch.get_num_threads()
    try:
        scaling_sweep.run_sweep(path, threads=1, show_progress=False)
    finally:
        torch.set_num_threads(threads)
    new = json.loads(path.read_text())
    assert len(new["runs"]) == len(src["runs"])
    redone = next(r for r in new["runs"] if r["key"] == cheapest["key"])
    assert redone["final_val_loss"] == pytest.approx(cheapest["final_val_loss"], abs=RERUN_TOLERANCE)
    old = {r["key"]: r for r in src["runs"]}
    for r in new["runs"]:
        if r["key"] != cheapest["key"]:
            assert r == old[r["key"]]
    shutil.copy(path, tmp_path / "again.json")
    scaling_sweep.run_sweep(tmp_path / "again.json", show_progress=False)    # nothing left to do
    assert json.loads((tmp_path / "again.json").read_text())["runs"] == new["runs"]
