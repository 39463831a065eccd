"""Tests of course_lib.fp8 (chapter 15): formats, the six scaling recipes, accumulation, FP8 linears.

What is pinned: the formats' numbers come from torch's dtypes and agree with their bit layouts;
every recipe torchao 0.18 has (tensorwise, rowwise, MX) is equal to torchao bit for bit, values,
scales and dequantized tensors; every recipe stays within the float64 rounding bound; an outlier
channel 1e6x the rest flushes every ordinary value to zero under per-tensor scaling and none
outside the outlier's tile under 1x128 tiles (by arithmetic, with a factor-2 margin); a ~14-bit
accumulator's error grows with K and promotion every 128 elements removes the growth; the tiny
GPT trains in FP8 to within a stated margin of FP32.
"""
from __future__ import annotations

import logging
import math

import pytest
import torch

from course_lib import fp8
from course_lib.fp8 import accumulate, bill, formats, linear, recipes, runs

# ------------------------------------------------------------------------------- torchao, quietly
# torchao 0.18's import logs two kinds of warnings on a CPU build of torch 2.13: "Failed to load
# .../_C_mxfp8...so" (its CUDA kernels; logger "torchao") and "<enum ...> is an Enum subclass and
# is now natively supported" (torch.utils._pytree, for torchao's enums). Neither concerns the
# CPU reference paths used here; raise those two loggers to ERROR for the import only.
_quiet = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
_levels = [lg.level for lg in _quiet]
for lg in _quiet:
    lg.setLevel(logging.ERROR)
try:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.prototype.mx_formats import constants as mx_constants
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
finally:
    for lg, lv in zip(_quiet, _levels):
        lg.setLevel(lv)

