"""The 4D layout planner (course_lib.layout): every layout it returns fits and respects the batch
floor, its memory terms are the chapter-4 and chapter-11 calculators, its pipeline memory is the
exact schedule's, and on the published runs it lands on the published shapes where it should
(Megatron-LM 1T with 2021's tools; Llama 3 405B's CP at 128K), for the reasons the book gives."""
from __future__ import annotations

import json
import math
import re

import pytest

from course_lib import comm, layout as L, memory, pipeline
from course_lib.__main__ import main
from course_lib.layout.evaluate import _evaluate, _in_flight
from course_lib.layout.job import _job

SMALL = dict(n_params=7e9, n_layers=32, d_model=4096, n_heads=32, seq_len=4096,
             global_batch_tokens=4 * 2 ** 20, n_gpus=64)


def _llama(seq_len=8192):
    kw = L.llama3_405b(seq_len)
    return _job(kw["n_params"], kw["n_layers"], kw["d_model"], kw["n_heads"], kw["seq_len"],
                kw["global_batch_tokens"], kw["n_gpus"], kw["gpu"], L.DGX_H100_NDR, 0.5, 0.9, True,
                kw["kv_heads"], 1, 128, 3)


def test_every_returned_layout_fits_and_respects_the_batch_floor():
    plans = L.plan_layouts(**SMALL)
    assert plans and plans == sorted(plans, key=lambda x: x.step_s)
    seqs = SMALL["global_batch_tokens"] / SMALL["seq_len"]
    for x in plans:
        assert x.tp * x.cp * x.pp * x.dp == SMALL["n_gpus"]
        assert x.memory_bytes <= 0.9 * 80 * 2 ** 30 and x.fits
        assert x.microbatches >= x.pp and x.dp * x.microbatches <= seqs     # m >= p per pipeline
        assert x.tp <= 8                                                    # TP stays in the node
        assert x.step_s == pytest.approx(x.compute_s + x.bubble_s + x.tp_s + x.cp_s + x.pp_s + x.dp_s)


def test_memory_terms_are_the_calculators():
    job = _llama()
    x = _evaluate(job, 8, 1, 16, 128, 1, 1, "none")
    assert x.states_bytes == pytest.approx(memory.zero_memory_per_gpu(405e9 / (8 * 16), 128, 1))
    per_layer = memory.activation_bytes_per_layer(8192, 1, 16384, 128, tp=8, sequence_parallel=True,
                                                  recompute="selective")         # flash: no s² term
    assert x.activation_bytes == pytest.approx(per_layer * math.ceil(126 / 16) * 16)   # 1F1B: p in flight
    full = _evaluate(job, 8, 1, 16, 128, 1, 1, "full")
    assert full.activation_bytes == pytest.approx(
        memory.activation_bytes_per_layer(8192, 1, 16384, 128, 8, True, "full") * 8 * 16 + per_layer)
    assert full.compute_s > x.compute_s * 1.3                                   # one more forward
    cp = _evaluate(job, 8, 16, 16, 8, 1, 1, "none")                             # CP shards the sequence
    assert cp.activation_bytes == pytest.approx(x.activation_bytes / 16)


def test_tp_time_is_tp_bytes_over_nvlink():
    job = _llama()
    x = _evaluate(job, 8, 1, 16, 128, 1, 1, "none")
    per_layer = comm.tp_bytes_per_layer(8192, 1, 16384, 8) / 450e9 + 4 * L.DGX_H100_NDR.ring_latency("all_reduce", 8)
    assert x.tp_s == pytest.approx(16 * 126 / 16 * per_layer)


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (8, 16, 2), (16, 16, 4), (4, 4, 1), (8, 32, 4)])
def test_pipeline_memory_is_the_schedules(p, m, v):
    assert _in_flight(p, m, v) == pytest.approx(
        pipeline.peak_in_flight("interleaved" if v > 1 else "1f1b", p, m, 0, v=v))


