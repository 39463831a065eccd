"""The planner itself: size → layout → step time → days and cost → checkpoints → loader → numerics.

Each stage calls the chapter's own calculator; nothing is re-derived here. The arithmetic that
ties them together is the chapter-1 identity days = 6ND / (GPUs · dense peak · MFU) / 86 400,
whether the MFU is given or is the layout planner's estimate (``layout.mfu``: 6ND over the
estimated step time, which carries the attention FLOPs, the pipeline bubble and the exposed
communication of every level).
"""
from __future__ import annotations

import math

from .. import batch as batch_size
from .. import faults, flops, scaling
from .._validate import MAX_INT, calculator, choice, fraction, positive, positive_int, utilisation
from ..data.tokenize import token_dtype
from ..hardware import ACCELERATORS, lookup
from ..layout import USABLE_FRACTION, MoE, layout
from ..layout.job import _MAX_LAYERS, _POW2, MIN_CP_TOKENS
from ..numerics import format_info, stall_point
from ..report import si
from .result import Plan

__all__ = ["plan", "model_shape", "failure_budget", "DEFAULT_PRICE_PER_GPU_HOUR", "LLAMA3_GPU_MTBF_S"]

# DeepSeek-V3 technical report (arXiv 2412.19437, §1): "assuming the rental price of the H800 GPU
# is $2 per GPU hour". A stated assumption of that report, not a market quote: pass your own.
DEFAULT_PRICE_PER_GPU_HOUR = 2.0
# Per-GPU MTBF implied by Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100s
# (arXiv 2407.21783 §3.3.4; course_lib.faults.LLAMA3): about 5.8 years per GPU (chapter 12).
LLAMA3_GPU_MTBF_S = faults.LLAMA3_GPU_MTBF_S
# Chapter 12's checkpoint inputs: each rank writes its shard at 2 GB/s; the filesystem's rate and a
# restart's time are the accelerator generation's published cluster's (Accelerator.storage_bytes_per_s,
# .restart_seconds, .cluster_source): for H100, Llama 3's Tectonic at 2 TB/s (arXiv 2407.21783 §3.3.1)
# and ByteRobust's 10-minute failover (arXiv 2509.16293 §2.3), also failure_budget's defaults.
_WRITER_BW = 2e9
_STORAGE_BW = ACCELERATORS["H100-SXM"].storage_bytes_per_s
_RESTART_S = ACCELERATORS["H100-SXM"].restart_seconds
_CKPT_BYTES_PER_PARAM = 14.0       # BF16 weights 2 + FP32 master 4 + Adam moments 8; no gradients
_HEAD_DIM = 128                    # Llama 2/3, GPT-3 175B: d_model = 128 · heads


@calculator
def model_shape(n_params: float) -> tuple[int, int, int]:
    """A plausible (n_layers, d_model, n_heads) for ``n_params`` when the user gives no shape:
    N ≈ 12·L·d² with d/L ≈ 128 (GPT-3 175B: 12288/96; Llama 3 8B: 4096/32; 405B: 16384/126),
    heads of 128 in a multiple of 8 so tensor parallelism up to 8 divides them. A size whose width
    overflows a float (1e308) is a ValueError naming ``n_params``."""
    n = positive("n_params", n_params)
    d_guess = (n * _HEAD_DIM / 12.0) ** (1 / 3)
    heads = max(8, 8 * round(d_guess / _HEAD_DIM / 8))
    d = heads * _HEAD_DIM
    return max(1, round(n / (12.0 * d * d))), d, heads


def _check_default_shape(n: float, shape: tuple[int, int, int], given: tuple) -> None:
    """Refuse a default shape (``model_shape``, for the parts not given) that the layout planner
    cannot take, naming ``n_params``, the argument it came from, not the layers or heads the user
    never typed (1e21 parameters give 171,974 layers)."""
    bounds = (_MAX_LAYERS, MAX_INT, MAX_INT)
    if any(x is None and v > top for x, v, top in zip(given, shape, bounds)):
        raise ValueError(f"n_params={n!r}: its default shape (model_shape: {shape[0]} layers, d_model "
                         f"{shape[1]}, {shape[2]} heads) is beyond the layout planner's bounds (at most "
                         f"{_MAX_LAYERS} layers, 2**53 for a width): give n_layers, d_model and n_heads")


