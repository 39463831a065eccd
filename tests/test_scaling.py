"""Chapter 2: compute-optimal scaling calculators, the loss fit, the shipped sweep and the widget."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import scaling
from course_lib.scaling import explore

GOPHER = 5.76e23


# ----------------------------------------------------------------------- published numbers
def test_rule_of_thumb_closed_form():
    n, d = scaling.compute_optimal(GOPHER, fit="tokens_per_param")
    assert n == pytest.approx(math.sqrt(GOPHER / 120))
    assert d == pytest.approx(math.sqrt(20 * GOPHER / 6))
    assert d / n == pytest.approx(20.0)
    assert 6 * n * d == pytest.approx(GOPHER)


@pytest.mark.parametrize("fit, n_b, d_t, ratio", [
    ("hoffmann", 32.2, 2.98, 92.6), ("besiroglu", 72.2, 1.33, 18.4), ("tokens_per_param", 69.3, 1.39, 20.0)])
def test_factcheck_claim8_gopher_budget(fit, n_b, d_t, ratio):
    """factcheck.md claim 8: N*, D* at the Gopher budget under each rule."""
    n, d = scaling.compute_optimal(GOPHER, fit=fit)
    assert n / 1e9 == pytest.approx(n_b, abs=0.05)
    assert d / 1e12 == pytest.approx(d_t, abs=0.005)
    assert d / n == pytest.approx(ratio, abs=0.05)
    assert 6 * n * d == pytest.approx(GOPHER, rel=1e-12)


@pytest.mark.parametrize("fit, n_frac, extra", [("hoffmann", 0.565, 0.130), ("besiroglu", 0.574, 0.148)])
def test_factcheck_claim15_double_tokens(fit, n_frac, extra):
    f, x = scaling.size_for_tokens(2.0, fit)
    assert f == pytest.approx(n_frac, abs=5e-4)
    assert x == pytest.approx(extra, abs=5e-4)


@pytest.mark.parametrize("fit, frac, k, extra", [
    ("hoffmann", 0.5, 2.42, 0.208), ("besiroglu", 0.5, 2.52, 0.259),
    ("hoffmann", 0.75, None, 0.028), ("besiroglu", 0.75, None, 0.034),
    ("hoffmann", 0.3, None, 1.06), ("besiroglu", 0.3, None, 1.61)])
def test_factcheck_claim15_smaller_model(fit, frac, k, extra):
    km, x = scaling.overtraining_cost(frac, fit)
    if k is not None:
        assert km == pytest.approx(k, abs=5e-3)
    assert x == pytest.approx(extra, abs=5e-3)


def test_seed_plus_33_percent_is_not_the_iso_loss_price():
    """The seed's '2x tokens costs +33%' is (2/3)·2 = 4/3: that model overshoots the target loss."""
    for fit in ("hoffmann", "besiroglu"):
        n, d = scaling.compute_optimal(GOPHER, fit)
        assert scaling.loss(2 / 3 * n, 2 * d, fit) < scaling.loss(n, d, fit)
        assert scaling.size_for_tokens(2.0, fit)[1] < 0.2


def test_overtraining_is_scale_free_and_iso_loss():
    for fit in ("hoffmann", "besiroglu"):
        k, extra = scaling.overtraining_cost(0.4, fit)
        for c in (1e20, 1e23, 1e26):
            n, d = scaling.compute_optimal(c, fit)
            assert scaling.loss(0.4 * n, k * d, fit) == pytest.approx(scaling.loss(n, d, fit), rel=1e-10)
            assert (0.4 * n * k * d) / (n * d) - 1 == pytest.approx(extra)


def test_size_for_tokens_inverts_overtraining_cost():
    for fit in ("hoffmann", "besiroglu"):
        for f in (0.2, 0.5, 0.9, 1.0, 2.0):
            k, extra = scaling.overtraining_cost(f, fit)
            f2, extra2 = scaling.size_for_tokens(k, fit)
            assert f2 == pytest.approx(f, rel=1e-9) and extra2 == pytest.approx(extra, rel=1e-6, abs=1e-12)


def test_too_small_model_cannot_reach_target():
    f_min = scaling.min_size_fraction("besiroglu")
    with pytest.raises(ValueError, match="size_fraction"):
        scaling.overtraining_cost(0.99 * f_min, "besiroglu")
    assert scaling.overtraining_cost(1.01 * f_min, "besiroglu")[0] > 100


@settings(max_examples=60, deadline=None)
@given(c=st.floats(1e15, 1e28), fit=st.sampled_from(["hoffmann", "besiroglu"]),
       t=st.floats(0.3, 3.0))
