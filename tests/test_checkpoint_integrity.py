"""Checkpoints that cannot lie (course_lib.faults.integrity, course_lib.faults.checkpointer):
verify() on a real two-rank DCP checkpoint broken each way a disk or a person breaks one, the
checkpointer falling back to the newest checkpoint that verifies (the same step on every rank),
the folder lock against a second job, in this process and across a SIGKILLed one, and the
retention policy. The same faults on real torchrun restarts are in test_faults_real.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from course_lib.faults.integrity import (DAMAGES, LOCK, MARKER, CheckpointError, FolderInUseError, FolderLock,
                                         ForeignFolderError, damage, remove_checkpoint, to_delete, verify)

RUN = "unit-run"


def save_worker(ctx, root, steps, keep_last):
    """Two ranks save a small model and optimizer as steps 1..steps (one shard file per rank)."""
    import torch
    from course_lib.faults.checkpointer import ShardedCheckpointer
    torch.manual_seed(ctx.rank)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters())
    with ShardedCheckpointer(root, ctx.group, run_id=RUN, keep_last=keep_last) as ckpt:
        for step in range(1, steps + 1):
            model(torch.randn(4, 64)).sum().backward()
            opt.step()
            ckpt.save({f"rank{ctx.rank}": model.state_dict(), "optim": opt.state_dict()}, step)
    return sorted(p.name for p in (root / f"step_{steps:06d}").iterdir())


def fallback_worker(ctx, root):
    """Resume from a folder whose newest checkpoint was broken: every rank must get the same step,
    the same refusal, and a load of the broken one must raise."""
    import torch
    from course_lib.faults.checkpointer import ShardedCheckpointer
    ckpt = ShardedCheckpointer(root, ctx.group, run_id=RUN)
    latest = ckpt.latest()
    into = {f"rank{ctx.rank}": torch.nn.Linear(64, 64).state_dict()}
    ckpt.load(into, latest)
    try:
        ckpt.load(into, 3)
        error = None
    except CheckpointError as e:
        error = str(e)
    ckpt.close()
    return latest, ckpt.refused, error


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A folder with complete checkpoints of steps 1, 2 and 3, written by two ranks."""
    from course_lib.dist import launch
    root = tmp_path_factory.mktemp("saved")
    names = launch(save_worker, 2, backend="gloo", root=root, steps=3, keep_last=None)[0]
    assert names == [".metadata", MARKER, "__0_0.distcp", "__1_0.distcp"]
    return root


