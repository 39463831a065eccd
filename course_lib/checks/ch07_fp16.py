"""Graded questions of chapter 7, "FP16 bugs — when 1 + 1 + … + 1 stops counting".

References come from course_lib.numerics (real arithmetic in the torch dtypes). The function
question runs the student's Kahan summation on vectors where a plain FP16 running sum fails and
compares with the exact sums.
"""
from __future__ import annotations

import math

import torch

from course_lib import numerics
from course_lib.grading import NO_UNIT, Mistake, Question
from course_lib.grading.i18n import msg, series

STALL_CASE = (0.3, "fp16")              # increment, format
STALL_BF16_CASE = (0.01, "bf16")
ULP_CASE = (3000.0, "fp16")
# does an FP16/BF16 Kahan sum of `value` added `count` times equal the exact sum, correctly rounded?
KAHAN_CASES = [(1.0, 10_000, "fp16"), (0.01, 10_000, "bf16"), (0.3, 10_000, "fp16")]
RING_RANKS = 16


def kahan_fixes(value: float, count: int, dtype: str) -> bool:
    """True when Kahan summation in ``dtype`` returns the exact sum rounded once to ``dtype``."""
    x = torch.full((count,), value, dtype=torch.float64).to(numerics.resolve_dtype(dtype))
    exact = math.fsum(x.double().tolist())
    best = float(torch.tensor(exact, dtype=torch.float64).to(x.dtype))
    return float(numerics.kahan_sum(x, dtype)) == best


def _grading_cases() -> list[torch.Tensor]:
    """FP16 vectors where the plain running sum is far off: the seed's ones, a tenth, uniform
    noise, and one large value followed by many small ones."""
    gen = torch.Generator().manual_seed(7)
    return [torch.ones(10_000, dtype=torch.float16),
            torch.full((6_000,), 0.1, dtype=torch.float16),
            (torch.rand(8_000, generator=gen) * 0.5).half(),
            torch.cat([torch.tensor([1000.0]), torch.full((4_000,), 0.2)]).half()]


# all operations in FP16: here textbook Kahan is one ulp above the correctly rounded sum,
# which a sum done in FP32 and rounded at the end would not be
_FP16_ONLY = torch.full((30_000,), 1e-4, dtype=torch.float16)


def _grade_kahan(fn) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, "Pass your function itself, e.g. check('kahan_fp16', kahan_fp16)."
    passed, notes = 0, []
    for i, x in enumerate(_grading_cases()):
        out = fn(x.clone())
        if not isinstance(out, torch.Tensor):
            return 0.0, msg("Your function returned {type}; return a 0-d torch tensor.", type=type(out).__name__)
        if out.dtype != torch.float16:
            return 0.0, msg("Your function returned a {dtype} tensor: the exercise is to keep the "
                            "sum and the compensation in torch.float16.", dtype=out.dtype)
        exact = math.fsum(x.double().tolist())
        err = abs(float(out) - exact)
        if err <= 2 * numerics.ulp(exact, "fp16"):
            passed += 1
        elif float(out) == float(numerics.running_sum(x, "fp16")):
            notes.append(msg("case {case}: {got:.6g} is exactly the plain running sum (exact {exact:.6g}): "
                             "the compensation never reaches the next addend", case=i + 1, got=float(out),
                             exact=exact))
        else:
            notes.append(msg("case {case}: {got:.6g} instead of {exact:.6g}", case=i + 1, got=float(out),
                             exact=exact))
    score = passed / 5
    if passed == 4:
        mine, ref = float(fn(_FP16_ONLY.clone())), float(numerics.kahan_sum(_FP16_ONLY, "fp16"))
        if mine == ref:
            score = 1.0
        else:
            notes.append(msg("summing 1e-4 thirty thousand times you get {mine:.6g}; Kahan with every "
                             "operation in FP16 gets {ref:.6g} — did some step run in FP32?", mine=mine, ref=ref))
    if not notes:
        return score, ""
    text = series(notes)
    return score, text if text.endswith("?") else msg("{notes}.", notes=text)


