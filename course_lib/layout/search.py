"""The layout search: the rules every layout keeps (``_rule_broken``), the grid searched
(``_candidates``), every layout that fits (``plan_layouts``), the fastest with its explanation
(``layout``) and one given layout (``estimate``). See ``course_lib.layout`` for the model."""
from __future__ import annotations

import inspect
import math
from dataclasses import replace

from .._validate import calculator, choice, flag, positive, positive_int, zero_stage
from ..hardware import lookup
from ..memory import RECOMPUTE
from ..network import DGX_H100_NDR, Network
from .evaluate import _evaluate
from .explanation import explain, gb
from . import bubble as _bubble
from .job import _INTERLEAVES, _POW2, MIN_CP_TOKENS, USABLE_FRACTION, Layout, _Job, _job
from .moe import MoE, expert_degrees

__all__ = ["plan_layouts", "estimate", "layout", "explain_layout"]


def _candidates(job: _Job, recompute: tuple[str, ...]):
    """Every (tp, cp, pp, dp, v, zero, recompute, ep) of the searched grid (powers of two, ``_INTERLEAVES``,
    ``expert_degrees``) that breaks none of ``_rule_broken``'s rules."""
    for tp in _POW2:
        for cp in _POW2:
            for pp in _POW2:
                if job.n % (tp * cp * pp):
                    continue
                dp = job.n // (tp * cp * pp)
                # m < PP runs, with its bubble (Llama 3 at its batch limit, arXiv 2407.21783 §3.3.2,
                # whose schedule also lets m be any count when interleaved)
                for v in [1] if pp == 1 or job.schedule != "1f1b" else _INTERLEAVES:
                    if _rule_broken(job, tp, cp, pp, dp, v, 0, "none", 1):
                        continue
                    for zero in range(job.max_zero + 1):
                        for mode in recompute:
                            for ep in (expert_degrees(job.moe, dp, _POW2) if job.moe else (1,)):
                                yield tp, cp, pp, dp, v, zero, mode, ep