def test_megatron_1t_with_2021_tools_is_the_published_layout():
    """No FlashAttention, no CP, no sharded optimizer (Megatron-LM in 2021): TP 8 · PP 64 · DP 6."""
    best = L.layout(**L.megatron_1t(), **L.MEGATRON_2021)
    assert (best.tp, best.cp, best.pp, best.dp) == (8, 1, 64, 6)
    assert best.recompute != "none"                 # it does not fit without recomputation
    assert "With no recomputation: nothing fits" in best.explanation
    today = L.layout(**L.megatron_1t())             # with ZeRO the pipeline can be shorter
    assert today.pp < 64 and today.zero > 0


def test_llama3_shapes():
    short, long = L.layout(**L.llama3_405b(8192)), L.layout(**L.llama3_405b(131072))
    # 8K: a deep interleaved pipeline, TP inside the node, DP in the tens to hundreds
    assert short.pp >= 8 and short.v > 1 and short.tp * short.cp >= 8 and short.dp >= 32
    # 128K: context parallelism of 16 or more is needed, and a sequence spans a node or more
    assert long.cp >= 16 and long.tp * long.cp >= 128
    plans = L.plan_layouts(**L.llama3_405b(131072))
    # without CP only a pipeline starved to a few microbatches fits at 128K, mostly bubble
    assert all(x.microbatches <= 4 and x.step_s > 3 * plans[0].step_s for x in plans if x.cp == 1)
    # the published 8K layout needs recomputation under Korthikanti's accounting
    job = _llama()
    assert not _evaluate(job, 8, 1, 16, 128, 2, 1, "none").fits
    assert _evaluate(job, 8, 1, 16, 128, 2, 1, "full").fits


def test_bad_input_and_no_fit():
    with pytest.raises(ValueError, match=r"\bkv_heads\b"):
        L.plan_layouts(**SMALL, kv_heads=5)
    with pytest.raises(ValueError, match=r"\bgpu\b"):
        L.plan_layouts(**SMALL, gpu="RTX9090")
    with pytest.raises(ValueError, match=r"\bglobal_batch_tokens\b"):
        L.plan_layouts(**(SMALL | dict(global_batch_tokens=100)))
    with pytest.raises(ValueError, match=r"no layout fits.*n_params"):
        L.layout(**(SMALL | dict(n_params=1e13)))


def test_cli_prints_the_layout_and_its_explanation(capsys):
    argv = ["layout", "--n-params", "7B", "--n-layers", "32", "--d-model", "4096", "--n-heads", "32",
            "--seq-len", "4k", "--global-batch-tokens", "4Mi", "--n-gpus", "64", "--kv-heads", "8"]
    assert main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tp"] * out["cp"] * out["pp"] * out["dp"] == 64 and "ZeRO" in out["explanation"]
    assert main(argv) == 0      # for a reader: the shape, every figure with its unit, the explanation
    text = capsys.readouterr().out
    assert text.startswith("layout: TP ") and re.search(r"^memory_bytes: \S+ bytes \([\d.]+ GB\)$", text, re.M)
    assert re.search(r"^step_s: \S+ s$", text, re.M) and re.search(r"^mfu: \S+ \([\d.]+ %\)$", text, re.M)
    assert "explanation:\n  TP " in text
    with pytest.raises(SystemExit):
        main(["layout", "--n-params", "7e9", "--n-layers", "32", "--d-model", "4096", "--n-heads", "32",
              "--seq-len", "4096", "--global-batch-tokens", "4194304", "--n-gpus", "64", "--kv-heads", "5"])
    assert re.search(r"error: arguments? (--[\w-]+, )*--kv-heads\b", capsys.readouterr().err)


def test_widget_callback_and_static_text():
    from course_lib.layout import layout_calculator, layout_widget, render_layout
    r = layout_calculator(**(SMALL | dict(kv_heads=8)))
    assert r["tp"] * r["cp"] * r["pp"] * r["dp"] == 64 and r["shape"].startswith("TP ")
    text = render_layout(r)
    assert r["explanation"] in text and "MFU" in text
    box = layout_widget(**SMALL)                   # without a frontend it shows the same text
    assert render_layout(layout_calculator(**SMALL)) in box._repr_mimebundle_()["text/plain"]
    with pytest.raises(ValueError, match=r"\bn_gpus\b"):
        layout_calculator(n_gpus=0)


