"""Graded questions of chapter 6, "Training-loop stability".

References come from course_lib.stability: the spike rule of ``spikes.detect_spikes`` applied to a
real loss trace from the shipped cache (``data/stability_ablation.json``), ``spikes.plan_rollback``,
the dynamic loss-scale rule (``scaler.scale_sequence``, the same as ``torch.amp.GradScaler``) and
real casts to FP16/BF16 (``scaler.cast_outcome``).
"""
from __future__ import annotations

import math
import random

from course_lib.grading import NO_UNIT, Mistake, Question
from course_lib.grading.i18n import msg
from course_lib.grading.inputs import exercise_trace
from course_lib.stability import scaler, spikes

# --- spike detection: a recorded trace (seed 3, LR ×40 at steps 50–52, corrupted batches 120–129)
WINDOW, THRESHOLD, MIN_JUMP = 20, 5.0, 0.3


def _variant_spikes(losses, keep_spikes: bool = False, ddof: int = 0) -> list[int]:
    """Wrong-but-plausible detectors, to recognise a student's mistake."""
    hist, out = [], []
    for i, x in enumerate(losses):
        h = hist[-WINDOW:]
        if len(h) == WINDOW:
            mean = sum(h) / WINDOW
            std = math.sqrt(sum((v - mean) ** 2 for v in h) / (WINDOW - ddof))
            spike = not math.isfinite(x) or x > mean + max(THRESHOLD * std, MIN_JUMP)
        else:
            spike = not math.isfinite(x)
        if spike:
            out.append(i)
        if not spike or keep_spikes:
            hist.append(x)
    return out


# --- rollback: (step, data position) of each saved checkpoint; 40 batches were skipped once
CHECKPOINTS = [(0, 0), (100, 100), (200, 200), (300, 340), (400, 440), (500, 540)]
SPIKE = (517, 557)              # the spike was detected at step 517, on the batch at position 557
MIN_DISTANCE, SKIP_MARGIN = 100, 200

# --- casts
VALUES = [60000.0, 65519.0, 65520.0, 1e5, 3.0e38, 3.4e38]
SMALL_VALUES = [1e-4, 1e-6, 5e-8, 2e-8]


# --- the loss-scaler function question
def _scaler_cases(draw=None) -> list[tuple[list[bool], float, int]]:
    """Five fixed flag sequences, and two drawn from ``draw`` (a numpy Generator) when given."""
    rng = random.Random(6)
    drawn = [([bool(v) for v in draw.random(int(draw.integers(10, 40))) < draw.uniform(0.05, 0.4)],
              float(2.0 ** int(draw.integers(3, 24))), int(draw.integers(2, 8))) for _ in range(2)] if draw is not None else []
    return drawn + [([False] * 7, 1024.0, 2),
            ([True, True, False, False, False, False], 65536.0, 3),
            ([False, False, True, False, False, False, True, False], 8.0, 3),
            ([rng.random() < 0.15 for _ in range(60)], 2.0 ** 16, 4),
            ([rng.random() < 0.05 for _ in range(200)], 2.0 ** 24, 10)]


def _no_reset(flags, s, n):
    out, t = [], 0
    for f in flags:
        if f:
            s /= 2
        else:
            t += 1
            if t % n == 0:
                s *= 2
        out.append(s)
    return out


def _off_by_one(flags, s, n):
    return scaler.scale_sequence(flags, s, n + 1)


def _before_update(flags, s, n):
    return [s] + scaler.scale_sequence(flags, s, n)[:-1]


_SCALER_MISTAKES = [
    (_before_update, msg("You returned the scale each step *used*; the question asks for the scale after "
                         "each step's update (the sequence is shifted by one).")),
    (_no_reset, msg("After an overflow the count of good steps must restart from 0; yours keeps counting, "
                    "so the scale grows back too early.")),
    (_off_by_one, msg("Off by one: the scale doubles on the growth_interval-th good step in a row, not the "
                      "one after.")),
]


