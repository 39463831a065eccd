"""Graded questions of chapter 16, "The batch size, measured". References come from
course_lib.batch: ``noise_scale`` (McCandlish et al. App. A.1), ``pareto_fit`` (the front
(S/S_min − 1)(E/E_min − 1) = 1), ``dp_ceiling`` / ``gpus_allowed`` on Kaplan et al.'s B_crit(L), and
the µP rules ``batch.muparam`` checks against Microsoft's mup."""
from __future__ import annotations

import math

from course_lib import batch, comm
from course_lib.grading import Mistake, Question

# Q1/Q2: squared norms of gradients averaged over 8 and over 128 sequences (|G|² = 0.2, tr Σ = 10)
SMALL, BIG = dict(sq=1.45, b=8), dict(sq=0.278125, b=128)
# Q3/Q4: steps to one target loss at each batch size (sequences), each at its tuned learning rate
PARETO = dict(batch_sizes=[8, 16, 32, 64, 128, 256], steps=[2130, 1180, 760, 520, 415, 352])
# Q5/Q6: a run at loss 2.0 nats/token (Kaplan's law), sequences of 8192 tokens, TP 8 and 4 stages
CEIL = dict(loss=2.0, seq_len=8192, tp=8, pp=4)
# Q7/Q8: Adam tuned at width 256 (lr 2^-7, hidden init std 0.02), transferred to width 2048 under µP
MUP = dict(base=256, width=2048, lr=2.0 ** -7, std=0.02)


def _parts() -> tuple[float, float]:
    from course_lib.batch import noise
    return noise.noise_parts(SMALL["sq"], SMALL["b"], BIG["sq"], BIG["b"])


