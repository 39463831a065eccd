"""Chapter 9: the distillation cost model, the distillation losses, the KV-cache sampler, the shipped
teacher and sweep (one budget rerun), and the question bank."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import distill, flops
from course_lib.distill import noise as distill_noise, run as distill_run, train as distill_train
from course_lib.model import GPT, GPTConfig

OPUS = distill.PRICES["Claude Opus 4.6"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------- the bill
def test_factcheck_claim6_seed_arithmetic_and_batch():
    """factcheck.md claim 6: 1T output tokens at $25/MTok = $25M; with the Batch API's 50% off, $12.5M."""
    assert distill.api_cost(1e12, 25.0) == pytest.approx(25e6)
    assert distill.api_cost(1e12, OPUS.output_per_mtok, batch_discount=OPUS.batch_discount) == pytest.approx(12.5e6)
    assert distill.api_cost(1e12, 25.0, 2e11, 5.0) == pytest.approx(26e6)
    assert distill.api_cost(1e12, 25.0, 2e11, 5.0, batch_discount=0.5) == pytest.approx(13e6)


@pytest.mark.parametrize("kwargs, name", [
    (dict(output_tokens=0, price_out_per_mtok=25), "output_tokens"),
    (dict(output_tokens=-1, price_out_per_mtok=25), "output_tokens"),
    (dict(output_tokens=float("nan"), price_out_per_mtok=25), "output_tokens"),
    (dict(output_tokens=1e9, price_out_per_mtok=0), "price_out_per_mtok"),
    (dict(output_tokens=1e9, price_out_per_mtok=25, input_tokens=-5), "input_tokens"),
    (dict(output_tokens=1e9, price_out_per_mtok=25, price_in_per_mtok=-1.0), "price_in_per_mtok"),
    (dict(output_tokens=1e9, price_out_per_mtok=25, batch_discount=50), "batch_discount"),
    (dict(output_tokens=1e9, price_out_per_mtok=25, batch_discount=1.0), "batch_discount"),
    (dict(output_tokens="1e9", price_out_per_mtok=25), "output_tokens"),
])
def test_api_cost_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        distill.api_cost(**kwargs)


@settings(max_examples=60, deadline=None)
@given(t=st.floats(1e3, 1e14), p_out=st.floats(0.01, 200), p_in=st.floats(0, 50), ipo=st.floats(0, 10),
       disc=st.floats(0, 0.9), scale=st.floats(0.1, 10))
def test_distillation_cost_is_api_cost_and_linear(t, p_out, p_in, ipo, disc, scale):
    """Without hidden tokens or caching the full bill is api_cost; every bill is linear in volume."""
    bill = distill.distillation_cost(t, p_out, p_in, input_per_output=ipo, batch_discount=disc)
    assert bill["total_dollars"] == pytest.approx(distill.api_cost(t, p_out, t * ipo, p_in, disc), rel=1e-9)
    bigger = distill.distillation_cost(t * scale, p_out, p_in, input_per_output=ipo, batch_discount=disc)
    assert bigger["total_dollars"] == pytest.approx(scale * bill["total_dollars"], rel=1e-9)
    budget = bill["total_dollars"]
    assert distill.break_even_tokens(budget, p_out, p_in, input_per_output=ipo,
                                     batch_discount=disc) == pytest.approx(t, rel=1e-9)


def test_hidden_reasoning_and_cache_reads():
    plain = distill.distillation_cost(1e11, 25.0)["total_dollars"]
    hidden = distill.distillation_cost(1e11, 25.0, hidden_per_visible=3.0)
    assert hidden["billed_output_tokens"] == pytest.approx(4e11)
    assert hidden["total_dollars"] == pytest.approx(4 * plain)
    full = distill.distillation_cost(1e11, 25.0, 5.0, input_per_output=2.0)["input_dollars"]
    cached = distill.distillation_cost(1e11, 25.0, 5.0, input_per_output=2.0, cached_fraction=1.0)["input_dollars"]
    assert cached == pytest.approx(OPUS.cache_read_multiplier * full)
    half = distill.distillation_cost(1e11, 25.0, 5.0, input_per_output=2.0, cached_fraction=0.5)["input_dollars"]
    assert half == pytest.approx(0.55 * full)
    with pytest.raises(ValueError, match="cached_fraction"):
        distill.distillation_cost(1e11, 25.0, cached_fraction=1.5)
    with pytest.raises(ValueError, match="hidden_per_visible"):
        distill.distillation_cost(1e11, 25.0, hidden_per_visible=-1)


