"""Graded questions of chapter 5, "Pipeline parallelism". References come from course_lib.pipeline,
the schedule generators and the partitioner; the order, bubble and partition questions are graded
by running the exact schedule simulator (on orders written by hand, and on (p, m, schedule) drawn
from the run's seed) and by recomputing the optimal partition."""
from course_lib import pipeline
from course_lib.grading import Mistake, Question
from course_lib.grading.i18n import cases_partial, join, msg, series
from course_lib.pipeline import partition
from course_lib.pipeline.schedules import parse_ops, schedule

_PERCENT = Mistake.ratio(100, "That is a percentage; give a fraction (0.18, not 18).")

# the 1F1B order question: stage ORDER_STAGE of ORDER_P stages, ORDER_M microbatches
ORDER_P, ORDER_M, ORDER_STAGE = 4, 6, 1

# the ZB-H1 order question: stage ZB_STAGE of ZB_P stages, ZB_M microbatches, backward split in B and W
ZB_P, ZB_M, ZB_STAGE = 4, 6, 2

# the bubble function question: schedules whose bubble is drawn, at T_F : T_B : T_W = 1 : 1 : 1
BUBBLE_SCHEDULES = ("1f1b", "zb-h1", "zb-v", "dualpipev")

# the partition question: embedding, 10 blocks alternating global (1.4 ms) and sliding-window
# (1.0 ms) attention, then final norm + LM head + loss (3.2 ms); 4 stages
PARTITION_COSTS = [0.2] + [1.4, 1.0] * 5 + [3.2]
PARTITION_P = 4

# the imbalance question: per-microbatch forward times of 4 stages (ms); backward = 2 × forward
IMBALANCE_TF = [10.0, 10.0, 10.0, 20.0]
IMBALANCE_M = 8


def _simulated(answer, name: str, p: int, m: int, stage: int):
    """The student's order put on ``stage`` of schedule ``name`` (the other stages keep theirs) and
    simulated at t_f = 1, t_b = 2: ``(timeline, None, "")``, or ``(None, kind, text)`` when it cannot
    run, kind "parse", "deadlock" or "incomplete" (the caller words the message for its schedule)."""
    try:
        ops = parse_ops(answer)
    except ValueError as e:
        return None, "parse", str(e)
    orders = schedule(name, p, m)
    orders[stage] = ops
    try:
        return pipeline.simulate(orders, t_forward=1.0, t_backward=2.0), None, ""
    except pipeline.ScheduleError as e:
        text = str(e)
        if text.startswith("deadlock"):
            return None, "deadlock", text
        return None, "incomplete", text.removeprefix(f"rank {stage}: ")


def _grade_order(answer) -> tuple[float, str]:
    """Put the student's order on stage ORDER_STAGE, 1F1B on the others, and simulate it."""
    tl, kind, text = _simulated(answer, "1f1b", ORDER_P, ORDER_M, ORDER_STAGE)
    if kind == "parse":
        return 0.0, msg("{error}.", error=text)
    if kind == "deadlock":
        return 0.0, msg("With the other stages running 1F1B your order can never finish ({error}). "
                        "A stage cannot run ahead with all forwards while its neighbours already "
                        "wait for backwards (GPipe and 1F1B do not mix).", error=text)
    if kind:
        return 0.0, msg("Not a complete order: {error}.", error=text)
    ref = pipeline.simulate("1f1b", ORDER_P, ORDER_M, t_forward=1.0, t_backward=2.0).makespan()
    limit = ORDER_P - ORDER_STAGE
    peak = int(tl.peak_in_flight[ORDER_STAGE])
    score, notes = 0.2, []
    if peak <= limit:
        score += 0.4
    else:
        notes.append(msg("it keeps the activations of {peak} microbatches alive at once; 1F1B's point is "
                         "memory: at most p − s = {limit} on this stage (start backwards after "
                         "p − s − 1 = {warmup} warm-up forwards)", peak=peak, limit=limit, warmup=limit - 1))
    if tl.makespan() <= ref + 1e-9:
        score += 0.4
    else:
        if peak < limit:
            notes.append(msg("the step takes {t:.4g} time units instead of {ref:.4g} (t_f = 1, t_b = 2): your "
                             "order stalls its neighbours; with at most {peak} microbatches in flight it "
                             "asks for backwards before they can arrive — use p − s − 1 = {warmup} warm-up "
                             "forwards", t=tl.makespan(), ref=ref, peak=peak, warmup=limit - 1))
        else:
            notes.append(msg("the step takes {t:.4g} time units instead of {ref:.4g} (t_f = 1, t_b = 2): your "
                             "order stalls its neighbours", t=tl.makespan(), ref=ref))
    if not notes:
        return 1.0, ""
    return score, msg("Your order runs without deadlock, but {problems}.", problems=series(notes, "; and "))


