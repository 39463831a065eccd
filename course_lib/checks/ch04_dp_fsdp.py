"""Graded questions of chapter 4, "Data parallel, ZeRO and FSDP". References come from
course_lib.memory and course_lib.comm; the gradient-sync question is graded by running the
student's function on 2 real processes against a single-process reference, and the sharded
gradient-clipping question runs it on 2 processes and compares, here on the trusted side, with
torch.nn.utils.clip_grad_norm_ on the whole gradient."""
from __future__ import annotations


from course_lib import comm, hardware, memory
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import msg
from course_lib.grading.remote import NotAFunction, function_source, launch_with

GB = 1e9
_H100 = hardware.get_accelerator("H100-SXM")
_B300 = hardware.get_accelerator("B300")

# memory question: a 7B model, mixed-precision Adam, 64-way data parallel
MEM_PSI, MEM_N = 7e9, 64
# ZeRO-3 degree: a 70B model on 80 GB H100s keeping 20 GB for activations and buffers
Z3_PSI, Z3_RESERVED = 70e9, 20e9
# The question's round "80 GB" (80e9), not the datasheet's 80 GiB in course_lib.hardware: the
# prompt gives the number, so the answer is the one computed from it.
Z3_HBM = 80e9
# all-reduce of 7B bf16 gradients: 8 GPUs on NVLink, 64 GPUs in 8 servers over InfiniBand NDR;
# each server has eight 400 Gb/s NICs and NCCL runs one ring per NIC, so a ring moves
# comm.IB_NDR_BANDWIDTH = 8 x 50 GB/s per GPU (course_lib.network)
IB_ONE_NIC = 50e9   # bytes/s: one 400 Gb/s NDR NIC, the classic 8x-too-slow reading
AR_BYTES = 7e9 * 2
# batch floor: 16M-token critical batch, 8192-token sequences; TP = 8, PP = 4 on top
CRIT_TOKENS, SEQ, TP, PP = 16e6, 8192, 8, 4
# crossover: 4M-token batches, H100 at 50% compute MFU, InfiniBand between GPUs
XO_TOKENS, XO_MFU = 4e6, 0.5

_GBYTES = Mistake.ratio(1e-9, "Off by 10^9: give bytes, not GB.")


def _unrounded(message: str) -> Mistake:
    """A fractional answer within one of the integer expected: the student forgot to round."""
    return Mistake(lambda a, e: float(a) != round(float(a)) and abs(float(a) - e) < 1, message)


def _stage_list_mistakes() -> list[Mistake]:
    psi, n = MEM_PSI, MEM_N
    unsharded = [16 * psi] * 4
    return [
        Mistake(lambda a, e: all(abs(x / 1e-9 - y) <= 0.01 * y for x, y in zip(a, e)),
                "Off by 10^9 in every entry: give bytes, not GB."),
        Mistake.equals(unsharded, "Every stage gives 16Ψ: you did not divide anything by n. ZeRO-1 "
                                  "shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also "
                                  "the parameters.", rtol=0.01),
        Mistake(lambda a, e: abs(a[1] - (2 * psi + 14 * psi / n)) <= 0.01 * a[1],
                "Your stage-1 entry is the stage-2 value: ZeRO-1 shards only the optimizer state "
                "(12 bytes/param); the gradients (2 bytes) stay whole: 4Ψ + 12Ψ/n."),
        Mistake(lambda a, e: abs(a[0] - 20 * psi) <= 0.01 * a[0],
                "20 bytes per parameter: the fp32 master weights are part of the 12 bytes of optimizer "
                "state (4 master + 4 + 4 moments), not extra."),
        Mistake(lambda a, e: abs(a[3] - 16 * psi / (n - 1)) <= 0.001 * a[3],
                "Divide by n, not n − 1: each of the n ranks holds one shard."),
    ]


