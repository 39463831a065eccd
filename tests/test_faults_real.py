"""Chapter 12 on real processes: one torchrun elastic job (2 ranks) that is SIGKILLed at random
steps, cut in the middle of a checkpoint save, hung inside a collective and has its last
checkpoint corrupted, one failure per attempt, while a second copy of the job tries to use its
checkpoint folder; after each failure the agent restarts it and it ends bit-identical to an
uninterrupted run. Then checkpoints broken five ways between two launches (each refused by name,
one fallback, no crash loop), another job refused the folder, DCP resharding and async saves,
and the straggler monitor."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from machine_load import judge_timing

from course_lib.faults.elastic import Fault, JobConfig, job_id
from course_lib.faults.jobs import random_faults, read_log, reference_run, run_job

PG_TIMEOUT_S = 5.0
JOB = JobConfig(steps=12, ckpt_every=3, timeout_s=PG_TIMEOUT_S)
KILLS = random_faults(2, 8, seed=4)            # two SIGKILLs at seeded random steps and ranks
SAVE_CUT, HANG, ROT = Fault("save", 9, 1), Fault("hang", 11, 0), Fault("flip", 12, 1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every faulty run must reproduce bit for bit: digests and losses."""
    out = tmp_path_factory.mktemp("reference")
    return reference_run(out, JOB), read_log(out)["losses"]


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """The same job under torchrun, with one failure per attempt: two kills, a save cut short,
    a hang, a flipped byte in its last checkpoint. Once it has started, a second copy of the
    job (same seed: the same run id) is launched on the same folder. Returns the run, its
    directory and the second copy's run."""
    out = tmp_path_factory.mktemp("faulty")
    box = {}
    first = threading.Thread(target=lambda: box.update(res=run_job(
        out, replace(JOB, faults=KILLS + (SAVE_CUT, HANG, ROT)), max_restarts=5, timeout=300)))
    first.start()
    while first.is_alive() and not (out / "log.jsonl").exists():
        time.sleep(0.1)
    second = run_job(out, JOB, max_restarts=3, timeout=120)
    first.join()
    res = box["res"]
    assert res.returncode == 0, res.output[-3000:]
    return res, out, second


def test_every_failure_restarts_and_the_job_ends_bit_identical(faulty, reference):
    res, out, _ = faulty
    digests, losses = reference
    assert res.restarts == 5
    assert res.final == digests                         # weights, AdamW state and step count
    assert digests["steps"] == JOB.steps
    assert read_log(out)["losses"] == losses           # every step, the redone ones too


def test_random_kills_resume_from_the_last_checkpoint_before_them(faulty):
    res, *_ = faulty
    assert KILLS[0].step < KILLS[1].step <= 8
    for i, kill in enumerate(KILLS):                  # attempt i was killed during step kill.step
        assert res.last_step[i] == kill.step - 1       # nobody finishes the step a rank died in
        assert res.resumed_from[i + 1] == (kill.step - 1) // JOB.ckpt_every * JOB.ckpt_every
        assert res.steps_redone[i] == res.last_step[i] - res.resumed_from[i + 1]
        assert 0 <= res.steps_redone[i] < JOB.ckpt_every


def test_a_save_killed_midway_is_never_loaded(faulty):
    res, *_ = faulty
    cut = len(KILLS)                                   # the attempt whose save of step 9 was cut
    assert res.last_step[cut] == SAVE_CUT.step         # it trained step 9, then died in the save
    assert res.incomplete_seen[cut + 1] == [SAVE_CUT.step]   # the partial directory was there...
    assert res.resumed_from[cut + 1] == SAVE_CUT.step - JOB.ckpt_every   # ...and was not loaded
    assert res.steps_redone[cut] == JOB.ckpt_every


def test_a_hang_in_a_collective_is_caught_by_the_process_group_timeout(faulty):
    res, *_ = faulty
    hung = len(KILLS) + 1
    assert res.last_step[hung] == HANG.step - 1 and res.resumed_from[hung + 1] == 9
    # the peer waited out the timeout before failing: the gap holds at least that long
    assert res.restart_seconds[hung] >= PG_TIMEOUT_S
    assert "timed out" in res.output.lower() or "timeout" in res.output.lower()


