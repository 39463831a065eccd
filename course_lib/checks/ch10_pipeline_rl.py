"""Graded questions of chapter 10, "Pipeline RL". The value questions take their references from
``course_lib.rl.simulate``; the swap question runs the student's function inside a real actor
process that receives real weight broadcasts from a learner process
(:func:`course_lib.grading.drills.drill_worker`, which runs in the sandbox in a graded run)."""
from __future__ import annotations

from course_lib.grading import Mistake, Question
from course_lib.grading.drills import DRILL_INTERVAL, DRILL_VERSIONS, drill_worker
from course_lib.grading.remote import launch_with, source_of
from course_lib.grading.i18n import join, msg, series
from course_lib.rl import simulate
from course_lib.rl.task import LengthDist

# one length distribution for the value questions: most answers are short, a few hit 16k
LENGTHS = LengthDist((1000, 2000, 4000, 8000, 16000), (0.50, 0.25, 0.15, 0.07, 0.03))
SYNC_BATCH = 16                 # sequences started together in a synchronous step
T_DECODE = 0.025                # s per decode step
T_TRAIN = 60.0                  # s per optimizer step (sync question)
N_ACTORS, SLOTS, BATCH = 32, 16, 1024     # the in-flight cluster
T_TRAIN_CLUSTER = 150.0
T_DELAY = 30.0                  # s from a full batch to new weights in use

_PERCENT = Mistake.ratio(100, "That is a percentage; give a fraction (0.25, not 25).")


def _seq_weighted_lag() -> float:
    delta = simulate.pipeline_period(LENGTHS, N_ACTORS, SLOTS, BATCH, T_DECODE)
    return (T_DECODE * LENGTHS.mean() / 2 + T_DELAY) / delta


def grade_swap(fn) -> tuple[float, str]:
    """Run ``fn`` as the swap step of a real actor (2 processes) and score what it did."""
    from course_lib.dist import RankError
    if not callable(fn) or not hasattr(fn, "__name__"):
        return 0.0, "Pass the function itself (check('swap_weights', maybe_swap)), not its result."
    try:
        source = source_of(fn)
    except (OSError, TypeError):
        return 0.0, "Could not read the source of your function; define it with def in a notebook cell."
    try:
        res = launch_with(fn, drill_worker, 2, timeout=40.0, swap_source=source, swap_name=fn.__name__)[1]
    except RankError as e:
        last = [line for line in e.remote_traceback.strip().splitlines() if line.strip()][-1]
        if last.startswith("NotImplementedError"):
            return 0.0, msg("not implemented ({error})", error=last)
        raised = msg("Your function raised inside the actor process (rank {rank}): {error}.", rank=e.rank, error=last)
        if "NameError" in last:
            return 0.0, join(raised, "It runs in a fresh process: import torch and torch.distributed inside "
                                     "the function.")
        return 0.0, raised
    except TimeoutError:
        return 0.0, ("The run hung: the learner's broadcasts were never all received. Post the next "
                     "receive (dist.broadcast(buf, src=0, group=group, async_op=True)) after every swap.")
    score, notes = 0.0, []
    if res["seen"] == list(range(DRILL_VERSIONS)) and not res["wrong"]:
        score += 0.3
    elif res["wrong"]:
        notes.append(msg("after reporting version {version} the parameters were not the published "
                         "ones: copy buf[2:] into model.parameters() in order (buf[0] is the version, "
                         "buf[1] the publish time)", version=res["wrong"][0]))
    else:
        notes.append(msg("you reported versions {seen} instead of {want}: return int(buf[0]) once per "
                         "completed broadcast and post the next receive", seen=res["seen"],
                         want=list(range(DRILL_VERSIONS))))
    if not res["drift"]:
        score += 0.2
    else:
        notes.append("the parameters changed between two swaps: they share memory with the receive "
                     "buffer (vector_to_parameters or .data = … aliases it), so the next broadcast "
                     "overwrites the weights in the middle of generation; copy the values")
    if res["nones"] > 0:
        score += 0.3
    else:
        notes.append(msg("none of your {calls} calls returned without new weights, although the "
                         "learner paused {ms:g} ms between versions: your swap waits for the learner; "
                         "check pending.is_completed() and return (pending, None) when it is False",
                         calls=res["calls"], ms=1e3 * DRILL_INTERVAL))
    if res["stopped"] and not res["reposted"]:
        score += 0.2
    elif res["stopped"]:
        notes.append("on the stop message (version −1) do not post another receive; return (None, −1)")
    else:
        notes.append("the stop message (version −1) was never reported: return (None, -1) when buf[0] is −1")
    return score, msg("{notes}.", notes=series(notes)) if notes else ""


_E_MAX = LENGTHS.expected_max(SYNC_BATCH)

