"""Graded questions of chapter 12, "Failures at scale".

The value questions take their references from course_lib.faults (the failure arithmetic). The
resume question runs the student's training function as a real job in its own process, SIGKILLs it
after a step drawn from the run's seed, starts it again and compares its final weights with an
uninterrupted run bit for bit (:func:`course_lib.faults.drill.kill_and_resume`, run in the
sandbox in a graded run).
"""
from __future__ import annotations

from course_lib import faults
from course_lib.faults.drill import resume_worker
from course_lib.grading import Mistake, Question
from course_lib.grading.remote import NotAFunction, function_source, launch_with
from course_lib.grading.i18n import msg

HOUR, DAY = 3600.0, 86400.0
GPU_MTBF_H, N_GPUS = 50_000.0, 24_576          # per-GPU MTBF (hours) and cluster size
SAVE, MTBF = 90.0, 3 * HOUR                     # blocking save (s) and job MTBF (s)
POLICY = dict(interval_seconds=HOUR, save_seconds=SAVE, restart_seconds=10 * 60.0, mtbf_seconds=MTBF)
ZERO3 = (70e9, 1024)                            # parameters, ranks
ASYNC = (405e9, 16_384, 25e9)                   # parameters, ranks, device-to-host bytes/s
TOTAL_STEPS, EVERY = 12, 4

_PERCENT = Mistake.ratio(100, "That is a percentage; give a fraction (0.83, not 83).")


def _grade_resume(fn, draw) -> tuple[float, str]:
    """Kill the student's job after a drawn step, restart it, and score the resume."""
    try:
        source = function_source(fn, "check('resume', train_resumable)")
    except NotAFunction as e:
        return 0.0, e.message
    kill_at = int(draw.choice([k for k in range(EVERY + 1, TOTAL_STEPS) if k % EVERY]))
    from course_lib.dist import RankError
    try:
        res = launch_with(fn, resume_worker, 1, timeout=90, source=source, fn_name=fn.__name__,
                          kill_at=kill_at, total_steps=TOTAL_STEPS, every=EVERY)[0]
    except RankError as e:
        tb = e.remote_traceback.strip().splitlines()
        if not tb:
            return 0.0, msg("The harness failed around your function: an error")
        return 0.0, msg("The harness failed around your function: {error}", error=tb[-1])
    except TimeoutError:
        return 0.0, "The job hung: does your loop stop after total_steps steps?"
    if res["error"]:
        if "NotImplementedError" in res["error"]:
            return 0.0, msg("not implemented ({error})", error=res["error"])
        return 0.0, msg("Your job failed: {error}", error=res["error"])
    expected = kill_at // EVERY * EVERY
    start = res["resumed_from"]
    if start == 0:
        return 0.2, msg("Killed after step {kill_at}, your job started again from step 0: it ends right "
                        "but redoes all the work. Load the last complete checkpoint (step {expected}).",
                        kill_at=kill_at, expected=expected)
    if start != expected:
        return 0.2, msg("Killed after step {kill_at}, your job resumed after step {start}; the last "
                        "checkpoint written every {every} steps was step {expected}.", kill_at=kill_at,
                        start=start, every=EVERY, expected=expected)
    if not res["bit_identical"]:
        return 0.4, ("It resumed from the right step, but the final weights differ from an uninterrupted "
                     "run: some state was not restored. The next step depends on the weights, the "
                     "optimizer's moments and step count, the loader's position and torch's RNG (dropout).")
    return 1.0, ""


