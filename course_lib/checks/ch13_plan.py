"""Graded questions of chapter 13, the capstone. The value questions read published runs the way
the chapter does (what MFU a card's GPU-hours imply, what a mixture of experts counts, what 8N
counting does to an MFU, what a loader must carry, the 41-day problem with failures). The plan
question is open: any plan of a 70B run on 2,048 H100 that is consistent and meets the deadline
scores full marks, as judged by ``course_lib.plan.audit`` with the course's own calculators."""
from __future__ import annotations

from course_lib import flops
from course_lib.data.tokenize import token_dtype
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import lit, msg, series
from course_lib.hardware import lookup
from course_lib.plan import plan
from course_lib.plan.audit import REQUIRED, audit

H100 = lookup("gpu", "H100-SXM")
A100 = lookup("gpu", "A100")
# Q1: Llama 3 8B, Llama 3.1 model card: 1.46M H100-hours for 15T tokens
L8 = dict(n_params=8.03e9, n_tokens=15e12, gpu_hours=1.46e6)
# Q2: DeepSeek-V3 (arXiv 2412.19437): 671B total, 37B active, 14.8T tokens; H800 = H100's dense peak
DS = dict(active=37e9, total=671e9, n_tokens=14.8e12, mfu=0.40)
# Q3: Megatron-LM 1T (arXiv 2104.04473): 163 TFLOP/s per A100, counted with the recomputed forward
MEGATRON_TFLOPS = 163e12
# Q4: the loader of a Llama-3-like step
LOADER = dict(batch_tokens=16 * 2 ** 20, step_s=7.5, vocab=128_256)
# Q5: chapter 1's 41-day problem with the full plan
FORTY_ONE = dict(n_params=34e9, n_tokens=8e12, gpu="H100", n_gpus=1024, mfu=0.45)
# Q6: the open plan
PROBLEM = dict(n_params=70e9, n_layers=80, d_model=8192, n_heads=64, kv_heads=8, n_gpus=2048,
               gpu="H100-SXM", seq_len=8192, max_batch_tokens=16 * 2 ** 20, deadline_days=60.0,
               min_tokens_per_param=20.0)

_PERCENT = Mistake.ratio(100, "That is a percentage; give a fraction (0.4, not 40).")


def _implied_mfu() -> float:
    """Chapter 1's MFU at the card's throughput: its tokens over its GPU-seconds, per GPU."""
    return flops.mfu(L8["n_params"], L8["n_tokens"] / (L8["gpu_hours"] * 3600), H100.name)


def _moe_hours(n: float) -> float:
    """Chapter 1's training time on one GPU, in hours: GPU-hours at any GPU count."""
    return flops.training_days(n, DS["n_tokens"], 1, DS["mfu"], H100.name) * 24


def _failure_hours(p) -> float:
    return (p.wall_days - p.days) * 24


def _grade_plan(proposal) -> tuple[float, str]:
    """One fifth per passing finding of the audit; the messages say what failed."""
    if callable(proposal):
        return 0.0, "Submit the plan itself (a dict), not a function."
    findings = audit(proposal, **PROBLEM)
    score = sum(f.ok for f in findings) / len(findings)
    # the audit's fixed details are translated (tests/test_grading_i18n.py reads them from
    # course_lib/plan/audit.py); the ones with numbers in them stay in the audit's English
    return score, series(msg("{check}: {detail}", check=f.check, detail=lit(f.detail)) for f in findings if not f.ok)