def test_exercise_11_accepts_any_fitting_layout_within_the_models_resolution():
    """Practitioners' TP 8 · DP 128 with ZeRO-3 is ~20 % off the planner's fastest: inside the
    resolution (1.15/0.85 − 1 ≈ 35 %, from the ±15 % the planner holds on published runs), so it
    earns full marks; full recomputation on the same shape (~60 % slower) earns half."""
    from course_lib.checks import ch11_tensor_context as ch11
    from course_lib.plan.runs import TOLERANCE
    assert ch11.CLUSTER_SLACK == pytest.approx((1 + TOLERANCE) / (1 - TOLERANCE) - 1)
    practice = dict(tp=8, cp=1, pp=1, dp=128, zero=3)
    score, why = ch11._grade_layout(dict(practice, recompute="none"))
    assert score == 1.0 and "resolution" in why, why
    score, why = ch11._grade_layout(dict(practice, recompute="full"))
    assert score == 0.5, why


def test_2021_tools_have_neither_sequence_parallelism_nor_selective_recompute():
    """Megatron-LM's 1T run (arXiv 2104.04473) recomputed activations in full and had no SP: with
    those tools taken away the planner lands on the published TP 8 · PP 64 with full recompute."""
    best = L.layout(**L.megatron_1t(), **L.MEGATRON_2021)
    assert (best.tp, best.cp, best.pp, best.dp, best.recompute) == (8, 1, 64, 6, "full")
    assert "recompute=selective" not in best.explanation


@pytest.mark.parametrize("seq_len, degrees", [(8192, (8, 1, 16, 128)), (131072, (8, 16, 16, 8))])
def test_llama3_405b_published_layouts_fit_as_meta_ran_them(seq_len, degrees):
    """arXiv 2407.21783 §3.3.2 and Table 4: FSDP sharding optimizer states and gradients (ZeRO-2),
    one layer fewer on the first and last stages, one layer per interleaved chunk (v = 8), no
    activation checkpointing. Laid out so, both published layouts fit in 90 % of 80 GiB, and the
    MFU counted as Meta counts it (attention included) is within ±15 % of Table 4's."""
    from course_lib.layout import LLAMA3_TABLE4_MFU, mfu_counting_attention
    shape = {k: v for k, v in L.llama3_405b(seq_len).items() if k != "n_gpus"}
    x = L.estimate(*degrees, v=8, zero=2, trim_first_last=True, **shape)
    assert x.fits and x.recompute == "none"
    meta = mfu_counting_attention(x.mfu, 405e9, 126, 16384, seq_len)
    assert meta == pytest.approx(LLAMA3_TABLE4_MFU[seq_len], rel=0.15)
    # the first stage holds 7 layers, not 8: exactly 7/8 of the untrimmed activations
    naive = L.estimate(*degrees, v=2, zero=2, **shape)
    trimmed_v2 = L.estimate(*degrees, v=2, zero=2, trim_first_last=True, **shape)
    assert trimmed_v2.activation_bytes == pytest.approx(naive.activation_bytes * 7 / 8)
    with pytest.raises(ValueError, match="v <= 8"):
        L.estimate(*degrees, v=16, zero=2, trim_first_last=True, **shape)


