"""Chapter 14: load balancing by the Switch auxiliary loss and by DeepSeek-V3's per-expert bias.

Hand-computed small cases for the formulas (the bias update, the auxiliary loss, max/mean load, the
dropped share), the router's contract (bias for selection only, loads counted in training only),
and one point of the cached comparison the book reads, rerun.
"""
import math

import numpy as np
import pytest
import torch

from course_lib import moe
from course_lib.expert import balance as B
from course_lib.expert import labs as L
from course_lib.model import GPTConfig
from course_lib.moe.train import moe_gpt

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bias_update_by_hand():
    # mean load 4: expert 0 is over (bias down), expert 1 under (bias up), 2 and 3 exactly at the
    # mean keep theirs (sign 0); the size of the error does not matter, only its sign
    bias = torch.zeros(4)
    new = B.bias_update(bias, torch.tensor([6, 2, 4, 4]), 0.1)
    assert new.tolist() == pytest.approx([-0.1, 0.1, 0.0, 0.0])
    assert B.bias_update(new, torch.tensor([100, 0, 50, 50]), 0.1).tolist() == pytest.approx([-0.2, 0.2, 0.0, 0.0])
    with pytest.raises(ValueError, match="one count per expert"):
        B.bias_update(bias, torch.tensor([1, 2]), 0.1)
    with pytest.raises(ValueError, match="gamma"):
        B.bias_update(bias, torch.tensor([1, 2, 3, 4]), -1.0)


def test_router_bias_selects_gate_stays_unbiased():
    # three tokens, three experts; softmax scores by hand from logits log(p)
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.1, 0.3], [0.2, 0.7, 0.1]]])
    r = B.BiasBalancedRouter(3, top_k=1, gamma=0.05)
    r.train()
    out = r(p.log())
    assert out.assigned.float().argmax(-1).tolist() == [[0, 0, 1]]
    assert r.load.tolist() == [2, 1, 0]
    r.bias.copy_(torch.tensor([0.0, 0.25, 0.0]))         # 0.3 + 0.25 > 0.5: token 0 moves to expert 1
    out = r(p.log())
    assert out.assigned.float().argmax(-1).tolist() == [[1, 0, 1]]
    # the gate is the unbiased score of the chosen expert, not score + bias
    assert out.combine[0].sum(-1).tolist() == pytest.approx([0.3, 0.6, 0.7])
    assert r.load.tolist() == [3, 3, 0]                   # both training forwards counted
    signs = r.update()                                    # loads [3, 3, 0], mean 2
    assert signs.tolist() == [-1, -1, 1]
    assert r.bias.tolist() == pytest.approx([-0.05, 0.2, 0.05])
    assert r.load.tolist() == [0, 0, 0]
    r.eval()
    r(p.log())
    assert r.load.tolist() == [0, 0, 0]                   # evaluation does not steer the bias
    assert {"bias", "load"} <= set(r.state_dict())        # a checkpoint keeps the biases


def test_sigmoid_scores_renormalise_the_chosen_gates():
    logits = torch.tensor([[[2.0, 0.0, -1.0, 1.0]]])
    r = B.BiasBalancedRouter(4, top_k=2, score="sigmoid")
    out = r(logits)
    s = torch.sigmoid(logits)[0, 0]
    assert out.assigned[0, 0].tolist() == [True, False, False, True]
    want = [float(s[0] / (s[0] + s[3])), 0.0, 0.0, float(s[3] / (s[0] + s[3]))]
    assert out.combine[0, 0].tolist() == pytest.approx(want)


def test_bias_removes_a_persistent_skew_by_construction():
    # fixed scores, every token prefers expert 0 by a logit margin of 2: no balancing sends it all
    # there; the bias must overtake the gap (at most 1 in softmax probability) within 1/gamma steps
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 512, 4, generator=g) * 0.5 + torch.tensor([2.0, 0, 0, 0])
    r = B.BiasBalancedRouter(4, gamma=0.01)
    start = B.load_imbalance(r(logits).assigned.sum((0, 1)))
    r.update()
    hist = []
    for _ in range(150):
        hist.append(B.load_imbalance(r(logits).assigned.sum((0, 1))))
        r.update()
    assert start > 3.5
    assert max(hist[-50:]) < 1.25