QUESTIONS = [
    Question(
        "sync_util_gen", points=2, unit="fraction",
        prompt=f"Response lengths are {dict(zip(LENGTHS.lengths, LENGTHS.probs))} (tokens: probability). "
               f"A synchronous RL step starts {SYNC_BATCH} sequences together on one generator and waits "
               f"for all of them. What fraction of the generator's slot-steps produce a token?",
        expected=lambda: simulate.sync_utilisation(LENGTHS, SYNC_BATCH), rtol=0.01,
        mistakes=[Mistake.equals(LENGTHS.mean() / max(LENGTHS.lengths),
                                 "E[L]/L_max assumes the longest possible answer is always in the batch; "
                                 "the step lasts E[max of 16 lengths] = Σ l·(F(l)¹⁶ − F(l⁻)¹⁶) steps."),
                  Mistake.equals(1.0, "1 would mean no stragglers: every slot waits for the longest one."),
                  _PERCENT],
        hint="Useful work: E[L] per slot. Time: the batch's longest sequence, E[max_16 L] = Σ_l l·(F(l)^16 − F(l−1)^16).",
    ),
    Question(
        "sync_util_time", points=1, unit="fraction",
        prompt=f"Same step, one decode step takes {T_DECODE * 1e3:g} ms and the optimizer step that "
               f"follows takes {T_TRAIN:g} s, during which the generator idles. Its utilisation over "
               f"the whole RL step?",
        expected=lambda: simulate.sync_utilisation(LENGTHS, SYNC_BATCH, T_DECODE, T_TRAIN), rtol=0.01,
        mistakes=[Mistake.equals(simulate.sync_utilisation(LENGTHS, SYNC_BATCH),
                                 "That is the generation phase alone; the generator also idles while the "
                                 "learner trains."),
                  _PERCENT],
        hint="E[L]·t / (E[max L]·t + t_train).",
    ),
    Question(
        "pipeline_period", points=1, unit="s",
        prompt=f"PipelineRL on a cluster of {N_ACTORS} generators × {SLOTS} slots, batches of {BATCH} "
               f"sequences, same lengths and {T_DECODE * 1e3:g} ms per decode step; an optimizer step "
               f"takes {T_TRAIN_CLUSTER:g} s on separate trainer GPUs. Seconds between optimizer steps "
               f"in steady state?",
        expected=lambda: simulate.pipeline_period(LENGTHS, N_ACTORS, SLOTS, BATCH, T_DECODE, T_TRAIN_CLUSTER),
        rtol=0.01,
        mistakes=[Mistake.equals(BATCH * LENGTHS.mean() * T_DECODE / (N_ACTORS * SLOTS),
                                 "That is how fast the generators fill a batch; here the learner is slower, "
                                 "and the pipeline runs at the pace of its slowest stage."),
                  Mistake.equals(BATCH * LENGTHS.mean() * T_DECODE / (N_ACTORS * SLOTS) + T_TRAIN_CLUSTER,
                                 "Generation and training overlap in PipelineRL: take the slower of the two, "
                                 "not their sum.")],
        hint="Generation: B·E[L] tokens at n·S tokens per decode step. The period is the slower of that and training.",
    ),
    Question(
        "lag_inflight", points=2, unit="versions",
        prompt=f"Same cluster, but training is fast: a full batch turns into new weights in use "
               f"{T_DELAY:g} s later. Token-weighted mean policy lag (in versions) under in-flight "
               f"updates, in steady state?",
        expected=lambda: simulate.expected_lag(LENGTHS, N_ACTORS, SLOTS, BATCH, T_DECODE, T_DELAY),
        rtol=0.02,
        mistakes=[Mistake.equals(_seq_weighted_lag(),
                                 "You averaged over sequences (age E[L]/2); a random *token* sits in a long "
                                 "sequence more often (the inspection paradox): E_tok[age] = t·E[L²]/(2E[L]).",
                                 rtol=0.02),
                  Mistake.equals(simulate.expected_lag(LENGTHS, N_ACTORS, SLOTS, BATCH, T_DECODE),
                                 "You left out the delay between a full batch and the new weights.", rtol=0.02)],
        hint="Δ = B·E[L]·t/(n·S) between versions; lag = (t·E[L²]/(2E[L]) + delay)/Δ.",
    ),
    Question(
        "swap_weights", points=3,
        prompt="Write maybe_swap(model, pending, buf, group), the in-flight weight swap an actor calls "
               "between two decode steps (contract in the notebook). It is graded on two real processes.",
        grader=grade_swap,
        hint="if not pending.is_completed(): return pending, None — then wait(), read int(buf[0]), copy "
             "buf[2:] into the parameters in order, repost dist.broadcast(buf, src=0, group=group, async_op=True).",
    ),
]