def test_a_llama_block_is_counted_as_memory_counts_it_and_the_published_layout_fits_either_way():
    """block="llama": each layer held is memory.llama_activation_bytes_per_layer, with the SwiGLU
    width the step model reads (the MLP's share of Ψ over 3h) and the KV heads given; the recomputed
    layer under full recomputation is the same count. Llama 3 405B's published 8K layout fits
    under both counts, and the Llama count is the smaller (no dropout masks, 8 of 128 K/V heads)."""
    shape = {k: v for k, v in L.llama3_405b(8192).items() if k != "n_gpus"}
    gpt = L.estimate(8, 1, 16, 128, zero=2, **shape)
    llama = L.estimate(8, 1, 16, 128, zero=2, block="llama", **shape)
    h, kv_width = 16384, 8 * 128
    ffn = (405e9 / 126 - 2 * h * h - 2 * h * kv_width) / (3 * h)
    per_layer = memory._llama_activation_bytes(8192, 1, h, 128, 8, ffn, 8, True)
    assert llama.activation_bytes == pytest.approx(per_layer * math.ceil(126 / 16) * 16)   # 1F1B: p in flight
    assert llama.states_bytes == gpt.states_bytes and llama.step_s == gpt.step_s   # memory only
    full = L.estimate(8, 1, 16, 128, zero=2, recompute="full", block="llama", **shape)
    assert full.activation_bytes == pytest.approx(
        memory.activation_bytes_per_layer(8192, 1, h, 128, 8, True, "full") * 8 * 16 + per_layer)
    as_run = dict(v=8, zero=2, trim_first_last=True)
    a, b = (L.estimate(8, 1, 16, 128, **as_run, block=k, **shape) for k in ("gpt", "llama"))
    assert a.fits and b.fits and b.activation_bytes < a.activation_bytes
    with pytest.raises(ValueError, match="block"):
        L.estimate(8, 1, 16, 128, block="gelu", **shape)


def test_logits_are_counted_on_the_last_stage_when_the_vocabulary_is_given():
    """memory.logits_bytes (10 bytes per logit, vocabulary-parallel over TP) on top of one
    microbatch of the last stage's layers; with no pipeline, on top of all layers."""
    shape = dict(n_params=8e9, n_layers=32, d_model=4096, n_heads=32, kv_heads=8, seq_len=8192,
                 global_batch_tokens=2 ** 22)
    plain = L.estimate(1, 1, 1, 512, zero=1, **shape)
    counted = L.estimate(1, 1, 1, 512, zero=1, vocab_size=128_256, **shape)
    assert counted.activation_bytes - plain.activation_bytes == pytest.approx(
        memory.logits_bytes(8192, 1, 128_256), rel=1e-12)
    tp8 = L.estimate(8, 1, 1, 64, zero=1, vocab_size=128_256, **shape)
    assert tp8.activation_bytes - L.estimate(8, 1, 1, 64, zero=1, **shape).activation_bytes == pytest.approx(
        memory.logits_bytes(8192, 1, 128_256, tp=8), rel=1e-12)
    # with a pipeline the first stage (PP microbatches in flight) still holds the most
    deep = L.estimate(1, 1, 8, 64, zero=1, vocab_size=128_256, **shape)
    assert deep.activation_bytes == L.estimate(1, 1, 8, 64, zero=1, **shape).activation_bytes
    with pytest.raises(ValueError, match="vocab_size"):
        L.estimate(1, 1, 1, 512, vocab_size=1, **shape)


def test_usable_fraction_is_the_measured_fragmentation_and_llama3_fits_at_it():
    """USABLE_FRACTION is checked against its source: GMLake's 9.2 GB average fragmentation of an
    80 GB A100 (arXiv 2401.08156) leaves 0.885, within 2 points of it; and Meta's 8K layout, which
    ran, fits at it (usable_bytes is that share of the datasheet's 80 GiB), not at GMLake's worst case."""
    from course_lib.hardware import lookup
    assert 1 - L.GMLAKE_A100_FRAGMENTATION_BYTES / 80e9 == pytest.approx(L.USABLE_FRACTION, abs=0.02)
    shape = {k: v for k, v in L.llama3_405b(8192).items() if k != "n_gpus"}
    x = L.estimate(8, 1, 16, 128, v=8, zero=2, trim_first_last=True, **shape)
    assert x.fits and x.usable_bytes == L.USABLE_FRACTION * lookup("gpu", "H100-SXM").hbm_bytes
    # at GMLake's worst case (25 GB lost) the layout Meta ran would not fit: the average is the default
    assert x.memory_bytes > (1 - 25e9 / 80e9) * lookup("gpu", "H100-SXM").hbm_bytes


