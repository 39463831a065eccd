"""Published pretraining runs as data: what each report published, and where it was read.

Each ``Run`` holds what its report published (citations in ``source``; a model card, a blog or a
training script is marked as such) and, in ``verified``, where each figure was found while this table
was checked (2026-12), in the source itself, in a verbatim copy of it, or only in a secondary
account, and what stays unverified. ``RUNS`` are the runs the planner is set beside
(``plan.runs.check_published``); ``HELD_OUT`` runs were used for nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..layout.moe import DEEPSEEK_V2, DEEPSEEK_V3

__all__ = ["Run", "RUNS", "HELD_OUT", "LLAMA3_405B_MFU", "FP8_AT_BF16"]


LLAMA3_405B_MFU = (0.38 + 0.43) / 2     # arXiv 2407.21783 §3.3.2 and Table 4: 38-43 % BF16 MFU across its stages
_CARD = "Llama 3.1 model card (meta-llama/llama-models, models/llama3_1/MODEL_CARD.md)"
_L3_TABLE3 = "shape: arXiv 2407.21783 Table 3"
# the status a run trained in FP8 would carry if the step model timed it at BF16 (DeepSeek-V3 had it
# until the model timed FP8, node-limited dispatch and DualPipe: it is a test now)
FP8_AT_BF16 = "not a test: FP8 run timed at BF16"


# Vocabularies in the shapes (for the last stage's logits): Llama 3 128,256 (arXiv 2407.21783 §3.1.1,
# Table 3), DeepSeek-V3 129,280 (its released config; "128K" in arXiv 2412.19437 §4.1), PaLM 256k
# SentencePiece (arXiv 2204.02311 §3), GPT-3-sized runs GPT-2's 50,257 BPE (arXiv 2005.14165 §2.1),
# OPT 50,272 (its released configs), BLOOM 250,680 (arXiv 2211.05100 §3.3.2), Megatron-LM 51,200
# (GPT-2's padded to a multiple of 1,024, arXiv 2104.04473 §5), LLaMA and Llama 2 32,000
# (arXiv 2302.13971 §2.1; arXiv 2307.09288 §2.1).


@dataclass(frozen=True)
class Run:
    """One published run: size (the parameters a token uses, for 6ND), tokens, cluster, MFU, the
    one figure the planner is compared with (``unit``: gpu_hours, days or flops) and, where the run
    published one, its parallel ``layout`` (empty when none was published or none could be found)."""

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
    layout: str = ""
    identity: str = ""     # why, given the published MFU, the ratio restates the run's own arithmetic
    # the published layout in ``layout.estimate``'s terms (tp, cp, pp, dp, v, zero, recompute, ...),
    # where every degree was published: the step model is then tested on the run as it ran
    as_run: dict = field(default_factory=dict)
    # the published total is elapsed time (a card's or report's GPU-hours over the whole run, failures
    # and restarts inside), not a throughput figure: the prediction divides by chapter 12's goodput
    elapsed: bool = False
    # why a row with a published total is not (yet) a test of the step model: the run did something the
    # model does not time (shown as the row's status; its own-MFU figure is printed, never counted)
    not_a_test: str = ""


# Blocks whose activations are counted as a Llama block's (memory.llama_activation_bytes_per_layer:
# RMSNorm, SwiGLU, no dropout, grouped- or multi-query attention): LLaMA (arXiv 2302.13971 §2.2),
# Llama 2 (arXiv 2307.09288 §2.2, GQA for the 70B), Llama 3 (arXiv 2407.21783 §3.2, Table 3) and
# PaLM (arXiv 2204.02311 §2: SwiGLU, multi-query, parallel layers; §5: trained without dropout).
# The others keep Korthikanti's GPT count: GPT-3-style blocks (GELU, dropout), and the DeepSeeks,
# whose multi-head latent attention keeps other tensors than either count has.
_LLAMA = dict(block="llama")
_LLAMA_SHAPE = dict(seq_len=8192, global_batch_tokens=16 * 2 ** 20, vocab_size=128_256, **_LLAMA)   # Table 3: 128K tokens
RUNS: tuple[Run, ...] = (
    Run("Llama 3 8B", 8.03e9, 15e12, "H100-SXM", 2048, LLAMA3_405B_MFU, "borrowed from the 405B (none published)",
        1.46e6, "gpu_hours", f"{_CARD}: GPU-hours and tokens (a model card, not the paper); {_L3_TABLE3}",
        "1.46M GPU-hours on H100-80GB and '15T+' tokens read in the card itself (its 'Training Time (GPU "
        "hours)' table, defined there as the total GPU time for training each model); layers, width and heads "
        "in copies of the paper's Table 3. Not published, so not verifiable: the GPU count (2,048 assumed; at "
        "a given MFU the GPU-hours do not depend on it), the MFU and the layout. The 8.03B count is the "
        "released checkpoint's, not re-verified here (the card says 8B).",
        "The card's hours imply an MFU of ~14 %: a small model on a large cluster has small matmuls per GPU "
        "and exposed communication, and the card's cumulative total is not broken down (ablations, "
        "long-context stage, restarts may be inside it); public figures cannot separate the two.",
        dict(n_layers=32, d_model=4096, n_heads=32, kv_heads=8, **_LLAMA_SHAPE), elapsed=True),
    Run("Llama 3 70B", 70.6e9, 15e12, "H100-SXM", 2048, LLAMA3_405B_MFU, "borrowed from the 405B (none published)",
        7.0e6, "gpu_hours", f"{_CARD}: GPU-hours and tokens (a model card); {_L3_TABLE3}",
        "7.0M GPU-hours and '15T+' tokens read in the card itself; shape in copies of the paper's Table 3. "
        "GPU count (2,048 assumed), MFU and layout not published; 70.6B is the checkpoint's count, not "
        "re-verified here.",
        "Implied MFU ~25 %, below the 405B's 38-43 %: the same two suspects as the 8B (lower MFU of a "
        "smaller model, a cumulative total that includes more than the main run).",
        dict(n_layers=80, d_model=8192, n_heads=64, kv_heads=8, **_LLAMA_SHAPE), elapsed=True),
    Run("Llama 3 405B", 405e9, 15.6e12, "H100-SXM", 16384, LLAMA3_405B_MFU, "published 38-43 % (Table 4), midpoint",
        30.84e6, "gpu_hours", f"{_CARD}: GPU-hours (a model card); arXiv 2407.21783 §3.3.2 and Table 4 "
        f"(GPUs, layout, MFU), 15.6T tokens; {_L3_TABLE3}",
        "30.84M GPU-hours read in the card itself. In verbatim copies of the paper: Table 4 (8,192 GPUs at "
        "TP 8, CP 1, PP 16, DP 64: 430 TFLOP/s, 43 %; 16,384 GPUs at TP 8, CP 1, PP 16, DP 128: 400 TFLOP/s, "
        "41 %; the 131K stage at TP 8, CP 16, PP 16, DP 8: 380 TFLOP/s, 38 %; 16M tokens per batch), §3.3.2's "
        "'38-43%' BF16 MFU. In summaries of the paper: 15.6T tokens, and the 466 interruptions in its 54-day "
        "snapshot. The card's hours are not broken down by stage in either source.",
        "Within reach: the card's total also covers the long-context stage (lower MFU at 128K) and the "
        "466 interruptions of chapter 12.",
        dict(n_layers=126, d_model=16384, n_heads=128, kv_heads=8, **_LLAMA_SHAPE),
        "TP 8 · CP 1 · PP 16 · DP 128, FSDP (8K stage)",
        as_run=dict(tp=8, cp=1, pp=16, dp=128, v=8, zero=2, trim_first_last=True), elapsed=True),
    Run("DeepSeek-V3", 37e9, 14.8e12, "H800", 2048, LLAMA3_405B_MFU, "borrowed from Llama 3 405B (none published)",
        2.788e6, "gpu_hours", "arXiv 2412.19437 Table 1 (2.788M H800 GPU-hours in all, 2.664M of them "
        "pre-training), §3.1 (cluster), §3.2 (layout), §4.2 (shape, batch)",
        "In verbatim excerpts of the report: the abstract (671B total, 37B active per token, 14.8T tokens, "
        "2.788M H800 GPU-hours), Table 1 (2,664K pre-training + 119K context extension + 5K post-training "
        "= 2,788K hours at an assumed $2 per GPU-hour), §3.1 (2,048 H800, 8 per node, NVLink inside, "
        "InfiniBand across), §3.2 (16-way PP, 64-way EP over 8 nodes, ZeRO-1 DP, no TP), §4.2 (61 layers, "
        "hidden 7168, 128 heads, 4K sequences, batch ramped from 3,072 to 15,360 sequences over the first "
        "469B tokens), §3.3 (FP8 mixed-precision training). No MFU is published; the H800 has the H100 SXM's "
        "dense peak and a 400 GB/s NVLink (course_lib.hardware).",
        "Planned as a mixture of experts (layout.moe.DEEPSEEK_V3: 256 routed experts, 8 per token, one "
        "shared): 6ND counts the 37B active parameters, memory all 671B. Given the borrowed MFU the first "
        "ratio means little; the own-MFU ratio is the test. Timed as it ran (§3.2, §3.3): the block's and "
        "the experts' GEMMs in FP8 (precision='fp8'), node-limited dispatch (each token to at most 4 nodes, "
        "one InfiniBand copy per node forwarded over NVLink: comm.ep_node_bytes, with EP filling the nodes "
        "of a pipeline stage, rank_order='tp-cp-dp-pp'), FP8 dispatch and BF16 combine, the all-to-all "
        "overlapped as DualPipe does, DualPipe's two weight copies, and its bubble taken as DualPipeV's "
        "replayed by chapter 5's simulator (an assumption: the paper gives DualPipe's formula, not a "
        "schedule the simulator runs). Not timed, listed with their estimated share "
        "(plan.published_fp8.untimed_parts): MLA's attention over 192-wide query-key heads where the model "
        "times h-wide ones, the MTP module, routing and the token permutation. The memory model is BF16's "
        "(no FP8 activation caching, no recomputation of MLA's up-projections, §3.3.3-3.3.4), so the "
        "layout may show as not fitting. MFU here is against the BF16 peak; against the FP8 peak it is half. "
        "The total also holds context extension and post-training (0.124M hours).",
        dict(n_layers=61, d_model=7168, n_heads=128, seq_len=4096, global_batch_tokens=15360 * 4096,
             vocab_size=129_280, moe=DEEPSEEK_V3, precision="fp8", schedule="dualpipe"),
        "PP 16 (DualPipe) · EP 64 · ZeRO-1 DP, no TP, FP8",
        as_run=dict(tp=1, cp=1, pp=16, dp=128, ep=64, zero=1, rank_order="tp-cp-dp-pp"), elapsed=True),
    Run("DeepSeek-V2", 21e9, 1e12, "H800", 2048, None, "none published",
        172.8e3, "gpu_hours", "arXiv 2405.04434 §3.2.3/§4 (172.8K H800 GPU-hours per trillion tokens), §3.1 "
        "(shape), §3.2 (16-way zero-bubble PP, 8-way EP, ZeRO-1 DP)",
        "172.8K GPU-hours per trillion tokens, against 300.6K for the dense DeepSeek 67B, read in summaries "
        "of the report; 236B total and 21B active parameters, 60 layers, hidden 5120, 128 heads, 160 routed "
        "and 2 shared experts with 6 routed per token, 4K sequences and a batch ramped to 9,216 sequences "
        "in summaries of §3.1. The GPU count is not published (2,048 assumed, DeepSeek-V3's cluster: at a "
        "given MFU GPU-hours do not depend on it, the planner's own MFU does).",
        "A per-trillion-token rate of the main run, so no restarts or other stages inside it. On its "
        "published layout, with the zero-bubble schedule timed as ZB-H1 replayed by chapter 5's simulator "
        "(layout.bubble; an assumption: the report names zero-bubble pipeline parallelism, not which "
        "schedule), the step model lands within the tolerance; the layout the planner picks on its own is faster than "
        "the report, for the MoE costs the model does not time (routing, permutation, MLA).",
        dict(n_layers=60, d_model=5120, n_heads=128, seq_len=4096, global_batch_tokens=9216 * 4096,
             vocab_size=102_400, moe=DEEPSEEK_V2),
        "PP 16 (zero-bubble) · EP 8 · ZeRO-1 DP",
        as_run=dict(tp=1, cp=1, pp=16, dp=128, ep=8, zero=1, schedule="zb-h1")),
    Run("PaLM 540B", 540.35e9, 780e9, "TPUv4", 6144, 0.457, "published, without attention (46.2 % with it, HFU 57.8 %)",
        1200 * 6144 + 336 * 3072, "gpu_hours", "arXiv 2204.02311 §4 (layout, chips, 1,200 h on 6,144 "
        "TPU v4 plus 336 h on 3,072, 'including some downtime and repeated steps'), Appendix B (MFU), Table 1 (shape)",
        "The hours, the 'downtime and repeated steps', and Appendix B's MFU sentence (45.7 % without "
        "self-attention, 46.2 % with it, HFU 57.8 % with rematerialization) as quoted in a blog (Heim, "
        "'Estimating PaLM's training cost'); the §4 layout (per pod 12-way model parallelism and 256-way "
        "fully sharded data parallelism, two pods data-parallel, no pipeline) in verbatim copies of the "
        "paper; 780B tokens, 2 x 3,072 chips and the batch ramp to 2,048 sequences of 2,048 tokens in a "
        "summary of the paper. The 45.7 % is used because the planner counts 6N, without attention. The "
        "shape (118 layers, width 18432, 48 heads, multi-query) and 540.35B are Table 1, not re-verified here.",
        "The published hours include downtime and repeated steps (PaLM rolled back ~20 times around loss "
        "spikes, chapter 6) and the early small-batch phase; the 45.7 % is a steady-state figure.",
        dict(n_layers=118, d_model=18432, n_heads=48, kv_heads=1, seq_len=2048, global_batch_tokens=2048 * 2048,
             gpus_per_node=4, vocab_size=256_000, **_LLAMA),
        "MP 12 · PP 1 · DP 256 (FSDP) per pod, x2 pods", elapsed=True),
    Run("MegaScale 175B", 175e9, 300e9, "A100", 12288, 0.552, "published MFU",
        1.75, "days", "arXiv 2402.15627 abstract (55.2 % MFU on 12,288 GPUs, a 175B model); the 1.75 days "
        "for 300B tokens from news accounts of the paper",
        "55.2 % MFU, 12,288 GPUs and the 175B model read in the abstract (as shown on Hugging Face's papers "
        "page and ByteDance's veScale page). Not found in any source reachable here, so not verified: the 1.75 days (two "
        "news accounts, QbitAI and AIBase, attribute it to the paper as a GPT-3-sized model on a 12,288-GPU "
        "cluster), the GPU generation (the same QbitAI account and a paper summary say Ampere, A100/A800, "
        "with a Hopper cluster still being built; modelled as A100, same dense peak as the A800), the "
        "6,144-sequence batch and the parallel layout.",
        "Within reach at the published MFU. The planner's own MFU estimate is lower: MegaScale's 55.2 % is "
        "what its overlap engineering (parallel transformer block, sliding-window attention, overlapped "
        "DP/PP communication) buys over the stock layout the planner models.",
        dict(n_layers=96, d_model=12288, n_heads=96, seq_len=2048, global_batch_tokens=6144 * 2048,
             vocab_size=50_257),
        identity="its 1.75 days are 6ND / (GPUs x peak x 55.2 %): given that MFU, the planner's days equal them by construction"),
    Run("OPT-175B", 175e9, 180e9, "A100", 992, 147e12 / 312e12, "up to 147 TFLOP/s per GPU (§2.4)",
        None, None, "arXiv 2205.01068 §2.4 (992 80GB A100, FSDP with Megatron-LM TP, up to 147 TFLOP/s per "
        "GPU), §2.3 (~180B tokens), Table 1 (shape, 2M-token batch)",
        "§2.3 and §2.4 read in a verbatim copy of the paper (992 80GB A100, Fully Sharded Data Parallel "
        "with Megatron-LM tensor parallelism, 'up to 147 TFLOP/s per GPU', 'roughly 180B tokens', at least "
        "35 manual restarts over 2 months); Table 1's shape and batch in a summary of the paper. The paper "
        "states neither the TP degree nor a total GPU-hours figure (a talk's ~56 days is not in it: not "
        "used), nor how the 147 TFLOP/s are counted.",
        "", dict(n_layers=96, d_model=12288, n_heads=96, seq_len=2048, global_batch_tokens=1024 * 2048,
                 vocab_size=50_272),
        "FSDP + Megatron TP (degree not stated)"),
    Run("BLOOM-176B", 176.2e9, 366e9, "A100", 384, 156e12 / 312e12, "156 TFLOP/s per GPU (GENCI, a blog figure)",
        1_082_990, "gpu_hours", "arXiv 2211.05100 (384 A100 80GB, 366B tokens, 1,082,990 compute hours); "
        "GENCI's news page (156 TFLOP/s, a blog figure); BigScience's training script tr11-176B-ml.slurm (layout)",
        "1,082,990 hours, 48 nodes, 3.5 months and 156 TFLOP/s ('50% of FP32/BF16 peak') read on GENCI's "
        "page; 384 A100 80GB, 366B tokens, 1,082,990 hours and the shape in summaries of the paper. The layout "
        "read in BigScience's own script (bigscience-workshop/bigscience, train/tr11-176B-ml/tr11-176B-ml.slurm): "
        "48 nodes x 8 GPUs, TP 4, PP 12 (so DP 8), micro-batch 2, global batch 2,048 x 2,048 tokens after a "
        "ramp-up, --checkpoint-activations, DeepSpeed ZeRO stage 0 with a BF16 optimizer that implements its "
        "own ZeRO-1. Not found in the paper itself here: the 156 TFLOP/s.",
        "The 156 TFLOP/s is Megatron-DeepSpeed's count, which includes the recomputed forward when "
        "activation checkpointing is on (BigScience's throughput formula multiplies by 4, not 3, then; the "
        "training script turns checkpointing on): 8N, not 6N, so x3/4 for MFU. The 3.5 months also held restarts.",
        dict(n_layers=70, d_model=14336, n_heads=112, seq_len=2048, global_batch_tokens=2048 * 2048,
             vocab_size=250_680),
        "TP 4 · PP 12 · DP 8, ZeRO-1", as_run=dict(tp=4, cp=1, pp=12, dp=8, zero=1, recompute="full"),
        elapsed=True),
    Run("Megatron-LM 1T", 1008e9, 450e9, "A100", 3072, 163e12 / 312e12, "163 TFLOP/s per GPU, 52 % of peak (Table 1)",
        84, "days", "arXiv 2104.04473 Table 1 (shape, layout, throughput) and §5.1 (the 84-day estimate for "
        "450B tokens, not a completed run)",
        "§5.1's training-time paragraph read verbatim as quoted in BigScience's notes ('we assume that 450 "
        "billion tokens are needed ... 3072 A100 GPUs ... 163 teraFLOP/s ... 84 days', from 8TP/(nX)); "
        "Table 1's 1T row in a copy of the table (1008.0B, 160 heads, width 25600, 128 layers, TP 8, PP 64, "
        "3,072 GPUs, batch 3,072, 163 TFLOP/s, 52 %, 502 PFLOP/s); 8 x 200 Gb/s InfiniBand per node in a "
        "summary of §5. An estimate from measured throughput, not a finished training run.",
        "Megatron-LM counts the recomputed forward (its estimate is 8TP/(nX), not 6TP/(nX)) and the "
        "attention and logit FLOPs in its 163 TFLOP/s: in 6N terms the MFU is ~3/4 of 52 %.",
        dict(n_layers=128, d_model=25600, n_heads=160, seq_len=2048, global_batch_tokens=3072 * 2048,
             nic_bits_per_s=200e9, vocab_size=51_200),
        "TP 8 · PP 64 · DP 6", as_run=dict(tp=8, cp=1, pp=64, dp=6, zero=0, recompute="full"),
        identity='its 84 days are 8TP/(nX) from the same 163 TFLOP/s: given that figure as MFU the ratio is 6/8 by construction'),
    Run("GPT-3 175B", 174.6e9, 300e9, None, None, None, "", 3.14e23, "flops",
        "arXiv 2005.14165 Table D.1 (174,600M parameters, 300B tokens, 3.64e3 PF-days = 3.14e23 FLOP)",
        "Table D.1's GPT-3 175B row read in a full translation of the paper and in a reading note (3.64E+03 "
        "PF-days, 3.14E+23 FLOP, 174,600M parameters, 300B tokens, 6 FLOP per parameter per token); the "
        "parameter count is that row's 174.6B, not the rounded 175B. Cluster and training time not published.",
        identity='the published FLOP are 6ND itself (Table D.1): the ratio is 1 by construction'),
    Run("Chinchilla 70B", 70e9, 1.4e12, None, None, None, "", 5.76e23, "flops",
        "arXiv 2203.15556 §4 and Figure 2 caption (Gopher's budget, 5.76e23 FLOP, which Chinchilla was "
        "trained with); the same figure is Table 3's row for 67B",
        "Read in a study note that excerpts the paper (read against the v1 PDF): 5.76e23 FLOP is Gopher's "
        "compute budget (Fig. 2 caption), Chinchilla is 70B on 1.4T tokens at that budget (§4), and Table 3 "
        "lists 5.76e23 for 67B parameters on 1.5T tokens. FLOPs there include the embeddings (App. F); the "
        "ratio is 6ND over the budget, not over a measured count. Cluster not published.",
        identity='the budget is 6ND of the model and tokens chosen for it: the ratio is 1 by construction'),
)


# Held out: published dense runs that no constant of the course was read from or fitted to. The
# planner is run on them as on RUNS and reported apart (book/13), against HELD_OUT_TOLERANCE.
_L1 = "arXiv 2302.13971 (LLaMA): Table 15 (GPU-hours, A100-80GB), Table 2 (shape), §2.4 (2048 GPUs, 4M-token batch)"
_L2 = "arXiv 2307.09288 (Llama 2): Table 2 (GPU-hours, A100-80GB), Table 1 (tokens, 4K context, 4M-token batch, GQA)"
_L1_SEEN = ("GPU-hours in a secondary reading of the paper (13B: 135,168 quoted by an AI-model catalogue citing "
            "the paper's table); 2048 A100 80GB, 380 tokens/s/GPU and ~21 days for the 65B in a verbatim excerpt "
            "of §2.4. GPU count for the 13B not published: 2048 assumed (the cluster the paper names).")
_L2_SEEN = ("GPU-hours 184,320 / 368,640 / 1,720,320 and the 200 Gb/s endpoints (InfiniBand and RoCE) in a reading "
            "card of the paper; 2T tokens, 4K context and 4M-token batches in a verbatim copy of Table 1. GPU "
            "counts not published: 2048 assumed (RoCE 'scaled almost as well as InfiniBand up to 2000 GPUs').")
HELD_OUT: tuple[Run, ...] = (
    Run("LLaMA 13B", 13.0e9, 1.0e12, "A100", 2048, None, "none published", 135_168, "gpu_hours", _L1, _L1_SEEN,
        shape=dict(n_layers=40, d_model=5120, n_heads=40, seq_len=2048, global_batch_tokens=4e6, vocab_size=32_000, **_LLAMA)),
    Run("LLaMA 65B", 65.2e9, 1.4e12, "A100", 2048, None, "none published", 1_022_362, "gpu_hours", _L1, _L1_SEEN,
        shape=dict(n_layers=80, d_model=8192, n_heads=64, seq_len=2048, global_batch_tokens=4e6, vocab_size=32_000, **_LLAMA)),
    Run("Llama 2 7B", 6.74e9, 2.0e12, "A100", 2048, None, "none published", 184_320, "gpu_hours", _L2, _L2_SEEN,
        shape=dict(n_layers=32, d_model=4096, n_heads=32, seq_len=4096, global_batch_tokens=4 * 2 ** 20, vocab_size=32_000, **_LLAMA), elapsed=True),
    Run("Llama 2 13B", 13.0e9, 2.0e12, "A100", 2048, None, "none published", 368_640, "gpu_hours", _L2, _L2_SEEN,
        shape=dict(n_layers=40, d_model=5120, n_heads=40, seq_len=4096, global_batch_tokens=4 * 2 ** 20, vocab_size=32_000, **_LLAMA), elapsed=True),
    Run("Llama 2 70B", 69.0e9, 2.0e12, "A100", 2048, None, "none published", 1_720_320, "gpu_hours", _L2, _L2_SEEN,
        shape=dict(n_layers=80, d_model=8192, n_heads=64, kv_heads=8, seq_len=4096,
                   global_batch_tokens=4 * 2 ** 20, vocab_size=32_000, **_LLAMA), elapsed=True),
)