def _grade_zb_order(answer) -> tuple[float, str]:
    """Put the student's order on stage ZB_STAGE, ZB-H1 on the others, and simulate it (t_f = 1,
    t_b = 2 split into B = W = 1): complete, deadlock-free, at most p in flight, as fast as ZB-H1."""
    tl, kind, text = _simulated(answer, "zb-h1", ZB_P, ZB_M, ZB_STAGE)
    if kind == "parse":
        return 0.0, msg("{error}.", error=text)
    if kind == "deadlock":
        return 0.0, msg("With the other stages running ZB-H1 your order can never finish ({error}): a B "
                        "waits for the next stage's B, and the previous stage waits for yours.", error=text)
    if kind:
        return 0.0, msg("Not a complete order: {error}. Every microbatch needs its F, its B and its W.",
                        error=text)
    ref = pipeline.simulate("zb-h1", ZB_P, ZB_M, t_forward=1.0, t_backward=2.0).makespan()
    plain = pipeline.simulate("1f1b", ZB_P, ZB_M, t_forward=1.0, t_backward=2.0).makespan()
    peak = int(tl.peak_in_flight[ZB_STAGE])
    score, notes = 0.2, []
    if peak <= ZB_P:
        score += 0.4
    else:
        notes.append(msg("it keeps {peak} microbatches alive at once (a microbatch stays until its W); ZB-H1 "
                         "keeps 1F1B's bound of p = {p}", peak=peak, p=ZB_P))
    if tl.makespan() <= ref + 1e-9:
        score += 0.4
    elif tl.makespan() >= plain - 1e-9:
        notes.append(msg("the step takes {t:.4g} time units, no better than 1F1B's {plain:.4g}: running each "
                         "W right after its B gives back the whole backward; defer the W into the idle "
                         "slots", t=tl.makespan(), plain=plain))
    else:
        notes.append(msg("the step takes {t:.4g} time units instead of ZB-H1's {ref:.4g}: stage s runs each W "
                         "s backwards late", t=tl.makespan(), ref=ref))
    if not notes:
        return 1.0, ""
    return score, msg("Your order runs without deadlock, but {problems}.", problems=series(notes, "; and "))


def _bubble_cases(draw=None) -> list[tuple[str, int, int]]:
    """Four fixed (schedule, p, m), and four drawn from ``draw`` (a numpy Generator) when given."""
    drawn = []
    if draw is not None:
        for _ in range(4):
            p = int(draw.integers(2, 7))
            drawn.append((BUBBLE_SCHEDULES[int(draw.integers(0, 4))], p, int(draw.integers(2 * p, 4 * p + 1))))
    return drawn + [("1f1b", 4, 8), ("zb-h1", 4, 8), ("zb-v", 4, 8), ("dualpipev", 4, 8)]


def _grade_bubble(fn, draw) -> tuple[float, str]:
    if not callable(fn):
        return 0.0, "Pass your function itself, e.g. check('zb_bubble', bubble)."
    cases = _bubble_cases(draw)
    passed, notes = 0, {}
    for name, p, m in cases:
        want = pipeline.simulate(name, p, m, t_forward=1.0, t_backward=2.0).bubble_fraction()
        try:
            got = float(fn(name, p, m))
        except (TypeError, ValueError):
            return 0.0, msg("Return the bubble as a number, e.g. 0.06; got {type}.",
                            type=type(fn(name, p, m)).__name__)
        if abs(got - want) <= 1e-6 + 1e-3 * want:
            passed += 1
            continue
        if abs(got - pipeline.bubble_fraction(p, m)) < 1e-9:
            why = msg("(p−1)/(m+p−1) is 1F1B's bubble; a split backward lets W fill the fill and drain: "
                      "simulate it")
        elif abs(got - 100 * want) <= 1e-3 * 100 * want:
            why = msg("That is a percentage; give a fraction (0.18, not 18).")
        else:
            why = msg("not the simulator's bubble at T_F : T_B : T_W = 1 : 1 : 1 (t_forward=1, t_backward=2)")
        notes.setdefault(why, []).append(f"{name}/{p}/{m}")
    if passed == len(cases):
        return 1.0, ""
    return cases_partial(passed, len(cases), notes)


