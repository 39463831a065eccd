"""Chapter 13's audit of a hand-written plan (course_lib.plan.audit) and the graded questions
built on it: a consistent plan passes whatever its layout, each kind of inconsistency is caught
by the check that names it, and a plan that does not fit or is late cannot score full marks."""
from __future__ import annotations

import dataclasses

import pytest

from course_lib import flops
from course_lib.checks import ch13_plan as bank
from course_lib.plan import plan
from course_lib.plan.audit import REQUIRED, audit
from course_lib.plan.planner import failure_budget

SHAPE = {k: bank.PROBLEM[k] for k in ("n_layers", "d_model", "n_heads", "kv_heads")}
Q = {q.qid: q for q in bank.QUESTIONS}


def as_proposal(p) -> dict:
    return dict(n_tokens=p.n_tokens, tp=p.tp, cp=p.cp, pp=p.pp, dp=p.dp, v=p.interleave, zero=p.zero_stage,
                recompute=p.recompute, global_batch_tokens=p.global_batch_tokens, mfu=p.mfu,
                memory_bytes=p.memory_bytes, days=p.days, wall_days=p.wall_days)


@pytest.fixture(scope="module")
def good() -> dict:
    return as_proposal(plan(n_params=70e9, n_tokens=10e12, gpu="H100", n_gpus=2048, **SHAPE))


def findings(proposal) -> dict:
    return {f.check: f for f in audit(proposal, **bank.PROBLEM)}


def test_the_planners_own_plan_passes_and_so_does_the_dataclass(good):
    assert all(f.ok for f in findings(good).values())
    assert Q["plan_70b"].grade(good).score == 5
    p = plan(n_params=70e9, n_tokens=10e12, gpu="H100", n_gpus=2048, **SHAPE)
    assert Q["plan_70b"].grade(dataclasses.asdict(p)).score == 5     # zero_stage / interleave read too


def test_a_slower_honest_plan_on_another_layout_passes(good):
    """Not one right answer: a pipeline layout with ZeRO-1 at a lower MFU than its estimate."""
    from course_lib.layout import estimate
    est = estimate(8, 1, 4, 64, v=1, zero=1, recompute="full", n_params=70e9, seq_len=8192,
                   global_batch_tokens=2 ** 23, **SHAPE)
    assert est.fits and est.mfu < good["mfu"]
    mfu = 0.9 * est.mfu
    days = flops.training_days(70e9, 1.4e12, 2048, mfu, "H100")
    mine = dict(n_tokens=1.4e12, tp=8, cp=1, pp=4, dp=64, zero=1, recompute="full", global_batch_tokens=2 ** 23,
                mfu=mfu, memory_bytes=est.memory_bytes, days=days,
                wall_days=days / failure_budget(70e9, 2048)[4])
    assert all(f.ok for f in findings(mine).values()), findings(mine)


@pytest.mark.parametrize("change, failing", [
    (dict(mfu=0.6), {"mfu", "days"}),                 # more than the layout's estimate; days then wrong too
    (dict(days=40.0), {"days"}),
    (dict(wall_days=40.0), {"days"}),                 # wall time without the goodput
    (dict(memory_bytes=30e9), {"memory"}),
    (dict(n_tokens=15e12), {"days", "deadline"}),     # 15T tokens do not fit in 60 days at this MFU
])
def test_each_inconsistency_is_caught_by_its_check(good, change, failing):
    bad = {c for c, f in findings(good | change).items() if not f.ok}
    assert bad == failing