def test_pretraining_cost_agrees_with_chapter_1():
    """GPU-hours = training_days on one GPU × 24; dollars = hours × the assumed price."""
    n, d = 70e9, 15e12
    hours = flops.training_days(n, d, 1, 0.4) * 24
    assert distill.gpu_hours(n, d, 0.4) == pytest.approx(hours)
    assert distill.pretraining_cost(n, d, 2.0, 0.4) == pytest.approx(2.0 * hours)
    assert distill.ASSUMED_GPU_HOUR_PRICE == 2.0
    assert distill.inference_cost(n, d, 2.0, 0.4) == pytest.approx(distill.pretraining_cost(n, d, 2.0, 0.4) / 3)
    for kwargs, name in ((dict(mfu=40), "mfu"), (dict(gpu="H900"), "gpu"), (dict(gpu_hour_price=0), "gpu_hour_price")):
        with pytest.raises(ValueError, match=name):
            distill.pretraining_cost(n, d, **kwargs)
    with pytest.raises(ValueError, match="n_tokens"):
        distill.pretraining_cost(n, 0)


def test_published_runs_imply_plausible_mfu():
    """Published final-run GPU-hours against 6ND: implied MFU between 25% and 50% (Llama 3 reports 38-43%)."""
    for n, d, hours, gpu, _ in distill.PUBLISHED_RUNS.values():
        implied = distill.gpu_hours(n, d, 1.0, gpu) / hours
        assert 0.25 < implied < 0.5


def test_calculator_callback_and_figure():
    r = distill.distill_calculator(visible_tokens=1e12, price_out_per_mtok=25, price_in_per_mtok=5,
                                   input_per_output=0.2, batch_discount=0.5)
    assert r["total_dollars"] == pytest.approx(13e6)
    assert r["break_even_tokens"] * r["dollars_per_visible_mtok"] / 1e6 == pytest.approx(r["pretraining_dollars"])
    assert r["distill_over_pretrain"] == pytest.approx(13e6 / r["pretraining_dollars"])
    text = distill.render_distill(r)
    assert "ASSUMED" in text and "$13M" in text
    with pytest.raises(ValueError, match="batch_discount"):
        distill.distill_calculator(batch_discount=50)
    import matplotlib.pyplot as plt
    fig = distill.cost_figure()
    assert len(fig.axes[0].lines) >= 4
    plt.close(fig)


# ------------------------------------------------------------------- information measures
def test_kl_cross_entropy_entropy_known_values():
    p, q = (0.5, 0.5), (0.9, 0.1)
    assert distill.entropy(p) == pytest.approx(math.log(2))
    assert distill.kl_divergence(p, q) == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1))
    assert distill.kl_divergence((1.0, 0.0), (0.5, 0.5)) == pytest.approx(math.log(2))
    assert distill.kl_divergence((0.5, 0.5), (1.0, 0.0)) == math.inf
    for bad, name in ((((0.5, 0.6), (0.5, 0.5)), "p"), (((0.5, 0.5), (0.2, 0.3, 0.5)), "q"),
                      (((0.5, 0.5), (0.7, 0.7)), "q"), ((("a",), (1.0,)), "p")):
        with pytest.raises(ValueError, match=name):
            distill.kl_divergence(*bad)


probs = st.lists(st.floats(0.01, 1.0), min_size=2, max_size=8)