QUESTIONS = [
    Question(
        "implied_mfu_8b", points=1, unit="fraction",
        prompt=f"The Llama 3.1 model card gives {L8['gpu_hours'] / 1e6:g}M H100-hours for Llama 3 8B "
               f"({L8['n_params'] / 1e9:g}B parameters) on {L8['n_tokens'] / 1e12:g}T tokens. With 6ND and "
               f"the H100 SXM's dense BF16 peak ({H100.peak('bf16') / 1e12:g} TFLOP/s), what MFU does that "
               f"imply, as a fraction?",
        expected=_implied_mfu, rtol=0.01,
        mistakes=[_PERCENT,
                  Mistake.ratio(1 / 3, "That counts 2ND, the forward pass only: training is 6ND."),
                  Mistake.ratio(H100.peak("bf16") / H100.peak("fp8"),
                                "That is against the FP8 peak; Llama 3 trained in BF16.")],
        hint="MFU = model FLOP / (GPU-seconds × peak).",
    ),
    Question(
        "moe_gpu_hours", points=1, unit="GPU-hours",
        prompt=f"DeepSeek-V3 has {DS['total'] / 1e9:g}B parameters, of which {DS['active'] / 1e9:g}B are "
               f"active per token, and trained on {DS['n_tokens'] / 1e12:g}T tokens on H800s (the H100's "
               f"dense BF16 peak). At an MFU of {DS['mfu']:g}, how many GPU-hours does 6ND give?",
        expected=lambda: _moe_hours(DS["active"]), rtol=0.01,
        mistakes=[Mistake.ratio(DS["total"] / DS["active"], "You counted every expert: a token's FLOPs "
                                                            "go through its active parameters only."),
                  Mistake.ratio(3600, "That is GPU-seconds; give hours.")],
        hint="6 · N_active · D / (peak · MFU), in seconds, then hours.",
    ),
    Question(
        "mfu_6n", points=1, unit="fraction",
        prompt=f"Megatron-LM's 1T-parameter estimate runs at {MEGATRON_TFLOPS / 1e12:g} TFLOP/s per A100 "
               f"(dense BF16 peak {A100.peak('bf16') / 1e12:g} TFLOP/s), counting 8N FLOP per token because "
               f"full recomputation runs every forward twice. What is its MFU in the 6N convention?",
        expected=lambda: MEGATRON_TFLOPS / A100.peak("bf16") * 6 / 8, rtol=0.01,
        mistakes=[_PERCENT,
                  Mistake.ratio(4 / 3, "That counts the recomputed forward as useful work: a hardware "
                                       "FLOP utilisation. The model needs 6N per token, not 8N.")],
        hint="Model FLOPs are 6/8 of the FLOPs the hardware ran.",
    ),
    Question(
        "loader_bytes", points=1, unit="bytes/s",
        prompt=f"A step takes {LOADER['step_s']:g} s and consumes a global batch of "
               f"{LOADER['batch_tokens']:,} tokens from a vocabulary of {LOADER['vocab']:,}. Token ids are "
               f"stored in the smallest unsigned integer type that holds them. How many bytes per second "
               f"must the data loaders of the whole cluster deliver?",
        expected=lambda: LOADER["batch_tokens"] / LOADER["step_s"] * token_dtype(LOADER["vocab"]).itemsize,
        rtol=0.01,
        mistakes=[Mistake.ratio(0.5, "A uint16 holds ids below 65,536 only; 128,256 needs 4 bytes."),
                  Mistake.ratio(1 / 4, "That is tokens per second; give bytes.")],
        hint="tokens per step / seconds per step × bytes per token.",
    ),
    Question(
        "failure_hours_41", points=1, unit="hours",
        prompt=f"Chapter 1's problem: {FORTY_ONE['n_params'] / 1e9:g}B parameters, "
               f"{FORTY_ONE['n_tokens'] / 1e12:g}T tokens, {FORTY_ONE['n_gpus']:,} H100 at "
               f"{FORTY_ONE['mfu']:.0%} MFU. With failures at Llama 3's per-GPU rate and the planner's "
               f"checkpoint model (course_lib.plan.plan, everything else at its defaults), how many hours "
               f"of wall time do the failures (checkpoint saves, restarts, lost work) add to the compute time?",
        expected=lambda: _failure_hours(plan(**FORTY_ONE)), rtol=0.01,
        mistakes=[Mistake.predicate(lambda a: abs(float(a)) < 1e-9, "Failures are not free: the plan's "
                                    "goodput is below 1."),
                  Mistake.ratio(1 / 24, "That is in days; give hours.")],
        hint="wall days = days / goodput; the difference, in hours.",
    ),
    Question(
        "plan_70b", points=5,
        prompt=f"Plan a {PROBLEM['n_params'] / 1e9:g}B run (Llama 3 70B's shape: {PROBLEM['n_layers']} layers, "
               f"d {PROBLEM['d_model']}, {PROBLEM['n_heads']} heads, {PROBLEM['kv_heads']} KV heads, "
               f"sequences of {PROBLEM['seq_len']}) on {PROBLEM['n_gpus']:,} H100 SXM (8 per node) that "
               f"finishes in at most {PROBLEM['deadline_days']:g} days of wall time, on at least "
               f"{PROBLEM['min_tokens_per_param']:g} tokens per parameter, with a global batch of at most "
               f"{PROBLEM['max_batch_tokens']:,} tokens. Submit a dict with the keys "
               f"{', '.join(REQUIRED)} (and v, the interleave, if not 1). Graded by course_lib.plan.audit: "
               f"the layout obeys the rules, fits, and its memory is what chapter 11's model says; the MFU "
               f"is at most that layout's estimate; days and wall days follow from it; the deadline is met.",
        grader=_grade_plan,
        hint="plan(n_params=..., n_tokens=..., n_layers=..., d_model=..., n_heads=..., kv_heads=..., "
             "gpu='H100', n_gpus=2048) gives a layout and its MFU; choose the tokens so the wall time fits.",
    ),
]