def test_a_corrupted_checkpoint_is_refused_and_the_job_falls_back_once(faulty):
    res, *_ = faulty
    rot = len(KILLS) + 2                               # the attempt that flipped a byte of step 12
    assert res.last_step[rot] == ROT.step and res.resumed_from[rot + 1] == ROT.step - JOB.ckpt_every
    assert res.refused[rot + 1] == [f"{res.refused[rot + 1][0].split('/ckpt/')[0]}/ckpt/step_000012/"
                                    "__1_0.distcp does not match its SHA-256 in COMPLETE: corrupt or replaced"]
    assert all(not r for i, r in enumerate(res.refused) if i != rot + 1)


def test_retention_keeps_the_last_three_checkpoints_by_default(faulty):
    _, out, _ = faulty
    assert sorted(p.name for p in (out / "ckpt").glob("step_*")) == ["step_000006", "step_000009", "step_000012"]


def test_a_second_copy_of_the_job_is_refused_the_folder_while_the_first_runs(faulty):
    _, out, second = faulty
    assert second.returncode != 0
    assert f"FolderInUseError: checkpoint folder {out / 'ckpt'}" in second.output
    assert repr(job_id(JOB)) in second.output          # it names the job that holds the folder
    # refused once: no restart can fix it, so the agent was stopped instead of trying again
    assert second.output.count("job refused: FolderInUseError") == 1


# ------------------------------------------------------------------ checkpoints broken five ways
ROTTEN = {12: ("flip", "__1_0.distcp", "does not match its SHA-256"),
          10: ("swap", "__1_0.distcp", "does not match its SHA-256"),
          8: ("trunc", "__1_0.distcp", "truncated"),
          6: ("meta", ".metadata", "does not match its SHA-256"),
          4: ("delete", "__1_0.distcp", "is missing")}


@pytest.fixture(scope="module")
def rotten(tmp_path_factory):
    """The job under torchrun with a checkpoint every 2 steps; then its five newest checkpoints
    are broken, one way each, and the job is launched again on them."""
    from course_lib.faults.checkpointer import checkpoint_dir
    from course_lib.faults.integrity import damage
    out = tmp_path_factory.mktemp("rotten")
    job = replace(JOB, ckpt_every=2, keep_last=6)
    assert run_job(out, job, max_restarts=0).returncode == 0
    (out / "log.jsonl").rename(out / "first.jsonl")
    for step, (how, _, _) in ROTTEN.items():
        damage(checkpoint_dir(out / "ckpt", step), how, rank=1, older=checkpoint_dir(out / "ckpt", step - 2))
    res = run_job(out, replace(job, keep_last=2, keep_every=4), max_restarts=3)
    assert res.returncode == 0, res.output[-3000:]
    return res, out


@pytest.mark.parametrize("step", sorted(ROTTEN, reverse=True))
def test_each_kind_of_broken_checkpoint_is_refused_naming_the_file(rotten, step):
    res, out = rotten
    how, name, words = ROTTEN[step]
    reason = res.refused[0][sorted(ROTTEN, reverse=True).index(step)]   # newest first
    assert reason.startswith(f"{out}/ckpt/step_{step:06d}/{name} ") and words in reason, (how, reason)


def test_the_job_falls_back_past_them_once_and_ends_bit_identical(rotten, reference):
    res, out = rotten
    assert res.restarts == 0 and res.resumed_from == [2]   # no crash loop: one start, one fallback
    assert len(res.refused[0]) == len(ROTTEN)
    assert res.final == reference[0]
    # retention kept the last 2 and the multiples of 4; the broken ones were replaced on the way
    assert sorted(p.name for p in (out / "ckpt").glob("step_*")) == [
        "step_000004", "step_000008", "step_000010", "step_000012"]


