"""Graded questions of chapter 9, "The economics of distillation". References come from
course_lib.distill (the cost model and the information measures)."""
from __future__ import annotations

import math

from course_lib import distill, hardware
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import msg

P_OUT, P_IN = 25.0, 5.0                       # Claude Opus 4.6, $/MTok (factcheck claim 6)
TEACHER = (70e9, 15e12)                       # a 70B teacher on 15T tokens
GPU_PRICE, MFU = 2.0, 0.4                     # assumed $/H100-hour and MFU, stated in the prompts
TEACHER_P = (0.6, 0.25, 0.1, 0.05)            # next-token distributions over a 4-token vocabulary
STUDENT_Q = (0.4, 0.3, 0.2, 0.1)
TOP5_LOGPROBS = (-0.35, -1.9, -2.6, -3.3, -3.9)

_H100_SPARSE = 1979e12 / hardware.get_accelerator("H100-SXM").peak("bf16")


def _pretrain() -> float:
    return distill.pretraining_cost(*TEACHER, GPU_PRICE, MFU, "H100-SXM")


def _break_even() -> float:
    return distill.break_even_tokens(_pretrain(), P_OUT, batch_discount=0.5)


def _grade_kl_fn(fn, draw) -> tuple[float, str]:
    """Run the student's ``kl(p, q)`` on cases with zeros, infinities and unequal distributions,
    and on two pairs drawn from ``draw`` (seeded per graded run)."""
    cases = [((0.5, 0.5), (0.9, 0.1)), (TEACHER_P, STUDENT_Q), ((1.0, 0.0, 0.0), (0.2, 0.3, 0.5)),
             ((0.0, 0.3, 0.7), (0.1, 0.2, 0.7)), ((0.25,) * 4, (0.25,) * 4), ((0.5, 0.5), (1.0, 0.0))]
    for k in draw.integers(3, 7, size=2):
        cases.append(tuple(tuple(float(v) for v in draw.dirichlet([1.0] * int(k))) for _ in range(2)))
    passed, notes = 0, []
    for p, q in cases:
        ref = distill.kl_divergence(p, q)
        try:
            got = float(fn(list(p), list(q)))
        except (ValueError, ZeroDivisionError) as e:
            notes.append(msg("kl({p}, {q}) raised {error}: skip terms with p = 0 before taking the log, "
                             "and return math.inf when q = 0 where p > 0", p=p, q=q,
                             error=f"{type(e).__name__} ({e})"))
            continue
        if (math.isinf(ref) and math.isinf(got) and got > 0) or (
                math.isfinite(ref) and math.isclose(got, ref, rel_tol=1e-6, abs_tol=1e-9)):
            passed += 1
        elif math.isinf(ref):
            notes.append(msg("kl({p}, {q}) should be inf: q puts zero mass where p does not", p=p, q=q))
        elif math.isnan(got):
            notes.append(msg("kl({p}, {q}) gave nan: a term with p = 0 contributes 0 (0·log 0 = 0), skip it",
                             p=p, q=q))
        elif math.isclose(got, distill.kl_divergence(q, p), rel_tol=1e-6):
            notes.append("that is KL(q‖p): the sum is over p·log(p/q), weighted by the teacher p")
        elif math.isclose(got, ref / math.log(2), rel_tol=1e-6):
            notes.append("that is in bits (log2); use the natural log (nats)")
        else:
            notes.append(msg("kl({p}, {q}) = {got:.4g} is not KL(p‖q) = Σ p·ln(p/q)", p=p, q=q, got=got))  # drawn case: no reference
    return passed / len(cases), (notes[0] if notes else "")