QUESTIONS = [
    Question(
        "cluster_mtbf", points=1, unit="s",
        prompt=f"Each GPU fails independently, on average once every {GPU_MTBF_H:,.0f} hours. What is the "
               f"mean time between failures of a synchronous job on {N_GPUS:,} GPUs, in seconds?",
        expected=lambda: faults.cluster_mtbf(GPU_MTBF_H * HOUR, N_GPUS), rtol=0.01,
        mistakes=[Mistake.ratio(1 / HOUR, "That is in hours; the course's unit is seconds."),
                  Mistake.ratio(N_GPUS, "Multiply the failure rates, not the MTBFs: n GPUs fail n times "
                                        "as often, so M = M_gpu / n."),
                  Mistake.ratio(N_GPUS ** 2, "That is M_gpu × n: more GPUs fail more often, not less.")],
        hint="Independent failures: the rates 1/M_gpu add up over n GPUs.",
    ),
    Question(
        "llama3_gpu_mtbf", points=1, unit="s",
        prompt="Llama 3 405B saw 419 unexpected interruptions in 54 days on 16,384 H100 GPUs. Attributing "
               "each to one GPU, what per-GPU MTBF does that imply, in seconds?",
        expected=lambda: faults.implied_gpu_mtbf(419, 54 * DAY, 16_384), rtol=0.01,
        mistakes=[Mistake.ratio(419 / 466, "You counted all 466 interruptions; 47 of them were planned "
                                           "(maintenance, upgrades), not failures."),
                  Mistake.ratio(1 / 16_384, "That is the job's MTBF (~3 h); per GPU, multiply by the "
                                            "number of GPUs: GPU-seconds per failure."),
                  Mistake.ratio(1 / DAY, "That is in days; give seconds.")],
        hint="GPU-seconds observed / failures: n · T / f.",
    ),
    Question(
        "young_interval", points=1, unit="s",
        prompt=f"A checkpoint blocks training for {SAVE:g} s and the job fails every {MTBF / HOUR:g} h on "
               f"average. What compute time between checkpoints does Young's formula give, in seconds?",
        expected=lambda: faults.optimal_checkpoint_interval(SAVE, MTBF), rtol=0.01,
        mistakes=[Mistake.ratio(2 ** -0.5, "That is √(δM): Young's optimum is √(2δM)."),
                  Mistake.ratio(1 / 60, "That is in minutes; give seconds."),
                  Mistake.ratio(60 ** -0.5, "You used the MTBF in minutes and δ in seconds: convert both "
                                            "to seconds.")],
        hint="Waste per second ≈ δ/τ + τ/(2M); set its derivative to zero.",
    ),
    Question(
        "policy_goodput", points=2, unit="fraction",
        prompt=f"A job checkpoints every {POLICY['interval_seconds'] / HOUR:g} h of compute; each save "
               f"blocks {SAVE:g} s, each restart takes {POLICY['restart_seconds'] / 60:g} min, and the job "
               f"fails every {MTBF / HOUR:g} h on average. Under the first-order model (a failure loses R "
               f"plus half a period), what fraction of wall time is useful training?",
        expected=lambda: faults.goodput(**POLICY), rtol=0.005,
        mistakes=[_PERCENT,
                  Mistake.equals(faults.goodput(POLICY["interval_seconds"], SAVE, 0.0, MTBF),
                                 "You left out the restart time: every failure also costs R."),
                  Mistake.predicate(lambda a: abs(float(a) - POLICY["interval_seconds"] / (
                      POLICY["interval_seconds"] + SAVE) * (1 - (600 + HOUR + SAVE) / MTBF)) < 1e-3,
                      "A failure loses on average half a period, not a whole one: it strikes at a "
                      "uniformly random moment since the last checkpoint.")],
        hint="goodput = τ/(τ+δ) · (1 − (R + (τ+δ)/2)/M).",
    ),
    Question(
        "zero3_ckpt_bytes", points=1, unit="bytes",
        prompt=f"A {ZERO3[0] / 1e9:g}B-parameter model is fully sharded (ZeRO-3) over {ZERO3[1]:,} ranks, "
               f"with mixed-precision Adam at 16 bytes per parameter. How many bytes does each rank "
               f"write in a sharded checkpoint?",
        expected=lambda: faults.checkpoint_bytes_per_rank(*ZERO3), rtol=0.01,
        mistakes=[Mistake.ratio(ZERO3[1], "That is the whole checkpoint; each rank writes only its 1/n shard."),
                  Mistake.ratio(8, "That is in bits; give bytes."),
                  Mistake.ratio(2 / 16, "Only the bf16 weights: a checkpoint to resume from also needs the "
                                        "optimizer state (fp32 master copy and both Adam moments).")],
        hint="Full sharding: each rank owns 1/n of every parameter's bytes.",
    ),
    Question(
        "async_stall", points=1, unit="s",
        prompt=f"An asynchronous sharded save of a {ASYNC[0] / 1e9:g}B model (16 bytes per parameter) over "
               f"{ASYNC[1]:,} GPUs: each GPU first copies its shard to host memory at "
               f"{ASYNC[2] / 1e9:g} GB/s and training resumes. How long does training stall, in seconds?",
        expected=lambda: faults.async_blocking_seconds(16 * ASYNC[0], ASYNC[1], ASYNC[2]), rtol=0.01,
        mistakes=[Mistake.ratio(ASYNC[1], "That copies the whole checkpoint through one GPU's link; each "
                                          "GPU copies only its own shard, in parallel."),
                  Mistake.ratio(1e3, "That is in milliseconds; give seconds.")],
        hint="Shard bytes / copy bandwidth.",
    ),
    Question(
        "resume", points=4,
        prompt=f"Write train_resumable(ckpt_dir, total_steps, every) that builds the job with "
               f"drill.make_job(), trains it with drill.train_step(model, optimizer, loader) until "
               f"total_steps steps are done, writes a checkpoint into ckpt_dir after every `every` steps "
               f"(atomically: checkpoint.save_atomic), resumes from that checkpoint if one exists, and "
               f"returns the model. Graded by running it as a job ({TOTAL_STEPS} steps, every {EVERY}), "
               f"SIGKILLing it after a random step, starting it again, and comparing the final weights "
               f"with an uninterrupted run bit for bit.",
        grader=_grade_resume,
        hint="Save model.state_dict(), optimizer.state_dict(), loader.state_dict(), "
             "checkpoint.rng_state() and the step; after loading, restore all five before the next step.",
    ),
]