def _check_shape_holds(n: float, L: int, h: int, vocab: int, what: str) -> None:
    """A given shape must hold roughly the parameters the plan counts: 12·L·d² in the blocks (4d²
    attention, 8d² MLP) plus up to two V·d embedding tables. Published dense runs sit within a
    factor of 1.3 of it (Llama 3 405B: 406e9; PaLM 540B: 481e9, multi-query attention); a factor
    of 4 either way leaves room for GQA, SwiGLU and vocabularies, and refuses a plan whose 8e9
    parameters live in one layer of width 128, or whose count includes every expert of a mixture."""
    core = 12.0 * L * h * h
    if n < core / 4 or n > 4 * (core + 2.0 * vocab * h):
        raise ValueError(f"{what} ({n:.4g}) does not match the shape: n_layers={L} of d_model={h} hold "
                         f"about 12·L·d² = {core:.3g} parameters, plus {2.0 * vocab * h:.3g} at most in the "
                         f"embeddings; give the parameters a token uses (for a mixture of experts the active "
                         f"ones) or the n_layers and d_model that hold them")


def _sizing(compute, n_params, n_tokens, inference_tokens, fit) -> tuple[float, float, str, float]:
    """(N, D, how they were chosen, inference FLOPs) — chapter 2."""
    if compute is None and (n_params is None or n_tokens is None):
        raise ValueError("compute: give either compute (FLOP) or both n_params and n_tokens")
    if compute is not None and (n_params is not None or n_tokens is not None):
        raise ValueError("compute: give either compute or n_params and n_tokens, not both")
    choice("fit", fit, scaling.FIT_NAMES)
    inf = 0.0 if inference_tokens is None else positive("inference_tokens", inference_tokens, allow_zero=True)
    if compute is not None:
        c = positive("compute", compute)
        if inf > 0:
            best = scaling.inference_optimal(c, inf, fit)
            if best["n_params"] < 1:
                raise ValueError(f"compute={compute!r} is too small: it buys less than one parameter")
            return (best["n_params"], best["n_tokens"], f"inference-aware ({fit} fit, "
                    f"{best['saving_fraction']:.0%} fewer lifetime FLOP than Chinchilla)", best["inference_flops"])
        n, d = scaling.compute_optimal(c, fit)
        if n < 1 or d < 1:
            raise ValueError(f"compute={compute!r} is too small: it buys less than one parameter or token")
        return n, d, f"compute-optimal ({fit} fit)", 0.0
    n, d = positive("n_params", n_params), positive("n_tokens", n_tokens)
    for name, value in (("n_params", n), ("n_tokens", d)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value!r}")
    return n, d, "given", 2.0 * n * inf