@pytest.mark.parametrize("change, reason", [
    (dict(tp=8), "not the 2048 GPUs"),
    (dict(n_tokens=1e12), "under 20 per parameter"),
    (dict(global_batch_tokens=2 ** 25), "over the"),
    (dict(tp=16, dp=64), "breaks a rule"),           # TP would leave the 8-GPU node
    (dict(zero=5), "zero"),
    (dict(recompute="most"), "recompute"),
    (dict(tp="two"), "tp must be an integer"),
    (dict(tp=1.5), "tp must be an integer"),
    (dict(tp=10 ** 400, dp=1), "tp must be <= 2**53"),          # no OverflowError from a huge degree
    (dict(mfu=float("nan")), "mfu must be finite"),
    (dict(mfu=45), "mfu must be a fraction"),
    (dict(n_tokens=1e6), "less than one global batch"),         # a run shorter than one step
])
def test_an_invalid_layout_leaves_the_rest_unchecked(good, change, reason):
    f = findings(good | change)
    assert not f["layout"].ok and reason in f["layout"].detail
    assert all(not x.ok and x.detail.startswith("not checked") for c, x in f.items() if c != "layout")
    assert Q["plan_70b"].grade(good | change).score == 0


def test_a_plan_that_does_not_fit_scores_one_fifth_at_most(good):
    f = findings(good | {"zero": 0})
    assert f["layout"].ok and not f["memory"].ok and "GB per GPU" in f["memory"].detail
    assert Q["plan_70b"].grade(good | {"zero": 0}).score == 1


def test_what_is_not_a_plan_scores_zero_with_a_reason(good):
    assert Q["plan_70b"].grade({}).score == 0
    assert "lacks" in Q["plan_70b"].grade({k: good[k] for k in REQUIRED[:-1]}).message
    assert "dict" in Q["plan_70b"].grade([1, 2]).message
    assert "not a function" in Q["plan_70b"].grade(lambda: good).message


def test_value_questions_and_their_mistakes():
    assert Q["implied_mfu_8b"].reference() == pytest.approx(0.139, abs=1e-3)
    assert "percentage" in Q["implied_mfu_8b"].grade(13.9).message
    assert "every expert" in Q["moe_gpu_hours"].grade(Q["moe_gpu_hours"].reference() * 671 / 37).message
    assert Q["mfu_6n"].reference() == pytest.approx(163 / 312 * 0.75)
    assert "hardware" in Q["mfu_6n"].grade(163 / 312).message
    assert "uint16" in Q["loader_bytes"].grade(2 ** 24 / 7.5 * 2).message
    forty_one = plan(**bank.FORTY_ONE)
    hours = Q["failure_hours_41"].reference()
    assert hours == pytest.approx((forty_one.days / forty_one.goodput - forty_one.days) * 24)
    assert 0 < hours < 0.02 * 24 * forty_one.days          # at 1,024 GPUs failures cost under 2 %
    assert "not free" in Q["failure_hours_41"].grade(0).message
    assert "days" in Q["failure_hours_41"].grade(hours / 24).message


def test_a_published_layout_off_the_searched_degrees_is_evaluated_and_a_broken_rule_named():
    """BLOOM's published PP 12 is no power of two, which the search tries, but breaks no rule: a given
    layout is evaluated. A layout that does break one is refused naming that rule."""
    from course_lib.layout import estimate
    bloom = dict(n_params=176e9, n_layers=70, d_model=14336, n_heads=112, seq_len=2048,
                 global_batch_tokens=2048 * 2048, gpu="A100")
    x = estimate(4, 1, 12, 8, recompute="full", **bloom)
    assert x.pp == 12 and x.fits and 0.3 < x.mfu < 0.5
    for degrees, rule in (((16, 1, 12, 2), "TP must divide the 8 GPUs of a node"),
                          ((3, 1, 12, 8), "TP must divide the 8 GPUs"),
                          ((4, 3, 4, 8), "CP must divide the sequence"),
                          ((4, 1, 96, 1), "PP cannot exceed the 70 layers"),
                          ((1, 1, 1, 4096), "at least one microbatch")):
        with pytest.raises(ValueError, match=rule):
            estimate(*degrees, **bloom)
    with pytest.raises(ValueError, match=r"v chunks of at least one layer"):
        estimate(4, 1, 12, 8, v=8, **bloom)