def _grade_partition(answer) -> tuple[float, str]:
    """Accept any split whose slowest stage is as fast as the optimum."""
    n = len(PARTITION_COSTS)
    try:
        sizes = partition.check_sizes(list(answer), n, PARTITION_P)
    except (TypeError, ValueError) as e:
        return 0.0, msg("Give the number of layers of each of the {p} stages, e.g. [3, 3, 3, 3] ({error}).",
                        p=PARTITION_P, error=str(e))
    worst = max(partition.stage_costs(PARTITION_COSTS, sizes))
    best = max(partition.stage_costs(PARTITION_COSTS, partition.balanced_partition(PARTITION_COSTS, PARTITION_P)))
    if worst <= best + 1e-9:
        return 1.0, ""
    even = max(partition.stage_costs(PARTITION_COSTS, partition.even_partition(n, PARTITION_P)))
    text = msg("Your slowest stage costs {worst:.3g} ms per microbatch; a better split reaches {best:.3g} ms "
               "(the whole pipeline moves at the pace of its slowest stage).", worst=worst, best=best)
    if abs(worst - even) < 1e-9:
        text = join(text, "That is the equal-layer-count split: the stage holding the LM head becomes the "
                          "bottleneck.")
    return (0.5 if worst <= 1.1 * best else 0.0), text