def _grade_sync(fn) -> tuple[float, str]:
    """Run the student's ``fn(grads, group)`` on 2 ranks and compare with the whole-batch gradient."""
    try:
        source = function_source(fn, "check(\"sync_grads\", sync_gradients)")
    except NotAFunction as e:
        return 0.0, e.message
    from course_lib.dist import RankError
    from course_lib.parallel.labs import grad_sync_check_worker
    try:
        res = launch_with(fn, grad_sync_check_worker, 2, timeout=90, source=source, fn_name=fn.__name__)
    except RankError as e:
        tb = e.remote_traceback.strip().splitlines()
        last = tb[-1] if tb else "an error"
        if "NameError" in last:
            return 0.0, msg("On the ranks: {error}. The function runs in fresh processes: import torch "
                            "and torch.distributed inside its body.", error=last)
        return 0.0, msg("Your function raised on rank {rank}: {error}", rank=e.rank, error=last)
    except TimeoutError:
        return 0.0, ("The ranks hung: one rank waited in a collective the other never called (every "
                     "rank must call reduce-scatter and all-gather, in the same order).")
    if not all(r["shapes_ok"] for r in res):
        return 0.0, "Your function changed the gradients' shapes; write the result back in place."
    errs = [r["err"] for r in res]
    if max(errs) < 1e-5:
        uses = "reduce_scatter" in source and "all_gather" in source
        if not uses:
            return 0.5, ("The gradients are right, but the exercise asks for reduce-scatter followed "
                         "by all-gather (an all-reduce is exactly those two; write them out).")
        return 1.0, "Matches the whole-batch gradient on both ranks."
    if max(r["err_if_summed"] for r in res) < 1e-5:
        return 0.3, ("Your result is the sum of the ranks' gradients, world_size × too large: divide by "
                     "the world size (each rank's loss is a mean over its own slice).")
    if all(r["unchanged"] for r in res):
        return 0.0, ("The gradients did not change: write the averaged values back into each tensor "
                     "(g.copy_(...)), rebinding a local name does nothing.")
    return 0.0, msg("Largest relative error against the whole-batch gradient: {err:.3g}. Did every "
                    "rank get every shard back (all-gather after the reduce-scatter)?", err=max(errs))


def _ran(fn, worker, hint: str, **kwargs):
    """Run ``worker`` with the student's ``fn`` on 2 ranks: (results, None) or (None, verdict)."""
    try:
        source = function_source(fn, hint)
    except NotAFunction as e:
        return None, (0.0, e.message)
    from course_lib.dist import RankError
    try:
        return launch_with(fn, worker, 2, timeout=90, source=source, fn_name=fn.__name__, **kwargs), None
    except RankError as e:
        tb = e.remote_traceback.strip().splitlines()
        last = tb[-1] if tb else "an error"
        if "NameError" in last:
            return None, (0.0, msg("On the ranks: {error}. The function runs in fresh processes: import torch "
                                   "and torch.distributed inside its body.", error=last))
        return None, (0.0, msg("Your function raised on rank {rank}: {error}", rank=e.rank, error=last))
    except TimeoutError:
        return None, (0.0, "The ranks hung: one rank waited in a collective the other never called "
                           "(every rank must call the all-reduce, even with nothing to add).")


