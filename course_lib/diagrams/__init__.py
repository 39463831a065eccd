"""Concept diagrams drawn from the course's own calculators, so a picture cannot drift from the
numbers the chapters compute.

Each function returns a matplotlib ``Figure`` (the course's style and Okabe-Ito colours, text of
8 pt or more at 6.4 in wide) and reads what it draws from the code the chapter tests:

* chapter 1 (``gemms``): :func:`six_n` — one linear layer's three products (forward Y = X·W,
  backward dX = dY·Wᵀ and dW = Xᵀ·dY) as grids of their elements, each 2 FLOPs per weight per
  token, and a model's training FLOPs per token, the dense 6N beside the attention scores, from
  ``flops.training_flops`` and ``flops.attention_flops_per_token``.
* chapter 3 (``banding``): :func:`lsh_banding` — two edited pairs' MinHash signatures cut into
  the pipeline's bands and rows (``data.parallel.run_pipeline``'s defaults), the bands that make
  a candidate, beside ``data.dedup.s_curve`` and its ``lsh_threshold``.
* chapter 4 (``sharding``): :func:`zero_stages` — who owns which shard of the weights, gradients
  and optimizer state under DP and ZeRO-1/2/3, from ``memory.zero_memory_breakdown`` and
  ``comm.zero_bytes_per_step``; :func:`fsdp_unit` — an FSDP unit's gather, compute, free, with
  the bytes of ``comm.fsdp_bytes_per_step``.
* chapter 5 (``schedules``): :func:`pipeline_schedules` — GPipe, 1F1B and interleaved 1F1B as
  the exact simulator ``pipeline.simulate`` replays them, with rank 0's stash of activations.
* chapter 6 (``rollback``): :func:`rollback_and_skip` — a loss spike, the rollback to a
  checkpoint from before it and the skip past its data, the step counter and the data position
  parting ways; from the cached guarded run and ``stability.spikes.plan_rollback``.
* chapter 7 (``formats``): :func:`float_formats` — the sign, exponent and mantissa bits of FP32,
  BF16, FP16, FP8 E4M3 and E5M2 beside the range (smallest normal to max) and eps each gives,
  from ``numerics.format_info``.
* chapter 8 (``routing``): :func:`moe_routing` — token-choice top-k under a capacity limit, the
  overflow dropped, and expert choice before and after only the last token changes, an earlier
  token's routing moving with it; from ``moe.token_choice`` and ``moe.expert_choice``.
* chapter 10 (``inflight``): :func:`pipeline_rl_inflight` — PipelineRL's generator slots
  sequence by sequence, each stretch labelled with the weight version that wrote it and shaded by
  its lag when trained, from the simulator ``rl.simulate.simulate(record=True)``.
* chapter 11 (``tensor``): :func:`tp_split` — Megatron's column→row split with f and g and
  sequence parallelism's regions, with ``comm.tp_bytes_per_layer``; :func:`cp_ring` — the
  context-parallel ring and the causal work of a contiguous and a zig-zag split
  (``tensor_context.context.chunk_ids``).
* chapters 11 and 13 (``mesh``): :func:`layout_mesh` — a layout's ranks over nodes, TP fastest,
  then CP, PP, DP, as ``layout`` numbers them.
* chapter 12 (``checkpoints``): :func:`checkpoint_restart` — one MTBF of a run checkpointing
  every τ, the failure that loses the work since the last complete checkpoint, the restart, and
  the goodput left, from ``faults.goodput``, ``faults.expected_lost_seconds`` and Young's
  ``faults.optimal_checkpoint_interval``.
* chapter 14 (``mesh``): :func:`ep_all_to_all` — who sends how many (token, expert) pairs to whom
  in the dispatch all-to-all, routed by chapter 8's ``moe.token_choice``, beside
  ``comm.ep_bytes_per_layer``'s balanced expectation.

Every drawer has a data function beside it (``zero_ownership``, ``fsdp_events``,
``mesh_coords``, ``ep_send_counts``, ``checkpoint_timeline``, ``goodput_shares``,
``routing_example``, ``banded_pairs``, ``inflight_sequences``, ``rollback_trace``, ``linear_gemms``,
``token_flops``, ``format_layouts``, …) that the
tests check against the calculators.
This is chapter-level code: the core imports none of it.
"""
from .banding import banded_pairs, lsh_banding, pipeline_banding
from .checkpoints import checkpoint_restart, checkpoint_timeline, goodput_shares, llama3_job_mtbf
from .formats import float_formats, format_layouts
from .gemms import linear_gemms, six_n, token_flops
from .inflight import inflight_run, inflight_sequences, pipeline_rl_inflight
from .mesh import DIMS, ep_all_to_all, ep_send_counts, layout_mesh, mesh_coords, mesh_groups
from .rollback import rollback_and_skip, rollback_trace
from .routing import moe_routing, routing_example
from .schedules import pipeline_schedules, stash_curve
from .sharding import fsdp_events, fsdp_unit, zero_ownership, zero_stages
from .tensor import cp_ring, cp_work, tp_split, tp_stages

__all__ = ["DIMS", "tp_stages", "zero_ownership", "zero_stages", "fsdp_events", "fsdp_unit", "pipeline_schedules",
           "stash_curve", "tp_split", "cp_work", "cp_ring", "mesh_coords", "mesh_groups",
           "layout_mesh", "ep_send_counts", "ep_all_to_all", "llama3_job_mtbf", "checkpoint_timeline",
           "goodput_shares", "checkpoint_restart", "routing_example", "moe_routing",
           "pipeline_banding", "banded_pairs", "lsh_banding", "inflight_sequences", "inflight_run",
           "pipeline_rl_inflight", "rollback_trace", "rollback_and_skip", "linear_gemms", "token_flops", "six_n",
           "format_layouts", "float_formats"]
