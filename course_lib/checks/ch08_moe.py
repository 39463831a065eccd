"""Graded questions of chapter 8, "MoE routing and how it can break causality".

References come from ``course_lib.moe``; the causality questions are graded by running the
harness (``course_lib.moe.causality``) at grading time, on the library's routers and on the student's.
"""
from __future__ import annotations

import torch

from course_lib.moe import causality
from course_lib import moe
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import cases_partial, msg, series
from course_lib.grading.inputs import MOE_SCHEMES


COUNTS = [150, 90, 60, 212, 40, 88, 290, 94]          # router counts of 1024 tokens over 8 experts
SEEDS = (0, 1, 2)                                      # harness probes per scheme (a leak found once is proof)

SCHEMES = MOE_SCHEMES                                 # name -> MoE keyword arguments


def harness_verdict(router, **kwargs) -> tuple[bool, bool, list[tuple[int, int]]]:
    """(causal, batch_independent, witnesses) from probing a router with several seeds."""
    causal, indep, leaks = True, True, []
    for seed in SEEDS:
        rep = causality.probe_router(router, seed=seed, **kwargs)
        causal &= rep.causal
        indep &= rep.batch_independent
        leaks += rep.future_leaks
    return causal, indep, leaks


def _grade_classification(answer) -> tuple[float, str]:
    if not isinstance(answer, dict):
        return 0.0, msg("Expected a dict {shape}, got {type}.", shape="{scheme name: True/False}",
                        type=type(answer).__name__)
    missing = sorted(set(SCHEMES) - set(answer))
    if missing:
        return 0.0, msg("Missing schemes: {names}.", names=", ".join(missing))
    wrong = []
    for name, kwargs in SCHEMES.items():
        causal, _, leaks = harness_verdict(**kwargs)
        said = answer[name]
        if not isinstance(said, bool):
            wrong.append(msg("{name}: answer True or False, not {said}", name=name, said=repr(said)))
        elif said != causal:
            if causal:
                wrong.append(msg("{name} IS causal: the harness found no later token that moves an earlier "
                                 "output (a token's slot depends only on tokens before it, or on itself)",
                                 name=name))
            else:
                n, p = leaks[0]
                wrong.append(msg("{name} is NOT causal: changing the token at position {p} moved the "
                                 "output at position {n}", name=name, p=p, n=n))
    ok = len(SCHEMES) - len(wrong)
    return ok / len(SCHEMES), series(wrong) if wrong else msg("all {n} match the harness", n=len(SCHEMES))


def _case(seed: int, B: int, S: int, E: int) -> torch.Tensor:
    return torch.randn(B, S, E, generator=torch.Generator().manual_seed(seed)) * 2


CASES = [(0, 2, 16, 4, 1, 1.0), (1, 3, 12, 4, 2, 1.0), (2, 2, 20, 8, 2, 1.25), (3, 1, 32, 4, 1, 0.5)]


def _grade_token_choice(fn, draw) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, msg("Pass your function itself ({usage}), got {got}.",
                        usage="check('token_choice_impl', my_token_choice)", got=repr(fn))
    passed, notes = 0, {}                 # message -> cases it explains (each message said once)
    drawn = (int(draw.integers(10, 2**31)), int(draw.choice([1, 2, 3])), int(draw.choice([8, 12, 16, 24])),
             int(draw.choice([4, 8])), int(draw.choice([1, 2])), float(draw.choice([0.5, 1.0, 1.25])))
    cases = [*CASES, drawn]                # the drawn one is new in every graded run
    for seed, B, S, E, k, cf in cases:
        logits = _case(seed, B, S, E)
        got = torch.as_tensor(fn(logits.clone(), k, cf)).bool()
        ref = moe.token_choice(logits, k, cf, "sequence", "position")
        if got.shape != ref.kept.shape:
            return 0.0, msg("Return a bool mask of shape (B, S, E) = {want}, got {got}.",
                            want=tuple(ref.kept.shape), got=tuple(got.shape))
        if torch.equal(got, ref.kept):
            passed += 1
            continue
        most = int(got.sum(1).max())
        if torch.equal(got, ref.assigned):
            why = msg("you kept every choice; each expert keeps at most C = ceil(k·S·CF/E) per sequence")
        elif torch.equal(got, moe.token_choice(logits, k, cf, "sequence", "rank").kept):
            why = msg("you served every first choice before any second choice (GShard's rule): for k ≥ 2 a "
                      "later token's first choice can then push out an earlier token's second choice, which "
                      "the harness flags as non-causal; serve token by token")
        elif torch.equal(got, moe.token_choice(logits, k, cf, "sequence", "score").kept):
            why = msg("you served the highest scores first (V-MoE's batch priority); the task is first come, "
                      "first served, which is what keeps the layer causal")
        elif most > ref.capacity:
            why = msg("an expert kept more tokens of one sequence than C = ceil(k·S·CF/E)")
        elif int(got.sum()) < int(ref.kept.sum()):
            why = msg("you dropped too many: did you round C down? C = ceil(k·S·CF/E)")
        else:
            why = msg("the kept pairs differ: serve token by token in position order, each token's "
                      "choices in rank order, and keep a pair while its expert has a free slot")
        notes.setdefault(why, []).append(f"[k={k} CF={cf} C={ref.capacity}]")
    if passed < len(cases):
        return cases_partial(passed, len(cases), notes)
    causal, indep, _ = harness_verdict(moe.mask_router(lambda lg: fn(lg, 2, 1.0)))
    if not (causal and indep):
        return 0.75, "matches the reference on the fixed cases but the harness finds it is not causal"
    return 1.0, "matches the reference, and the harness confirms it is causal and batch-independent"