@settings(max_examples=80, deadline=None)
@given(a=probs, b=probs)
def test_gibbs_inequality_and_decomposition(a, b):
    n = min(len(a), len(b))
    p = [x / sum(a[:n]) for x in a[:n]]
    q = [x / sum(b[:n]) for x in b[:n]]
    kl = distill.kl_divergence(p, q)
    assert kl >= -1e-12
    assert distill.cross_entropy(p, q) == pytest.approx(distill.entropy(p) + kl, abs=1e-12)
    assert distill.kl_divergence(p, p) == pytest.approx(0.0, abs=1e-12)


def test_torch_losses_match_the_definitions():
    """full_kl_loss on one position = kl_divergence; top-k with k = V equals the full KL (both tails);
    renormalised top-k = KL(renormalised teacher ‖ student)."""
    gen = torch.Generator().manual_seed(0)
    t, s = torch.randn(1, 1, 6, generator=gen), torch.randn(1, 1, 6, generator=gen)
    p, q = t.softmax(-1)[0, 0].tolist(), s.softmax(-1)[0, 0].tolist()
    assert float(distill_train.full_kl_loss(s, t)) == pytest.approx(distill.kl_divergence(p, q), rel=1e-5)
    ids, lp = distill_train.api_topk(t, 6)
    for tail in distill_train.TAILS:
        assert float(distill_train.topk_loss(s, ids, lp, tail)) == pytest.approx(float(distill_train.full_kl_loss(s, t)),
                                                                                  rel=1e-5)
    ids, lp = distill_train.api_topk(t, 3)
    top = sorted(p, reverse=True)[:3]
    renorm = [x / sum(top) if x in top else 0.0 for x in p]
    assert float(distill_train.topk_loss(s, ids, lp, "renormalise")) == pytest.approx(
        distill.kl_divergence(renorm, q), rel=1e-5)
    tail_t = 1 - sum(top)
    q_top = [q[i] for i in ids[0, 0].tolist()]
    bucket = sum(a * math.log(a / b) for a, b in zip(top, q_top)) + tail_t * math.log(tail_t / (1 - sum(q_top)))
    assert float(distill_train.topk_loss(s, ids, lp, "bucket")) == pytest.approx(bucket, rel=1e-5)
    assert float(distill_train.text_loss(s, torch.tensor([[2]]))) == pytest.approx(-math.log(q[2]), rel=1e-5)
    with pytest.raises(ValueError, match="tail"):
        distill_train.topk_loss(s, ids, lp, "drop")
    with pytest.raises(ValueError, match="k"):
        distill_train.api_topk(t, 7)


# -------------------------------------------------------------------- sampler and training
TINY_T = GPTConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32)
TINY_S = GPTConfig(n_layers=1, d_model=16, n_heads=2, seq_len=32)


def test_kv_cache_sampler_matches_the_model():
    teacher = GPT(TINY_T, seed=3)
    prompts = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(1))
    tok, logits = distill_train.sample_with_logits(teacher, prompts, 20, torch.Generator().manual_seed(2))
    assert tok.shape == (4, 28) and logits.shape == (4, 20, 256)
    assert torch.equal(tok[:, :8], prompts)
    ref = teacher(tok[:, :-1])[:, 7:]
    assert torch.allclose(ref, logits, atol=1e-5)
    tok2, _ = distill_train.sample_with_logits(teacher, prompts, 20, torch.Generator().manual_seed(2))
    assert torch.equal(tok, tok2)
    with pytest.raises(ValueError, match="seq_len"):
        distill_train.sample_with_logits(teacher, prompts, 26, torch.Generator())
    with pytest.raises(ValueError, match="windows"):
        distill_train.sample_with_logits(GPT(TINY_T.with_(windows=(4, None))), prompts, 2, torch.Generator())


