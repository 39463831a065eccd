"""Checkpoints that cannot lie (course_lib.faults.integrity, course_lib.faults.checkpointer):
verify() on a real two-rank DCP checkpoint broken each way a disk or a person breaks one, the
checkpointer falling back to the newest checkpoint that verifies (the same step on every rank),
the folder lock against a second job, in this process and across a SIGKILLed one, and the
retention policy; stray files, unreadable files, a folder none of whose checkpoints verifies and a
broken RUN file (issue #43 items 17 and 22). The same faults on real torchrun restarts are in
test_faults_real.py."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.faults.integrity import (DAMAGES, LOCK, MARKER, OWNER, CheckpointError, FolderError, FolderInUseError,
                                         FolderLock, ForeignFolderError, NoVerifiedCheckpointError, OwnerFileError,
                                         UnreadableError, checkpoint_files, damage, file_sha256, remove_checkpoint,
                                         to_delete, verify)

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


def test_verify_refuses_a_broken_missing_or_foreign_marker(fresh):
    step3, step2, step1 = (fresh / f"step_00000{i}" for i in (3, 2, 1))
    with pytest.raises(CheckpointError, match="written by job 'unit-run', not by this job 'other'"):
        verify(step3, "other")
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


# ------------------------------------------------ stray files, unreadable files, nothing verifies
def resume_worker(ctx, root, unreadable=None):
    """Each rank asks the checkpointer where to resume, as a restarted job does; with ``unreadable``,
    reading that file fails with EIO (a bad disk, a lost NFS server) on the rank that hashes it."""
    from course_lib.faults import integrity
    from course_lib.faults.checkpointer import ShardedCheckpointer
    if unreadable:
        real = integrity.file_sha256

        def failing(path):
            if Path(path).name == unreadable:
                raise OSError(errno.EIO, "Input/output error", str(path))
            return real(path)
        integrity.file_sha256 = failing
    try:
        with ShardedCheckpointer(root, ctx.group, run_id=RUN) as ckpt:
            return ckpt.latest(), ckpt.refused, ckpt.ignored
    except CheckpointError as e:
        return type(e).__name__, str(e), None


def _digests(root):
    return {p: file_sha256(p) for p in sorted(root.rglob("step_*/*")) if p.is_file()}


def test_a_file_the_marker_does_not_list_is_reported_not_taken_for_corruption(fresh):
    step3 = fresh / "step_000003"
    (step3 / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (step3 / "__2_0.distcp").write_bytes(b"a file DCP's verified .metadata does not name")
    (step3 / ".ipynb_checkpoints").mkdir()
    assert verify(step3, RUN)["unlisted"] == [".DS_Store", ".ipynb_checkpoints", "__2_0.distcp"]
    # what a save's marker covers: DCP's files, not a desktop's hidden file or a folder
    assert checkpoint_files(step3) == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp"]


def test_a_stray_file_in_every_checkpoint_does_not_send_the_job_back_to_step_0(fresh):
    from course_lib.dist import launch
    for step in fresh.glob("step_*"):
        (step / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    results = launch(resume_worker, 2, backend="gloo", root=fresh)
    assert results[0] == results[1]
    latest, refused, ignored = results[0]
    assert latest == 3 and refused == []                  # 28369aa: None, all three refused
    assert ignored == [str(fresh / "step_000003" / ".DS_Store")]


def test_an_unreadable_file_stops_on_every_rank_naming_it_instead_of_falling_back(fresh):
    from course_lib.dist import launch
    before = _digests(fresh)
    # files hash in sorted order split over 2 ranks: __0_0.distcp is rank 1's; rank 0 reads fine
    results = launch(resume_worker, 2, backend="gloo", root=fresh, unreadable="__0_0.distcp")
    assert results[0] == results[1]                       # every rank stops, with the same words
    kind, why, _ = results[0]
    assert kind == "UnreadableError", results[0]          # 28369aa: refused step 3, 2, 1; fresh start
    assert why.startswith(f"{fresh / 'step_000003' / '__0_0.distcp'} cannot be read (OSError: Input/output "
                          "error): an I/O or permission error is not proof that checkpoint step_000003 is corrupt")
    assert _digests(fresh) == before


def test_an_unreadable_file_raises_from_verify_naming_it(fresh, monkeypatch):
    from course_lib.faults import integrity

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(integrity, "file_sha256", denied)
    with pytest.raises(UnreadableError, match=r"step_000002/\.metadata cannot be read \(PermissionError"):
        verify(fresh / "step_000002", RUN)


def test_when_no_complete_checkpoint_verifies_the_job_stops_and_leaves_them(fresh):
    from course_lib.dist import launch
    damage(fresh / "step_000003", "flip", rank=1)
    damage(fresh / "step_000002", "trunc", rank=0)
    damage(fresh / "step_000001", "meta")
    (fresh / "step_000001" / ".DS_Store").write_bytes(b"junk")
    before = _digests(fresh)
    results = launch(resume_worker, 2, backend="gloo", root=fresh)
    assert results[0] == results[1]
    kind, why, _ = results[0]
    assert kind == "NoVerifiedCheckpointError", results[0]     # 28369aa: None, a fresh start
    assert f"checkpoint folder {fresh} holds 3 complete checkpoint(s) and none verifies" in why
    for words in (f"{fresh}/step_000003/__1_0.distcp does not match its SHA-256",
                  f"{fresh}/step_000002/__0_0.distcp has", f"{fresh}/step_000001/.metadata does not match"):
        assert words in why
    assert ".DS_Store" not in why
    assert _digests(fresh) == before                           # nothing trained or saved over them
    assert issubclass(NoVerifiedCheckpointError, FolderError) and issubclass(UnreadableError, FolderError)


# a RUN file that names no job: contents, and the words that must say what is wrong with it
BAD_RUN = {"binary": (b"\xff\xfe\x00garbage", "not JSON text"), "empty": (b"", "is empty"),
           "a list": (b'["job-a"]', "not a JSON object with a run id"),
           "a number id": (b'{"run_id": 7}', "not a JSON object with a run id"),
           "null": (b"null", "not a JSON object with a run id"), "a directory": (None, "unreadable (IsADirectoryError")}


@pytest.mark.parametrize("what", BAD_RUN)
def test_a_broken_run_file_is_named_and_stops_the_job(tmp_path, what):
    content, words = BAD_RUN[what]
    if content is None:
        (tmp_path / OWNER).mkdir()
    else:
        (tmp_path / OWNER).write_bytes(content)
    with pytest.raises(OwnerFileError) as e:                    # 28369aa: UnicodeDecodeError, AttributeError...
        FolderLock(tmp_path, "job-a")
    assert str(e.value).startswith(f"{tmp_path / OWNER} is ") and words in str(e.value)
    assert '{"run_id": "job-a"}' in str(e.value) and isinstance(e.value, FolderError)
    if content is not None:
        (tmp_path / OWNER).write_text(json.dumps({"run_id": "job-a"}))   # repaired as the message says
        FolderLock(tmp_path, "job-a").release()                 # and the lock was not left held


def test_every_rank_raises_the_same_error_for_a_broken_or_foreign_run_file(tmp_path):
    from course_lib.dist import launch
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / OWNER).write_bytes(b"\xff")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / OWNER).write_text(json.dumps({"run_id": "another-job"}))
    for name, kind in (("broken", "OwnerFileError"), ("foreign", "ForeignFolderError")):
        results = launch(resume_worker, 2, backend="gloo", root=tmp_path / name)
        assert results[0] == results[1] and results[0][0] == kind, results
        assert str(tmp_path / name) in results[0][1]