def _grade_scaler(fn, draw) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, "Pass your function itself, e.g. check('loss_scaler', loss_scale_sequence)."
    cases = _scaler_cases(draw)
    passed, first_bad = 0, None
    for flags, s, n in cases:
        got = fn(list(flags), s, n)
        try:
            ok = [float(v) for v in got] == scaler.scale_sequence(flags, s, n)
        except (TypeError, ValueError):
            return 0.0, msg("Return a list of numbers, one per step; got {type}.", type=type(got).__name__)
        passed += ok
        if not ok and first_bad is None:
            first_bad = (flags, s, n, [float(v) for v in got])
    if first_bad is None:
        return 1.0, ""
    flags, s, n, got = first_bad
    for variant, why in _SCALER_MISTAKES:
        if got == [float(v) for v in variant(flags, s, n)]:
            return passed / len(cases), why
    want = scaler.scale_sequence(flags, s, n)
    i = next(k for k, (a, b) in enumerate(zip(got + [None] * len(want), want)) if a != b)
    return passed / len(cases), msg("{passed}/{n_cases} flag sequences right; with init_scale={s:g}, "
                                    "growth_interval={n}, your scale after step {i} (overflow={flag}) is "
                                    "wrong.", passed=passed, n_cases=len(cases), s=s, n=n, i=i,
                                    flag=flags[i])  # a drawn case: the right value is not shown