def failure_budget(n_params: float, n_gpus: int, gpu_mtbf_seconds: float = LLAMA3_GPU_MTBF_S,
                   step_seconds: float | None = None, storage_bytes_per_s: float = _STORAGE_BW,
                   restart_seconds: float = _RESTART_S) -> tuple[float, float, float, float, float]:
    """Chapter 12's stage of the plan: (checkpoint bytes, blocking save s, job MTBF s, checkpoint
    interval s, goodput) for a sharded checkpoint of 14 bytes per parameter written by every rank.

    The interval is Young's, but never shorter than one training step (``step_seconds``, when
    given): a checkpoint can only be taken between steps, so a step longer than Young's interval
    sets the period, and the goodput follows from that period. A plan whose step outlasts the
    job's MTBF therefore makes no progress and is refused, instead of showing a checkpoint every
    few minutes beside a step of weeks. Without a step it depends on the size and GPU count only.
    ``storage_bytes_per_s`` (the filesystem's sustained write rate; Llama 3's Tectonic, 2 TB/s) and
    ``restart_seconds`` (assumed 10 minutes: no published run states one) are the cluster's own.
    """
    n, n_gpus = positive("n_params", n_params), positive_int("n_gpus", n_gpus)
    gpu_mtbf = positive("gpu_mtbf_seconds", gpu_mtbf_seconds)
    step = None if step_seconds is None else positive("step_seconds", step_seconds)
    storage = positive("storage_bytes_per_s", storage_bytes_per_s)
    restart = positive("restart_seconds", restart_seconds, allow_zero=True)
    try:
        ckpt = faults.checkpoint_bytes_per_rank(n, n_gpus, _CKPT_BYTES_PER_PARAM) * n_gpus
        faults.save_seconds(ckpt, n_gpus, _WRITER_BW, _STORAGE_BW)
    except ValueError:
        raise ValueError(f"n_params={n_params!r}: its checkpoint ({_CKPT_BYTES_PER_PARAM:g} bytes per "
                         f"parameter) is more bytes than a float holds") from None
    try:
        save = faults.save_seconds(ckpt, n_gpus, _WRITER_BW, storage)
    except ValueError:
        raise ValueError(f"storage_bytes_per_s={storage_bytes_per_s!r}: a checkpoint of {ckpt:.3g} bytes at "
                         f"that rate takes longer than a float holds") from None
    mtbf = faults.cluster_mtbf(gpu_mtbf, n_gpus)      # 0 when 5e-324 s is shared by 8 GPUs
    young = faults.optimal_checkpoint_interval(save, mtbf) if mtbf > 0 else 0.0
    interval = young if step is None else max(young, step)
    period = interval + save
    good = faults.goodput(interval, save, restart, mtbf) if mtbf > 0 and period < math.inf else 0.0
    if good <= 0 and mtbf > 0 and step is not None and step > young:
        raise ValueError(f"n_gpus={n_gpus}: one step takes {step:g} s and the job fails every {mtbf:g} s on "
                         f"average; a checkpoint can only be taken between steps, so each failure costs a "
                         f"restart and half a step, and no training progresses. Make a step shorter or the "
                         f"job's MTBF longer (gpu_mtbf_seconds)")
    if good <= 0 and restart < mtbf <= restart + save / 2 and storage < n_gpus * _WRITER_BW:
        # the save alone outlasts the time a restart leaves between failures, and the filesystem's
        # rate (not the ranks' writers) sets the save: name the rate, not the GPUs
        raise ValueError(f"storage_bytes_per_s={storage_bytes_per_s!r}: a checkpoint of {ckpt:.3g} bytes takes "
                         f"{save:.3g} s to write at that rate, while the job fails every {mtbf:.3g} s on average, "
                         f"less than a restart and half of that save take: no training progresses. Give the "
                         f"filesystem's sustained write rate in bytes per second (Llama 3's Tectonic: "
                         f"{_STORAGE_BW:.0e})")
    if good <= 0:
        raise ValueError(f"n_gpus={n_gpus}: the job fails every {mtbf / 60:.1f} minutes on average, less "
                         f"than a restart (restart_seconds={restart_seconds!r}) and half a checkpoint period "
                         f"take: no training progresses. Use fewer GPUs or more reliable ones "
                         f"(gpu_mtbf_seconds), or a faster restart")
    return ckpt, save, mtbf, interval, good