def test_another_job_is_refused_the_folder_and_it_is_left_as_it_was(rotten):
    from course_lib.faults.integrity import file_sha256
    _, out = rotten
    before = {p: file_sha256(p) for p in (out / "ckpt").rglob("*") if p.is_file()}
    other = run_job(out, replace(JOB, seed=1), max_restarts=3)          # another seed: another job
    assert other.returncode != 0
    assert (f"checkpoint folder {out / 'ckpt'} belongs to job {job_id(JOB)!r}, not to this job "
            f"{job_id(replace(JOB, seed=1))!r}") in other.output
    assert other.output.count("job refused: ForeignFolderError") == 1
    assert {p: file_sha256(p) for p in (out / "ckpt").rglob("*") if p.is_file()} == before


def test_a_job_none_of_whose_checkpoints_verifies_stops_once_and_leaves_them(tmp_path, monkeypatch):
    # keep_last=1 and its one checkpoint broken: 28369aa refused it, trained from step 0, exited 0
    # and saved over it. Now the job stops, naming the file, and the agent does not restart it.
    from course_lib.faults.checkpointer import checkpoint_dir
    from course_lib.faults.integrity import damage, file_sha256
    job = replace(JOB, keep_last=1)
    reference_run(tmp_path, replace(job, steps=6))                  # leaves one checkpoint: step 6
    hit = damage(checkpoint_dir(tmp_path / "ckpt", 6), "flip", rank=1)
    (hit.parent / ".DS_Store").write_bytes(b"a desktop's file")      # not the reason it is refused
    files = lambda: {p: file_sha256(p) for p in (tmp_path / "ckpt").rglob("*")  # noqa: E731
                     if p.is_file() and p.name != "LOCK"}
    before = files()
    temp = tmp_path / "temp"          # the agent's and the ranks' temp folder: torchrun's logs go elsewhere
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    res = run_job(tmp_path, job, max_restarts=3)
    assert res.returncode != 0, res.output[-3000:]
    left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]   # torch's one cache
    assert not left, left                                            # the job left nothing else in it
    assert res.output.count("job refused: NoVerifiedCheckpointError") == 1, res.output[-3000:]
    assert f"{hit} does not match its SHA-256" in res.output and ".DS_Store" not in res.output
    assert files() == before                                         # nothing trained or saved over it


def test_a_job_saving_asynchronously_resumes_to_the_same_bits(tmp_path, reference):
    import json
    from course_lib.faults.checkpointer import latest_complete
    reference_run(tmp_path, replace(JOB, steps=6, async_save=True))   # stops after step 6...
    assert latest_complete(tmp_path / "ckpt") == 6
    resumed = reference_run(tmp_path, replace(JOB, async_save=True))   # ...and goes on to 12
    starts = [json.loads(ln) for ln in (tmp_path / "log.jsonl").read_text().splitlines() if '"start"' in ln]
    assert [e["resumed_from"] for e in starts] == [0, 6]
    assert resumed == reference[0]


def test_fault_spec_round_trips():
    assert Fault.parse("kill:5:1") == Fault("kill", 5, 1) and str(Fault("hang", 2, 0)) == "hang:2:0"
    with pytest.raises(ValueError, match="fault kind"):
        Fault.parse("explode:1:0")


# ------------------------------------------------------------------ DCP: resharding, async saves
def test_a_checkpoint_saved_by_4_ranks_loads_on_2_bit_identical(tmp_path):
    from course_lib.faults.labs import reshard_check
    r = reshard_check(tmp_path, save_ranks=4, load_ranks=2, steps=2)
    assert r["shard_files"] == 4                      # every saving rank wrote its own shard
    assert r["state_identical"]                       # weights, AdamW moments, step: same bits
    assert r["next_loss_identical"] and r["next_loss_saved"] == r["next_loss_loaded"]


