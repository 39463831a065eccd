"""Graded questions of chapter 14, "Expert parallelism and the all-to-all". References come from
course_lib.comm (ep_bytes_per_layer, ep_node_bytes); the dispatch function is graded against the
permutation and send counts the course's expert-parallel layer uses, on inputs drawn from the
run's seed."""
from __future__ import annotations

import torch

from course_lib import comm
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import cases_partial, msg

# Q1/Q2: one DeepSeek-V3-like MoE layer (arXiv 2412.19437: d = 7168, 8 routed experts a token)
LAYER = dict(tokens=4096, d_model=7168, top_k=8, ep=64)
# Q3: the same layer over 8 nodes of 8 GPUs, node-limited routing to at most 4 nodes
NODES = dict(gpus_per_node=8, max_nodes=4)
# Q4: expert weights: 256 experts a layer, 58 MoE layers, 3 matrices of d x 2048 each (SwiGLU)
EXPERTS, MOE_LAYERS, EXPERT_PARAMS = 256, 58, 3 * 7168 * 2048
FIT_BYTES_PER_PARAM, FIT_BUDGET = 4, 48e9        # bf16 weights + bf16 gradients, bytes a GPU
# Q5: the straggler
HOT_LOAD, MOE_SHARE = 2.5, 0.6                  # busiest rank's tokens / mean; MoE share of a balanced step


def _fit_degree() -> int:
    need = EXPERTS * MOE_LAYERS * EXPERT_PARAMS * FIT_BYTES_PER_PARAM / FIT_BUDGET
    return next(d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if d >= need)