QUESTIONS = [
    Question(
        "bubble_p8_m32", points=1, unit="fraction",
        prompt="GPipe or 1F1B with p = 8 stages and m = 32 microbatches: what fraction of the step's "
               "wall time does each rank sit idle (the bubble)?",
        expected=lambda: pipeline.bubble_fraction(8, 32), rtol=0.01,
        mistakes=[Mistake.ratio(39 / 32, "That is (p−1)/m = 7/32, the bubble relative to the ideal "
                                         "time (Megatron's normalisation); the share of wall time is "
                                         "(p−1)/(m+p−1)."),
                  Mistake.equals(8 / 40, "p/(m+p) counts one stage too many: the fill and the drain "
                                         "take p − 1 slots each."),
                  _PERCENT],
        hint="Wall time = (m + p − 1) slots of (t_f + t_b); each rank works m of them.",
    ),
    Question(
        "bubble_interleaved", points=1, unit="fraction",
        prompt="Same pipeline (p = 8, m = 32) with the interleaved schedule, v = 4 model chunks per "
               "rank: the bubble as a fraction of wall time?",
        expected=lambda: pipeline.bubble_fraction(8, 32, v=4), rtol=0.01,
        mistakes=[Mistake.ratio((7 / 39) / (7 / 135), "You left out the interleaving: v chunks per rank "
                                                      "make each fill/drain slot v times shorter."),
                  Mistake.ratio((7 / 128) / (7 / 135), "That is (p−1)/(v·m), relative to the ideal time; "
                                                       "as a share of wall time it is (p−1)/(v·m + p − 1)."),
                  _PERCENT],
        hint="Interleaving divides the bubble time by v: (p−1)/(v·m + p − 1).",
    ),
    Question(
        "min_mb_p16", points=2, unit="microbatches",
        prompt="p = 16 stages (no interleaving). Smallest number of microbatches m that keeps the bubble "
               "at or below 5% of wall time?",
        expected=lambda: pipeline.min_microbatches(16, 0.05), rtol=0, atol=0.5,
        mistakes=[Mistake.equals(300, "300 makes (p−1)/m = 5%, the bubble relative to the ideal time; "
                                      "for 5% of wall time solve (p−1)/(m+p−1) ≤ 0.05."),
                  Mistake.equals(284, "One short: round m up; with 284 the bubble is just above 5%."),
                  Mistake.equals(64, "m ≥ 4p is GPipe's rule of thumb (it gives a 19% bubble here), not "
                                     "the answer to this target.")],
        hint="(p−1)/(m+p−1) ≤ f  ⇔  m ≥ (p−1)(1−f)/f; round up.",
    ),
    Question(
        "stash_1f1b_stage3", points=1, unit="GB",
        prompt="p = 8, m = 32. One microbatch's activations on stage 3 (counting from 0) take 1.5 GB. "
               "Peak activation memory of stage 3 under 1F1B, in GB?",
        expected=lambda: 1.5 * pipeline.peak_in_flight("1f1b", 8, 32, 3), rtol=0.01,
        mistakes=[Mistake.equals(48, "48 GB is GPipe: all 32 microbatches are stashed before the first "
                                     "backward. 1F1B keeps only p − s in flight."),
                  Mistake.equals(12, "p microbatches is the bound of stage 0; stage s holds p − s."),
                  Mistake.equals(6, "One short: stage s runs p − s − 1 warm-up forwards and then one more "
                                    "forward before its first backward, so p − s are alive."),
                  Mistake.ratio(1e9, "Give the answer in GB, not bytes.")],
        hint="1F1B: stage s has at most p − s microbatches in flight.",
    ),
    Question(
        "imbalanced_step_ms", points=2, unit="ms",
        prompt=f"GPipe, m = {IMBALANCE_M}, four stages whose forward passes take {IMBALANCE_TF} ms per "
               f"microbatch (the last stage carries the LM head); every backward takes twice its forward. "
               f"Step time in ms (communication free)?",
        expected=lambda: pipeline.simulate("gpipe", 4, IMBALANCE_M, t_forward=IMBALANCE_TF,
                                           t_backward=[2 * t for t in IMBALANCE_TF]).makespan(),
        rtol=0.01,
        mistakes=[Mistake.equals(11 * 3 * 12.5, "412.5 ms uses the mean stage time in (m+p−1)(t_f+t_b); "
                                                "the pipeline moves at the pace of its slowest stage."),
                  Mistake.equals(11 * 3 * 20.0, "660 ms assumes every stage is as slow as the slowest; "
                                                "fill and drain pass each stage once at its own speed: "
                                                "Σ t_s + (m−1)·max t_s per phase."),
                  Mistake.ratio(1e-3, "Give milliseconds, not seconds.")],
        hint="Each phase is a flow shop of identical jobs: Σ_s t_s + (m − 1)·max_s t_s. Or simulate it.",
    ),
    Question(
        "order_1f1b", points=3,
        prompt=f"Write the 1F1B order of operations of stage {ORDER_STAGE} in a pipeline of p = {ORDER_P} "
               f"stages with m = {ORDER_M} microbatches, as a list like ['F0', 'F1', 'B0', ...]. It is "
               f"graded by simulating it with the other stages running 1F1B: it must not deadlock, must "
               f"not stash more than p − s microbatches, and must not slow the step down.",
        grader=_grade_order,
        hint="p − s − 1 warm-up forwards, then alternate one forward and one backward, then the "
             "remaining backwards.",
    ),
    Question(
        "partition", points=2,
        prompt=f"Layer costs (ms per microbatch, forward + backward): {PARTITION_COSTS} — embedding, ten "
               f"blocks alternating global and sliding-window attention, LM head + loss. Split them into "
               f"{PARTITION_P} contiguous stages (give the number of layers per stage) so that the "
               f"slowest stage is as fast as possible.",
        grader=_grade_partition,
        hint="Minimise the most expensive stage; try a bound T and pack layers greedily while the stage "
             "stays ≤ T (or use course_lib.pipeline.partition.balanced_partition to check).",
    ),
    Question(
        "order_zb_h1", points=3,
        prompt=f"Zero bubble splits each backward into B (the input gradient, sent upstream at once) and W "
               f"(the weight gradient, deferred). Write the ZB-H1 order of stage {ZB_STAGE} in a pipeline of "
               f"p = {ZB_P} stages with m = {ZB_M} microbatches, as a list like ['F0', 'F1', 'B0', 'W0', ...]. "
               f"It is graded by simulating it with the other stages running ZB-H1 (t_f = 1, B = W = 1): it "
               f"must not deadlock, must keep at most p microbatches alive (until their W), and must be as "
               f"fast as ZB-H1.",
        grader=_grade_zb_order,
        hint="Keep 1F1B's order of F and B (p − s − 1 warm-up forwards), and run each W s backwards after "
             "its B; the W still owed at the end run last.",
    ),
    Question(
        "zb_bubble", points=2,
        prompt="Write a function bubble(schedule, p, m) that returns the bubble (idle share of the ranks' wall "
               "time) of schedule in ('1f1b', 'zb-h1', 'zb-v', 'dualpipev') with p ranks and m microbatches, "
               "when a rank's forward, input-gradient and weight-gradient passes take equal times (t_forward=1, "
               "t_backward=2). The grader calls it on (schedule, p, m) drawn from the run's seed.",
        grader=_grade_bubble,
        hint="No closed formula covers all four: replay the schedule with course_lib.pipeline.simulate and "
             "read the Timeline's bubble_fraction().",
    ),
]