QUESTIONS = [
    Question(
        "spike_steps", points=2, unit="steps",
        prompt=f"Which steps of the recorded loss trace `exercise_trace()` are spikes? Rule: step t is a "
               f"spike if its loss is not finite, or if at least {WINDOW} earlier non-spike losses exist "
               f"and loss_t > μ + max({THRESHOLD:g}·σ, {MIN_JUMP}) with μ, σ the mean and population "
               f"standard deviation of the last {WINDOW} non-spike losses. Answer the 0-based step "
               f"indices as a list.",
        expected=lambda: spikes.detect_spikes(exercise_trace(), WINDOW, THRESHOLD, MIN_JUMP),
        mistakes=[Mistake.predicate(lambda a: list(a) == _variant_spikes(exercise_trace(), keep_spikes=True),
                                    "Spike losses must not enter the running window: once a spike is in it, "
                                    "μ and σ jump and the steps right after it are no longer flagged."),
                  Mistake.predicate(lambda a: list(a) == _variant_spikes(exercise_trace(), ddof=1),
                                    "Use the population standard deviation (divide by N, numpy's default "
                                    "ddof=0), not the sample one."),
                  Mistake.predicate(lambda a, e: [int(v) - 1 for v in a] == list(e),
                                    "Off by one: steps are 0-based indices into the list.")],
        hint="Keep a list of healthy losses; for each step compare with the last 20 of them, and only "
             "append the loss when it was not a spike.",
    ),
    Question(
        "rollback_plan", points=2, unit="(step, data position)",
        prompt=f"Checkpoints were saved at (step, data position) = {CHECKPOINTS} (the run already skipped 40 "
               f"batches once). A spike is detected at step {SPIKE[0]}, on the batch at data position "
               f"{SPIKE[1]}. Following PaLM, restore the newest checkpoint at least {MIN_DISTANCE} steps "
               f"before the spike and skip every batch from there through the spiking one plus "
               f"{SKIP_MARGIN} more. Answer [checkpoint step to restore, data position to resume at].",
        expected=lambda: (lambda p: [p.restore_step, p.resume_position])(
            spikes.plan_rollback(CHECKPOINTS, *SPIKE, min_distance=MIN_DISTANCE, skip_margin=SKIP_MARGIN)),
        mistakes=[Mistake.predicate(lambda a: a[0] == 500,
                                    "Step 500 is only 17 steps before the spike: the damage may already be "
                                    "in it. Go back at least 100 steps."),
                  Mistake.predicate(lambda a: a[1] == SPIKE[0] + 1 + SKIP_MARGIN,
                                    "You counted from the step number; data positions run 40 ahead of "
                                    "steps here, because batches were skipped before. Use the position."),
                  Mistake.predicate(lambda a: a[1] == SPIKE[1] + SKIP_MARGIN,
                                    "Off by one: skip the spiking batch itself too (resume at position "
                                    "+ 1 + margin)."),
                  Mistake.predicate(lambda a: a[0] < 400 and a[1] == SPIKE[1] + 1 + SKIP_MARGIN,
                                    "Too far back: step 400 is already at least 100 steps before the "
                                    "spike; restore the newest checkpoint that qualifies, to redo as "
                                    "little work as possible."),
                  Mistake.predicate(lambda a: a[1] == 440 + SKIP_MARGIN,
                                    "The margin is counted after the spiking batch, not after the "
                                    "checkpoint: everything from the checkpoint to the spike is skipped too.")],
        hint="Newest checkpoint with step ≤ 517 − 100; resume at spike position + 1 + 200.",
    ),
    Question(
        "loss_scaler", points=3,
        prompt="Write loss_scale_sequence(overflow_flags, init_scale, growth_interval) returning the loss "
               "scale after each step's update: on an overflow halve the scale and restart counting; "
               "after growth_interval overflow-free steps in a row double it (and restart counting). "
               "Graded on five flag sequences against torch.amp.GradScaler's rule.",
        grader=_grade_scaler,
        hint="Keep (scale, good_steps). Overflow: scale *= 0.5, good_steps = 0. Else good_steps += 1; if it "
             "equals growth_interval: scale *= 2, good_steps = 0.",
    ),
    Question(
        "overflow_fp16", points=1, unit=NO_UNIT,
        prompt=f"For each value {VALUES}, does rounding it (held in FP32) to FP16 give inf? A list of booleans.",
        expected=lambda: [scaler.overflows(v, "fp16") for v in VALUES],
        mistakes=[Mistake.equals([False, True, True, True, True, True],
                                 "65519 is above the largest FP16 number (65504) but still rounds *down* to "
                                 "it: the next step would be 65536, and only values ≥ the midpoint 65520 "
                                 "round up to it, i.e. to inf."),
                  Mistake.equals([False, False, False, True, True, True],
                                 "65520 is exactly halfway between 65504 and 65536; ties round to the even "
                                 "significand, which is 65536 = 2^16 — beyond the range, so inf.")],
        hint="Largest FP16: 65504; the spacing there is 32; round to nearest, ties to even.",
    ),
    Question(
        "overflow_bf16", points=1, unit=NO_UNIT,
        prompt=f"And rounding the same values {VALUES} to BF16? A list of booleans.",
        expected=lambda: [scaler.overflows(v, "bf16") for v in VALUES],
        mistakes=[Mistake.equals([scaler.overflows(v, "fp16") for v in VALUES],
                                 "That is the FP16 answer: BF16 has FP32's 8-bit exponent, so its range "
                                 "reaches about 3.39e38."),
                  Mistake.equals([False] * len(VALUES),
                                 "3.4e38 is above BF16's largest value (≈3.3895e38) by more than half a "
                                 "spacing, so it rounds to inf.")],
        hint="BF16's largest finite value is (2 − 2^-7)·2^127 ≈ 3.3895e38.",
    ),
    Question(
        "underflow_fp16", points=1, unit=NO_UNIT,
        prompt=f"What do the gradient values {SMALL_VALUES} become in FP16: 'normal', 'subnormal' or 'zero'? "
               f"A list of strings.",
        expected=lambda: [scaler.cast_outcome(v, "fp16") for v in SMALL_VALUES],
        mistakes=[Mistake.predicate(lambda a: [str(v).lower() for v in a][2] == "zero",
                                    "5e-8 is below the smallest FP16 subnormal 2^-24 ≈ 5.96e-8 but above half "
                                    "of it, so it rounds *up* to 2^-24 instead of to zero."),
                  Mistake.predicate(lambda a: [str(v).lower() for v in a][1] == "normal",
                                    "1e-6 is below FP16's smallest normal 2^-14 ≈ 6.1e-5: it is subnormal.")],
        hint="FP16: smallest normal 2^-14 ≈ 6.1e-5, smallest subnormal 2^-24 ≈ 5.96e-8; below half of that, zero.",
    ),
    Question(
        "adam_first_step", points=1, unit="×",
        prompt="AdamW's first update with peak LR 0.4 and no warmup: how large is the change of each weight "
               "(ε and weight decay negligible), relative to the initial weight scale 0.02? Answer the ratio.",
        expected=lambda: 0.4 / 0.02, rtol=0.01,
        mistakes=[Mistake.ratio(0.02, "That is the absolute change (lr); divide by the weight scale 0.02."),
                  Mistake.ratio(1 / 30, "That is the first step *with* a 30-step warmup (LR 0.4/30); the "
                                        "question is without warmup."),
                  Mistake.ratio(math.sqrt(0.05) / 0.1, "Adam's first step is bias-corrected: m̂ = g and "
                                                     "v̂ = g², so the step is lr·g/|g| = ±lr exactly.")],
        hint="Bias-corrected moments after one step: m̂ = g, v̂ = g², so the update is lr·g/√(g²).",
    ),
]