def test_optimum_beats_every_other_split(c, fit, t):
    """Property: on the line C = 6ND no other split has a lower predicted loss than N*."""
    n, d = scaling.compute_optimal(c, fit)
    assert 6 * n * d == pytest.approx(c, rel=1e-9)
    assert scaling.loss(n, d, fit) <= scaling.loss(n * t, d / t, fit) + 1e-12


@settings(max_examples=40, deadline=None)
@given(c=st.floats(1e18, 1e27), fit=st.sampled_from(["hoffmann", "besiroglu"]))
def test_exponent_a(c, fit):
    """N* ∝ C^a with a = β/(α+β): 10× compute multiplies N* by 10^a."""
    lf = scaling.FITS[fit]
    n1, _ = scaling.compute_optimal(c, fit)
    n2, _ = scaling.compute_optimal(10 * c, fit)
    assert n2 / n1 == pytest.approx(10 ** lf.a, rel=1e-9)


def test_headline_exponents():
    assert scaling.FITS["hoffmann"].a == pytest.approx(0.28 / 0.62)
    assert scaling.FITS["besiroglu"].a == pytest.approx(0.513, abs=5e-4)


# ------------------------------------------------------------------------ inference-aware
def test_inference_optimal_limits():
    for fit in ("hoffmann", "besiroglu"):
        none = scaling.inference_optimal(1e23, 0.0, fit)
        assert none["size_fraction"] == pytest.approx(1.0, abs=2e-3)
        assert none["saving_fraction"] == pytest.approx(0.0, abs=1e-6)
        n_star, d_star = scaling.compute_optimal(1e23, fit)
        prev = 1.0
        for ratio in (0.1, 1.0, 10.0, 100.0):
            r = scaling.inference_optimal(1e23, ratio * d_star, fit)
            assert r["size_fraction"] <= prev + 1e-12          # more inference → smaller model
            assert 0 <= r["saving_fraction"] < 1
            assert r["total_flops"] <= r["chinchilla_total_flops"]
            assert scaling.loss(r["n_params"], r["n_tokens"], fit) == pytest.approx(r["target_loss"], rel=1e-9)
            prev = r["size_fraction"]


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, name", [
    (lambda: scaling.compute_optimal(0), "compute"),
    (lambda: scaling.compute_optimal(-1e20), "compute"),
    (lambda: scaling.compute_optimal(float("nan")), "compute"),
    (lambda: scaling.compute_optimal(1e20, fit="kaplan"), "fit"),
    (lambda: scaling.loss(0, 1e9), "n_params"),
    (lambda: scaling.loss(1e9, -5), "n_tokens"),
    (lambda: scaling.loss(1e9, 1e9, fit="tokens_per_param"), "fit"),
    (lambda: scaling.overtraining_cost(0), "size_fraction"),
    (lambda: scaling.overtraining_cost(0.5, fit="tokens_per_param"), "fit"),
    (lambda: scaling.size_for_tokens(-2), "token_multiplier"),
    (lambda: scaling.inference_optimal(1e20, -1), "inference_tokens"),
    (lambda: scaling.inference_optimal(float("inf"), 1), "compute"),
])
def test_bad_input_names_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ------------------------------------------------------------------------- fitting
def test_fit_power_law_recovers_exponent():
    x = np.array([1e18, 1e19, 1e20, 1e21])
    coef, expo = scaling.fit_power_law(x, 0.3 * x ** 0.5)
    assert expo == pytest.approx(0.5) and coef == pytest.approx(0.3)
    with pytest.raises(ValueError):
        scaling.fit_power_law([1.0], [2.0])


def test_isoflop_minimum_of_a_parabola():
    n = np.array([1e4, 2e4, 4e4, 8e4, 1.6e5])
    losses = 2.0 + 0.3 * (np.log(n) - np.log(3e4)) ** 2
    assert scaling.isoflop_minimum(n, losses) == pytest.approx(3e4, rel=1e-6)
    with pytest.raises(ValueError):
        scaling.isoflop_minimum(n, 2.0 - 0.3 * (np.log(n) - np.log(3e4)) ** 2)


def test_fit_loss_recovers_a_known_law():
    """Synthetic IsoFLOP data from a known law (plus 0.2% noise): the Huber/L-BFGS fit recovers
    the compute-optimal exponent a and reproduces the losses."""
    true = scaling.LossFit("true", 0.8, 60.0, 300.0, 0.4, 0.45)
    rng = np.random.default_rng(0)
    n, d = [], []
    for c in (1e10, 1e11, 1e12, 1e13):
        for t in np.geomspace(0.1, 10, 7):
            n0, _ = true.optimum(c)
            n.append(n0 * t)
            d.append(c / (6 * n0 * t))
    n, d = np.array(n), np.array(d)
    y = true.loss(n, d) * np.exp(rng.normal(0, 0.002, n.size))
    got = scaling.fit_loss(n, d, y)
    assert got.a == pytest.approx(true.a, abs=0.03)
    assert np.max(np.abs(got.loss(n, d) / y - 1)) < 0.01


