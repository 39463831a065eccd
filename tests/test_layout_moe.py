"""The layout planner plans a mixture of experts (issue 33): EP carved from DP, every expert in
memory but only the active ones in 6ND, the all-to-all per MoE layer from comm.ep_bytes_per_layer,
and DeepSeek-V3's published layout against what its pre-training hours imply (nothing fitted to it)."""
import dataclasses

import pytest

from course_lib import comm, layout as L
from course_lib.layout import moe as layout_moe
from course_lib.layout.job import _POW2
from course_lib.layout.moe import DEEPSEEK_V3, MoE
from course_lib.memory import _breakdown

V3 = dict(n_params=37e9, n_layers=61, d_model=7168, n_heads=128, seq_len=4096,
          global_batch_tokens=15360 * 4096, gpu="H800", vocab_size=129_280, moe=DEEPSEEK_V3)
# arXiv 2412.19437 Table 1: 2.664M H800 GPU-hours of pre-training for 14.8T tokens at 37B active
V3_IMPLIED_MFU = 6 * 37e9 * 14.8e12 / (2.664e6 * 3600 * 989e12)


def test_deepseek_v3_published_layout_fits_and_as_it_ran_is_faster_than_its_hours():
    """At BF16 with 1F1B the published layout fits; timed as it ran (#45: FP8 GEMMs, node-limited
    FP8 dispatch, DualPipe, EP inside the nodes of a stage) the model's MFU is well above what the
    2.664M pre-training hours imply: the gap is the run's untimed parts and more (plan.runs reports
    it as a test that misses). Its MFU against the FP8 peak is half the one against BF16's."""
    x = L.estimate(1, 1, 16, 128, ep=64, zero=1, **V3)
    assert x.fits and x.shape() == "TP 1 · CP 1 · PP 16 · DP 128 (EP 64)"
    y = L.estimate(1, 1, 16, 128, ep=64, zero=1, precision="fp8", schedule="dualpipe", rank_order="tp-cp-dp-pp", **V3)
    assert y.shape() == "TP 1 · CP 1 · PP 16 (DualPipe) · DP 128 (EP 64)"
    assert y.mfu > x.mfu > V3_IMPLIED_MFU and y.bubble_s < x.bubble_s / 4
    assert y.fp8["mfu_vs_fp8"] == pytest.approx(y.mfu * 989e12 / 1979e12, rel=1e-12)
    assert y.hidden["ep"] > 0 and y.states_bytes > x.states_bytes       # DualPipe's second copy


def test_node_limited_fp8_dispatch_is_chapter_14s_bytes_on_each_wire():
    """The EP all-to-all of the step model is comm.ep_node_bytes: node-limited to 4 nodes, one IB
    copy per node forwarded over NVLink; FP8 dispatch (1 byte and a 4-byte scale per 128 values)
    and BF16 combine, two of the four exchanges each; EP inside the nodes with rank_order."""
    moe, t, h = DEEPSEEK_V3, 4096, 7168
    inside, across = comm.ep_node_bytes(t, h, 8, 64, 8, max_nodes=4)
    got = layout_moe.all_to_all_seconds(moe, t, h, 64, 8, 200e9, 50e9, 0.0)
    assert got == pytest.approx(inside / 200e9 + across / 50e9, rel=1e-12)
    fp8 = layout_moe.all_to_all_seconds(moe, t, h, 64, 8, 200e9, 50e9, 0.0, dispatch_bytes=1 + 4 / 128)
    assert fp8 == pytest.approx(got * (1 + 4 / 128 + 2) / 4, rel=1e-12)
    assert layout_moe.FP8_DISPATCH_BYTES == 1 + 4 / 128
    naive = layout_moe.all_to_all_seconds(dataclasses.replace(moe, max_nodes=None), t, h, 64, 8, 200e9, 50e9, 0.0)
    assert naive > got
    with pytest.raises(ValueError, match="max_nodes"):
        dataclasses.replace(moe, max_nodes=9).checked(61)
    a, b = (L.estimate(1, 1, 16, 128, ep=64, zero=1, rank_order=o, **V3) for o in ("tp-cp-pp-dp", "tp-cp-dp-pp"))
    # EP across nodes (one member a node) or inside them (8 a node: 7 of 8 copies hop over the H800's
    # 200 GB/s NVLink, 3.5 cross IB): the placement changes the wire each byte takes
    assert a.hidden["ep"] != pytest.approx(b.hidden["ep"], rel=1e-3)
    with pytest.raises(ValueError, match="rank_order"):
        L.estimate(1, 1, 16, 128, ep=64, rank_order="dp-pp", **V3)