def reference_dispatch(expert_ids: torch.Tensor, n_experts: int, ep: int) -> tuple[torch.Tensor, list[int]]:
    """The permutation that orders kept pairs by expert (ties: original order) and the rows sent
    to each of ``ep`` ranks (rank r owns experts [r·E/ep, (r+1)·E/ep))."""
    order = expert_ids.argsort(stable=True)
    counts = torch.bincount(expert_ids // (n_experts // ep), minlength=ep).tolist()
    return order, counts


FIXED = [(0, 40, 8, 4), (1, 7, 4, 2), (2, 64, 16, 8), (3, 1, 2, 2)]


def _grade_dispatch(fn, draw) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, msg("Pass your function itself ({usage}), got {got}.", usage="check('dispatch_impl', dispatch)",
                        got=repr(fn))
    drawn = (int(draw.integers(10, 2**31)), int(draw.choice([5, 33, 100])), int(draw.choice([8, 16])),
             int(draw.choice([2, 4, 8])))
    passed, notes = 0, {}
    cases = [*FIXED, drawn]
    for seed, n, e, ep in cases:
        ids = torch.randint(0, e, (n,), generator=torch.Generator().manual_seed(seed))
        want_order, want_counts = reference_dispatch(ids, e, ep)
        try:
            order, counts = fn(ids.clone(), e, ep)
            order = torch.as_tensor(order).long()
            counts = [int(c) for c in counts]
        except Exception as exc:                    # a student's bug costs this case only
            notes.setdefault(msg("your function raised {error}", error=f"{type(exc).__name__}: {exc}"),
                             []).append(f"[n={n}]")
            continue
        ok_order, ok_counts = torch.equal(order, want_order), counts == want_counts
        if ok_order and ok_counts:
            passed += 1
            continue
        if not ok_counts:
            why = (msg("send counts are per rank, not per expert: rank r gets the pairs of its E/ep experts")
                   if counts == torch.bincount(ids, minlength=e).tolist() else
                   msg("send counts differ: count the pairs whose expert lives on each rank (expert // (E/ep))"))
        elif sorted(order.tolist()) != list(range(n)):
            why = msg("the order must be a permutation of 0..n-1 (every pair sent exactly once)")
        elif torch.equal(ids[order] // (e // ep), ids[want_order] // (e // ep)):
            why = msg("sorted by rank but not by expert within it (or not stably): the receiver splits "
                      "its rows by expert, so order by expert id, ties in original order")
        else:
            why = msg("the order differs: a stable sort of the pairs by expert id")
        notes.setdefault(why, []).append(f"[n={n} E={e} ep={ep}]")
    if passed == len(cases):
        return 1.0, "matches the layer's dispatch on every case, including one drawn for this run"
    return cases_partial(passed, len(cases), notes)


QUESTIONS = [
    Question(
        "ep_layer_bytes", points=2, unit="bytes",
        prompt="Bytes each GPU sends per MoE layer and microbatch (dispatch + combine, forward and "
               "backward, bf16) for 4096 tokens a GPU, d = 7168, top-8, EP 64, dropless and balanced.",
        expected=lambda: comm.ep_bytes_per_layer(**LAYER), rtol=0.01,
        mistakes=[Mistake.ratio(0.5, "Half: you counted the forward pass only; the backward repeats both "
                                     "all-to-alls with the gradients."),
                  Mistake.ratio(0.25, "A quarter: that is the forward dispatch alone; the combine sends the "
                                      "results back, and the backward does both again."),
                  Mistake.ratio(64 / 63, "Slightly high: the pairs whose expert lives on your own GPU never "
                                         "leave it, a share 1/ep."),
                  Mistake.ratio(2, "Twice: bf16 is 2 bytes a value; you used 4.")],
        hint="k·T pairs of d values; (ep−1)/ep of them leave; four exchanges (dispatch, combine, × 2 "
             "for the backward); 2 bytes a value.",
    ),
    Question(
        "ep_capacity_bytes", points=1, unit="bytes",
        prompt="The same layer with capacity-padded buffers at capacity factor 1.25: bytes a GPU sends.",
        expected=lambda: comm.ep_bytes_per_layer(**LAYER, capacity_factor=1.25), rtol=0.01,
        mistakes=[Mistake.ratio(1 / 1.25, "That is the dropless number: padded buffers always carry "
                                          "k·T·CF slots, empty ones included.")],
        hint="Each expert's buffer has C = k·T·CF/E slots whether they are full or not.",
    ),
    Question(
        "ib_bytes_node_limited", points=2, unit="bytes",
        prompt="The layer of Q1 on 8 nodes of 8 GPUs with DeepSeek-V3's node-limited routing (each token "
               "goes to at most 4 nodes, one copy per node over InfiniBand): bytes a GPU sends over "
               "InfiniBand per layer and microbatch (forward and backward, dispatch and combine).",
        expected=lambda: comm.ep_node_bytes(**LAYER, **NODES)[1], rtol=0.01,
        mistakes=[Mistake.ratio(2, "That is unrestricted routing: each of the 8 copies crosses the network "
                                   "separately, 7 of 8 to another node; node-limited routing sends one copy a "
                                   "node, 3.5 on average."),
                  Mistake.ratio(8 / 7, "You counted 4 copies a token; one of the 4 nodes is your own with "
                                       "chance 4/8, and that copy stays on NVLink.")],
        hint="M·(N−1)/N copies a token cross nodes (N = 8 nodes, M = 4); d values each, 2 bytes, four exchanges.",
    ),
    Question(
        "ep_degree_fits", points=2, unit="GPUs",
        prompt="256 experts a layer, 58 MoE layers, 3·7168·2048 parameters an expert; weights and gradients "
               "in bf16 (4 bytes a parameter) may take 48 GB a GPU. Smallest EP degree (a power of two "
               "dividing 256) that fits the expert weights and gradients?",
        expected=_fit_degree, rtol=0, atol=0.5,
        mistakes=[Mistake.predicate(lambda a: 54 < a < 55, "That is the unrounded ratio: the degree must be a "
                                                        "whole power of two that divides the 256 experts."),
                  Mistake.ratio(0.5, "Too small: with EP 32 each GPU holds 8 experts a layer, about 1.7× the budget.")],
        hint="Total expert bytes / budget, rounded up to the next power of two.",
    ),
    Question(
        "straggler_cost", points=2, unit="×",
        prompt="In a balanced step the MoE experts take 60 % of the time and everything else 40 %. A hot "
               "expert gives the busiest EP rank 2.5× the mean number of tokens. By what factor does the "
               "step time grow (everyone waits for the busiest rank at the combine)?",
        expected=lambda: (1 - MOE_SHARE) + MOE_SHARE * HOT_LOAD, rtol=0.01,
        mistakes=[Mistake.ratio(2.5 / 1.9, "You scaled the whole step; only the expert part grows with the load."),
                  Mistake.ratio(1.5 / 1.9, "That is the expert time alone, 0.6 × 2.5; add the other 40 %.")],
        hint="step = non-expert share + expert share × (busiest load / mean load).",
    ),
    Question(
        "dispatch_impl", points=3,
        prompt="Implement dispatch(expert_ids, n_experts, ep) -> (order, send_counts): expert_ids is a 1-D "
               "int tensor of the kept pairs' experts; order is the permutation that sorts the pairs by "
               "expert id (ties in original order), send_counts the list of rows sent to each rank (rank "
               "r owns experts r·E/ep … (r+1)·E/ep − 1). Graded on inputs drawn for the run.",
        grader=_grade_dispatch,
        hint="torch.argsort(..., stable=True) gives the order; torch.bincount of expert_ids // (E/ep) the counts.",
    ),
]