def test_zero_bubble_h1_is_timed_as_chapter_5s_simulator_replays_it():
    """The planner's ZB-H1 bubble is the simulator's replay at the layout's p and m (layout.bubble),
    no longer the constant ZB_H1_BUBBLE_SHARE = 1/3. At T_F : T_B : T_W = 1 : 1 : 1 and m >= p the
    replay gives exactly that third of 1F1B's bubble (p−1 of 3(p−1) idle stage-times), so the number
    the old test pinned still holds there; below m = p, and at other ratios, the replay differs from
    the constant, which is why the constant went (tests/test_layout_schedules.py)."""
    from course_lib import pipeline
    from course_lib.layout import bubble
    p, m = 8, 32
    zb = pipeline.simulate("zb-h1", p, m, t_forward=1.0, t_backward=2.0).makespan() - 3 * m
    one = pipeline.simulate("1f1b", p, m, t_forward=1.0, t_backward=2.0).makespan() - 3 * m
    assert zb / one == pytest.approx(1 / 3, rel=1e-12)
    assert bubble.bubble_share("zb-h1", p, m) == pytest.approx(zb / (3 * m), rel=1e-12)
    shape = dict(n_params=21e9, n_layers=60, d_model=5120, n_heads=128, seq_len=4096,
                 global_batch_tokens=9216 * 4096, gpu="H800")
    base, zbl = (L.estimate(1, 1, 16, 128, schedule=s, **shape) for s in ("1f1b", "zb-h1"))
    assert zbl.bubble_s == pytest.approx(base.bubble_s / 3, rel=1e-12)      # m = 72 >= p = 16
    assert zbl.memory_bytes == base.memory_bytes and zbl.shape().endswith("PP 16 (ZB-H1) · DP 128")
    with pytest.raises(ValueError, match="needs v=1"):
        L.estimate(1, 1, 16, 128, v=2, schedule="zb-h1", **shape)
    with pytest.raises(ValueError, match="schedule"):
        L.estimate(1, 1, 16, 128, schedule="zb-x", **shape)


def test_context_parallelism_leaves_each_rank_the_shortest_chunk_a_published_run_used():
    """Issue #43 item 7: at s = 2048 the search gave multi-head models CP 2 to 128 (16 tokens a rank),
    and chapter 13 showed MegaScale 175B and OPT-175B at CP 4 and 2. One rule of ``_rule_broken``, so
    the search and ``estimate`` agree: CP leaves each rank MIN_CP_TOKENS tokens, NeMo's Llama 3 70B
    recipe's 4,096 (CP 2 at 8K); Llama 3 405B's 128K layout (CP 16, 8,192 a rank) still holds."""
    gpt3 = dict(n_params=175e9, n_layers=96, d_model=12288, n_heads=96, seq_len=2048,
                global_batch_tokens=1536 * 2048)
    assert {x.cp for x in L.plan_layouts(**gpt3, n_gpus=1024)} == {1}
    with pytest.raises(ValueError, match=r"cp=4.*at least 4096 tokens .* got 2048 / 4 = 512"):
        L.estimate(2, 4, 16, 8, **gpt3)
    l8 = L.llama3_405b(8192)
    assert {x.cp for x in L.plan_layouts(**l8)} <= {1, 2} and L.MIN_CP_TOKENS == 8192 // 2
    shape = {k: v for k, v in L.llama3_405b(131072).items() if k != "n_gpus"}
    assert L.estimate(8, 16, 16, 8, v=8, zero=2, trim_first_last=True, **shape).cp == 16
    assert max(x.cp for x in L.plan_layouts(**L.llama3_405b(131072))) <= 131072 // L.MIN_CP_TOKENS


@pytest.mark.parametrize("bad", [None, 0, ""])
def test_estimate_refuses_a_trim_first_last_that_is_not_a_bool(bad):
    """Issue #43 item 24: trim_first_last=None (or 0, or "") was read as False, a layout without the
    trim and no error; every switch of a calculator is True or False, else a ValueError naming it."""
    shape = {k: v for k, v in L.llama3_405b(8192).items() if k != "n_gpus"}
    with pytest.raises(ValueError, match=r"^trim_first_last must be True or False, got " + re.escape(repr(bad))):
        L.estimate(8, 1, 16, 128, v=8, zero=2, trim_first_last=bad, **shape)