def test_switch_aux_loss_by_hand():
    # two experts; three tokens with p = (3/4, 1/4), one with p = (1/4, 3/4); top-1
    # f = (3/4, 1/4), P = mean p = (5/8, 3/8): E * sum f P = 2 * (15/32 + 3/32) = 9/8
    logits = torch.tensor([[[math.log(3), 0.0]] * 3 + [[0.0, math.log(3)]]])
    r = moe.token_choice(logits)
    assert float(moe.switch_aux_loss(logits, r.assigned)) == pytest.approx(9 / 8)
    # the gradient reaches the router through P only: d/dlogit of E * sum f P for one token
    x = logits.clone().requires_grad_(True)
    moe.switch_aux_loss(x, r.assigned).backward()
    p = torch.tensor([0.75, 0.25])
    f = torch.tensor([0.75, 0.25])
    dP = 2 * f / 4                                        # dL/dp of each token (mean over 4)
    want = p * (dP - (p * dP).sum())                      # softmax Jacobian
    assert x.grad[0, 0].tolist() == pytest.approx(want.tolist())


def test_imbalance_and_drop_share_by_hand():
    assert B.load_imbalance([6, 2, 4, 4]) == 1.5
    assert B.load_imbalance([16, 0, 0, 0]) == 4.0
    assert B.drop_share([6, 2, 4, 4], 1.0) == 2 / 16       # C = 4: expert 0 overflows by 2
    assert B.drop_share([6, 2, 4, 4], 1.25) == 1 / 16      # C = 5
    assert B.drop_share([6, 2, 4, 4], 1.0, top_k=2) == 2 / 16   # 8 tokens of 2 pairs: C = 2 * 8 / 4 = 4
    with pytest.raises(ValueError, match="counts"):
        B.load_imbalance([0, 0])
    with pytest.raises(ValueError, match="top_k"):
        B.drop_share([3, 2], 1.0, top_k=2)


def test_bias_balance_installs_one_router_per_layer():
    cfg = GPTConfig(vocab_size=32, seq_len=8, n_layers=2, n_heads=2, d_model=16)
    model = moe_gpt(cfg, 4, top_k=2)
    routers = B.bias_balance(model, gamma=0.01)
    assert len(routers) == 2 and routers[0] is not routers[1] and routers[0].top_k == 2
    assert sum(k.endswith(".bias") and "router_kind" in k for k in model.state_dict()) == 2
    model.train()
    model(torch.randint(0, 32, (2, 8)))
    assert [float(r.load.sum()) for r in routers] == [2 * 8 * 2] * 2
    with pytest.raises(ValueError, match="no course_lib.moe.MoE"):
        B.bias_balance(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="score"):
        B.BiasBalancedRouter(4, score="relu")
    with pytest.raises(ValueError, match="top_k"):
        B.BiasBalancedRouter(4, top_k=5)


def test_cached_comparison_reruns_and_its_verdicts_hold():
    """The book reads data/expert_balance.json: its first 30 steps are rerun here (before chaos
    amplifies kernel rounding, the trajectories agree), and its verdicts are the lab's."""
    cache = L.load_balance_cache()
    assert cache["config"] == L.BALANCE
    n = 30
    fresh = L.balance_run("bias", **{**L.BALANCE, "steps": n})
    old = cache["trace"]["bias"]
    assert np.abs(np.array(fresh["imbalance"]) - np.array(old["imbalance"][:n])).max() < 0.02
    assert np.abs(np.array(fresh["loss"]) - np.array(old["loss"][:n])).max() < 1e-3
    gamma = L.BALANCE["gamma"]
    steps = np.array(old["bias"]) / gamma                 # every bias is a whole number of ±gamma moves
    assert np.abs(steps - steps.round()).max() < 1e-3
    for seed, s in cache["summary"].items():
        assert s["bias"]["imbalance"] < 1.7 and s["aux"]["imbalance"] < 2.0 < 2.2 < s["none"]["imbalance"], seed
        assert max(s["bias"]["drop"], s["aux"]["drop"]) < 0.5 * s["none"]["drop"], seed
