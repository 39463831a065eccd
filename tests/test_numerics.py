"""Tests of course_lib.numerics (formats, ulps, sums) and course_lib.numerics.allreduce (real processes).

The claims of chapter 7 are pinned here: FP16 1+1+… stalls at 2048 (not 1024), BF16 at 256; the
fast "jump" summation is identical to the literal loop; gloo's FP16 all-reduce is a ring of FP16
additions whose order we model bit for bit; our ring/tree/FP32 all-reduces equal their
single-process references; the rounding-error theory predicts the measured error.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.numerics import allreduce as fa
from course_lib import numerics as nm
from course_lib.numerics import train as numerics_train

SMALL = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


# ----------------------------------------------------------------------------- formats and ulps
@pytest.mark.parametrize("fmt,exp_bits,man_bits", [("fp32", 8, 23), ("bf16", 8, 7), ("fp16", 5, 10),
                                                   ("fp8_e4m3", 4, 3), ("fp8_e5m2", 5, 2)])
def test_format_layout(fmt, exp_bits, man_bits):
    info = nm.format_info(fmt)
    assert (info.exponent_bits, info.mantissa_bits) == (exp_bits, man_bits)
    assert info.eps == 2.0 ** -man_bits
    assert info.smallest_subnormal == info.smallest_normal * info.eps


def test_known_spacings():
    assert nm.ulp(1.0, "fp16") == 2 ** -10          # "about 0.001 between 1 and 2": true
    assert nm.ulp(1024.0, "fp16") == 1.0            # every integer in [1024, 2048) exists
    assert nm.ulp(2048.0, "fp16") == 2.0
    assert nm.ulp(40000.0, "fp16") == 32.0
    assert nm.ulp(65504.0, "fp16") == 32.0          # at max: the spacing below
    assert nm.ulp(256.0, "bf16") == 2.0
    assert nm.ulp(1.0, "fp8_e4m3") == 0.125 and nm.ulp(448.0, "fp8_e4m3") == 32.0
    assert nm.ulp(0.0, "fp16") == nm.format_info("fp16").smallest_subnormal


@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(list(nm.FORMATS)), mant=st.floats(1.0, 1.999), e=st.integers(-20, 15))
def test_ulp_measured_equals_textbook(fmt, mant, e):
    x = mant * 2.0 ** e
    if x > nm.format_info(fmt).max:
        return
    assert nm.ulp(x, fmt) == nm.ulp_theory(x, fmt)


def test_ulp_table_rows():
    rows = nm.ulp_table(("fp16", "bf16"), range(10, 17))
    assert rows[0]["binade_start"] == 1024 and rows[0]["fp16"] == 1.0 and rows[0]["bf16"] == 8.0
    assert rows[-2]["fp16"] == 32.0 and rows[-1]["fp16"] is None      # 65536 > 65504
    assert nm.ulp_table(("fp8_e4m3",), range(9, 10))[0]["fp8_e4m3"] is None   # 512 > 448


# ----------------------------------------------------------------------------- the seed's story
def test_seed_story_fp16_stalls_at_2048_not_1024():
    total = nm.sequential_sum(1.0, 10_000, "fp16", method="loop")
    assert total == 2048.0
    assert 10_000 / total == pytest.approx(4.88, abs=0.01)       # not "10× off"
    traj = nm.running_sum(torch.ones(2100), "fp16", trajectory=True)
    assert traj[2046].item() == 2047 and traj[2047].item() == 2048 and traj[2048].item() == 2048


@pytest.mark.parametrize("value,dtype,stall", [(1.0, "fp16", 2048), (0.5, "fp16", 1024), (0.1, "fp16", 256),
                                               (3.0, "fp16", 8192), (1.0, "bf16", 256), (0.1, "bf16", 32),
                                               (1.0, "fp32", 2 ** 24), (1.0, "fp8_e4m3", 16),
                                               (1.0, "fp8_e5m2", 8), (1000.0, "fp16", math.inf)])
def test_stall_points(value, dtype, stall):
    assert nm.stall_point(value, dtype) == stall
    assert nm.sequential_sum(value, 10 ** 9, dtype) == stall      # jump method; proven equal below


def test_overshoot_with_three():
    traj = nm.running_sum(torch.full((3000,), 3.0), "fp16", trajectory=True).double()
    exact = 3.0 * torch.arange(1, 3001, dtype=torch.float64)
    assert (traj > exact).any()                # 3 rounds up to +4 on [4096, 8192)
    assert traj[-1].item() == 8192.0


@settings(max_examples=40, deadline=None)
@given(fmt=st.sampled_from(SMALL), value=st.floats(1e-3, 200.0), count=st.integers(1, 5000))
def test_jump_equals_loop(fmt, value, count):
    assert nm.sequential_sum(value, count, fmt, method="jump") == \
        nm.sequential_sum(value, count, fmt, method="loop")


@pytest.mark.parametrize("value", [1.0, 0.1, 3.0, 1e-3, 7.25])
def test_jump_equals_loop_fp32(value):
    assert nm.sequential_sum(value, 3000, "fp32", method="jump") == \
        nm.sequential_sum(value, 3000, "fp32", method="loop")


@settings(max_examples=40, deadline=None)
@given(fmt=st.sampled_from(SMALL), value=st.floats(1e-3, 100.0))
def test_stall_point_is_where_the_real_loop_stops(fmt, value):
    stall = nm.stall_point(value, fmt)
    steps_needed = stall / value if math.isfinite(stall) else 1e9
    if steps_needed < 4000:    # cheap enough for the literal loop
        assert nm.sequential_sum(value, 20_000, fmt, method="loop") == stall
    assert nm.sequential_sum(value, 10 ** 12, fmt, method="jump") == stall
    assert nm.stall_point(-value, fmt) == -stall


# ----------------------------------------------------------------------------- fixes
def test_fixes_on_ten_thousand_ones():
    out = nm.compare_summation(torch.ones(10_000), "fp16")
    assert out["sequential"] == 2048
    for k in ("pairwise", "kahan", "fp32 accumulator", "torch.sum"):
        assert out[k] == 10_000, k
    assert abs(out["stochastic rounding"] - 10_000) < 5 * 170   # unbiased, σ ≈ 165


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(2, 3000), dtype=st.sampled_from(["fp16", "bf16"]))
def test_kahan_and_pairwise_error_bounds(seed, n, dtype):
    x = (torch.rand(n, generator=torch.Generator().manual_seed(seed)) + 0.01).to(nm.resolve_dtype(dtype))
    exact = math.fsum(x.double().tolist())
    u = nm.format_info(dtype).eps / 2
    assert abs(nm.kahan_sum(x, dtype).item() - exact) <= 2 * u * exact + 2 * u * n * u * exact
    assert abs(nm.pairwise_sum(x, dtype).item() - exact) <= math.ceil(math.log2(n)) * u * exact * 1.01


def test_stochastic_round_is_unbiased_and_brackets():
    gen = torch.Generator().manual_seed(0)
    x = torch.full((20_000,), 1.0 + 2 ** -12, dtype=torch.float64)    # a quarter ulp above 1 in fp16
    r = nm.stochastic_round(x, "fp16", gen).double()
    assert set(r.unique().tolist()) == {1.0, 1.0 + 2 ** -10}
    assert r.mean().item() == pytest.approx(1.0 + 2 ** -12, abs=4 * 2 ** -10 * 0.433 / math.sqrt(20_000))
    exact = torch.tensor([3.0, 0.5], dtype=torch.float64)
    assert torch.equal(nm.stochastic_round(exact, "bf16", gen).double(), exact)


def test_stochastic_sum_mean_matches_and_spread_matches_theory():
    gen = torch.Generator().manual_seed(1)
    chains = nm.stochastic_sum(torch.ones(10_000, 48), "fp16", gen).double()
    # theory: per step var r(1−r)·u² with r = frac(1/u): u=2 → 1, u=4 → 3, u=8 → 7
    sd = math.sqrt(2048 * 1 + 4096 * 3 + (10_000 - 8192) * 7)
    assert abs(chains.mean().item() - 10_000) < 4 * sd / math.sqrt(48)
    assert 0.6 * sd < chains.std().item() < 1.5 * sd


def test_low_precision_training_bias():
    near = numerics_train.train_low_precision("nearest", steps=60)
    stoch = numerics_train.train_low_precision("stochastic", steps=60)
    ref = numerics_train.train_low_precision("fp32", steps=60)
    assert near["lost_fraction"] > 0.05 and ref["lost_fraction"] == 0
    tail = lambda o: sum(o["losses"][-10:]) / 10   # noqa: E731
    assert abs(tail(stoch) - tail(ref)) < abs(tail(near) - tail(ref))


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call,name", [
    (lambda: nm.sequential_sum(1.0, 10, "fp12"), "dtype"),
    (lambda: nm.sequential_sum(1.0, 0, "fp16"), "count"),
    (lambda: nm.sequential_sum(float("nan"), 10, "fp16"), "value"),
    (lambda: nm.sequential_sum(1.0, 10, "fp16", method="magic"), "method"),
    (lambda: nm.stall_point(0.0, "fp16"), "increment"),
    (lambda: nm.stall_point(float("inf"), "fp16"), "increment"),
    (lambda: nm.ulp(1e6, "fp16"), "x"),
    (lambda: nm.ulp_table(("fp16", "fp4")), "formats"),
    (lambda: nm.running_sum([], "fp16"), "values"),
    (lambda: nm.stochastic_round(torch.ones(2), "fp8_e4m3", torch.Generator()), "dtype"),
    (lambda: numerics_train.train_low_precision("floor"), "rounding"),
    (lambda: numerics_train.train_low_precision("fp32", lr=2.0), "lr"),
    (lambda: fa.rank_gradients(0, 10), "world_size"),
    (lambda: fa.rank_gradients(2, 10, scale=-1.0), "scale"),
    (lambda: fa.reference_allreduce(torch.ones(2, 3), "butterfly"), "algorithm"),
    (lambda: fa.theory_relative_rms_error("ring", 0), "world_size"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ----------------------------------------------------------------------------- real all-reduces
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("algorithm", fa.ALGORITHMS)
def test_allreduce_matches_single_process_reference(world_size, algorithm):
    out = fa.run_allreduce(algorithm, world_size, n_elements=1031, dtype="fp16", seed=world_size)
    assert out["ranks_agree"] and out["matches_reference"]


@pytest.mark.parametrize("world_size,n", [(3, 37), (4, 4099)])
def test_gloo_bf16_and_odd_sizes_follow_the_ring_model(world_size, n):
    out = fa.run_allreduce("gloo", world_size, n_elements=n, dtype="bf16", mean=1.0)
    assert out["ranks_agree"] and out["matches_reference"]


def test_gloo_does_not_upcast_fp16():
    """If gloo summed in FP32 its result would equal the FP32 path's; it does not."""
    grads = fa.rank_gradients(4, 4096, seed=3).half()
    gloo = fa.run_allreduce("gloo", 4, n_elements=4096, seed=3)["result"]
    assert torch.equal(gloo, fa.reference_allreduce(grads, "gloo"))
    assert not torch.equal(gloo, fa.reference_allreduce(grads, "fp32"))


