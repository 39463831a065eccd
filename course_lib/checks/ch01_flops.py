"""Graded questions of chapter 1, "Counting FLOPs: 6ND". References come from course_lib.flops."""
from course_lib import flops, hardware
from course_lib.grading import Mistake, Question

_H100 = hardware.get_accelerator("H100-SXM")
_PCIE = hardware.get_accelerator("H100-PCIe")
_SPARSE = Mistake.ratio(0.5, "About half the expected value: you probably used the 2:4-sparsity peak "
                             "(1979 TFLOP/s); the dense BF16 peak of an H100 SXM is 989 TFLOP/s.")
_TWO_ND = Mistake.ratio(1 / 3, "A third of the expected value: you counted 2ND (forward only); "
                                "training adds the backward pass (4ND), 6ND in all.")
_EIGHT_ND = Mistake.ratio(4 / 3, "4/3 of the expected value: you counted 8ND, which includes recomputation "
                                  "(that is HFU); MFU and training compute use 6ND.")

QUESTIONS = [
    Question(
        "flops_34b_8t", points=1, unit="FLOP",
        prompt="Training compute in FLOP of a 34B-parameter model trained on 8T tokens.",
        expected=lambda: flops.training_flops(34e9, 8e12), rtol=0.01,
        mistakes=[_TWO_ND, _EIGHT_ND,
                  Mistake.ratio(1e-12, "Off by 10^12: keep tokens and parameters as plain counts "
                                       "(8e12, not 8 'trillion')."),
                  Mistake.ratio(1e-9, "Off by 10^9: 34B parameters is 34e9, not 34.")],
        hint="C = 6·N·D, with N and D as plain counts.",
    ),
    Question(
        "days_34b_8t", points=2, unit="days",
        prompt="Days to train 34B parameters on 8T tokens with 1024 H100 SXM at 45% MFU (dense BF16).",
        expected=lambda: flops.training_days(34e9, 8e12, 1024, 0.45), rtol=0.01,
        mistakes=[_SPARSE, _TWO_ND, _EIGHT_ND,
                  Mistake.ratio(86400, "That looks like seconds: divide by 86,400 to get days."),
                  Mistake.ratio(24, "That looks like hours: divide by 24 to get days."),
                  Mistake.ratio(0.45, "Too small by 0.45: the MFU must divide the peak throughput "
                                      "(the cluster delivers only 45% of its peak)."),
                  Mistake.ratio(_H100.peak() / _PCIE.peak(),
                                "You used the H100 PCIe peak (756 TFLOP/s); the question is about SXM.")],
        hint="days = 6ND / (GPUs × dense peak FLOP/s × MFU) / 86,400.",
    ),
    Question(
        "gpus_30_days", points=1, unit="GPUs",
        prompt="Whole H100 SXM GPUs needed to finish the same run (34B, 8T, 45% MFU) in 30 days.",
        expected=lambda: float(-(-flops.gpus_needed(34e9, 8e12, 30, 0.45) // 1)), rtol=0, atol=0.5,
        mistakes=[_SPARSE,
                  Mistake.predicate(lambda a, e: abs(a - (e - 1)) < 0.5,
                                    "One short: round the GPU count *up*; with one fewer GPU the run "
                                    "takes longer than 30 days.")],
        hint="Invert the days formula: GPUs = 6ND / (days × 86,400 × peak × MFU), then round up.",
    ),
    Question(
        "days_pcie", points=1, unit="days",
        prompt="Days for the same run on 1024 H100 PCIe cards at 45% MFU.",
        expected=lambda: flops.training_days(34e9, 8e12, 1024, 0.45, gpu="H100-PCIe"), rtol=0.01,
        mistakes=[Mistake.ratio(_PCIE.peak() / _H100.peak(),
                                "That is the SXM answer: the PCIe card's dense BF16 peak is 756 TFLOP/s."),
                  Mistake.ratio(0.5, "About half: 1513 TFLOP/s is the PCIe card's sparsity figure; dense is 756.")],
        hint="Same formula, with the H100 PCIe dense BF16 peak.",
    ),
    Question(
        "attn_fraction_8k", points=2, unit="fraction",
        prompt="Llama-2-7B-like model (L=32, d=4096, N=6.74e9), causal attention, s=8192: attention-score "
               "FLOPs as a fraction of the dense 2N FLOPs (a fraction, not a percentage).",
        expected=lambda: flops.attention_fraction(32, 4096, 8192, 6.74e9), rtol=0.01,
        mistakes=[Mistake.ratio(2, "Twice the causal value: that is the full-matrix count 4·L·s·d; a causal "
                                   "kernel does half of it, 2·L·s·d per token."),
                  Mistake.ratio(2 / 4096, "Far too small by a factor d/2: each score is a dot product of "
                                          "length d, so the cost per token is 2·L·s·d, not 2·L·s (the "
                                          "source notes' formula misses d)."),
                  Mistake.ratio(100, "That is a percentage; give a fraction (e.g. 0.16, not 16).")],
        hint="Causal forward attention per token: 2·L·s·d FLOPs; dense forward: 2N.",
    ),
    Question(
        "crossover_causal", points=1, unit="tokens",
        prompt="Sequence length at which causal attention FLOPs equal the dense FLOPs for that model.",
        expected=lambda: flops.attention_crossover(32, 4096, 6.74e9), rtol=0.01,
        mistakes=[Mistake.ratio(0.5, "Half the causal crossover: that is the full-matrix one, N/(2·L·d).")],
        hint="Solve L·s·d / N = 1 for s.",
    ),
    Question(
        "mfu_13b", points=2, unit="fraction",
        prompt="A 13B model trains at 250,000 tokens/s on 64 H100 SXM. Its MFU (a fraction)?",
        expected=lambda: flops.mfu(13e9, 250_000 / 64), rtol=0.01,
        mistakes=[Mistake.ratio(64, "64× too large: divide the cluster throughput by the number of GPUs."),
                  _TWO_ND, _EIGHT_ND, _SPARSE,
                  Mistake.ratio(100, "That is a percentage; give a fraction.")],
        hint="MFU = 6·N·(tokens/s per GPU) / dense peak.",
    ),
    Question(
        "hfu_13b", points=1, unit="fraction",
        prompt="The same run uses full activation recomputation. Its HFU (a fraction)?",
        expected=lambda: flops.mfu(13e9, 250_000 / 64, recompute=True), rtol=0.01,
        mistakes=[Mistake.ratio(0.75, "That is the MFU: HFU also counts the recomputed forward, 8N per token.")],
        hint="HFU counts what the hardware executes: 2N forward + 2N recomputed forward + 4N backward.",
    ),
]