QUESTIONS = [
    Question(
        "b_simple", points=2, unit="sequences",
        prompt="Gradients averaged over 8 sequences have a mean squared norm of 1.45; over 128 sequences, "
               "0.278125. The gradient noise scale B_simple.",
        expected=lambda: batch.noise_scale(SMALL["sq"], SMALL["b"], BIG["sq"], BIG["b"]), rtol=0.01,
        mistakes=[Mistake.equals(_parts()[1] / BIG["sq"], "You divided tr(Σ) by the big batch's |G_128|², which "
                                 "still holds noise tr(Σ)/128: use the unbiased |G|² of both batches.", rtol=1e-3),
                  Mistake.predicate(lambda a, e: math.isclose(float(a) * float(e), 1.0, rel_tol=1e-3),
                                    "That is |G|²/tr(Σ), the inverse: B_simple = tr(Σ)/|G|².")],
        hint="|G|² = (128·|G_128|² − 8·|G_8|²)/(128 − 8); tr(Σ) = (|G_8|² − |G_128|²)/(1/8 − 1/128).",
    ),
    Question(
        "trace_sigma", points=1, unit="squared gradient norm",
        prompt="From the same two numbers, the trace of the per-sequence gradient covariance, tr(Σ).",
        expected=lambda: _parts()[1], rtol=0.01,
        mistakes=[Mistake.equals(SMALL["sq"] - BIG["sq"], "That is only the difference of the squared norms: divide "
                                 "it by 1/8 − 1/128, the difference of the noise's weights.", rtol=1e-3),
                  Mistake.equals(SMALL["sq"] * SMALL["b"], "8·|G_8|² still counts the true gradient 8 times: "
                                 "subtract the big batch's share.", rtol=1e-3)],
        hint="E|G_B|² = |G|² + tr(Σ)/B at both batch sizes: two equations, two unknowns.",
    ),
    Question(
        "pareto_b_crit", points=2, unit="sequences",
        prompt="Steps to a target loss at batch sizes [8, 16, 32, 64, 128, 256] sequences were "
               "[2130, 1180, 760, 520, 415, 352]. Fit (S/S_min − 1)(E/E_min − 1) = 1 (E = B·S): B_crit.",
        expected=lambda: batch.pareto_fit(**PARETO)[2], rtol=0.05,
        mistakes=[Mistake.predicate(lambda a, e: math.isclose(float(a) * float(e), 1.0, rel_tol=0.05),
                                    "That is S_min/E_min, the inverse: B_crit = E_min/S_min."),
                  Mistake.equals(8, "8 is the batch with the fewest examples, E_min's side of the front, not "
                                    "the knee between the two regimes.", rtol=0),
                  Mistake.equals(256, "256 is the largest batch you ran; B_crit is where the steps are twice "
                                      "their minimum.", rtol=0)],
        hint="S = S_min + E_min/B is a straight line in 1/B: fit it, then B_crit = E_min/S_min.",
    ),
    Question(
        "pareto_s_min", points=1, unit="steps",
        prompt="From the same fit, S_min: the fewest steps any batch size could take to that loss.",
        expected=lambda: batch.pareto_fit(**PARETO)[0], rtol=0.05,
        mistakes=[Mistake.equals(352, "That is the steps of your largest batch: S only approaches S_min as "
                                      "B grows; extrapolate the fit to 1/B = 0.", rtol=0.005)],
        hint="The intercept of S against 1/B.",
    ),
    Question(
        "dp_replicas", points=1, unit="replicas",
        prompt="Kaplan et al.'s B_crit(L) = 2e8/L^(1/0.21) tokens at loss 2.0, sequences of 8192 tokens: the "
               "most data-parallel replicas (one sequence each, no pipeline).",
        expected=lambda: batch.dp_ceiling(CEIL["loss"], CEIL["seq_len"]), rtol=0, atol=0.5,
        mistakes=[Mistake.equals(batch.critical_batch_tokens(CEIL["loss"]), "That is B_crit in tokens: divide "
                                 "by the sequence length.", rtol=1e-3),
                  Mistake.equals(2e8 / CEIL["loss"] ** 0.21 / CEIL["seq_len"], "The exponent is 1/α_B = 1/0.21, "
                                 "not α_B.", rtol=1e-3)],
        hint="floor(B_crit / seq_len), with B_crit = 2e8 / 2.0^(1/0.21).",
    ),
    Question(
        "gpus_allowed", points=2, unit="GPUs",
        prompt="The same batch, now with tensor parallelism 8 and a pipeline of 4 stages (each pipeline needs "
               "at least 4 microbatches of one sequence). How many GPUs does the batch keep busy?",
        expected=lambda: batch.gpus_allowed(CEIL["loss"], CEIL["seq_len"], tp=CEIL["tp"], pp=CEIL["pp"]),
        rtol=0, atol=0.5,
        mistakes=[Mistake.equals(batch.dp_ceiling(CEIL["loss"], CEIL["seq_len"]) * CEIL["tp"] * CEIL["pp"],
                                 "The pipeline's microbatches come out of the same batch: each pipeline "
                                 "takes pp sequences, so divide B_crit by seq_len·pp first.", rtol=0),
                  Mistake.equals(batch.dp_ceiling(CEIL["loss"], CEIL["seq_len"]) * CEIL["tp"],
                                 "That leaves the pipeline out: the stages are GPUs too.", rtol=0),
                  Mistake.equals(comm.max_dp_degree(batch.critical_batch_tokens(CEIL["loss"]),
                                                    CEIL["seq_len"] * CEIL["pp"]),
                                 "That is the number of pipelines (replicas); each holds tp·pp GPUs.", rtol=0)],
        hint="floor(B_crit/(seq_len·pp)) replicas, each of tp·pp GPUs.",
    ),
    Question(
        "mup_lr", points=2, unit="learning rate",
        prompt="Adam's learning rate was tuned to 2^-7 at width 256. Under µP, the learning rate of a hidden "
               "matrix (both dimensions grow with width, e.g. the MLP's up projection) at width 2048.",
        expected=lambda: MUP["lr"] * MUP["base"] / MUP["width"], rtol=1e-6,
        mistakes=[Mistake.ratio(MUP["width"] / MUP["base"], "That is the rate for an embedding or a bias "
                                "(vector-like, unchanged): hidden matrices divide it by the width multiplier."),
                  Mistake.ratio((MUP["width"] / MUP["base"]) ** 2, "Multiplied instead of divided: wider "
                                "matrices take smaller Adam steps."),
                  Mistake.ratio((MUP["width"] / MUP["base"]) ** 0.5, "That is √m, the initial std's factor; "
                                "Adam's learning rate scales by 1/m.")],
        hint="m = 2048/256; hidden matrices get lr/m under Adam.",
    ),
    Question(
        "mup_std", points=1, unit="std",
        prompt="At width 256 the hidden matrices start with std 0.02. Under µP, their initial std at width 2048.",
        expected=lambda: MUP["std"] * (MUP["width"] / MUP["base"]) ** -0.5, rtol=1e-6,
        mistakes=[Mistake.ratio((MUP["width"] / MUP["base"]) ** -0.5, "Divided by m, not √m: the variance "
                                "goes as 1/fan_in, the std as its square root."),
                  Mistake.ratio((MUP["width"] / MUP["base"]) ** 0.5, "Unchanged: that is the standard "
                                "parametrization's fixed 0.02; µP scales it by 1/√m.")],
        hint="std = 0.02/√m with m = 2048/256.",
    ),
]