def test_error_theory_matches_measurement():
    real = fa.run_allreduce("ring", 4, n_elements=8192, seed=5)
    assert real["error"] / real["theory"] == pytest.approx(1.0, abs=0.15)
    grads = fa.rank_gradients(64, 4096, seed=6)
    for alg in ("ring", "tree", "fp32"):
        err = fa.relative_rms_error(fa.reference_allreduce(grads.half(), alg), grads.double().sum(0))
        assert err / fa.theory_relative_rms_error(alg, 64) == pytest.approx(1.0, abs=0.15), alg
    ring64 = fa.theory_relative_rms_error("ring", 64)
    assert ring64 > 1.5 * fa.theory_relative_rms_error("tree", 64)


def test_ring_order_stalls_like_the_seed_but_tree_does_not():
    ones = torch.ones(4096, 8, dtype=torch.float16)     # 4096 "ranks" each contributing 1.0
    assert fa.reference_allreduce(ones, "ring").unique().tolist() == [2048.0]
    assert fa.reference_allreduce(ones, "tree").unique().tolist() == [4096.0]
    assert fa.reference_allreduce(ones, "fp32").unique().tolist() == [4096.0]


# ----------------------------------------------------------------------------- question bank
def test_question_bank_consistent_with_library():
    from course_lib.checks import ch07_fp16 as bank
    qs = {q.qid: q for q in bank.QUESTIONS}
    assert qs["seed_ratio"].reference() == pytest.approx(10_000 / 2048)
    assert qs["stall_point"].reference() == 1024.0 == nm.sequential_sum(0.3, 10 ** 6, "fp16")
    assert qs["stall_bf16"].reference() == 4.0 == nm.sequential_sum(0.01, 10 ** 6, "bf16")
    assert qs["ulp_value"].reference() == 2.0 == nm.ulp_theory(*bank.ULP_CASE)
    expected = []
    for value, count, dtype in bank.KAHAN_CASES:
        x = torch.full((count,), value).to(nm.resolve_dtype(dtype))
        best = torch.tensor(math.fsum(x.double().tolist()), dtype=torch.float64).to(x.dtype)
        expected.append(bool(nm.kahan_sum(x, dtype) == best))
    assert qs["kahan_fixes"].reference() == expected == [True, False, True]
    assert qs["ring_roundings"].reference() == [bank.RING_RANKS - 1, 4]


def test_kahan_grader_separates_right_from_wrong():
    q = {q.qid: q for q in __import__("course_lib.checks.ch07_fp16", fromlist=["x"]).QUESTIONS}["kahan_fp16"]
    assert q.grade(lambda v: nm.kahan_sum(v, "fp16")).score == q.points
    naive = q.grade(lambda v: nm.running_sum(v, "fp16"))
    assert naive.score == 0 and "plain running sum" in naive.message
    assert q.grade(lambda v: v.float().sum()).score == 0                       # wrong dtype
    fp32_kahan = q.grade(lambda v: nm.kahan_sum(v.float(), "fp32").half())
    assert 0 < fp32_kahan.score < q.points and "FP32" in fp32_kahan.message
