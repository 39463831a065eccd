"""Chapter 16 (course_lib.batch): the gradient noise scale, the Pareto fit of the critical batch,
the batch-ceiling calculators and µP against Microsoft's mup, each on cases with a known answer,
plus the stored sweeps (data/batch_*.json) checked for the properties the chapter states and
against a small live rerun."""
from __future__ import annotations

import json
import math

import pytest
import torch

from course_lib import batch, comm, corpus
from course_lib.batch import muparam, noise, pareto, runs

DATA = runs.DATA
pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- B_simple (McCandlish et al. App. A.1) ----

def test_noise_scale_known_value():
    # E|G_B|^2 = |G|^2 + tr(S)/B with |G|^2 = 0.4, tr(S) = 6.4: B=4 -> 2.0, B=64 -> 0.5
    assert batch.noise_scale(2.0, 4, 0.5, 64) == pytest.approx(16.0, rel=1e-12)
    g2, tr = noise.noise_parts(2.0, 4, 0.5, 64)
    assert (g2, tr) == pytest.approx((0.4, 6.4), rel=1e-12)


def test_noise_scale_stats_recovers_a_known_noise_scale():
    # per-example gradients G + N(0, sigma^2 I) in d dims: tr(S) = d sigma^2, B_simple = d sigma^2 / |G|^2
    gen = torch.Generator().manual_seed(0)
    d, sigma, big, small = 200, 0.5, 64, 4
    G = torch.full((d,), 0.1, dtype=torch.float64)
    truth = d * sigma ** 2 / float(G @ G)
    sq_s, sq_b = [], []
    for _ in range(400):
        g = G + sigma * torch.randn(big, d, generator=gen, dtype=torch.float64)
        sq_b.append(float(g.mean(0).square().sum()))
        sq_s.append(float(g.view(big // small, small, d).mean(1).square().sum(1).mean()))
    st = batch.noise_scale_stats(sq_s, small, sq_b, big)
    assert abs(st["b_simple"] - truth) < 5 * st["stderr"] and st["stderr"] < 0.1 * truth


def test_grad_sq_norms_big_gradient_is_the_mean_of_the_small_ones():
    cfg = muparam.width_config(16)
    model = muparam.build(cfg, cfg, seed=0, parametrization="sp")
    x, y = corpus.get_batch(corpus.load().train, 8, cfg.seq_len, torch.Generator().manual_seed(0))
    small, big = noise.grad_sq_norms(model, x, y, 2)
    model.zero_grad()
    model(x, y)[1].backward()
    direct = float(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
    assert big == pytest.approx(direct, rel=1e-5) and small > big


@pytest.mark.parametrize("args, name", [
    ((-1.0, 4, 0.5, 64), "sq_norm_small"), ((2.0, 0, 0.5, 64), "batch_small"),
    ((2.0, 4, float("nan"), 64), "sq_norm_big"), ((2.0, 64, 0.5, 4), "batch_big"),
    ((2.0, 4, 2.5, 64), "sq_norm_small"), ((0.1, 4, 2.0, 64), "sq_norm_big")])
def test_noise_scale_names_the_bad_argument(args, name):
    with pytest.raises(ValueError, match=name):
        batch.noise_scale(*args)


# ---- the Pareto front ----

def test_pareto_fit_recovers_the_front():
    bs = [4, 8, 16, 32, 64, 128]
    steps = [1000 * (1 + 40 / b) for b in bs]
    s_min, e_min, b_crit = batch.pareto_fit(bs, steps)
    assert (s_min, e_min, b_crit) == pytest.approx((1000, 40_000, 40), rel=1e-9)
    for b, s in zip(bs, steps):   # every point on (S/S_min - 1)(E/E_min - 1) = 1
        assert (s / s_min - 1) * (b * s / e_min - 1) == pytest.approx(1, rel=1e-9)


def test_pareto_fit_with_noise_stays_close():
    gen = torch.Generator().manual_seed(1)
    bs = [4, 8, 16, 32, 64, 128, 256]
    steps = [500 * (1 + 30 / b) * (1 + 0.03 * float(torch.randn(1, generator=gen))) for b in bs]
    assert batch.pareto_fit(bs, steps)[2] == pytest.approx(30, rel=0.25)


@pytest.mark.parametrize("bs, steps, name", [
    ([4, 8], [10, 5, 3], "differ in length"), ([4, 4, 4], [10, 9, 8], "batch_sizes"),
    ([4, -8, 16], [10, 5, 3], r"batch_sizes\[1\]"), ([4, 8, 16], [10, 0, 3], r"steps\[1\]"),
    ([4, 8, 16], [10, 10, 10.5], "steps"), ([4, 8, 16], [100, 10, 1], "steps"), ("abc", [1], "batch_sizes")])
def test_pareto_fit_names_the_bad_argument(bs, steps, name):
    with pytest.raises(ValueError, match=name):
        batch.pareto_fit(bs, steps)


def test_steps_to_target_interpolates_and_never_reaches():
    assert pareto.steps_to_target([0, 10, 20], [3.0, 2.5, 2.0], 2.25) == pytest.approx(15)
    assert pareto.steps_to_target([0, 10, 20], [3.0, 2.5, 2.6], 2.4) is None
    # a bump up does not count as a second crossing: the curve is smoothed to its running minimum
    assert pareto.steps_to_target([0, 10, 20, 30], [3.0, 2.0, 2.6, 1.0], 2.5) == pytest.approx(5)


# ---- the batch ceiling ----

def test_kaplan_law_and_the_ceiling_it_sets():
    c = batch.law("kaplan2020")
    assert c["b_star"] == 2e8 and c["alpha_b"] == 0.21 and "2001.08361" in c["source"] and c["limits"]
    b = batch.critical_batch_tokens(2.0)
    assert b == pytest.approx(2e8 / 2.0 ** (1 / 0.21), rel=1e-12)
    assert batch.critical_batch_tokens(1.8) > b          # it grows as the loss falls
    assert batch.largest_useful_batch(2.0, 4096) == math.floor(b / 4096)
    assert batch.dp_ceiling(2.0, 4096) == comm.max_dp_degree(b, 4096)
    assert batch.dp_ceiling(2.0, 4096, pp=4) == comm.max_dp_degree(b, 4 * 4096)
    assert batch.gpus_allowed(2.0, 4096, tp=8, cp=2, pp=4) == comm.max_dp_degree(b, 4 * 4096) * 8 * 2 * 4


@pytest.mark.parametrize("call, name", [
    (lambda: batch.critical_batch_tokens(0.0), "loss"), (lambda: batch.critical_batch_tokens(2.0, "x"), "law_name"),
    (lambda: batch.dp_ceiling(2.0, 0), "seq_len"), (lambda: batch.gpus_allowed(2.0, 4096, tp=0), "tp"),
    (lambda: batch.dp_ceiling(2.0, 4096, pp=1.5), "pp"), (lambda: batch.dp_ceiling(9.0, 10 ** 9), "^loss"),
    (lambda: batch.dp_ceiling(9.0, 8192), r"^loss \(9\.0\).*seq_len=8192"),
    (lambda: batch.gpus_allowed(2.0, 4096, pp=4096), "^loss.*pp=4096")])
def test_ceiling_names_the_bad_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ---- µP against Microsoft's mup ----

def test_course_mup_equals_the_mup_package_bit_for_bit():
    r = muparam.compare_with_mup(64, 16, steps=3)
    assert r["same_init"] and r["same_lr"] and r["same_after_steps"]
    assert r["lrs"] == [0.25, 1.0]       # hidden matrices at lr/m with m = 4, the rest at lr


def test_the_comparison_can_fail_sp_is_not_mup():
    # the check is not vacuous: standard parametrisation at 4x the base width differs from mup's
    cfg, base = muparam.width_config(64), muparam.width_config(16)
    sp = muparam.build(cfg, base, 0, "sp")
    ref, ref_opt = muparam.mup_reference(cfg, base, 0, 1e-2)
    assert not all(torch.equal(a, b) for a, b in zip(sp.parameters(), ref.parameters()))
    lrs = set(muparam.param_lrs(sp, base, 1e-2, "sp").values())
    assert lrs == {1e-2} != {g["lr"] for g in ref_opt.param_groups}


def test_mup_at_the_base_width_is_the_standard_model():
    cfg = muparam.width_config(16)
    a, b = muparam.build(cfg, cfg, 3, "mup"), muparam.build(cfg, cfg, 3, "sp")
    x = torch.randint(0, 256, (2, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x), b(x))


# ---- the stored sweeps: the properties the chapter states, and a live slice of each ----

def _load(name: str) -> dict:
    return json.loads((DATA / f"batch_{name}.json").read_text())


def test_stored_sweeps_name_the_command_that_reruns_them():
    for name in ("noise", "critical", "critical_w64", "ramp", "mup"):
        d = _load(name)
        assert d["command"].startswith("python -m course_lib.batch.runs ") and d["corpus"]["sha256"]


def test_noise_scale_grows_from_initialisation_as_the_loss_falls():
    probes = _load("noise")["probes"]
    first, trained = probes[0], probes[1:]
    assert all(p["b_simple"] > 5 * first["b_simple"] for p in trained)
    half = len(trained) // 2
    early, late = trained[:half], trained[half:]
    assert max(p["loss"] for p in late) < min(p["loss"] for p in early)
    assert sum(p["b_simple"] for p in late) / len(late) > 1.1 * sum(p["b_simple"] for p in early) / len(early)


def test_critical_batch_grows_as_the_target_falls_and_agrees_with_b_simple():
    rows = [r for r in _load("critical")["summary"] if "b_crit" in r]
    assert rows[-1]["b_crit"] > 3 * rows[0]["b_crit"]
    probes = _load("noise")["probes"][1:]
    pairs = 0
    for r in rows:
        near = [p["b_simple"] for p in probes if abs(p["loss"] - r["target"]) <= 0.1]
        if near:
            pairs += 1
            assert 1 / 3 < r["b_crit"] / (sum(near) / len(near)) < 3, r["target"]
    assert pairs >= 3
    w64 = [r for r in _load("critical_w64")["summary"] if "b_crit" in r]
    assert w64[-1]["b_crit"] > 2 * w64[0]["b_crit"]


def test_stored_law_is_the_fit_of_the_stored_summary():
    d = _load("critical")
    law = runs.critical_law(d["summary"], d["seq_len"])
    assert law["alpha_b"] == pytest.approx(d["law"]["alpha_b"]) and batch.law("tiny_gpt")["alpha_b"] == d["law"]["alpha_b"]


def _best(row, lrs):
    return lrs[min(range(len(row)), key=lambda i: row[i] if row[i] == row[i] else 1e9)]


def test_sp_optimum_drifts_and_mup_optimum_stays():
    d = _load("mup")
    sp = [_best(r, d["lrs"]) for r in d["loss"]["sp"]]
    mu = [_best(r, d["lrs"]) for r in d["loss"]["mup"]]
    assert sp[0] / sp[-1] >= 4 and max(mu) / min(mu) <= 2
    assert d["loss"]["sp"][0] == d["loss"]["mup"][0]      # at the base width the two are one model


def test_ramp_beats_the_fixed_batch_at_equal_examples():
    d = _load("ramp")
    for r, f in zip(d["ramp"], d["fixed"]):
        assert r["examples"][-1] == f["examples"][-1] == d["budget_examples"]
        assert f["loss"][-1] - r["loss"][-1] > 0.02


def test_live_slice_reproduces_the_stored_sweep():
    # one (batch, lr) run of the critical sweep, rerun to the loss 2.7: the same steps within 20 %
    d = _load("critical")
    stored = next(r for r in d["runs"] if r["batch"] == 64 and r["lr"] == 4e-3)
    live = runs.train_curve(64, 4e-3, 200, eval_every=1, stop_below=2.7)
    s_live = pareto.steps_to_target(live["step"], live["loss"], 2.7)
    s_stored = pareto.steps_to_target(stored["step"], stored["loss"], 2.7)
    assert s_live == pytest.approx(s_stored, rel=0.2)