QUESTIONS = [
    Question(
        "cost_1t_list", points=1, unit="USD",
        prompt="The seed's estimate: 1e12 output tokens of Claude Opus 4.6 at $25 per million output tokens. "
               "Dollars?",
        expected=lambda: distill.api_cost(1e12, P_OUT), rtol=0.01,
        mistakes=[Mistake.ratio(1e6, "A million times too much: the price is per million tokens (MTok), "
                                     "so divide the token count by 1e6."),
                  Mistake.ratio(1e3, "A thousand times too much: the price is per million tokens, not per thousand."),
                  Mistake.ratio(P_IN / P_OUT, "That is the input price ($5/MTok); generated tokens are billed "
                                              "at the output price ($25/MTok).")],
        hint="tokens / 1e6 × price per MTok.",
    ),
    Question(
        "cost_1t_batch", points=2, unit="USD",
        prompt="Same 1e12 output tokens, plus the prompts: 2e11 input tokens at $5/MTok. Everything goes through "
               "the Batch API (50% off the whole bill). Dollars?",
        expected=lambda: distill.api_cost(1e12, P_OUT, 2e11, P_IN, batch_discount=0.5), rtol=0.01,
        mistakes=[Mistake.ratio(2.0, "Twice the answer: you left out the 50% batch discount."),
                  Mistake.equals(distill.api_cost(1e12, P_OUT, batch_discount=0.5),
                                 "You left out the input (prompt) tokens: 2e11 × $5/MTok before the discount.",
                                 rtol=0.01),
                  Mistake.equals(distill.api_cost(1e12, P_OUT, batch_discount=0.5) + 2e11 * P_IN / 1e6,
                                 "The batch discount applies to input tokens too, not only to output.", rtol=0.01),
                  Mistake.ratio(1.5, "You applied the discount as ×1.5; 50% off means paying ×0.5.")],
        hint="(output × $25 + input × $5) / 1e6, then × (1 − 0.5).",
    ),
    Question(
        "cost_hidden_reasoning", points=2, unit="USD",
        prompt="A reasoning model thinks 3 hidden tokens for every token it returns, and hidden tokens are "
               "billed as output ($25/MTok) but never returned. You need 1e11 returned tokens to train on; batch "
               "API (50% off); ignore input. Dollars?",
        expected=lambda: distill.distillation_cost(1e11, P_OUT, hidden_per_visible=3.0,
                                                   batch_discount=0.5)["total_dollars"], rtol=0.01,
        mistakes=[Mistake.ratio(0.25, "A quarter of the answer: you paid only for the returned tokens; "
                                      "the 3 hidden tokens per returned token are billed too (×4)."),
                  Mistake.ratio(0.75, "You billed 3× the returned tokens; the bill is returned + hidden = 1 + 3 = "
                                      "4 tokens per usable token."),
                  Mistake.ratio(2.0, "Twice the answer: apply the 50% batch discount.")],
        hint="Billed output = returned × (1 + hidden per returned).",
    ),
    Question(
        "pretrain_70b", points=2, unit="USD",
        prompt="Pretraining a teacher of 70e9 parameters on 15e12 tokens on H100 SXM (dense BF16 peak 989e12 "
               "FLOP/s) at 40% MFU, with an ASSUMED rental price of $2.00 per GPU-hour. Dollars of GPU time?",
        expected=_pretrain, rtol=0.02,
        mistakes=[Mistake.ratio(1 / _H100_SPARSE, "About half: you used the 2:4-sparsity peak (1979 TFLOP/s); "
                                                  "the dense BF16 peak is 989 TFLOP/s."),
                  Mistake.ratio(1 / 3, "A third of the answer: training costs 6ND FLOP (forward 2N + backward 4N), "
                                       "not 2ND."),
                  Mistake.ratio(3600, "3600× too much: you priced GPU-seconds; the price is per GPU-hour."),
                  Mistake.ratio(1 / 24, "24× too little: did you convert seconds to days instead of hours?"),
                  Mistake.ratio(0.01, "100× too little: MFU 40% is 0.4, not 40.")],
        hint="GPU-hours = 6·N·D / (989e12 × 0.4) / 3600; dollars = GPU-hours × 2.",
    ),
    Question(
        "break_even_tokens", points=2, unit="tokens",
        prompt="At what volume of output tokens does buying them at $25/MTok with the 50% batch discount "
               "(ignore input) cost as much as the pretraining run of the previous question? Tokens?",
        expected=_break_even, rtol=0.02,
        mistakes=[Mistake.ratio(0.5, "Half the answer: with the batch discount a token costs $12.5/MTok, "
                                     "so the same money buys twice as many."),
                  Mistake.ratio(1e-6, "That is millions of tokens (MTok); give the plain token count."),
                  Mistake.ratio(1 / 3, "A third: your pretraining cost used 2ND instead of 6ND.")],
        hint="tokens = pretraining dollars / (dollars per token), with dollars per token = 12.5 / 1e6.",
    ),
    Question(
        "kl_teacher_student", points=2, unit="nats",
        prompt="Teacher next-token distribution p = (0.6, 0.25, 0.1, 0.05), student q = (0.4, 0.3, 0.2, 0.1). "
               "KL(p ‖ q) in nats?",
        expected=lambda: distill.kl_divergence(TEACHER_P, STUDENT_Q), rtol=1e-3,
        mistakes=[Mistake.equals(distill.kl_divergence(STUDENT_Q, TEACHER_P), "That is KL(q ‖ p), the reverse "
                                 "direction; distillation's forward KL weights log(p/q) by the teacher's p.",
                                 rtol=1e-3),
                  Mistake.ratio(1 / math.log(2), "That is in bits (log base 2); use the natural log for nats."),
                  Mistake.equals(distill.cross_entropy(TEACHER_P, STUDENT_Q), "That is the cross-entropy H(p, q); "
                                 "KL subtracts the teacher's entropy H(p).", rtol=1e-3)],
        hint="Σ p·log(p/q) over the four tokens.",
    ),
    Question(
        "ce_minus_kl", points=1, unit="nats",
        prompt="Same p and q: cross-entropy H(p, q) minus KL(p ‖ q), in nats. (Why do the two losses give the "
               "student identical gradients?)",
        expected=lambda: distill.entropy(TEACHER_P), rtol=1e-3,
        mistakes=[Mistake.equals(distill.entropy(STUDENT_Q), "That is the student's entropy H(q); the "
                                 "difference is the teacher's entropy H(p), which does not depend on the student.",
                                 rtol=1e-3),
                  Mistake.ratio(1 / math.log(2), "That is in bits; use nats.")],
        hint="H(p, q) = H(p) + KL(p ‖ q).",
        explanation="H(p, q) − KL(p‖q) = H(p), the teacher's entropy: a constant for the student, so both "
                    "losses have the same gradient.",
    ),
    Question(
        "topk_tail_mass", points=1, unit="fraction",
        prompt="An API returns the top-5 log-probabilities (natural log) at one position: "
               + ", ".join(f"{v}" for v in TOP5_LOGPROBS) + ". What fraction of the teacher's probability "
               "mass is NOT in these 5 tokens?",
        expected=lambda: 1.0 - sum(math.exp(v) for v in TOP5_LOGPROBS), rtol=0.01,
        mistakes=[Mistake.equals(sum(math.exp(v) for v in TOP5_LOGPROBS), "That is the mass the top 5 carry; "
                                 "the question asks for the rest, 1 minus it.", rtol=0.01),
                  Mistake.equals(1.0 - sum(2.0 ** v for v in TOP5_LOGPROBS), "You used 2**logprob; "
                                 "log-probabilities are natural logs, so use exp.", rtol=0.01)],
        hint="p = exp(logprob); the tail is 1 − Σ p.",
    ),
    Question(
        "kl_function", points=2,
        prompt="Write kl(p, q) -> KL(p ‖ q) in nats for two probability lists of equal length. Terms with p = 0 "
               "contribute 0; return float('inf') when q = 0 where p > 0.",
        grader=_grade_kl_fn,
        hint="Loop over pairs; skip p = 0; if q = 0 (and p > 0) return math.inf.",
    ),
]