def _rule_broken(job: _Job, tp: int, cp: int, pp: int, dp: int, v: int, zero: int, mode: str, ep: int) -> str:
    """The first rule a layout breaks ("" when none): the rules the search filters its grid with
    (``_candidates``) and ``estimate`` checks a given layout against. A published layout may use
    degrees the search does not try (BLOOM ran PP 12, Megatron-LM's 1T model DP 6), so any whole
    degree is evaluated."""
    if tp > job.g or job.g % tp:
        return f"TP must divide the {job.g} GPUs of a node (its all-reduces need the scale-up link)"
    if job.a % tp:
        return f"TP must divide the {job.a} heads"
    if job.s % cp or cp > job.max_cp:
        return f"CP must divide the sequence ({job.s} tokens)"
    if cp > 1 and job.s // cp < MIN_CP_TOKENS:
        return (f"CP must leave each rank at least {MIN_CP_TOKENS} tokens of the sequence (MIN_CP_TOKENS), "
                f"got {job.s} / {cp} = {job.s // cp}")
    if pp > job.L:
        return f"PP cannot exceed the {job.L} layers"
    if int(job.tokens / job.s // (dp * job.b)) < 1:
        return ("each pipeline needs at least one microbatch: DP may be at most the "
                f"{job.tokens / job.s:g} sequences of a step")
    if pp == 1 and v > 1:
        return "interleaving (v > 1) needs a pipeline (PP > 1)"
    if v * pp > job.L:
        return "v chunks of at least one layer per stage (v·PP <= n_layers)"
    if pp > 1 and job.schedule in _bubble.V_SHAPED and 2 * pp > job.L:
        return f"schedule={job.schedule!r} splits each stage into two chunks of at least one layer (2·PP <= n_layers)"
    if pp > 1 and job.schedule in ("dualpipev", "dualpipe") and int(job.tokens / job.s // (dp * job.b)) < 2 * pp:
        return f"schedule={job.schedule!r} needs at least 2·PP microbatches per step (DualPipe feeds both ends)"
    if job.moe is not None and (ep > dp or dp % ep or job.moe.n_experts % ep):
        return f"EP must divide DP ({dp}) and the {job.moe.n_experts} experts"
    return ""




def _all(job: _Job) -> list[Layout]:
    modes = ("none", "full") if job.flash or not job.selective else ("none", "selective", "full")
    return sorted((_evaluate(job, *c) for c in _candidates(job, modes)), key=lambda x: x.step_s)


@calculator
def plan_layouts(n_params: float, n_layers: int, d_model: int, n_heads: int, seq_len: int,
                 global_batch_tokens: float, n_gpus: int, *, gpu: str = "H100-SXM",
                 network: Network = DGX_H100_NDR, compute_mfu: float | None = None,
                 usable_fraction: float = USABLE_FRACTION,
                 flash_attention: bool = True, kv_heads: int | None = None,
                 micro_batch: int = 1, max_cp: int = 128, max_zero: int = 3, sequence_parallel: bool = True,
                 selective_recompute: bool = True, tp_overlap: bool = False, cp_comm: str = "ring",
                 vocab_size: int | None = None, moe: MoE | None = None,
                 block: str = "gpt", precision: str = "bf16", schedule: str = "1f1b",
                 fbw: tuple = _bubble.FBW) -> list[Layout]:
    """Every layout that fits, fastest first (see the module docstring for the model).

    ``network`` gives the GPUs per node and the NICs; ``kv_heads`` (grouped-query attention)
    shrinks what the CP ring carries; ``flash_attention`` (the default, as in every large run
    today) means no s×s scores are stored, so selective recomputation has nothing to save;
    ``max_cp=1`` plans without context parallelism (as before 2023), ``max_zero=0`` without
    sharded optimizer states (Megatron-LM in 2021); ``sequence_parallel=False`` and
    ``selective_recompute=False`` take away the two 2022 techniques of Korthikanti et al.
    (arXiv 2205.05198), leaving no recomputation or full recomputation.

    Compute time is the step model's (``course_lib.layout.stepmodel``: each GEMM, attention and the
    memory-bound ops from their shapes), unless ``compute_mfu`` gives one flat efficiency (the old
    what-if: 6Ψ + attention at that fraction of peak). ``tp_overlap=True`` hides TP's collectives
    behind the layer's GEMMs (Megatron-LM's ``--tp-comm-overlap``, off by default there);
    ``cp_comm`` is "ring" (K/V passed round behind the attention compute, Megatron-Core's form) or
    "all_gather" (gathered up front and exposed, as Llama 3 did). ``vocab_size`` counts the last
    stage's logits and cross-entropy (``memory.logits_bytes``, vocabulary-parallel over TP) on top
    of its layers for one microbatch; left None, logits are not counted. ``moe`` plans a mixture
    of experts (``course_lib.layout.moe``): ``n_params`` are then the active parameters, and an
    expert-parallel degree carved from DP joins the search. ``block`` says how a layer's
    activations are counted: "gpt", Korthikanti et al.'s GELU / multi-head / dropout block
    (``memory.activation_bytes_per_layer``), or "llama", an RMSNorm / grouped-query / SwiGLU block
    without dropout, counted tensor by tensor (``memory.llama_activation_bytes_per_layer``).

    ``precision="fp8"`` runs the block's GEMMs (``stepmodel.FP8_GEMMS``: QKV, attention output,
    MLP up and down, forward and both backward GEMMs; ``stepmodel.FP8_SOURCE``) at the chip's FP8
    peak, after casts timed as memory-bound work; attention, the norms and the embedding and output
    head (2·V·h, when ``vocab_size`` is given) stay BF16. A chip without FP8 is refused. The memory
    model is BF16's: DeepSeek-V3 caches Linear inputs in FP8 (arXiv 2412.19437 §3.3.3), Transformer
    Engine keeps FP8 weight copies beside BF16 ones; neither is modelled, so FP8 memory is an upper
    bound. ``Layout.mfu`` stays against the BF16 peak; ``Layout.fp8`` gives it against the FP8 and
    mixed peaks.

    ``schedule`` times every pipelined layout with that schedule's bubble, activations in flight
    and parameter copies, replayed by chapter 5's simulator (``course_lib.layout.bubble``): "1f1b"
    (interleaving searched), "zb-h1", "zb-v", "dualpipev" or "dualpipe" (v = 1: the V schedules hold
    their own two chunks). ``fbw`` is a stage's T_F : T_B : T_W for the replay, 1 : 1 : 1 by default
    (6N's three equal GEMMs; ``layout.bubble.FBW``).
    """
    job = _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, n_gpus, gpu, network,
               compute_mfu, usable_fraction, flash_attention, kv_heads, micro_batch, max_cp, max_zero,
               sequence_parallel, selective_recompute, tp_overlap, cp_comm, vocab_size, moe, block, precision,
               schedule, fbw)
    return [x for x in _all(job) if x.fits]


@calculator
def estimate(tp: int, cp: int, pp: int, dp: int, *, n_params: float, n_layers: int, d_model: int,
             n_heads: int, seq_len: int, global_batch_tokens: float, v: int = 1, zero: int = 1,
             recompute: str = "none", gpu: str = "H100-SXM", network: Network = DGX_H100_NDR,
             compute_mfu: float | None = None, usable_fraction: float = USABLE_FRACTION, flash_attention: bool = True,
             kv_heads: int | None = None, trim_first_last: bool = False, tp_overlap: bool = False,
             cp_comm: str = "ring", vocab_size: int | None = None, moe: MoE | None = None,
             ep: int = 1, schedule: str = "1f1b", block: str = "gpt", precision: str = "bf16",
             fbw: tuple = _bubble.FBW, rank_order: str = "tp-cp-pp-dp") -> Layout:
    """The planner's memory and step time for one given layout (e.g. a published one), whether or
    not it fits; it must satisfy the same rules (TP inside a node, m ≥ 1, CP dividing s). Inputs
    whose step time or memory overflows a float (``n_params=1e308``) are a ValueError naming them.

    ``trim_first_last=True`` lays the layers out as Llama 3 did (arXiv 2407.21783 §3.3.2, "we
    reduce one Transformer layer each from the first and the last stages"): the stages hold
    ⌈(L + 2)/PP⌉ layers but the first and the last one fewer, so the first stage, which keeps the
    most microbatches in flight, counts one layer less; ``v`` may then go up to one layer per chunk
    (v = ⌈(L + 2)/PP⌉, Llama 3's 126 layers in 16 stages of 8 chunks), beyond the search's v·PP ≤ L.
    The model states stay those of the average stage, Ψ/(TP·PP): the first stage's embedding
    table takes the place of the layer it gives up.

    ``schedule`` and ``fbw``: the pipeline schedule and a stage's T_F : T_B : T_W, as in
    :func:`plan_layouts` (``layout.bubble``: the bubble and activations in flight replayed by chapter
    5's simulator at this p and m; "dualpipe" also counts its second copy of the weights); every
    schedule but "1f1b" needs v = 1.

    ``rank_order`` numbers the ranks TP fastest, then CP, PP, DP (the default, Llama 3's) or, with
    "tp-cp-dp-pp", PP outermost, so that the data-parallel replicas, and the expert-parallel groups
    carved from them, fill a node first (DeepSeek-V3's "64-way EP spanning 8 nodes" beside 16-way
    PP, arXiv 2412.19437 §3.2).

    ``precision="fp8"``: the block's GEMMs in FP8, as in :func:`plan_layouts`.
    """
    degrees = {k: positive_int(k, x) for k, x in dict(tp=tp, cp=cp, pp=pp, dp=dp, v=v).items()}
    job = _job(n_params, n_layers, d_model, n_heads, seq_len, global_batch_tokens, math.prod(
        degrees[k] for k in ("tp", "cp", "pp", "dp")), gpu, network, compute_mfu, usable_fraction,
        flash_attention, kv_heads, 1, degrees["cp"], zero_stage("zero", zero), tp_overlap=tp_overlap,
        cp_comm=cp_comm, vocab_size=vocab_size, moe=moe, block=block, precision=precision, schedule=schedule,
        fbw=fbw)
    ep = positive_int("ep", ep)
    job = replace(job, rank_order=choice("rank_order", rank_order, ("tp-cp-pp-dp", "tp-cp-dp-pp")))
    if job.schedule != "1f1b" and v > 1:
        raise ValueError(f"schedule={job.schedule!r} is a schedule without interleaving: it needs v=1, got v={v}")
    if ep > 1 and job.moe is None:
        raise ValueError(f"ep={ep}: expert parallelism needs a mixture of experts (moe=...)")
    mode = choice("recompute", recompute, ("none", "full") if job.flash else RECOMPUTE)
    want = (tp, cp, pp, dp, v, zero, mode, ep)
    first = None
    if flag("trim_first_last", trim_first_last):    # None or "yes" is refused, not read as False
        stage = math.ceil((job.L + 2) / pp)
        if pp < 3 or v > stage:
            raise ValueError(f"trim_first_last needs pp >= 3 (a first, a middle and a last stage) and "
                             f"v <= {stage} layers per stage, got pp={pp}, v={v}")
        first = stage - 1
        want = (tp, cp, pp, dp, 1, zero, mode, ep)      # the other rules, checked as for v = 1
    broken = _rule_broken(job, *want)
    if broken:
        ep_text = f", ep={ep}" if ep > 1 else ""
        raise ValueError(f"tp={tp}, cp={cp}, pp={pp}, dp={dp}, v={v}{ep_text} breaks a rule: {broken}")
    return _evaluate(job, tp, cp, pp, dp, v, zero, mode, ep, first)


@calculator
def layout(n_params: float, n_layers: int, d_model: int, n_heads: int, seq_len: int,
           global_batch_tokens: float, n_gpus: int, gpu: str = "H100-SXM", gpus_per_node: int = 8,
           nics_per_node: int = 8, nic_bits_per_s: float | None = None, kv_heads: int | None = None,
           compute_mfu: float | None = None, usable_fraction: float = USABLE_FRACTION, flash_attention: bool = True,
           max_cp: int = 128, max_zero: int = 3, sequence_parallel: bool = True,
           selective_recompute: bool = True, tp_overlap: bool = False, cp_comm: str = "ring",
           vocab_size: int | None = None, moe: MoE | None = None, block: str = "gpt",
           precision: str = "bf16", schedule: str = "1f1b", fbw: tuple = _bubble.FBW) -> Layout:
    """The fastest layout that fits, with its explanation (``python -m course_lib layout``): the
    planner of :func:`plan_layouts` on nodes of ``gpus_per_node`` GPUs and ``nics_per_node`` NICs
    of ``nic_bits_per_s`` each (default: the NIC of ``gpu``'s generation, ``Accelerator.nic_bits_per_s``).
    ``precision`` is "bf16" or "fp8" (the block's GEMMs in FP8, as in :func:`plan_layouts`);
    ``schedule`` and ``fbw`` the pipeline schedule and a stage's T_F : T_B : T_W, as there."""
    plans, everything = _search(locals())
    return replace(plans[0], explanation=explain(plans, everything))


def _search(a: dict) -> tuple[list[Layout], list[Layout]]:
    """:func:`layout`'s search on its arguments ``a`` (by name): the layouts that fit, fastest first,
    and every layout evaluated; ValueError naming the inputs when none fits."""
    nic = lookup("gpu", a["gpu"]).nic_bits_per_s if a["nic_bits_per_s"] is None else a["nic_bits_per_s"]
    net = Network("custom", positive_int("gpus_per_node", a["gpus_per_node"]),
                  positive_int("nics_per_node", a["nics_per_node"]), positive("nic_bits_per_s", nic))
    job = _job(a["n_params"], a["n_layers"], a["d_model"], a["n_heads"], a["seq_len"], a["global_batch_tokens"],
               a["n_gpus"], a["gpu"], net, a["compute_mfu"], a["usable_fraction"], a["flash_attention"],
               a["kv_heads"], 1, a["max_cp"], a["max_zero"], a["sequence_parallel"], a["selective_recompute"],
               a["tp_overlap"], a["cp_comm"], a["vocab_size"], a["moe"], a["block"], a["precision"],
               a["schedule"], a["fbw"])
    everything = _all(job)
    plans = [x for x in everything if x.fits]
    if not plans:
        small = min(everything, key=lambda x: x.memory_bytes, default=None)
        why = (f"the smallest needs {gb(small.memory_bytes)} per GPU" if small else
               "the GPU count and the batch floor (a sequence per data-parallel replica) allow no layout")
        if small and small.activation_bytes > small.states_bytes:   # then the width and length are the cause
            why += (f", {gb(small.activation_bytes)} of it activations (d_model={job.h}, "
                    f"seq_len={job.s})")
        raise ValueError(f"no layout fits: n_params={a['n_params']!r} on n_gpus={a['n_gpus']!r} with "
                         f"global_batch_tokens={a['global_batch_tokens']!r} and usable_fraction="
                         f"{a['usable_fraction']!r} of HBM: {why}")
    return plans, everything


def explain_layout(lang: str = "en", /, **kwargs) -> str:
    """The explanation of ``layout(**kwargs)`` (its ``explanation``, which is English) in ``lang``,
    "en" or "zh" (course_lib.i18n): the same search, the same reasons, the page's words."""
    bound = inspect.signature(layout).bind(**kwargs)
    bound.apply_defaults()
    plans, everything = _search(dict(bound.arguments))
    return explain(plans, everything, lang=lang)