def _impossible(exc: ValueError, n: float, n_gpus: int, g: int, hbm: float, usable: float,
                batch: float, seq: int, n_layers: int) -> ValueError:
    """The layout planner's refusal, with what would make the plan possible."""
    text = str(exc)
    if "smallest needs" in text:
        floor = math.ceil(16.0 * n / (hbm * usable))
        return ValueError(f"n_gpus={n_gpus}: the plan does not fit ({text}). The model states alone "
                          f"(16 bytes per parameter, ZeRO-3) need at least {floor} GPUs of this type; "
                          f"use more GPUs, a GPU with more HBM, a shorter seq_len or a larger "
                          f"usable_fraction")
    seqs = batch / seq
    cp = max(c for c in _POW2 if seq % c == 0 and (c == 1 or seq // c >= MIN_CP_TOKENS))   # the largest CP
    # degree the layout planner tries
    pp = max(p for p in _POW2 if p <= n_layers)     # and PP degree (one microbatch, mostly bubble)
    need = math.ceil(n_gpus / (g * cp * pp))
    return ValueError(f"global_batch_tokens={batch:g}: batch below the floor ({text}). {seqs:g} sequence"
                      f"{'' if seqs == 1 else 's'} per step cannot give every data-parallel replica a sequence: one sequence feeds at "
                      f"most TP {g} (a node) × CP {cp} × PP {pp} = {g * cp * pp} GPUs, so {n_gpus} GPUs need {need}. Raise "
                      f"global_batch_tokens to {need * seq:g} or use fewer GPUs")


def _caveats(dtype: str, microbatches: int, dp: int, gpu: str) -> tuple[str, ...]:
    """Chapter 7's numerics that apply to this plan (each figure from ``course_lib.numerics``)."""
    stall = stall_point(1.0, "bf16")
    out = [f"Accumulate the {microbatches} microbatch gradients and the DP reduction over {dp} "
           f"ranks in FP32: a BF16 running sum of equal terms stops growing after {stall:.0f} of them."]
    if dtype == "fp16":
        out.append(f"FP16 tops out at {format_info('fp16').max:.0f}: dynamic loss scaling is required "
                   f"(OPT-175B's FP16 run used it); BF16 needs none.")
    elif dtype == "fp8":
        out.append(f"FP8 E4M3 saturates at {format_info('fp8_e4m3').max:.0f}: matmul inputs need per-tensor "
                   f"or per-block scales (DeepSeek-V3), master weights and optimizer stay in higher "
                   f"precision; the MFU here is still counted against the BF16 peak.")
        if "fp8" not in lookup("gpu", gpu).peak_flops:
            out.append(f"{gpu} has no FP8 tensor cores: the plan would run at its BF16 rate.")
    return tuple(out)


def _batch_note(n: float, d: float, fit: str, batch: float, seq: int, dp: int) -> str:
    """Chapter 16's ceiling: the critical batch at the loss ``fit`` predicts for the end of the run,
    from Kaplan et al.'s B_crit(L) (``batch.critical_batch_tokens``), set beside this plan's batch
    and its data-parallel degree. Their law is in WebText2 nats, outside the range it was fitted on
    at such losses (``batch.law``): a guide to the order of magnitude, which the note says."""
    loss = scaling.loss(n, d, fit=fit)
    crit = batch_size.critical_batch_tokens(loss)
    ceiling = max(1, math.floor(crit / seq))
    verdict = (f"{batch / crit:.1f}x past it: extra tokens per step buy ever fewer steps" if batch > crit
               else f"{batch / crit:.2f} of it: within the useful range")
    return (f"B_crit at the predicted final loss {loss:.2f} is {si(crit)} tokens (Kaplan et al.'s law, "
            f"{batch_size.law()['limits']}: a guide, not a bound); this batch of {si(batch)} tokens is "
            f"{verdict}. One sequence of {seq} per replica allows DP <= {ceiling}; this layout's DP is {dp}.")


def _fp8_caveat(fp8: dict, used: float) -> tuple[str, ...]:
    """precision="fp8": which GEMMs ran in FP8 and the MFU against each peak (``Layout.fp8``)."""
    if not fp8:
        return ()
    scale = used / fp8["mfu_vs_bf16"]     # a given mfu rescales the layout's three figures alike
    return (f"precision='fp8': {fp8['gemms_in_fp8']} (forward and both backward GEMMs) in FP8, their input "
            f"casts timed as memory-bound work; attention, norms, embedding and output head in BF16 "
            f"({fp8['fp8_flop_share']:.0%} of 6N in FP8). MFU {used:.1%} is against the BF16 peak (the "
            f"course's convention); against the FP8 peak {fp8['mfu_vs_fp8'] * scale:.1%}, against the mixed "
            f"peak {fp8['mfu_vs_mixed'] * scale:.1%}.",)


@calculator
def plan(compute: float | None = None, n_params: float | None = None, n_tokens: float | None = None,
         gpu: str = "H100-SXM", n_gpus: int = 1024, gpus_per_node: int = 8, seq_len: int = 8192,
         global_batch_tokens: float = 16 * 2 ** 20, price_per_gpu_hour: float = DEFAULT_PRICE_PER_GPU_HOUR,
         mfu: float | None = None, inference_tokens: float | None = None, fit: str = "besiroglu",
         n_layers: int | None = None, d_model: int | None = None, n_heads: int | None = None,
         kv_heads: int | None = None, nics_per_node: int | None = None, nic_bits_per_s: float | None = None,
         gpu_mtbf_seconds: float = LLAMA3_GPU_MTBF_S, vocab_size: int = 128_256, dtype: str = "bf16",
         usable_fraction: float = USABLE_FRACTION, storage_bytes_per_s: float | None = None,
         restart_seconds: float | None = None, moe: MoE | None = None, block: str = "gpt",
         precision: str = "bf16", schedule: str = "1f1b") -> Plan:
    """Plan a pretraining run end to end (``python -m course_lib plan``): model size, layout and
    memory, step time, MFU, days and cost, checkpoints and goodput, loader rate, numerics.

    Give ``compute`` (FLOP; with ``inference_tokens`` the inference-aware size) or ``n_params``
    and ``n_tokens``. ``mfu=None`` uses the layout planner's estimate; ``n_layers``/``d_model``/
    ``n_heads`` default to ``model_shape(n_params)``; ``nics_per_node`` to one per GPU and
    ``nic_bits_per_s`` to the NIC of the accelerator's generation (``Accelerator.nic_bits_per_s``:
    HDR 200 Gb/s for A100 clusters, NDR 400 Gb/s for H100). The
    sizing fit defaults to Besiroglu et al.'s refit, the one that agrees with ~20 tokens per
    parameter (chapter 2; Hoffmann's rounded constants print ~100 at 1e24 FLOP).
    ``storage_bytes_per_s`` and ``restart_seconds`` are the cluster's checkpoint write rate and
    restart time (chapter 12); left None they are those of a published cluster of ``gpu``'s
    generation (``Accelerator.cluster_source``: for H100 Llama 3's Tectonic at 2 TB/s and a
    10-minute failover, for A100 the 273 GB/s Megatron-LM's checkpoints reached on 3,072 A100).
    ``moe`` (``course_lib.layout.MoE``) plans a mixture of experts: ``n_params`` is then the
    active count (6ND), the layout holds every expert, and EP joins the layout search.
    ``block`` counts a layer's activations as Korthikanti's GELU / multi-head / dropout block
    ("gpt") or as a Llama block (RMSNorm, grouped-query attention, SwiGLU, no dropout: "llama",
    ``memory.llama_activation_bytes_per_layer``).
    ``precision="fp8"`` times the block's GEMMs in FP8 (``layout.plan_layouts``; refused on a chip
    without FP8); the MFU stays against the BF16 peak, and a caveat states it against the FP8 and
    mixed peaks and which GEMMs ran in FP8. ``schedule`` is the pipeline schedule every pipelined
    layout is timed with ("1f1b", "zb-h1", "zb-v", "dualpipev", "dualpipe": ``layout.bubble``).
    """
    n, d, sizing, inference_flops = _sizing(compute, n_params, n_tokens, inference_tokens, fit)
    acc = lookup("gpu", gpu)
    g = positive_int("gpus_per_node", gpus_per_node)
    n_gpus = positive_int("n_gpus", n_gpus)
    s = positive_int("seq_len", seq_len)
    batch = positive("global_batch_tokens", global_batch_tokens)
    if d < batch:    # 15e12 -> 1e6 tokens: not even one step
        what = f"n_tokens ({d!r}) is" if compute is None else f"compute={compute!r} buys {d!r} tokens,"
        raise ValueError(f"{what} less than one step of global_batch_tokens ({batch!r}): the run would not "
                         f"finish a single step")
    price = positive("price_per_gpu_hour", price_per_gpu_hour)
    dtype = choice("dtype", dtype, ("bf16", "fp16", "fp8"))
    shape = model_shape(n)
    L = shape[0] if n_layers is None else positive_int("n_layers", n_layers)
    h = shape[1] if d_model is None else positive_int("d_model", d_model)
    a = shape[2] if n_heads is None else positive_int("n_heads", n_heads)
    _check_default_shape(n, shape, (n_layers, d_model, n_heads))
    vocab = positive_int("vocab_size", vocab_size, minimum=2)    # one token carries no information
    if n_layers is not None or d_model is not None:
        _check_shape_holds(n, L, h, vocab, "n_params" if compute is None else f"compute={compute!r} gives n_params")
    u = fraction("usable_fraction", usable_fraction)
    # chapters 4, 5, 11: the fastest layout that fits, with its memory and step time
    try:
        best = layout(n, L, h, a, s, batch, n_gpus, gpu=gpu, gpus_per_node=g,
                      nics_per_node=g if nics_per_node is None else nics_per_node,
                      nic_bits_per_s=acc.nic_bits_per_s if nic_bits_per_s is None else nic_bits_per_s,
                      kv_heads=kv_heads, usable_fraction=u, vocab_size=vocab, moe=moe, block=block,
                      precision=precision, schedule=schedule)
    except ValueError as exc:
        if not str(exc).startswith("no layout fits"):
            raise
        raise _impossible(exc, n, n_gpus, g, acc.hbm_bytes, u, batch, s, L) from None
    # chapter 1: MFU → step, days, GPU-hours, cost
    used = best.mfu if mfu is None else utilisation("mfu", mfu)
    days = flops.training_days(n, d, n_gpus, used, gpu=acc.name, dtype=acc.training_dtype)
    step_s = 6.0 * n * batch / (n_gpus * acc.peak(acc.training_dtype) * used)
    gpu_hours = days * 24.0 * n_gpus
    # chapter 12: checkpoint size, save, interval, goodput at the cluster's MTBF
    storage_bytes_per_s = acc.storage_bytes_per_s if storage_bytes_per_s is None else storage_bytes_per_s
    restart_seconds = acc.restart_seconds if restart_seconds is None else restart_seconds
    try:
        ckpt, save, mtbf, interval, good = failure_budget(n, n_gpus, gpu_mtbf_seconds, step_s,
                                                          storage_bytes_per_s, restart_seconds)
    except ValueError as exc:    # a step longer than the MTBF: say which inputs set the step
        if "one step takes" not in str(exc):
            raise
        raise ValueError(f"{exc} (in this plan global_batch_tokens, mfu and nic_bits_per_s set the "
                         f"step)") from None
    # chapter 3: what the loader must deliver
    tokens_per_s = batch / step_s
    bytes_per_token = token_dtype(vocab).itemsize
    return Plan(
        sizing=sizing, n_params=n, n_tokens=d, compute_flops=flops.training_flops(n, d),
        tokens_per_param=d / n, inference_flops=inference_flops,
        gpu=acc.name, n_gpus=n_gpus, gpus_per_node=g, seq_len=s, global_batch_tokens=batch,
        n_layers=L, d_model=h, n_heads=a, layout_shape=best.shape(), tp=best.tp, cp=best.cp, pp=best.pp, dp=best.dp,
        interleave=best.v, zero_stage=best.zero, recompute=best.recompute, microbatches=best.microbatches,
        states_bytes=best.states_bytes, activation_bytes=best.activation_bytes, memory_bytes=best.memory_bytes,
        usable_bytes=best.usable_bytes, layout_step_s=best.step_s, compute_s=best.compute_s,
        bubble_s=best.bubble_s, exposed_comm_s={"tp": best.tp_s, "cp": best.cp_s, "pp": best.pp_s, "dp": best.dp_s},
        mfu_estimate=best.mfu, mfu=used, mfu_source="layout estimate" if mfu is None else "given",
        step_s=step_s, steps=d / batch, days=days, gpu_hours=gpu_hours,
        price_per_gpu_hour=price, cost=gpu_hours * price,
        checkpoint_bytes=ckpt, save_s=save, mtbf_s=mtbf, checkpoint_interval_s=interval,
        restart_s=float(restart_seconds), goodput=good, wall_days=days / good,
        loader_tokens_per_s=tokens_per_s, loader_bytes_per_s=tokens_per_s * bytes_per_token,
        bytes_per_token=bytes_per_token, dtype=dtype,
        caveats=_caveats("fp8" if best.fp8 else dtype, best.microbatches, best.dp * best.cp, acc.name) + _fp8_caveat(best.fp8, used),
        batch_note=_batch_note(n, d, fit, batch, s, best.dp),
        layout_explanation=best.explanation,
        mfu_vs_fp8=best.fp8["mfu_vs_fp8"] * used / best.fp8["mfu_vs_bf16"] if best.fp8 else None)

