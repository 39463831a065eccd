"""The claim ledger: every claim of the two source notes, its verdict, the corrected statement,
the primary reference, and where in the course a run demonstrates it.

The corrected statements are templates whose numbers are computed by ``numbers()`` from the
library itself, so the ledger cannot drift from what the chapters measure. ``evidence`` entries
point at a labelled book section (``book/07_fp16.md#sec-07-stall``) or a lab/solution cell
(``notebooks/01_flops_lab.ipynb#c08``); ``tests/test_claims.py`` fails if one no longer exists.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ._validate import choice

__all__ = ["Claim", "CLAIMS", "numbers", "render", "resolve_evidence", "verdict_of"]

VERDICTS = ("TRUE", "TRUE, with caveats", "IMPRECISE", "PARTLY FALSE", "FALSE", "UNSOURCED")


@dataclass(frozen=True)
class Claim:
    """One claim of the source notes and what the course shows about it."""

    number: int
    seed: str
    verdict: str
    corrected: str
    reference: str
    evidence: tuple[str, ...] = ()

    @property
    def note(self) -> int:
        """Which of the two source notes makes the claim (book/notes.md describes both)."""
        return 2 if self.number in NOTE_2 else 1


# Claims made by the second note (the tutorial chapter); the others come from the first (the
# lecture notes). Claim 1, 6ND, is in both; the first states it.
NOTE_2 = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 20})


@lru_cache(maxsize=1)
def numbers() -> dict[str, str]:
    """Every figure quoted by the ledger, computed by course_lib (formatted for prose)."""
    import torch

    from . import flops, numerics, scaling
    n: dict[str, str] = {}
    n["gpt3"] = f"{flops.training_flops(175e9, 300e9):.3g}"
    n["days"] = f"{flops.training_days(34e9, 8e12, 1024, 0.45):.1f}"
    n["days_sparse"] = f"{flops.training_days(34e9, 8e12, 1024, 0.45) / 2:.1f}"
    n["attn_c"] = f"{100 * flops.attention_fraction(32, 4096, 4096, 7e9):.1f}"
    n["attn_f"] = f"{100 * flops.attention_fraction(32, 4096, 4096, 7e9, causal=False):.1f}"
    n["cross"] = f"{flops.attention_crossover(32, 4096, 7e9) / 1e3:.1f}"
    n["fp16_end"] = f"{numerics.sequential_sum(1.0, 10_000, torch.float16):.0f}"
    n["bf16_end"] = f"{numerics.sequential_sum(1.0, 10_000, torch.bfloat16):.0f}"
    n["fp16_off"] = f"{10_000 / numerics.sequential_sum(1.0, 10_000, torch.float16):.2f}"
    n["bf16_off"] = f"{10_000 / numerics.sequential_sum(1.0, 10_000, torch.bfloat16):.0f}"
    for fit in ("hoffmann", "besiroglu"):
        N, _ = scaling.compute_optimal(5.76e23, fit=fit)
        n[f"nopt_{fit}"] = f"{N / 1e9:.1f}"
        n[f"half_{fit}"] = f"{100 * scaling.overtraining_cost(0.5, fit=fit)[1]:.1f}"
    from .plan import plan
    p41 = plan(n_params=34e9, n_tokens=8e12, gpu="H100", n_gpus=1024, mfu=0.45)
    n["days_fail_h"] = f"{(p41.wall_days - p41.days) * 24:.0f}"
    n["llama_tpp"] = f"{15.6e12 / 405e9:.1f}"
    n["llama_c"] = f"{flops.training_flops(405e9, 15.6e12):.2g}"
    from .distill import api_cost
    n["distill"] = f"{api_cost(1e12, 25.0) / 1e6:.1f}"
    n["distill_batch"] = f"{api_cost(1e12, 25.0, batch_discount=0.5) / 1e6:.2f}"
    from .faults import LLAMA3, cluster_mtbf, implied_gpu_mtbf
    day = 86400.0
    gpu = implied_gpu_mtbf(LLAMA3["unexpected"], LLAMA3["days"] * day, LLAMA3["n_gpus"])
    job = cluster_mtbf(gpu, LLAMA3["n_gpus"])
    n["l3_job_h"] = f"{job / 3600:.1f}"
    n["l3_gpu_y"] = f"{gpu / (365.25 * day):.1f}"
    n["l3_90d"] = f"{90 * day / job:,.0f}"
    n["gpus_2000"] = f"{2000 / (90 * day / gpu) / 1e3:.0f}"
    return n


CLAIMS: tuple[Claim, ...] = (
    Claim(1, "Pretraining FLOPs = 6ND: 2 per parameter per token forward, backward twice the forward.",
          "TRUE", "Exact for the matmuls (PyTorch's FLOP counter agrees to the last FLOP); it omits the "
          "attention scores, and full recomputation makes the hardware do 8ND (HFU vs MFU).",
          "kaplan2020scaling", ("book/01_flops.md#sec-01-backward", "notebooks/01_flops_lab.ipynb#c06")),
    Claim(2, "FSDP: all-gather before each layer, discard after; reduce-scatter instead of all-reduce gives "
             "only 50% communication overhead.",
          "IMPRECISE", "FSDP (ZeRO-3) moves 3Ψ per step, 1.5× DP's 2Ψ; reduce-scatter alone (ZeRO-1/2) costs "
          "nothing extra — the extra Ψ is the parameter re-gather for the backward pass.",
          "rajbhandari2020zero", ("book/04_dp_fsdp.md#sec-04-seed-claim", "book/04_dp_fsdp.md#sec-04-fsdp")),
    Claim(3, "Critical batch 10M tokens with 10K-token sequences → at most 1K GPUs.",
          "TRUE, with caveats", "10⁷/10⁴ = 1000 bounds the data-parallel degree, not the GPU count: tensor and "
          "context parallelism, which split one sequence's work, multiply it; expert and pipeline "
          "parallelism do not (EP ranks, and a pipeline's m ≥ p microbatches, each need sequences of the "
          "same batch). And 10M tokens is no constant: the critical batch grows as the loss falls "
          "(chapter 16 measures it on the tiny GPT, two ways); 10M is what Kaplan et al.'s fitted "
          "B_crit(L) gives late in a run on their data, far more than it allows early on.",
          "mccandlish2018largebatch",
          ("book/04_dp_fsdp.md#sec-04-batch-floor", "book/11_tensor_context.md#sec-11-batch-floor",
           "book/16_batch_size.md#sec-16-critical", "book/16_batch_size.md#sec-16-ceiling")),
    Claim(4, "B300 has 288 GB of HBM.", "TRUE", "288 GB HBM3e per GPU (datasheet); usable capacity can be "
          "a little lower.", "NVIDIA B300 documentation",
          ("book/01_flops.md#sec-01-days", "book/04_dp_fsdp.md#sec-04-dp")),
    Claim(5, "Pipeline bubbles: the last stages idle at the start, the first at the end.", "PARTLY FALSE",
          "The last stage idles at the start (and at the end); the first runs the step's last backward, so it "
          "idles in the middle, never at the end. Every stage idles (p−1)(t_f+t_b): bubble = (p−1)/(m+p−1) of "
          "wall time for GPipe and 1F1B alike; 1F1B bounds activation memory by p instead of m.",
          "huang2019gpipe", ("book/05_pipeline.md#sec-05-bubble", "book/05_pipeline.md#sec-05-1f1b")),
    Claim(6, "Distilling 1T tokens from Opus 4.6 at $25/MTok costs $25M.", "TRUE, with caveats",
          "${distill}M is the output-only list price; the Batch API halves it to ${distill_batch}M, input "
          "tokens add cost, and provider terms forbid training competing models on outputs.",
          "Anthropic pricing page", ("book/09_distill.md#sec-09-bill",)),
    Claim(7, "FP16: spacing ≈ 0.001 between 1 and 2; adding 1 ten thousand times stalls after 1024 and ends "
             "10× off.", "PARTLY FALSE",
          "The spacing is 2⁻¹⁰ (true), but the FP16 sum is exact to 2048 and stalls there (2048 + 1 is a tie, "
          "rounded to even): it ends at {fp16_end}, {fp16_off}× off. BF16 ends at {bf16_end} ({bf16_off}×).",
          "micikevicius2018mixed", ("book/07_fp16.md#sec-07-stall",)),
    Claim(8, "Chinchilla: ~20 tokens per parameter; N ≈ √(C/120), D ≈ √(20C/6).", "TRUE",
          "True as the rule of thumb. The parametric fit as printed gives N* = {nopt_hoffmann}B at the Gopher "
          "budget; the Besiroglu refit gives {nopt_besiroglu}B, consistent with ~20 tokens/parameter.",
          "hoffmann2022chinchilla", ("book/02_scaling.md#sec-02-budget", "book/02_scaling.md#sec-02-two-fits")),
    Claim(9, "GPT-3 (175B, 300B tokens) ≈ 3.1e23 FLOP.", "TRUE", "6ND = {gpt3} FLOP (the paper: 3.14e23).",
          "brown2020gpt3", ("book/01_flops.md#sec-01-backward",)),
    Claim(10, "Modern pretraining uses 10–20T tokens; raw web data is at PB scale.", "TRUE, with caveats",
          "True for 2024 (Llama 3: 15.6T); 2025 runs reach 22–40T. Common Crawl is multi-petabyte.",
          "llama3_2024", ("book/02_scaling.md#sec-02-overtraining",)),
    Claim(11, "Llama 3 405B: 15.6T tokens (~38 tokens/param); Llama 3 and MegaScale have built-in loss-spike "
              "rollback and data skipping.", "PARTLY FALSE",
          "The numbers hold ({llama_tpp} tokens/param, 6ND = {llama_c} FLOP). But Llama 3 reports few spikes and "
          "no interventions, and MegaScale automates recovery from hardware faults; the rollback-and-skip recipe "
          "is PaLM's.", "chowdhery2022palm",
          ("book/02_scaling.md#sec-02-overtraining", "book/06_stability.md#sec-06-rollback")),
    Claim(12, "BF16 is more stable than FP16 and needs no loss scaling.", "TRUE, with caveats",
          "BF16 has FP32's range, so no loss scaling; but less precision (it stalls at {bf16_end}, FP16 at "
          "{fp16_end}), so FP32 master weights and accumulators are still needed.",
          "kalamkar2019bfloat16",
          ("book/07_fp16.md#sec-07-binades", "book/06_stability.md#sec-06-underflow")),
    Claim(13, "Attention costs 4Ls FLOPs per token; ≈4% of a 7B model's compute at s=4096, >90% at s=10⁵.",
          "FALSE", "The formula misses d: it is 2·L·s·d per token causal (4·L·s·d full), i.e. {attn_c}% "
          "(causal) or {attn_f}% (full) at s=4096, and attention equals the dense compute at s ≈ {cross}k.",
          "kaplan2020scaling", ("book/01_flops.md#sec-01-attention", "notebooks/01_flops_lab.ipynb#c08",
                                "book/11_tensor_context.md#sec-11-cp")),
    Claim(14, "1024 H100 at 45% MFU train 34B parameters on 8T tokens in ≈41 days.", "TRUE",
          "{days} days with the dense 989 TFLOP/s peak; the 1979 sparsity figure would wrongly give "
          "{days_sparse}. The full plan (a layout that fits, failures at Llama 3's rate) adds "
          "{days_fail_h} hours of wall time.", "NVIDIA H100 datasheet",
          ("book/01_flops.md#sec-01-days", "book/13_plan.md#sec-13-41-days")),
    Claim(15, "Over-training: training on 2× the tokens costs +33%.", "FALSE",
          "At fixed N, 2× tokens is +100%. At matched loss, halving the model costs +{half_hoffmann}% "
          "(Hoffmann fit) or +{half_besiroglu}% (Besiroglu refit) compute.", "besiroglu2024chinchilla",
          ("book/02_scaling.md#sec-02-overtraining",)),
    Claim(16, "Expert-choice routing and token dropping break causality; rumoured cause of Llama 4 and "
              "Gemini 2 problems.", "TRUE, with caveats",
          "Expert choice breaks causality (measured); token dropping does so only with score- or rank-based "
          "priority. The stories about specific labs are rumours: Llama 4 uses token-choice top-1 plus a "
          "shared expert.", "zhou2022expertchoice", ("book/08_moe.md#sec-08-rumours",)),
    Claim(17, "GPT-4's original training had an FP16 all-reduce bug.", "UNSOURCED",
          "No primary source; the closest public account is OpenAI's 2025 GPT-4.5 talk about a "
          "data-dependent torch.sum bug.", "OpenAI, Pre-Training GPT-4.5 (2025 video)",
          ("book/07_fp16.md#sec-07-anecdote",)),
    Claim(18, "PipelineRL: in-flight weight updates so the next step's sequences come from the newest "
              "policy.", "TRUE, with caveats", "~2× faster learning on 128 H100s while staying nearly "
              "on-policy; but a long sequence mixes policy versions, and most of its tokens come from older "
              "ones (measured lag in the lab).",
          "piche2025pipelinerl", ("book/10_pipeline_rl.md#sec-10-lag", "book/10_pipeline_rl.md#sec-10-real")),
    Claim(19, "More accelerators in one fast domain (TPU pods) make FSDP friendlier.", "TRUE",
          "Per-GPU FSDP traffic is ≈3Ψ regardless of n; what matters is the bandwidth of the links it "
          "crosses, so larger NVLink/ICI domains (NVL72, TPU slices) keep more of it fast.",
          "zhao2023fsdp", ("book/04_dp_fsdp.md#sec-04-domains",)),
    Claim(20, "A pretraining run lasts months and spans thousands of failures.", "IMPRECISE",
          "Months, yes; thousands only on far larger clusters. At Llama 3's rate (419 unexpected "
          "interruptions in 54 days on 16,384 H100: one every {l3_job_h} h, a per-GPU MTBF of {l3_gpu_y} "
          "years) a 90-day run sees about {l3_90d}; 2,000 in 90 days takes ≈{gpus_2000}k such GPUs.",
          "llama3_2024", ("book/12_failures.md#sec-12-mtbf",)),
)


# The verdicts as the Chinese edition words them (book/zh/), one for each of VERDICTS.
VERDICTS_ZH = {"TRUE": "正确", "TRUE, with caveats": "正确但有保留", "IMPRECISE": "不精确",
               "PARTLY FALSE": "部分错误", "FALSE": "错误", "UNSOURCED": "无出处"}


def verdict_of(number: int, lang: str = "en") -> str:
    """The ledger's verdict on claim ``number``, for a chapter to render instead of typing its own;
    ``lang="zh"`` gives the Chinese edition's wording (``VERDICTS_ZH``)."""
    choice("lang", lang, ("en", "zh"))
    for claim in CLAIMS:
        if claim.number == number:
            return claim.verdict if lang == "en" else VERDICTS_ZH[claim.verdict]
    raise ValueError(f"number: no claim {number} in the ledger (1..{len(CLAIMS)})")


def render(claim: Claim) -> str:
    """The corrected statement with its numbers filled in from ``numbers()``."""
    return claim.corrected.format(**numbers())


def resolve_evidence(pointer: str, root: Path) -> bool:
    """True if ``pointer`` names an existing labelled section or notebook cell under ``root``."""
    path, _, anchor = pointer.partition("#")
    target = root / path
    if not target.exists() or not anchor:
        return False
    if target.suffix == ".md":
        return re.search(rf"^\({re.escape(anchor)}\)=\s*$", target.read_text(encoding="utf-8"), re.M) is not None
    cells = json.loads(target.read_text(encoding="utf-8")).get("cells", [])
    return any(c.get("id") == anchor for c in cells)
