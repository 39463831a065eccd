"""The planner runs FP8 (issue #45): ``precision="fp8"`` in ``layout.estimate``, ``layout.layout``
and ``plan.plan`` times the block's GEMMs (``stepmodel.FP8_GEMMS``) at the chip's FP8 peak, adds
their input casts as memory-bound time, keeps attention and the embedding/head in BF16, refuses a
chip without FP8, and reports MFU against the BF16 peak with the FP8 and mixed peaks beside it.
The default (``precision="bf16"``) is unchanged: the stored numbers below are today's before FP8."""
from __future__ import annotations

import dataclasses

import pytest

from course_lib import hardware, layout as L, plan as P
from course_lib.__main__ import main
from course_lib.layout import stepmodel

# Llama-3-70B-like, TP 8 · PP 4 · DP 8 on H100: a GEMM-bound step (GEMMs ~70 % of it in BF16)
DENSE = dict(n_params=70e9, n_layers=80, d_model=8192, n_heads=64, seq_len=8192, global_batch_tokens=4e6,
             kv_heads=8, vocab_size=128256, block="llama")
MOE = dict(n_params=37e9, n_layers=61, d_model=7168, n_heads=128, seq_len=4096, global_batch_tokens=15e6,
           moe=L.DEEPSEEK_V3, ep=64, gpu="H800")


def test_default_is_unchanged_stored_numbers_from_before_fp8():
    x = L.estimate(8, 1, 4, 8, **DENSE)
    assert (x.step_s, x.mfu) == (pytest.approx(18.443812903541826, rel=1e-12), pytest.approx(0.3597678218186371, rel=1e-12))
    # DEEPSEEK_V3 has routed node-limited since #45 (max_nodes=4, chapter 14's bytes in the step model):
    # without the limit the stored number stands; with it fewer copies cross InfiniBand, a shorter step
    y = L.estimate(1, 1, 16, 128, **dict(MOE, moe=dataclasses.replace(L.DEEPSEEK_V3, max_nodes=None)))
    assert (y.step_s, y.mfu) == (pytest.approx(6.238474027084568, rel=1e-12), pytest.approx(0.2635357988122279, rel=1e-12))
    assert L.estimate(1, 1, 16, 128, **MOE).step_s < y.step_s
    z = L.layout(8e9, 32, 4096, 32, 8192, 4e6, 256, kv_heads=8)
    assert (z.step_s, z.mfu) == (pytest.approx(1.785961165972522, rel=1e-12), pytest.approx(0.4246126812841065, rel=1e-12))
    assert x.fp8 == {} and "quantize" not in x.breakdown
    assert L.estimate(8, 1, 4, 8, precision="bf16", **DENSE) == x


def test_fp8_is_faster_than_bf16_on_a_gemm_bound_job_by_less_than_2x():
    b = L.estimate(8, 1, 4, 8, **DENSE)
    f = L.estimate(8, 1, 4, 8, precision="fp8", **DENSE)
    assert b.breakdown["gemm"] > 0.6 * b.step_s                       # GEMM-bound
    assert b.step_s / 2 < f.step_s < b.step_s
    assert b.compute_s / 2 < f.compute_s < b.compute_s                # the BF16 parts and the casts stay
    assert f.breakdown["quantize"] > 0                                # the casts are paid
    assert f.breakdown["attention"] == b.breakdown["attention"]       # core attention stays BF16
    assert f.breakdown["memory"] == b.breakdown["memory"]             # norms, residuals, SwiGLU product
    assert b.breakdown["gemm"] / 2 < f.breakdown["gemm"] < b.breakdown["gemm"]   # the head's share in BF16
    # memory model unchanged (BF16 bytes, an upper bound for FP8; see plan_layouts' docstring)
    assert (f.states_bytes, f.activation_bytes) == (b.states_bytes, b.activation_bytes)


def test_fp8_mfu_is_against_the_bf16_peak_and_given_against_fp8_and_mixed():
    f = L.estimate(8, 1, 4, 8, precision="fp8", **DENSE)
    acc = hardware.get_accelerator("H100-SXM")
    assert f.mfu == pytest.approx(6 * 70e9 * 4e6 / 256 / (acc.peak("bf16") * f.step_s))
    assert f.fp8["mfu_vs_bf16"] == f.mfu
    assert f.fp8["mfu_vs_fp8"] == pytest.approx(f.mfu * acc.peak("bf16") / acc.peak("fp8"))
    share = 1 - 2 * 128256 * 8192 / 70e9                              # all but the embedding and head
    assert f.fp8["fp8_flop_share"] == pytest.approx(share)
    assert f.fp8["mfu_vs_fp8"] < f.fp8["mfu_vs_mixed"] < f.mfu
    assert f.fp8["gemms_in_fp8"] == ", ".join(stepmodel.FP8_GEMMS)


def test_fp8_expert_gemms_of_a_moe_run_in_fp8():
    b = L.estimate(1, 1, 16, 128, **MOE)
    f = L.estimate(1, 1, 16, 128, precision="fp8", **MOE)
    assert f.breakdown["gemm"] < b.breakdown["gemm"] and f.breakdown["quantize"] > 0
    assert f.step_s < b.step_s


@pytest.mark.parametrize("gpu", ["A100", "V100", "TPUv5p"])
def test_a_chip_without_fp8_is_refused_naming_precision_and_the_chip(gpu):
    with pytest.raises(ValueError, match=rf"precision='fp8'.*{gpu}.*no FP8"):
        L.estimate(8, 1, 4, 8, precision="fp8", gpu=gpu, **DENSE)
    with pytest.raises(ValueError, match=rf"precision='fp8'.*{gpu}"):
        P.plan(n_params=13e9, n_tokens=1e12, n_gpus=256, gpu=gpu, precision="fp8")


def test_bad_precision_and_a_flat_compute_mfu_are_refused():
    with pytest.raises(ValueError, match="precision must be one of 'bf16', 'fp8'; got 'fp16'"):
        L.estimate(8, 1, 4, 8, precision="fp16", **DENSE)
    with pytest.raises(ValueError, match="precision='fp8' needs the step model: compute_mfu"):
        L.estimate(8, 1, 4, 8, precision="fp8", compute_mfu=0.4, **DENSE)


def test_plan_runs_fp8_end_to_end_and_says_which_peak(capsys):
    b = P.plan(n_params=70e9, n_tokens=2e12, n_gpus=1024)
    f = P.plan(n_params=70e9, n_tokens=2e12, n_gpus=1024, precision="fp8")
    assert f.days < b.days and f.mfu > b.mfu and f.layout_step_s < b.layout_step_s
    text = f.render()
    assert "precision='fp8'" in text and "against the BF16 peak" in text and "against the FP8 peak" in text
    assert "precision='fp8'" not in b.render()
    assert main(["plan", "--n-params", "70B", "--n-tokens", "2T", "--precision", "fp8"]) == 0
    assert "against the FP8 peak" in capsys.readouterr().out
    fast = L.layout(8e9, 32, 4096, 32, 8192, 4e6, 256, kv_heads=8, precision="fp8")
    assert fast.step_s < L.layout(8e9, 32, 4096, 32, 8192, 4e6, 256, kv_heads=8).step_s
