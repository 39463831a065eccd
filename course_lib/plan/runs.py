"""Published pretraining runs as data, and the planner checked against them.

Each ``Run`` holds what its report published (citations in ``source``; a model card or a blog is
marked as such) and, in ``verified``, whether the figure was found in that source or in a faithful
secondary account while this table was written, or is from memory of the paper and still to be
checked. ``check_published`` runs ``plan`` on each run's own size, tokens, GPUs and MFU and sets the
planner's GPU-hours (or days, FLOP, MFU) beside the published figure. The model is not tuned to the
table: where the ratio leaves ±15 %, ``miss`` says which physical effect or convention explains it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import flops
from .planner import plan

__all__ = ["Run", "RUNS", "TOLERANCE", "check_published"]

TOLERANCE = 0.15
LLAMA3_405B_MFU = (0.38 + 0.43) / 2     # arXiv 2407.21783 Table 4: 38-43 % BF16 MFU across its configurations


@dataclass(frozen=True)
class Run:
    """One published run: size (the parameters a token uses, for 6ND), tokens, cluster, MFU, and
    the one figure the planner is compared with (``unit``: gpu_hours, days, flops or mfu)."""

    name: str
    n_params: float
    n_tokens: float
    gpu: str | None
    n_gpus: int | None
    mfu: float | None
    mfu_source: str
    published: float | None
    unit: str | None
    source: str
    verified: str
    miss: str = ""
    shape: dict = field(default_factory=dict)


_LLAMA_SHAPE = dict(seq_len=8192, global_batch_tokens=16 * 2 ** 20)
RUNS: tuple[Run, ...] = (
    Run("Llama 3 8B", 8.03e9, 15e12, "H100-SXM", 2048, LLAMA3_405B_MFU, "borrowed from the 405B (none published)",
        1.46e6, "gpu_hours", "Llama 3.1 model card (GPU-hours, 15T+ tokens); shape arXiv 2407.21783 Table 3",
        "GPU-hours: model card table as reproduced by several mirrors; GPU count not published (2,048 assumed; "
        "at a given MFU the GPU-hours do not depend on it)",
        "The card's hours imply an MFU of ~14 %: a small model on a large cluster has small matmuls per GPU "
        "and exposed communication, and the card's cumulative total is not broken down (ablations, "
        "long-context stage, restarts may be inside it); public figures cannot separate the two.",
        dict(n_layers=32, d_model=4096, n_heads=32, kv_heads=8, **_LLAMA_SHAPE)),
    Run("Llama 3 70B", 70.6e9, 15e12, "H100-SXM", 2048, LLAMA3_405B_MFU, "borrowed from the 405B (none published)",
        7.0e6, "gpu_hours", "Llama 3.1 model card (GPU-hours); shape arXiv 2407.21783 Table 3",
        "GPU-hours: model card as reproduced by mirrors; GPU count not published (2,048 assumed)",
        "Implied MFU ~25 %, below the 405B's 38-43 %: the same two suspects as the 8B (lower MFU of a "
        "smaller model, a cumulative total that includes more than the main run).",
        dict(n_layers=80, d_model=8192, n_heads=64, kv_heads=8, **_LLAMA_SHAPE)),
    Run("Llama 3 405B", 405e9, 15.6e12, "H100-SXM", 16384, LLAMA3_405B_MFU, "published 38-43 %, midpoint",
        30.84e6, "gpu_hours", "Llama 3.1 model card (GPU-hours); arXiv 2407.21783 §3.3 (16K H100, MFU, tokens)",
        "GPU-hours: model card (mirrors); 16,384 GPUs and MFU 38-43 %: arXiv 2407.21783 as used in chapters 11-12",
        "Within reach: the card's total also covers the long-context stage (lower MFU at 128K) and the "
        "466 interruptions of chapter 12.",
        dict(n_layers=126, d_model=16384, n_heads=128, kv_heads=8, **_LLAMA_SHAPE)),
    Run("DeepSeek-V3", 37e9, 14.8e12, "H100-SXM", 2048, LLAMA3_405B_MFU, "borrowed from Llama 3 405B (none published)",
        2.788e6, "gpu_hours", "arXiv 2412.19437 Table 1 (2.788M H800 GPU-hours in all, 2.664M of them pre-training)",
        "verified in secondary accounts of the report (671B total, 37B active, 14.8T tokens, 2,048 H800, "
        "2.788M hours, $2/GPU-hour); H800 modelled as an H100 SXM (same dense peak, slower NVLink)",
        "A mixture of experts: 6ND counts the 37B parameters each token activates (with all 671B the "
        "planner would be ~18x too high). The published total also holds context extension and "
        "post-training (0.124M hours; against the 2.664M of pre-training alone the ratio is ~0.86), and the "
        "MFU is borrowed: FP8 matmuls and the MoE all-to-all move the real one both ways.",
        dict(n_layers=61, d_model=7168, n_heads=128, seq_len=4096, global_batch_tokens=15360 * 4096)),
    Run("PaLM 540B", 540.35e9, 780e9, "TPUv4", 6144, 0.462, "published MFU (HFU 57.8 %)",
        1200 * 6144 + 336 * 3072, "gpu_hours", "arXiv 2204.02311 §4 and Table 3 (chip-hours: 1,200 h on 6,144 "
        "TPU v4 plus 336 h on 3,072)", "verified in a secondary summary of the paper (hours, chips, 780B "
        "tokens, 2527.2 zettaFLOP); 46.2 % MFU from the paper's abstract as quoted widely",
        "The published hours include downtime and repeated steps (PaLM rolled back ~20 times around loss "
        "spikes, chapter 6) and the early small-batch phase; the 46.2 % is a steady-state figure.",
        dict(n_layers=118, d_model=18432, n_heads=48, kv_heads=1, seq_len=2048, global_batch_tokens=2048 * 2048,
             gpus_per_node=4)),
    Run("MegaScale 175B", 175e9, 300e9, "A100", 12288, 0.552, "published MFU",
        1.75, "days", "arXiv 2402.15627 (55.2 % MFU on 12,288 GPUs; a GPT-3-sized 175B model on 300B tokens "
        "in 1.75 days)", "55.2 % and 12,288 GPUs verified in the abstract; the 1.75 days and Ampere GPUs (a "
        "Hopper cluster was still being built) from a news account of the paper; batch of 6,144 sequences "
        "not verified here",
        "Within reach at the published MFU. The planner's own MFU estimate is lower: MegaScale's 55.2 % is "
        "what its overlap engineering (parallel transformer block, sliding-window attention, overlapped "
        "DP/PP communication) buys over the stock layout the planner models.",
        dict(n_layers=96, d_model=12288, n_heads=96, seq_len=2048, global_batch_tokens=6144 * 2048)),
    Run("OPT-175B", 175e9, 180e9, "A100", 992, 147e12 / 312e12, "147 TFLOP/s per GPU (arXiv 2205.01068)",
        None, None, "arXiv 2205.01068 §2.4 (992 80GB A100, up to 147 TFLOP/s per GPU, ~180B tokens)",
        "GPUs, TFLOP/s and tokens verified in a secondary summary; the paper gives no total GPU-hours "
        "(a talk's ~56 days with ~50 restarts is not in the paper: not used)",
        "", dict(n_layers=96, d_model=12288, n_heads=96, seq_len=2048, global_batch_tokens=1024 * 2048)),
    Run("BLOOM-176B", 176.2e9, 366e9, "A100", 384, 156e12 / 312e12, "156 TFLOP/s per GPU (GENCI / BigScience blog)",
        1_082_990, "gpu_hours", "arXiv 2211.05100 (384 A100 80GB, 366B tokens, 1,082,990 compute hours)",
        "hours, GPUs, tokens and 156 TFLOP/s verified on GENCI's and BigScience's pages (blog figures)",
        "The 156 TFLOP/s is Megatron-DeepSpeed's own count, which includes the recomputed forward when "
        "activation checkpointing is on (8N, not 6N: x3/4 for MFU; not verified here for BLOOM); the "
        "3.5 months also held restarts.",
        dict(n_layers=70, d_model=14336, n_heads=112, seq_len=2048, global_batch_tokens=2048 * 2048)),
    Run("Megatron-LM 1T", 1008e9, 450e9, "A100", 3072, 163e12 / 312e12, "163 TFLOP/s per GPU, 52 % of peak",
        84, "days", "arXiv 2104.04473 Table 1 and §5.1 (an estimate for 450B tokens, not a completed run)",
        "from the paper's text as the course cites it in chapter 11; not re-verified here",
        "Megatron-LM counts the recomputed forward (its estimate is 8TP/(nX), not 6TP/(nX)) and the "
        "attention and logit FLOPs in its 163 TFLOP/s: in 6N terms the MFU is ~3/4 of 52 %.",
        dict(n_layers=128, d_model=25600, n_heads=160, seq_len=2048, global_batch_tokens=3072 * 2048,
             nic_bits_per_s=200e9)),
    Run("GPT-3 175B", 175e9, 300e9, None, None, None, "", 3.14e23, "flops",
        "arXiv 2005.14165 Table D.1 (3.64e3 PF-days = 3.14e23 FLOP)", "not re-verified here; cluster not published"),
    Run("Chinchilla 70B", 70e9, 1.4e12, None, None, None, "", 5.76e23, "flops",
        "arXiv 2203.15556 (trained with Gopher's budget, 5.76e23 FLOP)", "not re-verified here; the figure is "
        "the paper's Table 3 budget for 67B, quoted as Gopher's"),
)


def check_published(runs: tuple[Run, ...] = RUNS) -> list[dict]:
    """Per run: the planner's figure on the run's own size, tokens, GPUs and MFU, the published
    figure, their ratio, whether it is within ±``TOLERANCE``, the explanation of a miss, and the
    layout planner's own MFU estimate for the run's cluster next to the MFU used."""
    rows = []
    for r in runs:
        row = {"name": r.name, "unit": r.unit, "published": r.published, "mfu": r.mfu,
               "mfu_source": r.mfu_source, "own_mfu": None, "source": r.source}
        if r.unit == "flops":
            row["planned"] = flops.training_flops(r.n_params, r.n_tokens)
        else:
            p = plan(n_params=r.n_params, n_tokens=r.n_tokens, gpu=r.gpu, n_gpus=r.n_gpus, mfu=r.mfu, **r.shape)
            row["own_mfu"] = p.mfu_estimate
            row["planned"] = {"gpu_hours": p.gpu_hours, "days": p.days, "mfu": p.mfu_estimate, None: p.days}[r.unit]
            row["planned_days"] = p.days
        row["ratio"] = None if r.published is None else row["planned"] / r.published
        row["within"] = None if row["ratio"] is None else abs(row["ratio"] - 1) <= TOLERANCE
        row["reason"] = "" if row["within"] in (True, None) else r.miss
        rows.append(row)
    return rows