def _grade_own_router(answer) -> tuple[float, str]:
    if not (isinstance(answer, tuple) and len(answer) == 2 and callable(answer[0]) and isinstance(answer[1], dict)):
        return 0.0, "Pass a pair (router_function, {'causal': bool, 'batch_independent': bool})."
    fn, claim = answer
    if set(claim) != {"causal", "batch_independent"} or not all(isinstance(v, bool) for v in claim.values()):
        return 0.0, "The claim must be {'causal': True/False, 'batch_independent': True/False}."
    causal, indep, leaks = harness_verdict(moe.mask_router(fn))
    got = {"causal": causal, "batch_independent": indep}
    wrong = [k for k in got if got[k] != claim[k]]
    if not wrong:
        return 1.0, msg("the harness agrees: causal={causal}, batch_independent={indep}", causal=causal, indep=indep)
    why = {"causal": (msg("harness: causal={causal} (position {p} moved the output at {n})", causal=causal,
                          p=leaks[0][1], n=leaks[0][0]) if leaks else msg("harness: causal={causal}", causal=causal)),
           "batch_independent": msg("harness: batch_independent={indep}", indep=indep)}
    return (2 - len(wrong)) / 2, series(why[k] for k in wrong)


QUESTIONS = [
    Question(
        "capacity_switch", points=1, unit="tokens",
        prompt="Expert capacity for a routing group of 4096 tokens, 64 experts, capacity factor 1.25, top-1.",
        expected=lambda: moe.expert_capacity(4096, 64, 1.25), rtol=0, atol=0.5,
        mistakes=[Mistake.ratio(0.8, "That is T/E: multiply by the capacity factor (1.25)."),
                  Mistake.ratio(64, "That is the total number of slots over all experts, k·T·CF; divide by E.")],
        hint="Switch eq. 3: capacity = (tokens per group / experts) × capacity factor, rounded up.",
    ),
    Question(
        "capacity_top2", points=1, unit="tokens",
        prompt="Expert capacity for 2048 tokens, 8 experts, capacity factor 1.25, top-2 routing.",
        expected=lambda: moe.expert_capacity(2048, 8, 1.25, top_k=2), rtol=0, atol=0.5,
        mistakes=[Mistake.ratio(0.5, "Half: with top-2 every token makes two assignments, so the slots double."),
                  Mistake.ratio(0.4, "You left out both the capacity factor and k.")],
        hint="Each token is assigned to k experts: capacity = ⌈k·T·CF/E⌉.",
    ),
    Question(
        "dropped_cf1", points=2, unit="tokens",
        prompt=f"A top-1 router sends 1024 tokens to 8 experts with counts {COUNTS}. With capacity "
               f"factor 1.0, how many tokens are dropped?",
        expected=lambda: moe.dropped_tokens(COUNTS, moe.expert_capacity(1024, 8, 1.0)), rtol=0, atol=0.5,
        mistakes=[Mistake.equals(0, "Zero only if every expert fits: the total equals E·C, but three "
                                    "experts are over C = 128 and their overflow is dropped."),
                  Mistake.equals(3, "That is the number of overflowing experts, not of dropped tokens."),
                  Mistake.equals(652, "That is every token of the overflowing experts; only the part above "
                                      "C = 128 is dropped, the first 128 are processed."),
                  Mistake.predicate(lambda a: 0 < a < 1, "Give a count of tokens, not a fraction.")],
        hint="C = ⌈T·CF/E⌉; dropped = Σ_e max(0, count_e − C).",
    ),
    Question(
        "drop_fraction_cf125", points=1, unit="fraction",
        prompt="Same counts, capacity factor 1.25: what FRACTION of the 1024 tokens is dropped?",
        expected=lambda: moe.dropped_tokens(COUNTS, moe.expert_capacity(1024, 8, 1.25)) / 1024, rtol=0.01,
        mistakes=[Mistake.ratio(1024, "That is the count; divide by the 1024 tokens."),
                  Mistake.ratio(268 / 182, "That is the CF = 1.0 answer; with 1.25 the capacity is 160."),
                  Mistake.ratio(100, "That is a percentage; give a fraction.")],
        hint="C = ⌈1024·1.25/8⌉ = 160.",
    ),
    Question(
        "classify_schemes", points=3,
        prompt="For each routing scheme in SCHEMES say whether it is causal (True) or not (False): "
               "can the output at position n change when a token at n + k (k > 0) of the same sequence "
               "changes? Graded by running the causality harness on each scheme.",
        grader=_grade_classification,
        hint="Ask, for each scheme: to decide whether token n is processed, which tokens' scores must "
             "I know? If any of them come after n, it is not causal.",
    ),
    Question(
        "token_choice_impl", points=4,
        prompt="Implement my_token_choice(logits, top_k, capacity_factor) -> bool mask (B, S, E): top-k "
               "token choice with capacity ⌈k·S·CF/E⌉ per expert per sequence, served first come, first "
               "served: token 0's choices (best first), then token 1's, and so on.",
        grader=_grade_token_choice,
        hint="Walk the (token, choice) pairs in order (position, then choice rank) keeping a counter "
             "per expert; keep a pair while its expert's counter is below C. Vectorised: a cumulative "
             "sum of one-hot expert ids along that order gives each pair its slot number.",
    ),
    Question(
        "own_router", points=2,
        prompt="Write any router of your own (logits -> bool mask (B, S, E)) and claim whether it is causal "
               "and batch-independent. The harness runs on your router and checks your claim.",
        grader=_grade_own_router,
        hint="A router that looks at other tokens' scores (a top-k over positions, a threshold set by a "
             "batch statistic) is probably not causal or not batch-independent. Then test it.",
    ),
]
