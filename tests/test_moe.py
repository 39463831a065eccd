"""Chapter 8: MoE routing calculators, routers, the MoE layer, the causality harness, the question bank."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from course_lib.moe import causality, train as moe_train
from course_lib import moe
from course_lib.model import GPTConfig, CausalSelfAttention


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------- calculators
@pytest.mark.parametrize("args, expected", [
    ((1024, 8, 1.25), 160),          # Switch default CF: (T/E)·CF
    ((1024, 8, 1.25, 2), 320),       # top-2 doubles the slots
    ((10, 3, 1.0), 4),               # rounded up, so balanced routing never drops
    ((4096, 64, 1.0), 64),
    ((100, 7, 1.1, 1), 16),          # 15.71… → 16
])
def test_expert_capacity_values(args, expected):
    assert moe.expert_capacity(*args) == expected


@pytest.mark.parametrize("kwargs, bad", [
    (dict(n_tokens=0, n_experts=8, capacity_factor=1.0), "n_tokens"),
    (dict(n_tokens=10.5, n_experts=8, capacity_factor=1.0), "n_tokens"),
    (dict(n_tokens=64, n_experts=-1, capacity_factor=1.0), "n_experts"),
    (dict(n_tokens=64, n_experts=8, capacity_factor=float("nan")), "capacity_factor"),
    (dict(n_tokens=64, n_experts=8, capacity_factor=0), "capacity_factor"),
    (dict(n_tokens=64, n_experts=8, capacity_factor=1.0, top_k=0), "top_k"),
    (dict(n_tokens=64, n_experts=8, capacity_factor=1.0, top_k=9), "top_k"),
    (dict(n_tokens=True, n_experts=8, capacity_factor=1.0), "n_tokens"),
])
def test_expert_capacity_rejects_bad_input(kwargs, bad):
    with pytest.raises(ValueError, match=bad):
        moe.expert_capacity(**kwargs)


def test_dropped_tokens_values_and_types():
    assert moe.dropped_tokens([5, 3, 0, 8], 4) == 1 + 4
    assert moe.dropped_tokens(torch.tensor([5, 3, 0, 8]), 4) == 5
    assert moe.dropped_tokens(np.array([2, 2]), 2) == 0
    assert moe.dropped_tokens([3, 1], 0) == 4


@pytest.mark.parametrize("counts, cap, bad", [
    ([1, -2], 1, "expert_counts"), ([1.5, 2], 1, "expert_counts"), ([], 1, "expert_counts"),
    ([1, 2], -1, "capacity"), ([1, 2], 1.5, "capacity"), (["a"], 1, "expert_counts"),
])
def test_dropped_tokens_rejects_bad_input(counts, cap, bad):
    with pytest.raises(ValueError, match=bad):
        moe.dropped_tokens(counts, cap)


@given(st.lists(st.integers(0, 500), min_size=1, max_size=32), st.integers(0, 600))
def test_dropped_tokens_properties(counts, cap):
    d = moe.dropped_tokens(counts, cap)
    assert d == sum(counts) - sum(min(c, cap) for c in counts)           # kept + dropped = total
    assert d >= moe.dropped_tokens(counts, cap + 1)                        # more slots, fewer drops
    assert (d == 0) == (max(counts) <= cap)


@given(st.integers(1, 4096), st.integers(1, 64), st.floats(0.1, 8.0), st.integers(1, 4))
def test_capacity_is_the_smallest_integer_above_the_average(t, e, cf, k):
    k = min(k, e)
    c = moe.expert_capacity(t, e, cf, k)
    assert c >= k * t * cf / e - 1e-9 and c - 1 < k * t * cf / e + 1e-9


def test_expected_drop_fraction_matches_simulated_random_routing():
    """The binomial formula against real token-choice routing of random, balanced logits."""
    gen = torch.Generator().manual_seed(0)
    T, E = 64, 8
    logits = torch.randn(400, T, E, generator=gen) * 0.01
    for cf in (0.75, 1.0, 1.5):
        measured = moe.token_choice(logits, 1, cf, "sequence").stats()["drop_fraction"]
        theory = moe.expected_drop_fraction(T, E, cf)
        assert measured == pytest.approx(theory, rel=0.05, abs=2e-3), cf
    skew = [0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]
    assert moe.expected_drop_fraction(T, E, 1.0, load=skew) > 2 * moe.expected_drop_fraction(T, E, 1.0)
    with pytest.raises(ValueError, match="load"):
        moe.expected_drop_fraction(T, E, 1.0, load=[0.5, 0.5])


# ----------------------------------------------------------------------------- routers
def _naive_token_choice(logits, k, cf, group, priority):
    """Loop-by-loop reference: serve assignments in priority order, count slots per expert."""
    B, S, E = logits.shape
    kept = torch.zeros(B, S, E, dtype=torch.bool)
    groups = [[(b, s) for s in range(S)] for b in range(B)] if group == "sequence" else \
        [[(b, s) for b in range(B) for s in range(S)]]
    for toks in groups:
        cap = moe.expert_capacity(len(toks), E, cf, k) if cf else None
        assigns = []
        for pos, (b, s) in enumerate(toks):
            p = logits[b, s].softmax(-1)
            v, i = p.topk(k)
            for j in range(k):
                key = {"position": (pos, j), "rank": (j, pos), "score": (j, -float(v[j]))}[priority]
                assigns.append((key, b, s, int(i[j])))
        used = [0] * E
        for _, b, s, e in sorted(assigns, key=lambda a: a[0]):
            if cap is None or used[e] < cap:
                used[e] += 1
                kept[b, s, e] = True
    return kept


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.integers(1, 6), st.integers(1, 3),
       st.sampled_from([None, 0.5, 1.0, 1.25, 2.0]), st.sampled_from(["sequence", "batch"]),
       st.sampled_from(["position", "rank", "score"]), st.integers(0, 10_000))
def test_token_choice_matches_loop_reference(B, S, E, k, cf, group, priority, seed):
    k = min(k, E)
    logits = torch.randn(B, S, E, generator=torch.Generator().manual_seed(seed))
    r = moe.token_choice(logits, k, cf, group, priority)
    assert torch.equal(r.kept, _naive_token_choice(logits, k, cf, group, priority))
    assert bool((r.kept <= r.assigned).all()) and int(r.assigned.sum()) == B * S * k
    if cf is not None:
        per_group = r.kept.sum(1) if group == "sequence" else r.kept.sum((0, 1))[None]
        assert int(per_group.max()) <= r.capacity


def test_expert_choice_fills_every_expert_exactly():
    logits = torch.randn(3, 16, 4, generator=torch.Generator().manual_seed(1))
    r = moe.expert_choice(logits, 1.0, group="sequence")
    assert r.capacity == 4 and bool((r.kept.sum(1) == 4).all())
    top = logits.softmax(-1).topk(4, dim=1).indices                      # per expert, per sequence
    ref = torch.zeros_like(r.kept).scatter_(1, top, True)
    assert torch.equal(r.kept, ref)
    rb = moe.expert_choice(logits, 1.0, group="batch")
    assert rb.capacity == 12 and bool((rb.kept.sum((0, 1)) == 12).all())


def test_switch_aux_loss_is_one_when_balanced_and_E_when_collapsed():
    E = 8
    uniform = torch.zeros(4, 16, E)
    balanced_assign = torch.nn.functional.one_hot(torch.arange(64) % E, E).bool().view(4, 16, E)
    assert float(moe.switch_aux_loss(uniform, balanced_assign)) == pytest.approx(1.0)
    collapsed = torch.zeros(4, 16, E)
    collapsed[..., 0] = 30.0
    r = moe.token_choice(collapsed)
    assert float(moe.switch_aux_loss(collapsed, r.assigned)) == pytest.approx(E, rel=1e-6)


# ----------------------------------------------------------------------------- the layer
@pytest.mark.parametrize("kwargs", [
    dict(router="token"), dict(router="token", top_k=2, capacity_factor=1.0),
    dict(router="token", capacity_factor=0.5, group="batch", priority="score"),
    dict(router="expert", capacity_factor=1.0), dict(router="token", shared_expert=True),
])
def test_sparse_dispatch_equals_dense_einsum_reference(kwargs):
    torch.manual_seed(0)
    layer = moe.MoE(16, 32, 4, **kwargs)
    with torch.no_grad():
        layer.router.weight.mul_(50)                                      # decisive, varied routing
    x = torch.randn(2, 10, 16, requires_grad=True)
    y, y_ref = layer(x), layer.forward_dense(x)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    g = torch.autograd.grad(y.square().sum(), [x, layer.up.weight, layer.router.weight])
    g_ref = torch.autograd.grad(y_ref.square().sum(), [x, layer.up.weight, layer.router.weight])
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_dropped_tokens_pass_through_the_residual():
    layer = moe.MoE(8, 16, 2, router="token", capacity_factor=1.0)
    with torch.no_grad():
        layer.router.weight.copy_(torch.tensor([[1.0] * 8, [-1.0] * 8]))  # everyone wants expert 0
    y = layer(torch.rand(1, 8, 8) + 0.1)
    assert layer.routing.capacity == 4 and layer.stats["drop_fraction"] == 0.5
    assert bool((y[0, 4:] == 0).all()) and bool((y[0, :4] != 0).all())   # first come, first served


def test_moe_rejects_bad_configuration():
    for kwargs, bad in [(dict(router="tokens"), "router"), (dict(top_k=5), "top_k"),
                        (dict(group="global"), "group"), (dict(priority="random"), "priority"),
                        (dict(capacity_tokens=0), "capacity_tokens"),
                        (dict(capacity_factor=-1.0), "capacity_factor")]:
        with pytest.raises(ValueError, match=bad):
            moe.MoE(8, 16, 4, **kwargs)


def test_moe_gpt_trains_and_records_stats():
    cfg = GPTConfig(seq_len=16, n_layers=1, n_heads=2, d_model=32)
    model = moe_train.moe_gpt(cfg, n_experts=4, router="token", capacity_factor=1.25)
    losses = moe_train.train(model, 25, batch_size=8, aux_coef=0.01)
    assert np.mean(losses[-5:]) < losses[0] - 0.5
    (logits,) = moe_train.router_logits(model, torch.zeros(2, 16, dtype=torch.long))
    assert logits.shape == (2, 16, 4)
    curve = moe_train.drop_curve(logits, [0.5, 1.0, 2.0, 4.0])
    assert np.all(np.diff(curve) <= 0) and curve[-1] == 0.0


# ----------------------------------------------------------------------------- the harness
B, S, D, E = 3, 12, 16, 4


def _layer(**kwargs):
    torch.manual_seed(0)
    layer = moe.MoE(D, 32, E, **kwargs)
    with torch.no_grad():
        layer.router.weight.mul_(5)
    return layer


def _x():
    return torch.randn(B, S, D, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name, model, causal, independent", [
    ("dense causal attention", lambda: CausalSelfAttention(GPTConfig(seq_len=S, d_model=D)), True, True),
    ("token choice, no capacity", lambda: _layer(router="token"), True, True),
    ("token choice, FCFS per sequence", lambda: _layer(router="token", capacity_factor=1.0), True, True),
    ("token choice, FCFS batch-wide", lambda: _layer(router="token", capacity_factor=1.0, group="batch"),
     True, False),
    ("token choice, score priority", lambda: _layer(router="token", capacity_factor=1.0, priority="score"),
     False, True),
    ("top-2, FCFS token by token", lambda: _layer(router="token", top_k=2, capacity_factor=1.0), True, True),
    ("top-2, GShard rank priority", lambda: _layer(router="token", top_k=2, capacity_factor=1.0,
                                                   priority="rank"), False, True),
    ("expert choice per sequence", lambda: _layer(router="expert"), False, True),
    ("expert choice batch-wide", lambda: _layer(router="expert", group="batch"), False, False),
])
def test_harness_classifies_the_schemes(name, model, causal, independent):
    rep = causality.check_causality(model(), _x(), name=name, trials=3)
    assert rep.causal is causal, rep.summary()
    assert rep.batch_independent is independent, rep.summary()
    assert (rep.violating_positions == []) is causal
    assert all(p > n for n, p in rep.future_leaks)


def test_harness_catches_a_plainly_acausal_model_everywhere():
    def rev(x):                                                           # y_n = Σ_{m ≥ n} x_m
        return x.flip(1).cumsum(1).flip(1)
    rep = causality.check_causality(rev, _x(), trials=1)
    assert rep.violating_positions == list(range(S - 1)) and rep.batch_independent
    ids = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(0))
    emb = torch.nn.Embedding(50, 4)
    rep_ids = causality.check_causality(lambda t: emb(t).flip(1).cumsum(1), ids, vocab_size=50, trials=1)
    assert not rep_ids.causal


def test_gradients_are_blind_to_routing_leaks():
    layer, x = _layer(router="expert"), _x()
    grad = causality.gradient_influence(layer, x)
    assert np.triu(grad, 1).max() == 0.0                                  # the Jacobian says "causal"
    assert not causality.check_causality(layer, x).causal                 # perturbation says otherwise
    def bidir(t):                                                         # a leak gradients do see
        return t + t.mean(1, keepdim=True)
    assert causality.gradient_influence(bidir, x)[np.triu_indices(S, 1)].min() > 0


def test_harness_rejects_bad_arguments():
    with pytest.raises(ValueError, match="seq"):
        causality.check_causality(lambda t: t, _x(), seq=5)
    with pytest.raises(ValueError, match="vocab_size"):
        causality.check_causality(lambda t: t, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="trials"):
        causality.check_causality(lambda t: t, _x(), trials=0)


def test_prefix_consistency_separates_causal_from_acausal_models():
    cfg = GPTConfig(seq_len=12, n_layers=1, n_heads=2, d_model=32)
    idx = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(0))
    tc = moe_train.moe_gpt(cfg, 4, router="token").eval()
    ec = moe_train.moe_gpt(cfg, 4, router="expert", capacity_factor=1.0).eval()
    for m in (tc, ec):
        for blk in m.blocks:
            blk.mlp.router.weight.data.mul_(50)
    fcfs = moe_train.moe_gpt(cfg, 4, router="token", capacity_factor=1.0).eval()
    fixed = moe_train.moe_gpt(cfg, 4, router="token", capacity_factor=1.0, capacity_tokens=12).eval()
    for m in (tc, ec, fcfs, fixed):
        for blk in m.blocks:
            blk.mlp.router.weight.data.mul_(50)
    r_tc = causality.prefix_consistency(tc, idx, idx)
    assert r_tc["max_abs_logit_diff"].max() < 1e-4
    assert abs(r_tc["teacher_forced"] - r_tc["autoregressive"]) < 1e-5
    assert causality.prefix_consistency(ec, idx)["max_abs_logit_diff"].max() > 1e-2
    # FCFS capacity is causal, but a capacity computed from the call's length is not the training one
    assert causality.prefix_consistency(fcfs, idx)["max_abs_logit_diff"].max() > 1e-2
    assert causality.prefix_consistency(fixed, idx)["max_abs_logit_diff"].max() < 1e-4


# ----------------------------------------------------------------------------- question bank
def test_question_bank_agrees_with_library_and_harness():
    from course_lib.checks import ch08_moe as bank
    q = {x.qid: x for x in bank.QUESTIONS}
    assert q["capacity_switch"].reference() == 80 == math.ceil(1.25 * 4096 / 64)
    assert q["capacity_top2"].reference() == 640
    assert q["dropped_cf1"].reference() == 22 + 84 + 162 and sum(bank.COUNTS) == 1024
    assert q["drop_fraction_cf125"].reference() == pytest.approx((52 + 130) / 1024)
    derived = {"token_choice_no_capacity": True, "token_choice_fcfs_per_sequence": True,
               "token_choice_top2_gshard_rank": False, "token_choice_score_priority_batch": False,
               "expert_choice_per_sequence": False, "expert_choice_batch": False}
    assert q["classify_schemes"].grade(derived).correct
    assert q["classify_schemes"].grade({**derived, "expert_choice_batch": True}).score == pytest.approx(2.5)

    def impl(priority):
        return lambda lg, k, cf: moe.token_choice(lg, k, cf, "sequence", priority).kept
    assert q["token_choice_impl"].grade(impl("position")).correct
    for wrong in ("rank", "score"):
        res = q["token_choice_impl"].grade(impl(wrong))
        assert not res.correct and ("GShard" in res.message or "V-MoE" in res.message)

    def ec(lg):
        return moe.expert_choice(lg, 1.0).kept
    assert q["own_router"].grade((ec, {"causal": False, "batch_independent": True})).correct
    assert q["own_router"].grade((ec, {"causal": True, "batch_independent": True})).score == 1.0