def _grade_clip(fn, rng) -> tuple[float, str]:
    """The student's ``clip_sharded(grads, max_norm, group)`` on 2 ranks, once with clipping acting
    and once with max_norm above the norm; compared with torch's clip of the whole gradient."""
    import torch

    from course_lib.parallel.clip_grading import clip_check_worker, clip_inputs, rank_pieces
    seed = int(rng.integers(0, 10_000))
    flat = clip_inputs(seed).double()
    norm = float(flat.norm())
    max_norms = [norm * float(rng.uniform(0.1, 0.5)), norm * float(rng.uniform(2.0, 4.0))]
    res, verdict = _ran(fn, clip_check_worker, 'check("clip_sharded", clip_sharded)', seed=seed,
                        max_norms=max_norms)
    if verdict:
        return verdict
    if not all(call["shapes_ok"] for rank in res for call in rank):
        return 0.0, "Your function changed the pieces' shapes; scale them in place (g.mul_(...))."
    local = [float(torch.cat(rank_pieces(flat, r, 2)).norm()) for r in range(2)]
    for k, max_norm in enumerate(max_norms):
        got = [rank[k]["norm"] for rank in res]
        if any(abs(g - norm) > 1e-5 * norm for g in got):
            if all(abs(g - w) <= 1e-5 * w for g, w in zip(got, local)):
                return 0.0, ("Each rank returned the norm of its own pieces: the global norm needs the "
                             "sum of squares over every rank (an all-reduce), then the square root.")
            if all(abs(g - sum(local)) <= 1e-5 * sum(local) for g in got):
                return 0.0, "You added the ranks' norms; add their squares, then take the square root."
            if all(abs(g - norm ** 2) <= 1e-5 * norm ** 2 for g in got):
                return 0.0, "That is the squared norm: take the square root of the all-reduced sum."
            if k == 0 and all(abs(g - max_norm) <= 1e-4 * max_norm for g in got):
                return 0.0, "That is the norm after clipping; return the norm before it, as torch does."
            return 0.0, msg("Your norm is {ratio:.3g}× the global norm of the gradient.", ratio=got[0] / norm)
        coef = min(1.0, max_norm / (norm + 1e-6))
        for r, rank in enumerate(res):
            want = torch.cat(rank_pieces(flat, r, 2)) * coef
            values = torch.tensor(rank[k]["values"], dtype=torch.float64)
            if torch.allclose(values, want, rtol=1e-5, atol=1e-9):
                continue
            mine = torch.cat(rank_pieces(flat, r, 2))
            if torch.allclose(values, mine, rtol=1e-6, atol=1e-12):
                return 0.5, ("The norm is right but the gradients were not scaled: multiply each piece "
                             "in place (g.mul_(coef)); rebinding a local name does nothing.")
            if k == 1 and torch.allclose(values, mine * max_norm / norm, rtol=1e-4, atol=1e-9):
                return 0.5, ("With max_norm above the norm you scaled the gradients *up*: the factor "
                             "is min(1, max_norm / (norm + 1e-6)).")
            return 0.5, msg("The norm is right; rank {rank}'s gradients are off (largest error {err:.3g}): "
                            "scale by max_norm / (norm + 1e-6).", rank=r, err=float((values - want).abs().max()))
    return 1.0, "Matches torch.nn.utils.clip_grad_norm_ on the whole gradient, on both ranks."


