"""A 4D layout planner: pick (TP, CP, PP, DP), the ZeRO stage and recomputation for a cluster.

For every layout whose degrees multiply to the GPU count, the planner asks two questions:

1. **Does it fit?** Model states per GPU are ZeRO's (chapter 4) for Ψ/(TP·PP) parameters sharded
   over the DP·CP ranks that hold the same weights. Activations are Korthikanti et al.'s per-layer
   bytes (``memory.activation_bytes_per_layer``, with sequence parallelism whenever TP > 1), or a
   Llama block's counted tensor by tensor with ``block="llama"``
   (``memory.llama_activation_bytes_per_layer``), at the context-parallel shard s/CP, times the
   layers a first pipeline stage keeps alive: ⌈L/PP⌉ layers for min(PP, m) microbatches under 1F1B, × (1 + (PP−1)/(PP·v)) with v interleaved chunks (their
   §4.2.3; at most m); L layers of one microbatch without PP. What must fit is ``usable_fraction`` of HBM (the
   rest is logits, workspace, communication buffers and fragmentation, not modelled).
2. **How long is a step?** Compute is timed op by op on one GPU (``course_lib.layout.stepmodel``): each
   GEMM of a layer from its shape after the TP and CP splits, FlashAttention at its rate for the
   block length, the memory-bound ops and the optimizer step over HBM, plus what recomputation
   reruns (one forward with full recomputation, attention's forward with selective); MFU is the
   output. (``compute_mfu=x`` instead spreads 6Ψ + attention over the GPUs at x of the peak: the
   old flat what-if.) The pipeline adds its bubble, (PP−1)/(v·m) of the pipeline's busy time under
   1F1B, or what chapter 5's simulator replays for the schedule chosen (``layout.bubble``), and
   every level adds its *exposed* communication: TP's four all-reduces per layer
   (``comm.tp_bytes_per_layer``) over NVLink, on the critical path unless ``tp_overlap=True``
   hides them behind the layer's GEMMs; CP's K/V exchange (``comm.cp_bytes_per_layer``, three
   times the forward bytes with the backward), as a ring minus the attention compute it hides
   behind, or as Llama 3's all-gather, exposed (``cp_comm``); PP's point-to-point activations (all
   counted, an upper bound); DP's ZeRO collectives over the network (``course_lib.network``) minus
   the compute they overlap (the last microbatch's backward for ZeRO 0–2, whose gradients are
   reduced once per step; the whole step for ZeRO-3, which re-gathers the parameters for every
   microbatch's forward and backward). ``Layout.breakdown`` holds the compute by op and
   ``Layout.hidden`` the communication each level hid. ``precision="fp8"`` runs the block's GEMMs
   (``stepmodel.FP8_GEMMS``) at the chip's FP8 peak plus their casts (``breakdown["quantize"]``);
   MFU stays against the BF16 peak, ``Layout.fp8`` adds it against the FP8 and mixed peaks.

Ranks are numbered TP fastest, then CP, PP, DP (Llama 3's order, arXiv 2407.21783 §3.3.2; ``estimate``'s
``rank_order="tp-cp-dp-pp"`` puts PP outermost, DeepSeek-V3's EP inside a stage's nodes), so a
group lives inside one node when the degrees inside it multiply to at most the GPUs per node;
across nodes each GPU gets its share of the node's NICs per group member in the node. TP never
leaves a node. A layout is refused when the batch is too small for it: DP·m·b·s ≤ B tokens with
m ≥ 1 microbatch per pipeline (chapter 4's floor: PP does not lift it, CP and TP do). Fewer
microbatches than stages are allowed and pay their bubble, (PP−1)/(v·m) of the busy time, as
Llama 3 ran at its batch limit (arXiv 2407.21783 §3.3.2). CP leaves each rank at least
``MIN_CP_TOKENS`` tokens of the sequence, the shortest chunk a published configuration ran.

Where each part lives (no two of them import each other; this file only gathers the names):

* ``job``: the inputs, checked (``_job``), and the answer for one layout (``Layout``), with the
  planner's cited constants (``USABLE_FRACTION``) and the searched grid;
* ``bubble``: a pipeline schedule's bubble, activations in flight and parameter copies, replayed by
  chapter 5's simulator (``schedule="1f1b" | "zb-h1" | "zb-v" | "dualpipev" | "dualpipe"``);
* ``evaluate``: one layout's memory and step time (``_evaluate``), from the step model and the
  communication of each level;
* ``stepmodel``: one layer's compute on one GPU, op by op (GEMMs, attention, memory-bound ops);
* ``moe``: a mixture of experts (``MoE``, ``DEEPSEEK_V3``): routed experts and their all-to-all;
* ``search``: the rules a layout must keep (``_rule_broken``), the search (``plan_layouts``,
  ``layout``) and one given layout (``estimate``);
* ``explanation``: why the chosen layout wins (``explain``; ``explain_layout`` in the page's language); ``published``: the published runs the
  chapters compare with (``llama3_405b``, ``megatron_1t``, ``MEGATRON_2021``); ``widget``: chapter
  11's calculator (``layout_widget``).
"""
from __future__ import annotations

from ..network import DGX_H100_NDR, Network
from . import bubble, moe, stepmodel
from .evaluate import _evaluate, _in_node  # noqa: F401 (read by course_lib.checks and tests/test_diagrams.py)
from .explanation import explain, gb
from .job import GMLAKE_A100_FRAGMENTATION_BYTES, MIN_CP_TOKENS, USABLE_FRACTION, Layout, _job  # noqa: F401
from .moe import DEEPSEEK_V2, DEEPSEEK_V3, MoE
from .published import LLAMA3_TABLE4_MFU, MEGATRON_2021, llama3_405b, megatron_1t, mfu_counting_attention
from .search import estimate, explain_layout, layout, plan_layouts
from .widget import layout_calculator, layout_widget, render_layout

__all__ = ["Layout", "plan_layouts", "estimate", "layout", "explain", "explain_layout", "llama3_405b", "megatron_1t", "MEGATRON_2021",
           "USABLE_FRACTION", "MIN_CP_TOKENS", "GMLAKE_A100_FRAGMENTATION_BYTES", "gb",
           "mfu_counting_attention", "LLAMA3_TABLE4_MFU", "layout_calculator", "render_layout", "layout_widget",
           "MoE", "DEEPSEEK_V3", "DEEPSEEK_V2", "DGX_H100_NDR", "Network", "moe", "stepmodel", "bubble"]