def test_sampled_text_gradient_is_unbiased():
    """The text loss's gradient, averaged over M resampled targets, converges to the full-KL gradient
    as err(1)/√M (within a factor 2 at M = 64)."""
    teacher, student = GPT(TINY_T, seed=3), GPT(TINY_S, seed=4)
    prompts = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(1))
    tok, logits = distill_train.sample_with_logits(teacher, prompts, 16, torch.Generator().manual_seed(2))
    res = distill_noise.sampled_gradient_error(student, tok, logits, 8, [1, 64], torch.Generator().manual_seed(5))
    e1, e64 = res["rel_error"]
    assert e64 < e1 / 4
    assert e1 / 8 / 2 < e64 < e1 / 8 * 2


def test_distill_is_deterministic_and_modes_are_independent():
    teacher = GPT(TINY_T, seed=3)
    cfg = distill_train.DistillConfig(steps=3, batch_size=4, prompt_len=8, gen_len=16)
    a = distill_train.distill(teacher, TINY_S, cfg)
    b = distill_train.distill(teacher, TINY_S, cfg, modes=("full", "text"))
    assert a["output_tokens"] == 3 * 4 * 16 and a["input_tokens"] == 3 * 4 * 8 and a["epochs"] == 1
    for m in ("full", "text"):
        assert b["modes"][m]["val_loss"] == a["modes"][m]["val_loss"]
    assert len({round(r["val_loss"], 6) for r in a["modes"].values()}) == 4
    with pytest.raises(ValueError, match="modes"):
        distill_train.distill(teacher, TINY_S, cfg, modes=("logits",))
    with pytest.raises(ValueError, match="gen_len"):
        distill_train.DistillConfig(steps=3, gen_len=0)
    with pytest.raises(ValueError, match="pool_batches"):
        distill_train.DistillConfig(steps=3, pool_batches=0)


def test_pooled_purchase_accounting_and_prefix_reruns():
    """A pool of 2 purchases cycled for 6 steps bills 2 batches (3 epochs); stopping after 2 steps
    reproduces the stored curve point at step 2 exactly."""
    teacher = GPT(TINY_T, seed=3)
    cfg = distill_train.DistillConfig(steps=6, batch_size=4, prompt_len=8, gen_len=16, pool_batches=2, eval_every=2)
    full = distill_train.distill(teacher, TINY_S, cfg, modes=("text", "full"))
    assert full["output_tokens"] == 2 * 4 * 16 and full["epochs"] == 3
    assert full["curve"]["steps"] == [2, 4, 6]
    assert full["curve"]["val_loss"]["full"][-1] == full["modes"]["full"]["val_loss"]
    part = distill_train.distill(teacher, TINY_S, cfg, modes=("full",), stop_after=2)
    assert part["steps_run"] == 2
    assert part["modes"]["full"]["val_loss"] == full["curve"]["val_loss"]["full"][0]


def test_noise_formula_and_topk_bias():
    gen = torch.Generator().manual_seed(0)
    logits = 2.0 * torch.randn(3, 40, 256, generator=gen)
    noise = distill_noise.target_noise(logits, 400, torch.Generator().manual_seed(1))
    assert noise["measured"] == pytest.approx(noise["theory"], rel=0.02)
    p = logits.softmax(-1)
    assert noise["theory"] == pytest.approx(float((1 - (p * p).sum(-1)).mean()), rel=1e-6)
    for k in (1, 5, 256):
        s = distill_noise.topk_stats(logits, k)
        assert s["l1_measured"] == pytest.approx(s["l1_theory"], abs=1e-5)
    assert distill_noise.topk_stats(logits, 256)["tail_mass"] == pytest.approx(0.0, abs=1e-5)


# ----------------------------------------------------------------- shipped teacher and sweep
@pytest.fixture(scope="module")
def shipped():
    return (distill_run.load_teacher(), distill_run.load_results(),
            distill_run.load_results(distill_run.ONEPASS_PATH))