# ------------------------------------------------------------------------- the calculator widget
def test_scaling_calculator_callback():
    from course_lib import flops
    for c, fit in ((1e21, "tokens_per_param"), (5.76e23, "hoffmann"), (1e25, "besiroglu")):
        r = explore.scaling_calculator(c, fit, gpu="H100-SXM", n_gpus=1024, mfu=0.4)
        n, d = scaling.compute_optimal(c, fit)
        assert (r["n_params"], r["n_tokens"]) == (n, d)
        assert r["days"] == pytest.approx(flops.training_days(n, d, 1024, 0.4, "H100-SXM"))
        assert r["days"] == pytest.approx(c / (1024 * 989e12 * 0.4) / 86400)
        assert r["loss"] == pytest.approx(scaling.loss(n, d, r["loss_fit"]))
        assert "days on 1024" in explore.render_scaling(r)
    slow = explore.scaling_calculator(1e24, "besiroglu", gpu="A100", n_gpus=512, mfu=0.4)
    fast = explore.scaling_calculator(1e24, "besiroglu", gpu="H100-SXM", n_gpus=1024, mfu=0.4)
    assert slow["days"] / fast["days"] == pytest.approx(2 * 989 / 312)
    for kwargs, name in ((dict(compute=-1), "compute"), (dict(compute=1e20, fit="kaplan"), "fit"),
                         (dict(compute=1e20, mfu=45), "mfu"), (dict(compute=1e20, gpu="H900"), "gpu")):
        with pytest.raises(ValueError, match=name):
            explore.scaling_calculator(**kwargs)


def test_widget_wrapper_calls_the_callback_on_change():
    import ipywidgets as w

    from course_lib import widgets
    seen = []

    def callback(x, y):
        seen.append((x, y))
        return {"sum": x + y}

    controls = {"x": w.IntSlider(value=1), "y": w.IntSlider(value=2)}
    box = widgets.interactive(callback, controls, render=lambda r: f"sum = {r['sum']}")
    controls["x"].value = 5
    assert seen[0] == (1, 2) and seen[-1] == (5, 2)
    assert isinstance(box, w.VBox)
    assert isinstance(explore.scaling_widget(), w.VBox)


def test_static_table_and_figure():
    import matplotlib.pyplot as plt

    from course_lib import widgets
    table = widgets.static_table(explore.scaling_calculator, [dict(compute=5.76e23, fit="besiroglu")],
                                 {"n_params": "N*", "tokens_per_param": ("D/N", ".1f")})
    assert table.splitlines()[2] == "| 72.2B | 18.4 |"
    fig = explore.isoflop_figure(5.76e23)
    assert len(fig.axes[0].lines) >= 5
    plt.close(fig)


# ------------------------------------------------------------------------- question bank
def test_question_bank_matches_library():
    from course_lib.checks import ch02_scaling as bank
    q = {x.qid: x for x in bank.QUESTIONS}
    assert q["n_rule_1e24"].reference() == pytest.approx(math.sqrt(1e24 / 120))
    assert q["d_rule_1e24"].reference() == pytest.approx(math.sqrt(20 * 1e24 / 6))
    lf = scaling.FITS["besiroglu"]
    G = (lf.alpha * lf.A / (lf.beta * lf.B)) ** (1 / (lf.alpha + lf.beta))
    assert q["n_besiroglu_1e24"].reference() == pytest.approx(G * (1e24 / 6) ** lf.a)
    assert q["loss_llama3_8b"].reference() == pytest.approx(
        1.8172 + 482.01 / 8.03e9 ** 0.3478 + 2085.43 / 15e12 ** 0.3658)
    assert q["overhead_half_besiroglu"].reference() == pytest.approx(0.259, abs=5e-4)
    assert q["tpp_llama3_405b"].reference() == pytest.approx(38.5, abs=0.05)
    assert 0.45 < q["exponent_from_points"].reference() < 0.55
    # the mistakes the bank recognises really are different answers
    assert not q["overhead_half_besiroglu"].grade(1 / 3).correct
    assert "+33%" in q["overhead_half_besiroglu"].grade(1 / 3).message
    assert "α and β" in q["loss_llama3_8b"].grade(
        1.8172 + 482.01 / 8.03e9 ** 0.3658 + 2085.43 / 15e12 ** 0.3478).message
    assert "2ND" in q["n_rule_1e24"].grade(math.sqrt(1e24 / 40)).message
    assert "dropped the 6" in q["d_rule_1e24"].grade(math.sqrt(6) * math.sqrt(20 * 1e24 / 6)).message
