"""Graded questions of chapter 2, "Chinchilla scaling". References come from course_lib.scaling."""
from __future__ import annotations

import math

import numpy as np

from course_lib import scaling
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import msg

BUDGET = 1e24
LLAMA3_8B = (8.03e9, 15e12)
# IsoFLOP minima of a (made-up but realistic) sweep: compute (FLOP) -> loss-minimising N.
POINTS_C = (6e18, 3e19, 1e20, 3e20, 1e21, 3e21)
POINTS_N = (2.9e8, 5.6e8, 1.1e9, 1.8e9, 3.6e9, 5.9e9)

_HOF, _BES = scaling.FITS["hoffmann"], scaling.FITS["besiroglu"]


def _swapped(fit: scaling.LossFit) -> scaling.LossFit:
    """The same fit with α and β exchanged: the classic slip."""
    return scaling.LossFit(fit.name + " (α↔β)", fit.E, fit.A, fit.B, fit.beta, fit.alpha)


def _n_star(compute: float, fit) -> float:
    return scaling.compute_optimal(compute, fit)[0]


def _exponent_b(fit: scaling.LossFit, compute: float) -> float:
    """N* computed with the data exponent b = α/(α+β) instead of a = β/(α+β)."""
    return fit.G * (compute / 6) ** (fit.alpha / (fit.alpha + fit.beta))


_TWO_ND = "you used C = 2ND (forward only); training costs 6ND (forward 2N + backward 4N per token)."
_NO_SIX = "you dropped the 6: with D = 20N the budget is C = 6·N·20N = 120·N², not 20·N²."


def _grade_power_law_fn(fn, draw: np.random.Generator) -> tuple[float, str]:
    """Run the student's ``fn(x, y) -> (coef, exponent)`` on three fixed synthetic data sets and
    one drawn from ``draw`` (seeded per graded run)."""
    rng = np.random.default_rng(2)
    lo, sign = draw.uniform(0, 20), draw.choice([-1.0, 1.0])
    cases = [(np.array([1.0, 10.0, 100.0, 1000.0]), 3.0, 0.5, 0.0),
             (np.geomspace(1e18, 1e23, 9), 0.08, 0.51, 0.0),
             (np.geomspace(1e3, 1e6, 12), 4e2, -0.34, 0.05),
             (np.geomspace(10 ** lo, 10 ** (lo + draw.uniform(2, 5)), int(draw.integers(5, 15))),
              10 ** draw.uniform(-2, 3), sign * draw.uniform(0.1, 0.7), 0.0)]
    passed, notes = 0, []
    for x, coef, expo, noise in cases:
        y = coef * x ** expo * np.exp(noise * rng.standard_normal(x.size))
        got = fn(x.copy(), y.copy())
        ref = scaling.fit_power_law(x, y)
        try:
            c, e = (float(v) for v in got)
        except (TypeError, ValueError):
            return 0.0, msg("return a pair (coef, exponent); got {type}", type=type(got).__name__)
        if math.isclose(e, ref[1], rel_tol=1e-3) and math.isclose(c, ref[0], rel_tol=1e-2):
            passed += 1
        elif math.isclose(c, ref[1], rel_tol=1e-3) and math.isclose(e, ref[0], rel_tol=1e-2):
            notes.append("you returned (exponent, coef); the order is (coef, exponent)")
        elif math.isclose(e, ref[1], rel_tol=1e-3) and math.isclose(c, math.log(ref[0]), rel_tol=1e-2):
            notes.append("your coef is log(coef): exponentiate the intercept of the log-log line")
        else:
            notes.append(msg("your exponent {e:.4g} is not the least-squares one: fit a straight line to "
                             "(log x, log y), not a curve to (x, y)", e=e))  # a drawn case: no reference shown
    return passed / len(cases), (notes[0] if notes else "")


