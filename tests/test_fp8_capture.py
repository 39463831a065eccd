"""Chapter 15, item 3: FP8 recipes measured on the tiny GPT's own tensors, captured in training.

What is pinned: LinearCapture records, per Linear and only on armed steps, the GEMM's input, its
weight and the gradient of its *output* (equal to autograd's); a short run on the corpus scores
every recipe on every captured tensor within the rounding bounds of its format (E4M3 ~31 dB,
E5M2 ~25 dB, MX's floor rule the only source of overflow); the cached sweep
(data/fp8_capture.json) agrees with a rerun of its first captured step; outliers grown into a
captured activation flush every ordinary value under per-tensor scaling and not under 1x128
tiles (SNR of the rest > 10 dB apart), on the rerun and in the cache the page reads.
"""
from __future__ import annotations

import math

import pytest
import torch

from course_lib.fp8 import capture, capture_runs
from course_lib.model import GPT, GPTConfig

SMALL = GPTConfig(vocab_size=32, seq_len=8, n_layers=1, n_heads=2, d_model=32)


def test_capture_records_input_weight_and_output_gradient_on_armed_steps_only():
    model = GPT(SMALL, seed=0)
    idx = torch.randint(0, SMALL.vocab_size, (2, SMALL.seq_len), generator=torch.Generator().manual_seed(0))
    with capture.LinearCapture(model) as cap:
        model(idx).sum().backward()                  # not armed: nothing kept
        cap.arm(7)
        logits = model(idx)
        logits.retain_grad()
        logits.square().sum().backward()
        cap.disarm()
        model(idx).sum().backward()
    assert list(cap.records) == [7]
    rec = cap.records[7]
    assert set(rec) == set(cap.layers) == {"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.up",
                                           "blocks.0.mlp.down", "head"}
    head = rec["head"]
    assert head["activation"].shape == (16, SMALL.d_model) and head["gradient"].shape == (16, SMALL.vocab_size)
    assert torch.equal(head["gradient"], logits.grad.reshape(16, -1))        # dL/d(output), not d(input)
    assert torch.equal(head["weight"], model.head.weight.detach())
    up = rec["blocks.0.mlp.up"]
    assert up["activation"].shape == (16, SMALL.d_model) and up["gradient"].shape == (16, SMALL.ff)
    assert not model.head._forward_hooks and not model.head._backward_hooks   # close() removed the hooks


def test_capture_and_outliers_name_bad_arguments():
    model = GPT(SMALL, seed=0)
    with pytest.raises(ValueError, match=r"names \['blocks.9.mlp'\]"):
        capture.LinearCapture(model, names=["blocks.9.mlp"])
    with pytest.raises(ValueError, match="model has no nn.Linear"):
        capture.LinearCapture(torch.nn.ReLU())
    with pytest.raises(ValueError, match="factor"):
        capture.grow_outliers(torch.ones(4, 8), factor=-1.0)
    with pytest.raises(ValueError, match="x must be a 2-D"):
        capture.grow_outliers(torch.ones(8))


def test_grow_outliers_grows_the_tensors_own_peaks():
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    grown, rest, where = capture.grow_outliers(x, channels=2, tokens=3, factor=1e3)
    assert int((~rest).sum()) == 6 and torch.equal(grown[rest], x[rest])
    assert torch.equal(grown[~rest], x[~rest] * 1e3)
    top2 = set(torch.topk(x.abs().amax(0), 2).indices.tolist())
    assert set(where["channels"]) == top2


@pytest.fixture(scope="module")
def first_step():
    """The first captured step of the cached run, rerun: step 1's forward and backward come before
    any update, so they do not depend on the run's length."""
    run = capture_runs.capture_training(1, (1,))
    return run, capture_runs.recipe_rows(run["records"])


def test_every_recipe_scores_every_captured_tensor_within_its_formats_bounds(first_step):
    run, rows = first_step
    per = {}
    for r in rows:
        per.setdefault((r["layer"], r["kind"]), set()).add(r["recipe"])
    assert len(per) == 3 * len(run["layers"]) == 27       # 8 block Linears and the head, 3 tensors each
    assert all(v == set(capture_runs.CAPTURE_RECIPES) for v in per.values())    # every shape tiles
    for r in rows:
        floor = {"e4m3": 28.0, "e5m2": 22.0}[r["fmt"]]      # measured: E4M3 ~31.5 dB, E5M2 ~25.5 dB
        if r["recipe"] == "mx":      # the floor rule clips a block's top values: the head's dlogits
            floor -= 3.0 if r["fmt"] == "e4m3" else 7.0      # (one big entry a row) lose most, 18.4 dB
        assert r["snr_db"] > floor, r
        assert r["underflow"] < 0.01, r
        if r["recipe"] != "mx":
            assert r["overflow"] == 0.0, r                 # amax/max scaling cannot overflow
    assert max(r["overflow"] for r in rows if r["recipe"] == "mx") > 0.001   # MX rounds its scale down


def test_cache_agrees_with_a_rerun_of_its_first_step(first_step):
    _, rows = first_step
    cached = capture_runs.load_cached()
    assert cached["command"] == capture_runs.COMMAND
    assert cached["config"]["capture_at"] == list(capture_runs.FULL_RUN["capture_at"])
    want = {(r["layer"], r["kind"], r["recipe"]): r for r in cached["rows"] if r["step"] == 1}
    assert len(want) == len(rows)
    for r in rows:
        c = want[(r["layer"], r["kind"], r["recipe"])]
        assert abs(r["snr_db"] - c["snr_db"]) < 0.2, (r, c)
        assert abs(r["underflow"] - c["underflow"]) < 1e-3 and abs(r["overflow"] - c["overflow"]) < 1e-3
    assert cached["losses"][0] > 5.0 and sum(cached["losses"][-10:]) / 10 < 3.5     # it trained


def _outlier_verdicts(rows: list[dict]) -> None:
    top = {r["recipe"]: r for r in rows if r["factor"] == max(x["factor"] for x in rows)}
    assert top["tensor"]["underflow_rest"] > 0.99 and top["tensor"]["snr_rest"] < 1.0
    assert top["tensor"]["snr_all"] > 25.0                 # the whole tensor's SNR hides the collapse
    assert top["block_1x128"]["snr_rest"] - top["tensor"]["snr_rest"] > 10.0
    assert top["block_1x128"]["underflow_rest"] < 0.05 and top["mx"]["underflow_rest"] < 0.01
    assert top["block_128x128"]["underflow_rest"] > 0.25   # a 128-token block shares the outlier's scale
    small = {r["recipe"]: r for r in rows if r["factor"] == 1.0}
    assert all(r["snr_rest"] > 27.0 for r in small.values()), small


def test_outliers_grown_into_a_captured_activation_break_per_tensor_scaling_not_tiles(first_step):
    run, _ = first_step
    x = run["records"][1][capture_runs.OUTLIER_LAYER]["activation"]
    _outlier_verdicts(capture_runs.outlier_sweep(x, factors=(1.0, 1e6))["rows"])
    _outlier_verdicts(capture_runs.load_cached()["outlier"]["rows"])
    assert not math.isnan(capture_runs.load_cached()["outlier"]["rows"][0]["snr_rest"])