@pytest.fixture
def fresh(saved, tmp_path):
    """A private copy of the saved folder, to break."""
    shutil.copytree(saved, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_an_intact_checkpoint_verifies_and_its_marker_lists_every_file(fresh):
    body = verify(fresh / "step_000003", RUN)
    assert body["step"] == 3 and body["run_id"] == RUN and body["world_size"] == 2
    assert sorted(body["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert all(len(sha) == 64 and size > 0 for sha, size in body["files"].values())


# each damage, the file it hits and the words of the refusal
EXPECTED = {"flip": ("__1_0.distcp", "does not match its SHA-256"),
            "swap": ("__1_0.distcp", "does not match its SHA-256"),
            "trunc": ("__1_0.distcp", "truncated"),
            "meta": (".metadata", "does not match its SHA-256"),
            "delete": ("__1_0.distcp", "is missing")}


@pytest.mark.parametrize("how", DAMAGES)
def test_verify_refuses_each_damage_naming_the_file(fresh, how):
    hit = damage(fresh / "step_000003", how, rank=1, older=fresh / "step_000002")
    name, words = EXPECTED[how]
    assert hit.name == name
    with pytest.raises(CheckpointError, match=words) as e:
        verify(fresh / "step_000003", RUN)
    assert str(fresh / "step_000003" / name) in str(e.value)
    verify(fresh / "step_000002", RUN)              # the older one is untouched


def test_the_hashing_can_be_split_between_ranks_and_the_union_catches_everything(fresh):
    # files hash in sorted order: .metadata (share 0), __0_0 (share 1), __1_0 (share 0) of 2
    damage(fresh / "step_000003", "flip", rank=0)
    verify(fresh / "step_000003", RUN, share=(0, 2))             # not this share's file
    with pytest.raises(CheckpointError, match="__0_0.distcp"):
        verify(fresh / "step_000003", RUN, share=(1, 2))


def test_verify_refuses_a_broken_missing_or_foreign_marker_and_extra_files(fresh):
    step3, step2, step1 = (fresh / f"step_00000{i}" for i in (3, 2, 1))
    with pytest.raises(CheckpointError, match="written by job 'unit-run', not by this job 'other'"):
        verify(step3, "other")
    (step3 / "__2_0.distcp").write_bytes(b"a shard of another save")
    with pytest.raises(CheckpointError, match="__2_0.distcp is not listed"):
        verify(step3, RUN)
    marker = bytearray((step2 / MARKER).read_bytes())
    marker[marker.index(b'"step": 2') + 8] = ord("7")           # still valid JSON, wrong step
    (step2 / MARKER).write_bytes(bytes(marker))
    with pytest.raises(CheckpointError, match=f"{step2 / MARKER} is corrupt"):
        verify(step2, RUN)
    (step1 / MARKER).write_text('{"step": 1, "world_size": 2}')   # a marker without digests
    with pytest.raises(CheckpointError, match="without one"):
        verify(step1, RUN)
    (step1 / MARKER).unlink()
    with pytest.raises(CheckpointError, match="never finished"):
        verify(step1, RUN)


def test_a_marker_moved_to_another_step_is_refused(fresh):
    shutil.copyfile(fresh / "step_000002" / MARKER, fresh / "step_000003" / MARKER)
    with pytest.raises(CheckpointError, match="marker of step 2, not of step_000003"):
        verify(fresh / "step_000003", RUN)


def test_the_checkpointer_falls_back_to_the_newest_that_verifies_on_every_rank(fresh):
    from course_lib.dist import launch
    damage(fresh / "step_000003", "trunc", rank=0)
    results = launch(fallback_worker, 2, backend="gloo", root=fresh)
    assert results[0] == results[1]                              # every rank: same step, same reasons
    latest, refused, error = results[0]
    assert latest == 2
    assert len(refused) == 1 and "step_000003/__0_0.distcp has" in refused[0]
    assert error == refused[0]                                   # loading it anyway is refused too


def test_retention_keeps_the_last_k_and_every_nth():
    steps = [2, 4, 6, 8, 10, 12, 14]
    assert to_delete(steps, 12, keep_last=2) == [2, 4, 6, 8]     # 14: newer, a refused one, left
    assert to_delete(steps, 12, keep_last=2, keep_every=4) == [2, 6]
    assert to_delete(steps, 12, keep_last=None) == []
    assert to_delete([3], 3, keep_last=3) == []


def test_the_checkpointer_applies_retention_and_removes_the_marker_first(tmp_path):
    from course_lib.dist import launch
    launch(save_worker, 2, backend="gloo", root=tmp_path, steps=5, keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000004", "step_000005"]
    from course_lib.faults.checkpointer import ShardedCheckpointer
    with pytest.raises(ValueError, match="keep_last must be"):     # checked before any collective
        ShardedCheckpointer(tmp_path / "x", None, keep_last=0)
    remove_checkpoint(tmp_path / "step_000004")
    assert not (tmp_path / "step_000004").exists()


def test_a_folder_belongs_to_one_job(tmp_path):
    first = FolderLock(tmp_path, "job-a")
    with pytest.raises(FolderInUseError, match=f"{tmp_path} is in use by job 'job-a' \\(pid {os.getpid()}"):
        FolderLock(tmp_path, "job-a")                            # same id, but a second user
    first.release()
    with pytest.raises(ForeignFolderError, match=f"{tmp_path} belongs to job 'job-a'.*run_id='job-a'"):
        FolderLock(tmp_path, "job-b")
    FolderLock(tmp_path, "job-a").release()                      # the owner comes back


def test_between_restarts_the_folder_stays_with_the_agents_job(tmp_path):
    # a rank of an elastic agent (here: this process plays the agent) took it and was killed
    held = FolderLock(tmp_path, "job-a", agent_pid=os.getpid())
    os.close(held._fd)                                           # the flock goes, the record stays
    with pytest.raises(FolderInUseError, match="whose elastic agent"):
        FolderLock(tmp_path, "job-a", agent_pid=None)            # another job, same run id
    FolderLock(tmp_path, "job-a", agent_pid=os.getpid()).release()   # the agent's restarted rank


def test_the_lock_dies_with_a_sigkilled_holder(tmp_path):
    code = ("import sys, time; from course_lib.faults.integrity import FolderLock; "
            "FolderLock(sys.argv[1], 'job-a'); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUseError, match=f"pid {proc.pid}"):
            FolderLock(tmp_path, "job-a")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    FolderLock(tmp_path, "job-a").release()
    assert (tmp_path / LOCK).read_text() == ""