DTYPE = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def _wide_tensor(shape=(64, 256), seed=0, dtype=torch.float32) -> torch.Tensor:
    """Values spanning 12 decades across the columns, a zero 32-block and exact zeros: every
    branch of the scale arithmetic (large, tiny, all-zero groups) is exercised."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.logspace(-6, 6, shape[-1])
    x[..., :32] = 0.0
    x[..., 40] = 0.0
    return x.to(dtype)


# ----------------------------------------------------------------------------------------- formats
def test_formats_read_from_torch_and_match_bit_layouts():
    e4, e5, e8, e2 = (fp8.spec(f) for f in ("e4m3", "e5m2", "e8m0", "e2m1"))
    assert (e4.max, e4.min_normal, e4.min_subnormal, e4.spacing_at_1) == (448.0, 2 ** -6, 2 ** -9, 2 ** -3)
    assert (e5.max, e5.min_normal, e5.min_subnormal, e5.spacing_at_1) == (57344.0, 2 ** -14, 2 ** -16, 2 ** -2)
    assert (e8.max, e8.min_normal, e8.exponent_bits, e8.mantissa_bits) == (2.0 ** 127, 2.0 ** -127, 8, 0)
    assert (e4.has_inf, e4.has_nan, e5.has_inf, e5.has_nan) == (False, True, True, True)
    assert e4.max == torch.finfo(torch.float8_e4m3fn).max and e5.max == torch.finfo(torch.float8_e5m2).max
    # the layout formula reproduces torch's numbers, so E2M1 (no torch finfo) is derived the same way
    lay4 = formats.from_layout("e4m3", 4, 3, ieee_special=False, fn_top_code=True)
    lay5 = formats.from_layout("e5m2", 5, 2, ieee_special=True)
    for got, want in ((lay4, e4), (lay5, e5)):
        assert (got.max, got.min_normal, got.min_subnormal, got.spacing_at_1) == \
               (want.max, want.min_normal, want.min_subnormal, want.spacing_at_1)
    assert (e2.max, e2.min_normal, e2.min_subnormal) == (mx_constants.F4_E2M1_MAX, 1.0, 0.5)
    assert len(formats.grid("e4m3")) == 127 and formats.grid("e4m3").max() == 448.0


# -------------------------------------------------------------------------------- torchao, bitwise
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("pow2", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tensor_and_row_equal_torchao(fmt, pow2, dtype):
    x = _wide_tensor((4, 16, 256), dtype=dtype)
    for recipe, gran, dim in (("tensor", ScalingGranularity.TENSORWISE, None),
                              ("row", ScalingGranularity.AXISWISE, -1)):
        ref = hp_tensor_to_float8_dynamic(x, DTYPE[fmt], LinearMMConfig(), scaling_granularity=gran,
                                          axiswise_dim=dim, round_scales_to_power_of_2=pow2)
        v, s = fp8.quantize(x, recipe, fmt, pow2_scales=pow2)
        assert v.dtype == DTYPE[fmt] and torch.equal(_bits(v), _bits(ref._data)), recipe
        assert s.dtype == torch.float32 and torch.equal(s, ref._scale), recipe
        # ours is float32 (the API); torchao's is float32 or the input's dtype: equal in its dtype
        want = ref.to_original_precision()
        assert torch.equal(fp8.dequantize(v, s, recipe).to(want.dtype), want), recipe


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mx_equals_torchao_to_mx(fmt, dtype):
    x = _wide_tensor((8, 16, 256), dtype=dtype)
    ref = MXTensor.to_mx(x, DTYPE[fmt], 32)
    v, s = fp8.quantize(x, "mx", fmt)
    assert s.dtype == torch.float8_e8m0fnu and s.shape == (8, 16, 8)
    assert torch.equal(_bits(v), _bits(ref.qdata))
    assert torch.equal(_bits(s).reshape(-1), _bits(ref.scale).reshape(-1))
    assert torch.equal(fp8.dequantize(v, s, "mx"), ref.dequantize(torch.float32))


# ----------------------------------------------------------------------- float64 reference bounds
@pytest.mark.parametrize("recipe", fp8.RECIPES)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_recipe_within_the_float64_rounding_bound(recipe, fmt):
    """|dequantized − x| ≤ half a grid step of the scaled value (relative 2**-(m+1) for normals,
    half the smallest subnormal below), computed in float64, plus float32's own rounding of the
    scaling multiply and the dequantizing divide. MX's FLOOR scale may clip values in
    (max, 2**(emax+1)): those must come back as ±max exactly."""
    x = _wide_tensor((256, 256), seed=1)
    hist = recipes.AmaxHistory() if recipe == "tensor_delayed" else None
    v, s = fp8.quantize(x, recipe, fmt, history=hist)
    back = fp8.dequantize(v, s, recipe).double()
    x64, info = x.double(), fp8.spec(fmt)
    if recipe == "mx":
        scale = recipes._e8m0_to_float(s).double().repeat_interleave(32, -1)   # x ≈ v · scale
        scaled = x64 / scale
    else:
        if recipe == "block_1x128":
            full = s.repeat_interleave(128, -1)
        elif recipe == "block_128x128":
            full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)
        else:
            full = s.expand(x.shape)
        scale = 1.0 / full.double()
        scaled = x64 * full.double()
    clipped = scaled.abs() > info.max * (1 + 2 ** -20)
    assert recipe == "mx" or not bool(clipped.any())
    assert torch.equal(v.float()[clipped].abs(), torch.full_like(v.float()[clipped], info.max))
    step = torch.maximum(scaled.abs() * 2.0 ** -(info.mantissa_bits + 1),
                         torch.full_like(scaled, info.min_subnormal / 2))
    bound = step * (1 + 2 ** -20) * scale + x64.abs() * 2 ** -22
    ok = ~clipped
    assert bool(((back - x64).abs()[ok] <= bound[ok]).all())
    assert float((back - x64).abs().max()) > 0          # it did quantize


# ---------------------------------------------------------------------------------- delayed scaling
def test_delayed_scaling_uses_history_and_saturates_on_a_jump():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g)
    hist = fp8.AmaxHistory(length=4)
    v0, s0 = fp8.quantize(x, "tensor_delayed", "e4m3", history=hist)
    assert torch.equal(_bits(v0), _bits(fp8.quantize(x, "tensor", "e4m3")[0]))    # first step: its own amax
    assert len(hist) == 1 and hist.amax() == float(x.abs().max())
    big = x * 10                                  # the next step's amax is 10x the history's
    stats_delayed = runs.error_stats(big, "tensor_delayed", history=hist)
    stats_current = runs.error_stats(big, "tensor")
    assert stats_current["saturated"] == 0.0
    assert stats_delayed["saturated"] > 0.05      # every |x| above amax/10 clips at 448
    assert stats_delayed["snr_db"] < stats_current["snr_db"] - 10
    for _ in range(5):
        fp8.quantize(x, "tensor_delayed", "e4m3", history=hist)
    assert len(hist) == 4 and hist.amax() == float(x.abs().max())   # the 10x amax left the window


# ------------------------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("call,match", [
    (lambda: fp8.quantize(torch.ones(4, 128), "blockwise"), "recipe"),
    (lambda: fp8.quantize(torch.ones(4, 128), "tensor", "e3m4"), "fmt"),
    (lambda: fp8.quantize(torch.tensor([1.0, math.nan]), "tensor"), "1 NaN"),
    (lambda: fp8.quantize(torch.tensor([1.0, math.inf]), "row"), "infinite"),
    (lambda: fp8.quantize(torch.ones(4, 100), "block_1x128"), r"divisible by 128, got shape \(4, 100\)"),
    (lambda: fp8.quantize(torch.ones(2, 128, 128), "block_128x128"), "2-D"),
    (lambda: fp8.quantize(torch.ones(4, 33), "mx"), "divisible by 32"),
    (lambda: fp8.quantize(torch.ones(4, 32), "tensor_delayed"), "history=AmaxHistory"),
    (lambda: fp8.quantize(torch.ones(4, 32), "row", history=fp8.AmaxHistory()), "only used by"),
    (lambda: fp8.quantize([1.0, 2.0], "tensor"), "torch.Tensor"),
    (lambda: fp8.quantize(torch.ones(4, dtype=torch.int64), "tensor"), "floating-point"),
    (lambda: fp8.quantize(torch.ones(0, 32), "tensor"), "empty"),
    (lambda: fp8.dequantize(torch.ones(4, 4), torch.ones(()), "tensor"), "float8"),
    (lambda: fp8.dequantize(torch.ones(4, 256).to(torch.float8_e4m3fn), torch.ones(4, 1), "block_1x128"),
     r"needs \(4, 2\)"),
    (lambda: fp8.dequantize(torch.ones(4, 32).to(torch.float8_e4m3fn), torch.ones(4, 1), "mx"),
     "float8_e8m0fnu"),
    (lambda: fp8.AmaxHistory(0), "length"),
    (lambda: linear.FP8Linear(128, 128, recipe="block_1x128", kernel="scaled_mm"), "kernel='scaled_mm'"),
    (lambda: fp8.fp8_mfu(1e9, 1e3, gpu="A100"), "gpu='A100' has no FP8"),
    (lambda: fp8.fp8_mfu(1e9, 1e3, fp8_fraction=1.5), "fp8_fraction"),
    (lambda: fp8.fp8_mfu(-1, 1e3), "n_params"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------------------ the outlier channel
def test_outlier_channel_breaks_per_tensor_scaling_not_tiles():
    """One channel 1e6x the rest: per-tensor E4M3 scaling maps every ordinary |x| ≤ 1 to at most
    448e-6 = 4.5e-4, below half the smallest subnormal (9.8e-4, a factor 2.2): all of them become
    0, on any CPU. 1x128 tiles lose only the outlier's own tile; scaling along the token dim
    (rows of xᵀ, one scale per channel) loses nothing."""
    x = runs.outlier_tensor(256, 512, outlier_channel=7, ratio=1e6)
    ordinary = torch.ones_like(x, dtype=torch.bool)
    ordinary[:, 7] = False
    assert 448 / 1e6 < fp8.spec("e4m3").min_subnormal / 2 / 2      # the margin, stated
    for recipe in ("tensor", "tensor_delayed"):
        v, s = fp8.quantize(x, recipe, history=fp8.AmaxHistory() if recipe == "tensor_delayed" else None)
        assert bool((v.float()[ordinary] == 0).all()), recipe
    v, s = fp8.quantize(x, "block_1x128")
    back = fp8.dequantize(v, s, "block_1x128")
    outside = ordinary.clone()
    outside[:, :128] = False                                        # the outlier's tile
    rel = ((back - x).abs() / x.abs())[outside]
    assert bool((rel <= 2 ** -4).all())                             # E4M3's half-ulp, no underflow
    assert bool((back[:, 1:128][:, 7:] == 0).all())                 # inside the tile: flushed too
    stats = runs.error_stats(x, "block_1x128")
    assert stats["underflow"] == pytest.approx(127 * 256 / x.numel())
    per_channel = runs.error_stats(x.t().contiguous(), "row")
    assert per_channel["underflow"] == 0.0 and runs.error_stats(x, "tensor")["underflow"] > 0.99


# ------------------------------------------------------------------------------------ accumulation
def test_limited_accumulator_error_grows_with_k_and_promotion_fixes_it():
    assert accumulate.round_mantissa(torch.tensor([1 + 2 ** -15]), 14).item() == 1.0
    assert accumulate.round_mantissa(torch.tensor([1 + 2 ** -14]), 14).item() == 1 + 2 ** -14
    short, long_ = accumulate.error_vs_k((128, 4096), n=16)
    # truncation at every add: relative error ~ K · 2**-16 (measured 2e-4 at K=128, 3e-2 at 4096)
    assert long_["limited_mean"] > 20 * short["limited_mean"]
    assert long_["limited_max"] > 0.01                       # DeepSeek-V3 reports ~2 % at K = 4096
    assert long_["promoted_max"] < 2 * short["promoted_max"]  # promotion: no growth with K
    assert long_["promoted_max"] < long_["limited_mean"] / 20
    exact = accumulate.dot(torch.ones(2, 256), torch.ones(2, 256), acc_bits=14)
    assert exact["rel_error"].max().item() == 0.0            # small integers: nothing to round


# ---------------------------------------------------------------------------------------- linears
@pytest.mark.parametrize("recipe", ["tensor", "row"])
def test_scaled_mm_and_dequantize_kernels_agree(recipe):
    torch.manual_seed(0)
    base = torch.nn.Linear(64, 32)
    x = torch.randn(2, 16, 64)
    outs = []
    for kernel in ("scaled_mm", "dequantize"):
        lin = linear.FP8Linear.from_linear(base, recipe, kernel=kernel)
        assert lin.kernel == kernel
        xi = x.clone().requires_grad_(True)
        base.weight.grad = None
        y = lin(xi)
        y.square().sum().backward()
        outs.append((y.detach(), xi.grad, base.weight.grad.clone()))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    ref = base(x).detach()
    assert float((outs[1][0] - ref).norm() / ref.norm()) < 0.1     # FP8's ~4 % error, not more


def test_tensorwise_linear_equals_torchao_float8linear():
    """torchao's Float8Linear (tensorwise: x and W in E4M3, the output gradient in E5M2, each
    with its current amax) on the same weights and input: output, input gradient and weight
    gradient equal bit for bit to FP8Linear with torch._scaled_mm."""
    import copy
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 32))
    ref = copy.deepcopy(base)
    convert_to_float8_training(ref, config=Float8LinearConfig())
    ours = linear.FP8Linear.from_linear(copy.deepcopy(base[0]), "tensor", kernel="scaled_mm")
    x = torch.randn(16, 64)
    xr, xo = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    yr, yo = ref(xr), ours(xo)
    yr.square().sum().backward()
    yo.square().sum().backward()
    assert torch.equal(yo, yr) and torch.equal(xo.grad, xr.grad)
    assert torch.equal(ours.weight.grad, ref[0].weight.grad)


def test_forward_multiplies_exactly_the_quantized_operands():
    torch.manual_seed(1)
    lin = linear.FP8Linear(256, 128, bias=False, recipe="deepseek")
    x = torch.randn(128, 256)
    qx, qw = fp8.quantize(x, "block_1x128"), fp8.quantize(lin.weight.detach(), "block_128x128")
    want = fp8.dequantize(*qx, "block_1x128") @ fp8.dequantize(*qw, "block_128x128").t()
    assert torch.equal(lin(x).detach(), want)
    with pytest.raises(ValueError, match="100 tokens"):      # dW contracts over the tokens
        lin(torch.randn(100, 256))
    with torch.no_grad():
        assert lin(torch.randn(100, 256)).shape == (100, 128)  # no backward: any token count


def test_convert_gpt_swaps_block_linears_only():
    from course_lib.model import GPT
    model = GPT(runs.TRAIN_CONFIG)
    names = fp8.convert_gpt(model, "mx")
    assert len(names) == 4 * runs.TRAIN_CONFIG.n_layers
    assert all(isinstance(model.get_submodule(n), fp8.FP8Linear) for n in names)
    assert type(model.head) is torch.nn.Linear


def test_fp8_training_tracks_fp32():
    """40 AdamW steps from one seed on one batch stream: every run leaves ln(64) = 4.16 and ends
    below 1.5 (measured ~1.0), and the FP8 runs end within 0.15 of FP32 (measured gaps ≤ 0.03):
    a margin of 5x on the gap, stated on the mean of the last five steps, not on a trajectory."""
    finals = {}
    for precision in ("fp32", "fp8_tensor", "fp8_deepseek"):
        losses = runs.train(precision, steps=40)["losses"]
        assert losses[0] > 4.0
        finals[precision] = sum(losses[-5:]) / 5
        assert finals[precision] < 1.5, (precision, finals)
    for precision in ("fp8_tensor", "fp8_deepseek"):
        assert abs(finals[precision] - finals["fp32"]) < 0.15, finals


# ----------------------------------------------------------------------------------------- the bill
def test_mfu_stated_both_ways():
    m = fp8.fp8_mfu(37e9, 1000.0, gpu="H800")
    assert m["vs_bf16"] == pytest.approx(6 * 37e9 * 1000 / 989e12)
    assert m["vs_bf16"] / m["vs_fp8"] == pytest.approx(1979 / 989)    # about twice: the FP8 peak
    assert m["vs_mixed"] == pytest.approx(m["vs_fp8"])                # all FLOPs in FP8
    half = fp8.fp8_mfu(37e9, 1000.0, gpu="H800", fp8_fraction=0.5)
    assert m["vs_fp8"] < half["vs_mixed"] < m["vs_bf16"]
    assert bill.mixed_peak("H100", 0.5) == pytest.approx(1 / (0.5 / 1979e12 + 0.5 / 989e12))
    assert "A100" not in bill.fp8_accelerators() and "H100-SXM" in bill.fp8_accelerators()


# ----------------------------------------------------------------------------- the question bank
def _tiles_reference(x):
    """A student's correct quantize_1x128, returning the E4M3 values as float32 (the graded run's
    pipe carries no FP8 dtype)."""
    tiles = x.reshape(*x.shape[:-1], x.shape[-1] // 128, 128)
    scales = 448.0 / tiles.abs().amax(-1).clamp(min=1e-12)
    values = (tiles * scales.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return values.float().reshape(x.shape), scales


def test_question_bank_agrees_with_the_library():
    """Chapter 15's bank: the references are the library's numbers, the master's answers score full
    marks, and the slips the feedback promises (the other format's max, a factor of 2, per-row
    instead of per-tile, the wrong peak) are recognised by name, not only called wrong."""
    from course_lib.checks import ch15_fp8 as bank
    qs = {q.qid: q for q in bank.QUESTIONS}
    assert sum(q.points for q in bank.QUESTIONS) >= 10
    assert qs["e4m3_max"].reference() == 448.0 and qs["e4m3_spacing"].reference() == 32.0
    assert "E5M2" in qs["e4m3_max"].grade(57344).message
    assert "binade" in qs["e4m3_spacing"].grade(16).message
    x = bank.drawn_tensor()
    assert qs["scale_tensor"].reference() == pytest.approx(448 / 30.0)        # the planted 30.0 is the amax
    assert qs["scale_tensor"].grade(448 / float(x.abs().max())).correct
    assert "E5M2" in qs["scale_tensor"].grade(57344 / float(x.abs().max())).message
    assert "inverse" in qs["scale_tensor"].grade(float(x.abs().max()) / 448).message
    assert "row 0" in qs["scale_tensor"].grade(448 / float(x[0].abs().max())).message
    tiles = 448 / x.reshape(4, 2, 128).abs().amax(-1)
    assert qs["scale_tiles"].grade(tiles).correct and qs["scale_tiles"].grade(tiles.tolist()).correct
    assert "One scale per row" in qs["scale_tiles"].grade(448 / x.abs().amax(-1, keepdim=True)).message
    assert "2×" in qs["scale_tiles"].grade(2 * tiles).message
    assert qs["mx_scale"].reference() == 2.0 ** -6
    assert "powers of two" in qs["mx_scale"].grade(448 / 5.3).message
    assert qs["survives_outlier"].grade(["block_1x128", "block_128x128", "mx"]).correct
    wrong = qs["survives_outlier"].grade(["row", "mx"])
    assert wrong.score < wrong.points and "per token" in wrong.message
    mfu = fp8.fp8_mfu(70e9, 1200.0, gpu="H100-SXM")
    assert qs["mfu_vs_bf16"].grade(mfu["vs_bf16"]).correct and qs["mfu_vs_fp8"].grade(mfu["vs_fp8"]).correct
    assert "FP8 peak" in qs["mfu_vs_bf16"].grade(mfu["vs_fp8"]).message
    assert "BF16 peak" in qs["mfu_vs_fp8"].grade(mfu["vs_bf16"]).message
    ag, values = qs["fp8_allgather_bytes"], 4 * 4096 * 4096 + 3 * 4096 * 11008      # one Llama-style block
    assert ag.reference() == 7 / 8 * values + 7 * 7 * 4 and ag.grade(7 / 8 * values + 7 * 7 * 4).correct
    assert "amax" in ag.grade(7 / 8 * values).message                   # the scale's agreement forgotten
    assert "BF16" in ag.grade(7 / 8 * values * 2).message
    assert "whole gathered buffer" in ag.grade(values).message


def test_quantize_question_grades_on_drawn_inputs():
    """The function question runs the student's quantize_1x128 on tensors the notebook never shows
    (fixed ones and one drawn from the run's seed) against fp8.quantize(x, 'block_1x128'): the
    correct function scores full marks under every seed, FP8 or float32 values alike, and each
    classic mistake gets 0 with its cause named."""
    from course_lib.checks import ch15_fp8 as bank
    q = next(q for q in bank.QUESTIONS if q.qid == "quantize_impl")
    for seed in (0, 1, 2):
        assert q.grade(_tiles_reference, seed=seed).correct
    assert q.grade(lambda x: (_tiles_reference(x)[0].to(torch.float8_e4m3fn), _tiles_reference(x)[1])).correct

    def per_row(x):
        s = 448.0 / x.abs().amax(-1, keepdim=True)
        return (x * s).to(torch.float8_e4m3fn).float(), s

    def e5m2_max(x):
        v, s = _tiles_reference(x)
        return v, s * 128

    def inverse(x):
        v, s = _tiles_reference(x)
        return v, 1 / s

    def unrounded(x):
        v, s = _tiles_reference(x)
        return (x.reshape(*s.shape, 128) * s.unsqueeze(-1)).reshape(x.shape), s

    for fn, cause in ((per_row, "one scale per row"), (e5m2_max, "E5M2's max"), (inverse, "inverse"),
                      (unrounded, "not E4M3 numbers")):
        r = q.grade(fn, seed=3)
        assert r.score == 0 and cause in r.message, (fn.__name__, r.message)
    assert "Pass your function" in q.grade(3).message