QUESTIONS = [
    Question(
        "n_rule_1e24", points=1, unit="parameters",
        prompt="Compute budget C = 1e24 FLOP, rule of thumb D = 20N. Compute-optimal parameters N?",
        expected=lambda: scaling.compute_optimal(BUDGET, "tokens_per_param")[0], rtol=0.01,
        mistakes=[Mistake.ratio(math.sqrt(3), "√3 too large: " + _TWO_ND),
                  Mistake.ratio(math.sqrt(6), "√6 too large: " + _NO_SIX),
                  Mistake.ratio(20, "20× too large: that is D, the number of tokens, not N.")],
        hint="C = 6·N·D with D = 20·N gives C = 120·N².",
    ),
    Question(
        "d_rule_1e24", points=1, unit="tokens",
        prompt="Same budget and rule: compute-optimal training tokens D?",
        expected=lambda: scaling.compute_optimal(BUDGET, "tokens_per_param")[1], rtol=0.01,
        mistakes=[Mistake.ratio(math.sqrt(3), "√3 too large: " + _TWO_ND),
                  Mistake.ratio(math.sqrt(6), "√6 too large: " + _NO_SIX),
                  Mistake.ratio(1 / 20, "20× too small: that is N, not D = 20·N.")],
        hint="D = 20·N = √(20·C/6).",
    ),
    Question(
        "n_besiroglu_1e24", points=2, unit="parameters",
        prompt="C = 1e24 FLOP, Besiroglu et al. fit (E=1.8172, A=482.01, B=2085.43, α=0.3478, β=0.3658). "
               "Compute-optimal N* from the closed form N* = G·(C/6)^(β/(α+β)), G = (αA/(βB))^(1/(α+β)).",
        expected=lambda: _n_star(BUDGET, "besiroglu"), rtol=0.01,
        mistakes=[Mistake.equals(_n_star(BUDGET, "hoffmann"), "That is N* under Hoffmann's printed constants "
                                 "(A=406.4, B=410.7, α=0.34, β=0.28); the question asks for the Besiroglu refit.",
                                 rtol=0.01),
                  Mistake.equals(_n_star(BUDGET, _swapped(_BES)), "You exchanged α and β: α belongs to the "
                                 "parameter term A/N^α, β to the data term B/D^β.", rtol=0.01),
                  Mistake.equals(_exponent_b(_BES, BUDGET), "You used the exponent α/(α+β), which belongs "
                                 "to D*; N* grows as (C/6)^(β/(α+β)).", rtol=0.01),
                  Mistake.ratio(6 ** _BES.a, "Too large by 6^a: the closed form uses C/6 = N·D, not C.")],
        hint="Evaluate G first, then raise C/6 to a = β/(α+β).",
    ),
    Question(
        "ratio_hoffmann_1e24", points=1, unit="tokens/parameter",
        prompt="C = 1e24 FLOP, Hoffmann's printed constants (E=1.69, A=406.4, B=410.7, α=0.34, β=0.28): "
               "tokens per parameter D*/N* at the optimum?",
        expected=lambda: (lambda n, d: d / n)(*scaling.compute_optimal(BUDGET, "hoffmann")), rtol=0.01,
        mistakes=[Mistake.equals(20.0, "20 is the rule of thumb; the printed constants give a different, "
                                       "budget-dependent ratio (that is the point of the question).", rtol=0.01),
                  Mistake.ratio(1 / ((lambda n, d: d / n)(*scaling.compute_optimal(BUDGET, "hoffmann"))) ** 2,
                                "You gave N*/D*, the inverse ratio.")],
        hint="Compute N* from the closed form, then D* = C/(6·N*).",
    ),
    Question(
        "loss_llama3_8b", points=2, unit="nats/token",
        prompt="Predicted final loss (nats/token) of Llama 3 8B — N = 8.03e9 parameters on D = 15e12 tokens — "
               "under the Besiroglu fit L = E + A/N^α + B/D^β.",
        expected=lambda: scaling.loss(*LLAMA3_8B, "besiroglu"), rtol=0.002,
        mistakes=[Mistake.equals(scaling.loss(*LLAMA3_8B, "hoffmann"), "That is the Hoffmann printed fit; "
                                 "use the Besiroglu constants.", rtol=0.002),
                  Mistake.equals(float(_swapped(_BES).loss(*LLAMA3_8B)), "You exchanged α and β: A/N^α is the "
                                 "parameter term, B/D^β the data term.", rtol=0.002),
                  Mistake.equals(float(_BES.loss(*LLAMA3_8B) - _BES.E), "You left out E, the irreducible loss.",
                                 rtol=0.002)],
        hint="Plug N and D in directly; keep them as plain counts (8.03e9, 15e12).",
    ),
    Question(
        "overhead_half_besiroglu", points=2, unit="fraction",
        prompt="Besiroglu fit: a model of half the compute-optimal size (N = 0.5·N*) is trained to the same "
               "loss as the compute-optimal model. Extra training compute, as a fraction (0.1 = +10%)?",
        expected=lambda: scaling.overtraining_cost(0.5, "besiroglu")[1], rtol=0.01,
        mistakes=[Mistake.equals(1 / 3, "+33% is the source notes' bookkeeping (2/3 of the model on 2× the "
                                 "tokens); at equal loss half the model needs k·D* tokens with "
                                 "k^(−β) = 1 + (β/α)(1 − 0.5^(−α)).", rtol=0.01),
                  Mistake.equals(scaling.overtraining_cost(0.5, "besiroglu")[0], "That is the token multiplier "
                                 "D/D*; the compute ratio is 0.5·D/D*, and the extra fraction that minus 1.",
                                 rtol=0.01),
                  Mistake.ratio(100, "That is a percentage; give a fraction."),
                  Mistake.equals(1 + scaling.overtraining_cost(0.5, "besiroglu")[1], "That is the compute "
                                 "ratio; the question asks for the extra fraction (ratio − 1).", rtol=0.01),
                  Mistake.equals(scaling.overtraining_cost(0.5, "hoffmann")[1], "That is the Hoffmann fit's "
                                 "answer; use the Besiroglu exponents.", rtol=0.01),
                  Mistake.equals(scaling.overtraining_cost(0.5, _swapped(_BES))[1], "You exchanged α and β.",
                                 rtol=0.01)],
        hint="At the optimum αA/N*^α = βB/D*^β, so equal loss gives (D/D*)^(−β) = 1 + (β/α)(1 − f^(−α)).",
    ),
    Question(
        "tpp_llama3_405b", points=1, unit="tokens/parameter",
        prompt="Tokens per parameter of Llama 3 405B (405e9 parameters, 15.6e12 tokens).",
        expected=lambda: 15.6e12 / 405e9, rtol=0.01,
        mistakes=[Mistake.ratio(1 / (15.6e12 / 405e9) ** 2, "You divided parameters by tokens."),
                  Mistake.ratio(1e-3, "Off by 1000: 15.6T is 15.6e12 tokens, 405B is 405e9 parameters.")],
        hint="Tokens divided by parameters; Chinchilla-optimal is about 20.",
    ),
    Question(
        "power_law_fn", points=2,
        prompt="Write fit(x, y) -> (coef, exponent) returning the least-squares power law y ≈ coef·x^exponent "
               "(a straight line through (log x, log y)).",
        grader=_grade_power_law_fn,
        hint="np.polyfit(np.log(x), np.log(y), 1) gives (slope, intercept); coef = exp(intercept).",
    ),
    Question(
        "exponent_from_points", points=2, unit="exponent",
        prompt="IsoFLOP minima C = " + ", ".join(f"{c:.0e}" for c in POINTS_C) + " FLOP gave N_opt = "
               + ", ".join(f"{n:.2g}" for n in POINTS_N) + ". Fit N_opt ∝ C^a: the exponent a?",
        expected=lambda: scaling.fit_power_law(POINTS_C, POINTS_N)[1], rtol=0.01,
        mistakes=[Mistake.equals(1 - scaling.fit_power_law(POINTS_C, POINTS_N)[1], "That is 1 − a, the exponent "
                                 "of D_opt = C/(6·N_opt); the question asks for N_opt's.", rtol=0.01),
                  Mistake.equals(float(np.polyfit(POINTS_C, POINTS_N, 1)[0]), "That is the slope of a line in "
                                 "linear space; fit log N against log C.", rtol=0.01)],
        hint="Use your fit() from the previous question on (C, N_opt).",
    ),
]
