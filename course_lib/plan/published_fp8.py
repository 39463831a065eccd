"""FP8 runs beside the planner: NVIDIA's published benchmark rows as a held-out check, and what the
step model leaves untimed in DeepSeek-V3 (``untimed_parts``).

**Held out.** NVIDIA's Megatron-Bridge performance summary (``docs/performance-summary.md`` of
NVIDIA-NeMo/Megatron-Bridge, read at commit df0289c180dd20ff26933455c7a0a11084f6a36f; the page
https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html) lists per release
container and system each model's layout, precision and tokens per second per GPU. No constant of the
planner was read from or fitted to it. Every row below is copied from its "25.11 NeMo Container"
section. What was looked for and is not there: on DGX-H100, no model has a BF16 row beside an FP8 row
at the same layout (the H100 rows are FP8 current scaling, "FP8-CS", only), and the older NeMo
performance pages stored here (NVIDIA/NeMo ``docs/source/performance/performance_summary.md``, 24.07)
list FP8 alone. The one same-model, same-layout BF16/FP8 pair in the stored tables is DeepSeek-V3
without its MTP module on DGX-GB300 (MXFP8). So the speed-up check has one pair, and the absolute
check the H100 FP8 rows; no figure is typed from anywhere else.

Conventions: a row's step time is its global batch over the cluster's tokens per second,
GBS · s / (tokens/s/GPU · GPUs). FSDP = 1 is ZeRO-3; FSDP = 0 is Megatron's DDP, taken with its
distributed optimizer (ZeRO-1, an assumption: the table does not say). The planner times MXFP8 as its
FP8 (the same GEMM peak; MX's 1×32 E8M0 scales are not counted apart from the casts), a GB300 NVL72
rack as B300s in one 72-GPU NVLink domain, and recomputation as none (the table does not say).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..layout.moe import DEEPSEEK_V3

__all__ = ["Bench", "FP8_HELD_OUT", "SPEEDUP_PAIRS", "SOURCE", "untimed_parts"]

SOURCE = ("NVIDIA Megatron-Bridge performance summary, 25.11 NeMo Container, Pre-Training Performance "
          "(NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at df0289c1; "
          "docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html)")


@dataclass(frozen=True)
class Bench:
    """One published benchmark row: the model on its layout and system, and its measured rate."""

    name: str
    system: str                   # as the table names it
    gpu: str                      # course_lib.hardware name the planner uses for it
    gpus_per_node: int
    precision: str                # as the table names it ("FP8-CS", "FP8-MX", "BF16")
    tokens_per_s_per_gpu: float
    global_batch: int             # sequences (GBS)
    layout: dict                  # estimate's degrees: tp, cp, pp, dp, v, zero, ep
    shape: dict                   # estimate's model shape (seq_len included)
    n_params: float
    notes: str = ""
    extra: dict = field(default_factory=dict)   # other estimate options (rank_order, ...)

    @property
    def n_gpus(self) -> int:
        return self.layout["tp"] * self.layout["cp"] * self.layout["pp"] * self.layout["dp"]

    @property
    def step_s(self) -> float:
        """The published step: GBS · s / (tokens/s/GPU · GPUs)."""
        return self.global_batch * self.shape["seq_len"] / (self.tokens_per_s_per_gpu * self.n_gpus)

    @property
    def planner_precision(self) -> str:
        return "bf16" if self.precision == "BF16" else "fp8"


_L3 = dict(vocab_size=128_256, block="llama", seq_len=8192)
_DSV3 = dict(n_layers=61, d_model=7168, n_heads=128, seq_len=4096, vocab_size=129_280, moe=DEEPSEEK_V3)
_GB300 = ("GB300 NVL72 rack: the B300 entry of course_lib.hardware in one 72-GPU NVLink domain; "
          "DeepSeek-V3 without its MTP module, as the table's row says; MXFP8 timed as the planner's FP8")
FP8_HELD_OUT: tuple[Bench, ...] = (
    Bench("Llama 3 8B", "DGX-H100", "H100-SXM", 8, "FP8-CS", 14451, 128,
          dict(tp=1, cp=1, pp=1, dp=8, v=1, zero=3),
          dict(n_layers=32, d_model=4096, n_heads=32, kv_heads=8, **_L3), 8.03e9, "FSDP 1, MBS 1, GA 16"),
    Bench("Llama 3 70B", "DGX-H100", "H100-SXM", 8, "FP8-CS", 1602, 128,
          dict(tp=4, cp=1, pp=8, dp=2, v=5, zero=1),
          dict(n_layers=80, d_model=8192, n_heads=64, kv_heads=8, **_L3), 70.6e9, "FSDP 0, VP 5, MBS 1, GA 64"),
    Bench("Llama 3.1 405B", "DGX-H100", "H100-SXM", 8, "FP8-CS", 292, 512,
          dict(tp=8, cp=2, pp=8, dp=8, v=8, zero=1),
          dict(n_layers=126, d_model=16384, n_heads=128, kv_heads=8, **_L3), 405e9, "FSDP 0, VP 8, MBS 1, GA 64"),
    Bench("DeepSeek-V3 (w/o MTP)", "DGX-GB300", "B300", 72, "BF16", 3848, 4096,
          dict(tp=1, cp=1, pp=2, dp=128, v=4, zero=1, ep=32), _DSV3, 37e9, _GB300),
    Bench("DeepSeek-V3 (w/o MTP)", "DGX-GB300", "B300", 72, "FP8-MX", 4357, 4096,
          dict(tp=1, cp=1, pp=2, dp=128, v=4, zero=1, ep=32), _DSV3, 37e9, _GB300),
)
# (BF16 row, FP8 row) of the same model, layout and system: the published FP8 speed-up
SPEEDUP_PAIRS: tuple[tuple[Bench, Bench], ...] = ((FP8_HELD_OUT[3], FP8_HELD_OUT[4]),)


def untimed_parts(x, n_params: float = 37e9, n_layers: int = 61, d_model: int = 7168, seq_len: int = 4096,
                  vocab: int = 129_280, global_batch_tokens: float = 15360 * 4096, hbm_bandwidth: float = 3.35e12,
                  moe=DEEPSEEK_V3) -> list[dict]:
    """What the step model does not time in DeepSeek-V3 (arXiv 2412.19437) on layout ``x`` (its
    ``Layout``), each as a share of that layout's step: ``part``, ``share`` and ``basis``.

    * MLA's attention (§2.1.1): 128 heads of query-key width 192 (128 + 64 rotary) and value width
      128, where the model times h-wide attention (2·s·h per token and layer forward, causal);
      the extra forward FLOPs s·(128·192 + 128·128) − 2·s·h per token and layer, ×3.5 with
      FlashAttention's backward (2.5× the forward), at the step's average rate (6N over the step);
    * the MTP module (§2.2, depth 1): one more MoE block's active parameters, its 2h×h projection and
      the shared output head run again (V·h), 6 FLOP per parameter and token, at the same rate;
    * routing (§2.1.2): the gate's h×E GEMM per MoE layer, 6·h·E FLOP per token, at the same rate;
    * permutation: the k routed copies of each token gathered before the dispatch and scattered
      after the combine, read and written in BF16 (4·k·h·2 bytes per token and MoE layer forward,
      ×3 with the backward), at the datasheet's HBM bandwidth over the tokens a GPU handles.
    MLA's projections themselves are inside 6N (the 37B) and timed as the model's GEMMs. A share of
    6N's FLOPs is that share of the step at the step's average rate (6N over the step is its MFU)."""
    attn_extra = n_layers * 3.5 * seq_len * (128 * 192 + 128 * 128 - 2 * d_model)
    layer = (n_params - 2.0 * vocab * d_model) / n_layers
    mtp = 6.0 * (layer + 2.0 * d_model * d_model + vocab * d_model)
    gate = 6.0 * d_model * moe.n_experts * moe.moe_layers
    per_gpu_tokens = global_batch_tokens / x.dp * moe.moe_layers / x.pp
    perm_s = per_gpu_tokens * 3 * 4 * moe.top_k * d_model * 2.0 / hbm_bandwidth
    parts = [("MLA attention (192-wide query-key heads)", attn_extra / (6.0 * n_params), "FLOPs at the step's rate"),
             ("MTP module (depth 1)", mtp / (6.0 * n_params), "FLOPs at the step's rate"),
             ("routing (the gate's GEMM)", gate / (6.0 * n_params), "FLOPs at the step's rate"),
             ("permutation (gather and scatter of routed copies)", perm_s / x.step_s, "HBM bytes at the datasheet rate")]
    return [dict(part=p, share=s, basis=b) for p, s, b in parts]