def test_every_expert_is_in_memory_and_ep_divides_them_over_its_ranks():
    one, many = (L.estimate(1, 1, 16, 128, ep=e, zero=1, **V3) for e in (8, 64))
    experts = DEEPSEEK_V3.routed_total()
    dense = (37e9 - DEEPSEEK_V3.routed_active()) / 16
    for x, e in ((one, 8), (many, 64)):
        want = (_breakdown(dense, 128, 1, 2.0, 2.0, 12.0).total
                + _breakdown(experts / (16 * e), 128 // e, 1, 2.0, 2.0, 12.0).total)
        assert x.states_bytes == pytest.approx(want, rel=1e-12)
    assert many.states_bytes < one.states_bytes
    assert experts + 37e9 - DEEPSEEK_V3.routed_active() == pytest.approx(671e9, rel=0.02)   # 671B total


def test_all_to_all_time_is_the_calculators_bytes_over_the_wires():
    moe, t, h = dataclasses.replace(DEEPSEEK_V3, max_nodes=None), 4096, 7168     # unrestricted routing
    total = comm.ep_bytes_per_layer(t, h, moe.top_k, 64)
    got = layout_moe.all_to_all_seconds(moe, t, h, 64, 8, 200e9, 50e9, 0.0)
    assert got == pytest.approx(total * 7 / 63 / 200e9 + total * 56 / 63 / 50e9, rel=1e-12)
    assert layout_moe.all_to_all_seconds(moe, t, h, 1, 1, 200e9, 50e9, 1e-5) == 0.0


def test_ep_is_carved_from_dp_and_a_dense_model_has_none():
    assert layout_moe.expert_degrees(DEEPSEEK_V3, 96, _POW2) == [1, 2, 4, 8, 16, 32]
    plans = L.plan_layouts(n_gpus=2048, **V3)
    assert plans and all(x.dp % x.ep == 0 and DEEPSEEK_V3.n_experts % x.ep == 0 for x in plans)
    assert any(x.ep > 1 for x in plans)
    with pytest.raises(ValueError, match="ep=8: expert parallelism needs a mixture of experts"):
        L.estimate(1, 1, 16, 128, ep=8, **{k: v for k, v in V3.items() if k != "moe"})


@pytest.mark.parametrize("bad, name", [(dict(top_k=300), "top_k"), (dict(moe_layers=62), "moe_layers"),
                                       (dict(imbalance=0.9), "imbalance"), (dict(expert_params=0), "expert_params"),
                                       (dict(shared=-1), "shared")])
def test_bad_moe_is_a_value_error_naming_the_field(bad, name):
    args = dict(n_experts=256, top_k=8, expert_params=1e7, moe_layers=58) | bad
    with pytest.raises(ValueError, match=name):
        L.estimate(1, 1, 16, 128, ep=8, **dict(V3, moe=MoE(**args)))


def test_imbalance_costs_the_busiest_ranks_time():
    even = L.estimate(1, 1, 16, 128, ep=64, zero=1, **dict(V3, moe=MoE(**{**DEEPSEEK_V3.__dict__, "imbalance": 1.0})))
    hot = L.estimate(1, 1, 16, 128, ep=64, zero=1, **dict(V3, moe=MoE(**{**DEEPSEEK_V3.__dict__, "imbalance": 1.5})))
    assert hot.step_s > even.step_s and hot.mfu < even.mfu


def test_a_mixture_whose_experts_outweigh_the_active_parameters_is_refused_everywhere():
    """Issue #43 item 24: estimate took n_params=1e9 with DeepSeek-V3's experts (2.3e10 parameters a
    token passes through) and answered with a negative dense part; plan refused it by another rule.
    One rule in the job all of them build: the message names n_params and the experts' count."""
    from course_lib.plan import plan
    small = dict(V3, n_params=20e9)
    want = r"^n_params \(20000000000\.0\) must be more than the experts a token passes through.*2\.299e\+10"
    with pytest.raises(ValueError, match=want):
        L.estimate(1, 1, 16, 128, ep=64, zero=1, **small)
    with pytest.raises(ValueError, match=want):
        L.plan_layouts(**small, n_gpus=2048)
    with pytest.raises(ValueError, match=want):
        plan(n_params=20e9, n_tokens=14.8e12, n_layers=61, d_model=7168, n_heads=128, n_gpus=2048,
             gpu="H800", moe=DEEPSEEK_V3)
    assert L.estimate(1, 1, 16, 128, ep=64, zero=1, **V3).fits      # 37e9 active: the published count holds
