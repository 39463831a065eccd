"""What the layout planner plans and answers: the job (a model on a cluster, every input checked
by ``_job`` with the name the user typed), one ``Layout`` and its estimate, and the planner's
cited constants (see ``course_lib.layout`` for the model)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .._validate import choice, flag, fraction, positive, positive_int, zero_stage
from ..hardware import ACCELERATORS, lookup
from ..memory import BLOCKS
from ..network import Network
from . import bubble as _bubble
from .moe import MoE

__all__ = ["Layout", "USABLE_FRACTION", "GMLAKE_A100_FRAGMENTATION_BYTES", "MIN_CP_TOKENS"]

_POW2 = tuple(2 ** i for i in range(8))   # 1 ... 128: the TP, CP and PP degrees searched
_INTERLEAVES = (1, 2, 4, 8)                # model chunks per pipeline rank searched
_MAX_LAYERS = 10 ** 5
# The share of HBM a training step may plan for. The rest goes to the CUDA context, NCCL's buffers
# and, mostly, the caching allocator's fragmentation: GMLake (Guo et al., ASPLOS 2024,
# arXiv 2401.08156) recovers 9.2 GB on average (up to 25 GB) of an 80 GB A100 across eight LLM
# training workloads by defragmenting PyTorch's allocator, i.e. ~11 % lost, so 0.9 is the average
# case, not the worst. Llama 3 405B's published 8K layout (arXiv 2407.21783 §3.3.2) fits at it,
# as Meta ran it (tests/test_layout.py checks both).
USABLE_FRACTION = 0.9
GMLAKE_A100_FRAGMENTATION_BYTES = 9.2e9     # the average above, of an 80 GB A100
# The fewest tokens of the sequence a context-parallel rank may hold. CP is a long-context tool:
# Llama 3 405B trained its 8K stage without it and used CP 16 only at 131K, 8,192 tokens a rank
# (arXiv 2407.21783 §3.3.2); the shortest chunk in a tuned recipe is NeMo's Llama 3 70B pretraining
# recipe, CP 2 at 8,192 tokens, 4,096 a rank (NVIDIA/NeMo, nemo/collections/llm/recipes/llama3_70b.py).
# The step model times a rank's attention on its s/CP block but not what a ring step costs beyond
# its bytes (a kernel launch and a send per step, the causal split's imbalance), so the search does
# not go below what a published configuration ran: at 2K tokens it gave MHA models (MegaScale 175B,
# OPT-175B) CP 4 and 2, an artefact of that omission (issue #43, item 7).
MIN_CP_TOKENS = 4096


@dataclass(frozen=True)
class Layout:
    """One layout and what the planner estimates for it (bytes per GPU, seconds per step)."""

    tp: int
    cp: int
    pp: int
    dp: int
    v: int
    zero: int
    recompute: str
    microbatches: int
    states_bytes: float
    activation_bytes: float
    usable_bytes: float
    compute_s: float
    bubble_s: float
    tp_s: float
    cp_s: float
    pp_s: float
    dp_s: float
    mfu: float
    memory_bytes: float    # states + activations
    step_s: float          # compute + bubble + the four exposed communication terms
    explanation: str = ""
    breakdown: dict = field(default_factory=dict, compare=False)   # compute by part, seconds per step
    hidden: dict = field(default_factory=dict, compare=False)      # communication hidden, per level
    ep: int = 1            # expert parallelism, carved from DP (a mixture of experts)
    ep_s: float = 0.0      # the exposed all-to-all of the MoE layers
    schedule: str = "1f1b"  # the pipeline schedule (layout.bubble.SCHEDULES), replayed by chapter 5's simulator
    # precision="fp8" only (empty under BF16): ``mfu`` above stays against the BF16 peak, the course's
    # convention; here the same step against the FP8 peak and the mixed one (course_lib.fp8.bill)
    fp8: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.usable_bytes

    def shape(self) -> str:
        """``TP 8 · CP 1 · PP 16 (v=2) · DP 128``."""
        named = {"zb-h1": "ZB-H1", "zb-v": "ZB-V", "dualpipev": "DualPipeV", "dualpipe": "DualPipe"}
        v = f" (v={self.v})" if self.v > 1 else (f" ({named[self.schedule]})" if self.schedule in named and self.pp > 1
                                                 else "")
        ep = f" (EP {self.ep})" if self.ep > 1 else ""
        return f"TP {self.tp} · CP {self.cp} · PP {self.pp}{v} · DP {self.dp}{ep}"


@dataclass(frozen=True)
class _Job:
    psi: float
    L: int
    h: int
    a: int
    s: int
    tokens: float
    n: int
    kv: int
    b: int
    flash: bool
    peak: float
    rate: float | None  # FLOP/s at a given flat compute_mfu (the what-if); None: the step model
    link: float
    g: int
    net: Network
    usable: float
    max_cp: int
    max_zero: int
    sp: bool = True          # sequence parallelism with TP (Korthikanti et al. 2022, arXiv 2205.05198)
    selective: bool = True   # selective recomputation offered (same paper; needs stored scores)
    gpu: str = "H100-SXM"
    hbm_bandwidth: float = 3.35e12
    tp_overlap: bool = False  # TP collectives hidden behind the layer's GEMMs (Megatron's tp-comm-overlap)
    cp_comm: str = "ring"     # "ring" (K/V passed round, hidden behind attention) or "all_gather" (exposed)
    vocab: int = 0            # vocabulary size: the last stage's logits and loss (0: not counted)
    moe: MoE | None = None   # a mixture of experts (course_lib.layout.moe)
    schedule: str = "1f1b"    # the pipeline schedule (layout.bubble.SCHEDULES)
    fbw: tuple = (1.0, 1.0, 1.0)   # T_F : T_B : T_W of a stage, for the replayed bubble (layout.bubble.FBW)
    rank_order: str = "tp-cp-pp-dp"   # fastest first; "tp-cp-dp-pp" puts DP (EP) inside nodes, PP across
    block: str = "gpt"        # how activations are counted (memory.BLOCKS): Korthikanti's or a Llama block's
    fp8_peak: float = 0.0     # precision="fp8": the chip's dense FP8 peak (stepmodel.FP8_GEMMS run at it); 0: BF16


def _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu, network,
         compute_mfu, usable_fraction, flash_attention, kv_heads, micro_batch, max_cp, max_zero,
         sequence_parallel=True, selective_recompute=True, tp_overlap=False, cp_comm="ring",
         vocab_size=None, moe=None, block="gpt", precision="bf16", schedule="1f1b", fbw=_bubble.FBW) -> _Job:
    a = positive_int("n_heads", n_heads)
    kv = a if kv_heads is None else positive_int("kv_heads", kv_heads)
    if kv > a or a % kv:
        raise ValueError(f"kv_heads ({kv}) must divide n_heads ({a}): each K/V head serves a whole group "
                         f"of query heads")
    if not isinstance(network, Network):
        raise ValueError(f"network must be a course_lib.network.Network, got {network!r:.40}")
    h = positive_int("d_model", d_model)
    if h % a:    # d_model 1000 with 7 heads, or 32 with 64: no such attention exists
        raise ValueError(f"n_heads ({a}) must divide d_model ({h}): each head gets d_model/n_heads "
                         f"dimensions, a whole number of at least 1")
    s = positive_int("seq_len", seq_len)
    tokens = positive("global_batch_tokens", global_batch_tokens)
    if tokens < s:
        raise ValueError(f"global_batch_tokens ({global_batch_tokens!r}) is less than one sequence "
                         f"(seq_len={s})")
    acc = lookup("gpu", gpu)
    u = None if compute_mfu is None else fraction("compute_mfu", compute_mfu)
    peak = acc.peak(acc.training_dtype)
    fp8_peak = _fp8_peak(acc, precision, u)
    return _Job(positive("n_params", n_params), positive_int("n_layers", n_layers, maximum=_MAX_LAYERS), h, a, s,
                tokens, positive_int("n_gpus", n_gpus), kv * h // a, positive_int("micro_batch", micro_batch),
                flag("flash_attention", flash_attention), peak, None if u is None else peak * u,
                acc.link_bandwidth, network.gpus_per_node, network,
                acc.hbm_bytes * fraction("usable_fraction", usable_fraction), positive_int("max_cp", max_cp),
                zero_stage("max_zero", max_zero), flag("sequence_parallel", sequence_parallel),
                flag("selective_recompute", selective_recompute), acc.name, acc.hbm_bandwidth,
                flag("tp_overlap", tp_overlap), choice("cp_comm", cp_comm, ("ring", "all_gather")),
                0 if vocab_size is None else positive_int("vocab_size", vocab_size, minimum=2),
                _moe(moe, n_layers, n_params), block=choice("block", block, BLOCKS), fp8_peak=fp8_peak,
                schedule=choice("schedule", schedule, _bubble.SCHEDULES), fbw=_bubble._check_fbw(fbw))


def _fp8_peak(acc, precision, compute_mfu) -> float:
    """The dense FP8 peak the step model runs ``stepmodel.FP8_GEMMS`` at under ``precision="fp8"``
    (``course_lib.hardware``'s cited datasheet figure), 0.0 under "bf16" (the chip's 16-bit training
    dtype: FP16 on V100). A chip without FP8 tensor cores (A100, V100, the TPUs listed) is refused,
    and so is a flat ``compute_mfu``, which spreads 6Ψ over one peak and has no GEMMs to run in FP8."""
    if choice("precision", precision, ("bf16", "fp8")) == "bf16":
        return 0.0
    p8 = acc.peak_flops.get("fp8", 0.0)
    if not p8:
        raise ValueError(f"precision='fp8': gpu={acc.name!r} has no FP8 tensor cores (no dense FP8 peak in "
                         f"the course's hardware table); use precision='bf16' or a chip with FP8: "
                         f"{', '.join(n for n, a in ACCELERATORS.items() if a.peak_flops.get('fp8'))}")
    if compute_mfu is not None:
        raise ValueError(f"precision='fp8' needs the step model: compute_mfu={compute_mfu!r} is a flat share of "
                         f"the BF16 peak with no GEMMs to run in FP8; leave compute_mfu=None")
    return p8


def _moe(moe, n_layers, n_params) -> MoE | None:
    """The mixture of experts, checked, and checked against ``n_params``: with ``moe`` the planner
    reads ``n_params`` as the active parameters, so they must hold more than the experts a token
    passes through (k routed and the shared ones in every MoE layer), or the dense rest
    (attention, embeddings) would be negative. One rule for ``plan_layouts``, ``layout``,
    ``estimate`` and ``plan``, which all build their job here."""
    if moe is None:
        return None
    if not isinstance(moe, MoE):
        raise ValueError(f"moe must be a course_lib.layout.MoE or None, got {moe!r:.40}")
    moe = moe.checked(positive_int("n_layers", n_layers, maximum=_MAX_LAYERS))
    experts = moe.moe_layers * (moe.top_k + moe.shared) * moe.expert_params
    if positive("n_params", n_params) <= experts:
        raise ValueError(f"n_params ({n_params!r}) must be more than the experts a token passes through: with "
                         f"moe, n_params counts the active parameters, and {moe.moe_layers} MoE layers x "
                         f"({moe.top_k} routed + {moe.shared} shared) experts of {moe.expert_params:.4g} parameters "
                         f"are {experts:.4g} already, with nothing left for attention")
    return moe