QUESTIONS = [
    Question(
        "zero_mem_stages", points=2, unit="bytes",
        prompt=f"A {MEM_PSI / 1e9:g}B-parameter model trained with mixed-precision Adam (2 + 2 + 12 "
               f"bytes per parameter) on {MEM_N} data-parallel GPUs. Model-state bytes per GPU for "
               f"ZeRO stage 0 (plain DP), 1, 2 and 3, as a list of four numbers.",
        expected=lambda: [memory.zero_memory_per_gpu(MEM_PSI, MEM_N, s) for s in range(4)],
        rtol=0.01, mistakes=_stage_list_mistakes(),
        hint="16Ψ, 4Ψ + 12Ψ/n, 2Ψ + 14Ψ/n, 16Ψ/n.",
    ),
    Question(
        "min_zero3_70b", points=2, unit="GPUs",
        prompt=f"A {Z3_PSI / 1e9:g}B model (16 bytes of model state per parameter) on 80 GB H100s, "
               f"keeping {Z3_RESERVED / GB:g} GB per GPU for activations and buffers: the smallest "
               f"ZeRO-3 degree whose model states fit?",
        expected=lambda: memory.min_zero3_degree(Z3_PSI, Z3_HBM, Z3_RESERVED), rtol=0, atol=1e-6,
        mistakes=[_unrounded("Round up to a whole number of GPUs: with the fraction cut off, the states do not fit."),Mistake.equals(14, "14 fills all 80 GB with model states: keep the 20 GB for "
                                     "activations (divide by 60 GB)."),
                  Mistake.equals(18, "One short: round up; with 18 GPUs each holds 62 GB of states."),
                  Mistake.equals(2, "That counts 2 bytes per parameter (the bf16 weights only); "
                                    "gradients and Adam state make it 16.")],
        hint="n ≥ 16Ψ / (HBM − reserved); round up.",
    ),
    Question(
        "b300_dp_max_params", points=1, unit="parameters",
        prompt="B300 has 288 GB of HBM. Plain data parallelism (no sharding), mixed-precision Adam: "
               "the largest parameter count whose model states fit on one GPU, activations ignored?",
        expected=lambda: memory.max_params_per_gpu(_B300.hbm_bytes, 1, 0), rtol=0.01,
        mistakes=[Mistake.ratio(8, "That divides by 2 bytes (bf16 weights only); training needs "
                                   "gradients and Adam state too: 16 bytes per parameter."),
                  Mistake.ratio(16 / 12, "That counts only the 12 bytes of optimizer state."),
                  Mistake.ratio(1e-9, "Give a plain count (18e9), not billions.")],
        hint="16 bytes per parameter under plain DP.",
    ),
    Question(
        "allreduce_nvlink_s", points=1, unit="s",
        prompt="All-reduce of 7B bf16 gradients (14 GB) with a ring over 8 H100s on NVLink "
               "(450 GB/s per direction per GPU): seconds, ignoring latency?",
        expected=lambda: comm.collective_time("all_reduce", AR_BYTES, 8, _H100.link_bandwidth), rtol=0.02,
        mistakes=[Mistake.ratio(0.5, "Half: an all-reduce sends 2(n−1)/n of the buffer (a "
                                     "reduce-scatter and an all-gather), or you used 900 GB/s, which "
                                     "counts both directions."),
                  Mistake.ratio(8 / 7, "You dropped the (n−1)/n factor: each GPU sends 7/8 of the "
                                       "buffer twice, not all of it."),
                  Mistake.ratio(2, "Twice too long: bf16 is 2 bytes per value, the buffer is 14 GB, "
                                   "not 28.")],
        hint="t = 2(n−1)/n · S / bandwidth.",
    ),
    Question(
        "allreduce_ib_s", points=1, unit="s",
        prompt="The same 14 GB all-reduce over 64 GPUs in 8 servers, each with eight 400 Gb/s "
               "InfiniBand NDR NICs (NCCL runs one ring per NIC): seconds, ignoring latency?",
        expected=lambda: comm.collective_time("all_reduce", AR_BYTES, 64, comm.IB_NDR_BANDWIDTH), rtol=0.02,
        mistakes=[Mistake.ratio(8, "Eight times too long: you took one NIC's 50 GB/s for the ring's; "
                                   "with one ring per NIC the ring moves 8 × 50 GB/s per GPU."),
                  Mistake.ratio(1 / 8, "Eight times too short: 400 Gb/s is 50 GB/s per NIC (bits, not bytes)."),
                  Mistake.ratio(0.5, "Half: an all-reduce sends 2(n−1)/n of the buffer.")],
        hint="t = 2(n−1)/n · S / ring bandwidth; ring bandwidth = NICs per server × NIC rate.",
    ),
    Question(
        "fsdp_bytes_7b_64", points=1, unit="bytes",
        prompt="FSDP (ZeRO-3, parameters resharded after forward) on 64 GPUs, 7B bf16 parameters: "
               "bytes each GPU sends per step?",
        expected=lambda: comm.fsdp_bytes_per_step(7e9, 64), rtol=0.005,
        mistakes=[Mistake.ratio(2 / 3, "That is plain DP's 2(n−1)/n·Ψ. FSDP gathers the parameters "
                                       "twice (forward and again for backward) and reduce-scatters "
                                       "the gradients: 3(n−1)/n·Ψ."),
                  Mistake.ratio(1 / 3, "Half of DP: the 'only 50% overhead' misreading. FSDP sends "
                                       "1.5× DP, not 0.5×."),
                  Mistake.ratio(64 / 63, "You dropped the (n−1)/n factor."), _GBYTES],
        hint="Three ring passes of Ψ·2 bytes: all-gather, all-gather, reduce-scatter.",
    ),
    Question(
        "max_dp_degree", points=1, unit="replicas",
        prompt=f"Critical batch {CRIT_TOKENS / 1e6:g}M tokens, sequences of {SEQ} tokens, at least one "
               f"whole sequence per replica: the largest data-parallel degree?",
        expected=lambda: comm.max_dp_degree(CRIT_TOKENS, SEQ), rtol=0, atol=1e-6,
        mistakes=[_unrounded("Round down to a whole number of replicas: rounding up would exceed the critical batch."),Mistake.equals(1954, "Round down: a 1954th replica would push the batch above the "
                                       "critical batch."),
                  Mistake.equals(2000, "8192 is not 8000.")],
        hint="floor(critical batch / sequence length).",
    ),
    Question(
        "max_gpus_tp_pp", points=1, unit="GPUs",
        prompt=f"Same run with tensor parallelism {TP} and pipeline parallelism {PP} inside each "
               f"replica; each pipeline needs at least {PP} microbatches (one sequence each) in flight "
               f"to keep its bubble small: how many GPUs can it use at most?",
        expected=lambda: comm.max_dp_degree(CRIT_TOKENS, SEQ * PP) * TP * PP, rtol=0, atol=1e-6,
        mistakes=[Mistake.equals(comm.max_dp_degree(CRIT_TOKENS, SEQ) * TP * PP,
                                 "Pipeline stages do not lift the batch bound: each pipeline needs m ≥ p "
                                 "microbatches from the same batch, so DP × PP ≤ B/s; only splitting a "
                                 "sequence's work (TP, CP, EP) multiplies the GPU count."),
                  Mistake.equals(1953, "The batch floor bounds the number of replicas, not GPUs: each "
                                       "replica is TP × PP GPUs.")],
        hint="DP ≤ B / (s · PP) when every pipeline holds PP sequences; GPUs = DP × TP × PP.",
    ),
    Question(
        "fsdp_crossover", points=2, unit="GPUs",
        prompt=f"FSDP over InfiniBand (one ring per NIC: 8 × 50 GB/s = 400 GB/s per GPU; bandwidth "
               f"term only), H100 at {XO_MFU:g} of peak while computing, "
               f"a fixed global batch of {XO_TOKENS / 1e6:g}M tokens, bf16. Beyond how many GPUs does "
               f"communication take longer than compute (perfect overlap)? A float.",
        expected=lambda: comm.crossover_gpus(XO_TOKENS, compute_mfu=XO_MFU, bandwidth=comm.IB_NDR_BANDWIDTH),
        rtol=0.01,
        mistakes=[Mistake.ratio(1.5, "That is plain DP's crossover (2Ψ per step); FSDP sends 3Ψ."),
                  Mistake(lambda a, e: abs(float(a) - comm.crossover_gpus(XO_TOKENS, compute_mfu=XO_MFU,
                                                                           bandwidth=IB_ONE_NIC))
                          <= 0.01 * float(e) / 8,
                          "You used one NIC's 50 GB/s; the ring moves 8 × 50 GB/s per GPU."),
                  Mistake.ratio(2, "A factor 2 too many: bf16 values are 2 bytes.")],
        hint="Solve 6·Ψ·B/(n·peak·u) = 3(n−1)/n·Ψ·2/bw for n: Ψ cancels.",
    ),
    Question(
        "sync_grads", points=3,
        prompt="Write sync_gradients(grads, group) that averages the list of gradient tensors over the "
               "ranks of group, in place, with one reduce-scatter and one all-gather on a flat buffer.",
        grader=_grade_sync,
        hint="Flatten and pad to a multiple of the world size; reduce_scatter_tensor into a shard; "
             "divide by the world size; all_gather_into_tensor back; copy slices into each gradient.",
    ),
    Question(
        "clip_sharded", points=3,
        prompt="Write clip_sharded(grads, max_norm, group): grads is this rank's list of gradient "
               "pieces (over the ranks of group, every element of the gradient exactly once, as "
               "under FSDP). Scale them in place, by the same factor on every rank, so that the "
               "global 2-norm is at most max_norm, as torch.nn.utils.clip_grad_norm_ does on one "
               "process, and return the global norm before clipping (a float).",
        grader=_grade_clip,
        hint="Local sum of squares -> all_reduce (SUM) -> sqrt is the global norm; every rank "
             "multiplies by min(1, max_norm / (norm + 1e-6)).",
    ),
]
