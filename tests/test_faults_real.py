"""Chapter 12 on real processes: one torchrun elastic job (2 ranks) that is SIGKILLed at random
steps, cut in the middle of a checkpoint save and hung inside a collective, one failure per
attempt; after each the agent restarts it and it ends bit-identical to an uninterrupted run.
Then DCP resharding and async saves, and the straggler monitor."""
from __future__ import annotations

from dataclasses import replace

import pytest

from course_lib.faults.elastic import Fault, JobConfig
from course_lib.faults.jobs import random_faults, read_log, reference_run, run_job

PG_TIMEOUT_S = 5.0
JOB = JobConfig(steps=12, ckpt_every=3, timeout_s=PG_TIMEOUT_S)
KILLS = random_faults(2, 8, seed=4)            # two SIGKILLs at seeded random steps and ranks
SAVE_CUT, HANG = Fault("save", 9, 1), Fault("hang", 11, 0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every faulty run must reproduce bit for bit: digests and losses."""
    out = tmp_path_factory.mktemp("reference")
    return reference_run(out, JOB), read_log(out)["losses"]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """The same job under torchrun, with one failure per attempt: two kills, a save cut short,
    a hang. Returns the run and its directory."""
    out = tmp_path_factory.mktemp("faulty")
    res = run_job(out, replace(JOB, faults=KILLS + (SAVE_CUT, HANG)), max_restarts=4, timeout=200)
    assert res.returncode == 0, res.output[-3000:]
    return res, out


def test_every_failure_restarts_and_the_job_ends_bit_identical(faulty, reference):
    res, out = faulty
    digests, losses = reference
    assert res.restarts == 4
    assert res.final == digests                         # weights, AdamW state and step count
    assert digests["steps"] == JOB.steps
    assert read_log(out)["losses"] == losses           # every step, the redone ones too


def test_random_kills_resume_from_the_last_checkpoint_before_them(faulty):
    res, _ = faulty
    assert KILLS[0].step < KILLS[1].step <= 8
    for i, kill in enumerate(KILLS):                  # attempt i was killed during step kill.step
        assert res.last_step[i] == kill.step - 1       # nobody finishes the step a rank died in
        assert res.resumed_from[i + 1] == (kill.step - 1) // JOB.ckpt_every * JOB.ckpt_every
        assert res.steps_redone[i] == res.last_step[i] - res.resumed_from[i + 1]
        assert 0 <= res.steps_redone[i] < JOB.ckpt_every


def test_a_save_killed_midway_is_never_loaded(faulty):
    res, _ = faulty
    cut = len(KILLS)                                   # the attempt whose save of step 9 was cut
    assert res.last_step[cut] == SAVE_CUT.step         # it trained step 9, then died in the save
    assert res.incomplete_seen[cut + 1] == [SAVE_CUT.step]   # the partial directory was there...
    assert res.resumed_from[cut + 1] == SAVE_CUT.step - JOB.ckpt_every   # ...and was not loaded
    assert res.steps_redone[cut] == JOB.ckpt_every


def test_a_hang_in_a_collective_is_caught_by_the_process_group_timeout(faulty):
    res, _ = faulty
    hung = len(KILLS) + 1
    assert res.last_step[hung] == HANG.step - 1 and res.resumed_from[hung + 1] == 9
    # the peer waited out the timeout before failing: the gap holds at least that long
    assert res.restart_seconds[hung] >= PG_TIMEOUT_S
    assert "timed out" in res.output.lower() or "timeout" in res.output.lower()


def test_fault_spec_round_trips():
    assert Fault.parse("kill:5:1") == Fault("kill", 5, 1) and str(Fault("hang", 2, 0)) == "hang:2:0"
    with pytest.raises(ValueError, match="fault kind"):
        Fault.parse("explode:1:0")