QUESTIONS = [
    Question(
        "seed_ratio", points=1, unit="×",
        prompt="Add 1.0 ten thousand times to an FP16 running total. By what factor is the result "
               "too small (true sum / FP16 result)?",
        expected=lambda: 10_000 / numerics.sequential_sum(1.0, 10_000, "fp16"), rtol=0.01,
        mistakes=[Mistake.predicate(lambda a: 9.0 <= float(a) <= 10.5,
                                "That is the source notes' '10× off', which assumes a stall at 1024. "
                                "On [1024, 2048) the spacing is exactly 1, so every integer up to 2048 "
                                "is reached; 2048 + 1 is a tie that rounds to even: 2048."),
                  Mistake.ratio(10_000 / 256 / (10_000 / 2048), "That is the BF16 factor (stall at 256).")],
        hint="The total is exact while the spacing is ≤ 1; find the first binade whose half-spacing "
             "is ≥ 1 and remember ties round to even.",
    ),
    Question(
        "stall_point", points=1, unit=NO_UNIT,
        prompt=f"Where does a running FP16 sum of the increment {STALL_CASE[0]} stop growing "
               f"(the value it stalls at)?",
        expected=lambda: numerics.stall_point(*STALL_CASE),
        mistakes=[Mistake.ratio(0.5, "Half the answer: the sum stalls when the increment is at most HALF "
                                     "the spacing (it rounds back down), not the whole spacing."),
                  Mistake.ratio(1 / 8, "That is the BF16 stall point: FP16 has 3 more mantissa bits, 8× finer."),
                  Mistake.ratio(2, "Twice the answer: at half-spacing = 0.5 ≥ 0.3 the increment already "
                                   "rounds away.")],
        hint="Stall at the first power of two 2^e whose half-ulp 2^(e−10)/2 is ≥ the increment "
             "(the increment itself is first rounded to FP16).",
    ),
    Question(
        "stall_bf16", points=1, unit=NO_UNIT,
        prompt=f"And a running BF16 sum of {STALL_BF16_CASE[0]}: where does it stall?",
        expected=lambda: numerics.stall_point(*STALL_BF16_CASE),
        mistakes=[Mistake.ratio(8, "That is the FP16 answer; BF16 keeps only 7 stored mantissa bits."),
                  Mistake.ratio(0.5, "Half the answer: compare the increment with HALF the spacing.")],
        hint="BF16: spacing 2^(e−7) on [2^e, 2^(e+1)).",
    ),
    Question(
        "ulp_value", points=1, unit=NO_UNIT,
        prompt=f"The spacing between {ULP_CASE[0]:g} and the next larger FP16 number.",
        expected=lambda: numerics.ulp(*ULP_CASE),
        mistakes=[Mistake.ratio(0.5, "That is the spacing on [1024, 2048); 3000 lies in [2048, 4096)."),
                  Mistake.equals(ULP_CASE[0] * 2 ** -10,
                                 "You multiplied the value by eps = 2^-10; the spacing is constant "
                                 "within a binade: 2^(e−10) with 2^e the power of two below the value."),
                  Mistake.ratio(8, "That is the BF16 spacing (7 mantissa bits, not 10).")],
        hint="Find e with 2^e ≤ x < 2^(e+1); the FP16 spacing there is 2^(e−10).",
    ),
    Question(
        "kahan_fixes", points=2, unit=NO_UNIT,
        prompt="For each case, does Kahan summation (every operation in the format) return the exact "
               "sum rounded once to the format? Answer a list of three booleans for: "
               + "; ".join(f"{v:g} added {n:,} times in {d.upper()}" for v, n, d in KAHAN_CASES) + ".",
        expected=lambda: [kahan_fixes(*c) for c in KAHAN_CASES],
        mistakes=[Mistake.equals([True, True, True],
                                 "Not in BF16: Kahan's error bound is 2u·|S| + O(n·u²)·Σ|x|; with "
                                 "u = 2^-8 and n = 10⁴, n·u² ≈ 0.15 is not small. Run kahan_sum to see."),
                  Mistake.equals([False, False, False],
                                 "Kahan does rescue FP16 here: its bound 2u + O(n·u²) with u = 2^-11 is "
                                 "tiny for n = 10⁴; the compensation carries what each add rounds off.")],
        hint="Try numerics.kahan_sum on each case and compare with the exact sum rounded to the format.",
    ),
    Question(
        "ring_roundings", points=1, unit="additions",
        prompt=f"In an FP16 ring all-reduce over {RING_RANKS} ranks, through how many FP16 additions "
               f"does one element's sum go? And in a binary tree? Answer [ring, tree].",
        expected=lambda: [RING_RANKS - 1, math.ceil(math.log2(RING_RANKS))],
        mistakes=[Mistake.equals([RING_RANKS, math.ceil(math.log2(RING_RANKS))],
                                 "Off by one for the ring: n values need n − 1 additions."),
                  Mistake.equals([RING_RANKS - 1, RING_RANKS - 1],
                                 "A tree also does n − 1 additions in total, but any one partial sum "
                                 "passes through only log2(n) of them.")],
        hint="Ring: the chunk's partial sum visits every rank once. Tree: one addition per level.",
    ),
    Question(
        "kahan_fp16", points=3,
        prompt="Write kahan_fp16(values) that sums a 1-D torch.float16 tensor with Kahan's compensated "
               "summation, keeping the sum and the compensation in torch.float16, and returns a 0-d "
               "float16 tensor. Graded on four vectors where the plain FP16 running sum is far off, "
               "plus one that tells FP16 arithmetic from FP32.",
        grader=_grade_kahan,
        hint="s = c = 0; for v: y = v − c; t = s + y; c = (t − s) − y; s = t. Keep every tensor in float16.",
    ),
]