def test_checkpoint_markers_decide_what_is_complete(tmp_path):
    from course_lib.faults.checkpointer import (MARKER, checkpoint_dir, complete_steps, incomplete_steps,
                                                latest_complete)
    assert latest_complete(tmp_path / "none") is None
    for step in (3, 6, 9):
        checkpoint_dir(tmp_path, step).mkdir()
    for step in (3, 6):
        (checkpoint_dir(tmp_path, step) / MARKER).write_text("{}")
    (tmp_path / "step_x").mkdir()
    assert complete_steps(tmp_path) == [3, 6] and incomplete_steps(tmp_path) == [9]
    assert latest_complete(tmp_path) == 6


def user_state_worker(ctx, root):
    """A user's own state, not the course's job: a plain module, its optimizer, a tensor, a number."""
    import torch
    from course_lib.faults.checkpointer import ShardedCheckpointer
    ckpt = ShardedCheckpointer(root, ctx.group)
    fresh_latest = ckpt.latest()
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "ema": torch.arange(5.0), "epoch": 7}
    ckpt.save(state, 1)
    other = torch.nn.Linear(4, 3)
    into = {"model": other.state_dict(), "optim": opt.state_dict(), "ema": torch.zeros(5), "epoch": 0}
    ckpt.load(into, ckpt.latest())
    try:
        ckpt.load(into, 2)
        missing = None
    except FileNotFoundError as e:
        missing = str(e)
    return {"fresh": fresh_latest, "latest": ckpt.latest(), "epoch": into["epoch"], "ema": into["ema"].tolist(),
            "weights": all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), into["model"].values())),
            "missing": missing}


def test_the_checkpointer_saves_and_loads_a_users_own_state(tmp_path):
    from course_lib.dist import launch
    for r in launch(user_state_worker, 2, backend="gloo", root=str(tmp_path)):
        assert r["fresh"] is None and r["latest"] == 1
        assert r["weights"] and r["epoch"] == 7 and r["ema"] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert "no complete checkpoint for step 2" in r["missing"]


@pytest.mark.serial
def test_async_save_blocks_training_less_than_a_sync_save(tmp_path):
    from course_lib.faults.labs import async_vs_sync
    r = async_vs_sync(tmp_path, repeats=3, overlap_steps=2)
    assert r["async_intact"]                          # each async checkpoint = weights when taken
    assert r["checkpoint_bytes"] > 1e6
    judge_timing(r["async_blocking_s"] < r["sync_s"],
                 f"the async save blocked {r['async_blocking_s']:.3f} s, a sync save {r['sync_s']:.3f} s")


# ------------------------------------------------------------------ stragglers
def test_the_straggler_monitor_flags_the_slowed_rank_and_only_it():
    from course_lib.faults.monitor import straggler_demo
    r = straggler_demo(world_size=3, steps=6, slow_rank=2, slow_s=0.15, threshold=3.0)
    assert r["flagged"] == [2] and r["first_flagged_step"] == 3    # after `patience` steps
    assert r["compute_s"][2] > 3 * max(r["compute_s"][:2])
    # the step time (compute + waiting in the all-reduce) is the slow rank's on every rank
    assert min(r["step_s"]) > 0.15


def record_worker(ctx, times):
    """Feed the monitor given per-rank compute times (exact, unlike a loaded machine's clock)."""
    from course_lib.faults.monitor import StragglerMonitor
    monitor = StragglerMonitor(ctx.group, threshold=1.5, patience=3)
    flags = []
    for row in times:
        monitor.record(row[ctx.rank])
        flags.append(monitor.step())
    return flags, monitor.history


def test_the_monitor_needs_a_sustained_slowdown_and_every_rank_agrees():
    from course_lib.dist import launch
    ok, slow = [1.0, 1.0, 1.1], [1.0, 1.0, 2.0]
    times = [ok, slow, ok, ok, slow, slow, slow, ok, ok, ok]
    (flags, history), *others = launch(record_worker, 3, backend="gloo", times=times)
    assert history == times and all(o == (flags, history) for o in others)
    # one slow step among calm ones flags nobody; three in the window flag rank 2 until they age out
    assert flags == [[], [], [], [], [], [2], [2], [2], [], []]