def test_shipped_files_agree(shipped):
    (teacher, meta), doc, onepass = shipped
    assert distill_run.TEACHER_PATH.stat().st_size < 2e6
    assert distill_run.weights_sha256(teacher) == meta["weights_sha256"]
    for d, design in ((doc, "fixed_compute"), (onepass, "one_pass")):
        assert d["teacher"]["weights_sha256"] == meta["weights_sha256"]
        assert [r["key"] for r in d["runs"]] == [s["key"] for s in distill_run.plan(design)]
    with pytest.raises(ValueError, match="design"):
        distill_run.plan("two_pass")
    # What the chapter reads off the shipped sweeps (best checkpoints for the same-compute design):
    c, c1, t = distill_run.curves(doc), distill_run.curves(onepass), meta["val_loss_fp16"]
    assert (c["full_best"] < c["topk_best"]).all() and (c["full_best"] < c["text_best"]).all()
    assert (c["full_best"] > t).all()                                    # no student reaches the teacher
    assert (c["topk_best"][:3] < c["text_best"][:3]).all()              # top-5 helps while tokens are scarce
    assert c["text"][0] - c["text_best"][0] > 0.5                       # ... and text overfits a small purchase
    assert abs(c1["text"][:-1] - c1["full"][:-1]).max() < 0.05          # one pass: no difference at first,
    assert c1["text"][-1] - c1["full"][-1] > 0.1                        # full logits ahead at the largest budget
    assert distill_run.equivalent_text_tokens(doc, float(c["full_best"][0])) > 2 * c["tokens"][0]


def test_rerun_smallest_budget_reproduces(shipped):
    """The regenerate command's smallest budget, restarted now for its first 64 steps (text and
    full-logit students): validation loss within 1% of the stored curve point (only summation
    order can differ between machines)."""
    (teacher, _), doc, _ = shipped
    spec = distill_run.plan("fixed_compute")[0]
    rec = distill_run.run_point(spec, teacher, modes=("text", "full"), stop_after=64)
    stored = doc["runs"][0]["curve"]
    i = stored["steps"].index(64)
    for m in ("text", "full"):
        assert rec["modes"][m]["val_loss"] == pytest.approx(stored["val_loss"][m][i], rel=0.01)


def test_rerun_one_pass_smallest_budget_reproduces(shipped):
    """The one-pass sweep's smallest budget (16 purchases), rerun now for the text student."""
    (teacher, _), _, onepass = shipped
    rec = distill_run.run_point(distill_run.plan("one_pass")[0], teacher, modes=("text",))
    assert rec["output_tokens"] == onepass["runs"][0]["output_tokens"]
    assert rec["modes"]["text"]["val_loss"] == pytest.approx(onepass["runs"][0]["modes"]["text"]["val_loss"], rel=0.01)


# ----------------------------------------------------------------------------- question bank
def test_question_bank_matches_library():
    from course_lib.checks import ch09_distill as bank
    ref = {q.qid: q for q in bank.QUESTIONS}
    assert ref["cost_1t_list"].reference() == pytest.approx(25e6)
    assert ref["cost_1t_batch"].reference() == pytest.approx(13e6)
    assert ref["cost_hidden_reasoning"].reference() == pytest.approx(1e11 * 4 * 25e-6 * 0.5)
    assert ref["pretrain_70b"].reference() == pytest.approx(6 * 70e9 * 15e12 / (989e12 * 0.4) / 3600 * 2.0, rel=1e-3)
    assert ref["break_even_tokens"].reference() == pytest.approx(ref["pretrain_70b"].reference() / 12.5e-6)
    p, q = bank.TEACHER_P, bank.STUDENT_Q
    assert ref["kl_teacher_student"].reference() == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)))
    assert ref["ce_minus_kl"].reference() == pytest.approx(-sum(a * math.log(a) for a in p))
    assert ref["kl_function"].grade(distill.kl_divergence).correct
    assert not ref["kl_function"].grade(lambda p, q: distill.kl_divergence(q, p)).correct
    assert "per million" in ref["cost_1t_list"].grade(25e12).message
