"""Chapter 17 (course_lib.triage): hangs named from flight-recorder dumps, a throttled rank found,
bit flips caught by the detectors that should catch them, a killed rank restored from a peer's
memory, and the goodput arithmetic — all on real gloo ranks (course_lib.dist.launch)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from machine_load import judge_timing

from course_lib import faults
from course_lib.triage import DumpError, analyze, dump_path
from course_lib.triage.goodput import llama3_interruptions_per_day, triage_goodput
from course_lib.triage.hang_runs import hang_case, torch_fr_compare
from course_lib.triage.sdc import Anomaly, fingerprint, flip_bit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hangs(tmp_path_factory):
    out = {}
    for case in ("skip", "other", "compute", "size"):
        folder = tmp_path_factory.mktemp(case)
        out[case] = (folder, hang_case(folder, case, world_size=4, faulty=2, collective_timeout=1.5, dump_after_s=0.3))
    return out


@pytest.mark.parametrize("case,kind", [("skip", "skipped"), ("other", "different collective"),
                                       ("compute", "stuck in compute"), ("size", "mismatched size")])
def test_each_injected_hang_is_named_with_its_rank_and_collective(hangs, case, kind):
    folder, res = hangs[case]
    assert res["error"] is not None, "the injected fault must end the run by a timeout or a check, with an error"
    v = res["verdict"]
    assert (v.rank, v.kind, v.seq) == (2, kind, 4), v.message
    assert "'step 2 grads'" in v.collective and "rank 2" in v.message
    assert sorted(p.name for p in Path(folder).iterdir()) == [dump_path(folder, r).name for r in range(4)]


def test_the_launcher_alone_blames_another_rank_when_every_rank_waits(hangs):
    """Why a flight recorder: with every rank stuck in some collective, the launcher's progress stamps
    cannot tell the culprit: it reports every rank as hung in a collective, the culprit among them
    in no particular place (the order is the order the ranks' timeouts reported, a race), where the
    dumps' sequence numbers name rank 2."""
    _, res = hangs["skip"]
    name, message = res["error"]
    assert name == "RankHung" and "every rank timed out waiting inside a collective" in message, message
    assert res["error_ranks"] == [0, 1, 2, 3], (res["error_ranks"], message)


def test_a_dump_missing_for_a_dead_rank_is_named(hangs, tmp_path):
    folder, _ = hangs["compute"]
    for r in (0, 1, 3):
        (tmp_path / dump_path(folder, r).name).write_bytes(dump_path(folder, r).read_bytes())
    v = analyze(tmp_path, 4)
    assert (v.rank, v.kind, v.missing) == (2, "no dump", [2])
    assert "rank 2 left no dump" in v.message and "'step 2 grads'" in v.message


def test_an_unchecked_size_mismatch_kills_an_innocent_rank_and_the_survivors_dumps_name_the_culprit(tmp_path):
    """On gloo a size mismatch is no hang: a rank that receives more than it expects aborts at once
    (SIGABRT), before it can dump, and the launcher names that rank. The survivors dump when their
    connection breaks, and their records at the collective name rank 2's other size; the dead rank is
    named as having left no dump."""
    res = hang_case(tmp_path, "size", world_size=4, faulty=2, check=False)
    assert res["error"][0] == "RankError" and "killed by SIGABRT" in res["error"][1]
    dead = int(res["error"][1].split()[1])
    v = res["verdict"]
    assert dead != 2 and v.missing == [dead]
    assert (v.rank, v.kind, v.seq) == (2, "mismatched size", 4)
    assert f"rank(s) {dead} left no dump" in v.message


def test_unreadable_dumps_give_clear_errors(tmp_path):
    with pytest.raises(DumpError, match="no flight-recorder dump"):
        analyze(tmp_path, 2)
    dump_path(tmp_path, 0).write_text("{not json")
    with pytest.raises(DumpError, match="rank_00000.json is not a flight-recorder dump"):
        analyze(tmp_path, 2)


def test_torch_flight_recorder_records_gloo_but_not_its_progress(tmp_path):
    """PyTorch 2.13's own recorder (TORCH_FR_BUFFER_SIZE, _dump_fr_trace_json) keeps gloo's
    collectives with the same op, sizes and order as the course's, but every entry stays
    'scheduled' with no start or completion time: on gloo it cannot tell waiting from done."""
    for rank in torch_fr_compare(tmp_path):
        ours, theirs = rank["course"], rank["torch"]
        assert [e["op"] for e in ours] == [e["op"].removeprefix("gloo:") for e in theirs]
        assert [e["sizes"] for e in ours] == [e["sizes"] for e in theirs]
        assert {e["state"] for e in ours} == {"completed"}
        assert {e["state"] for e in theirs} == {"scheduled"}
        assert all(e["completed_ns"] == 0 for e in theirs)


def test_the_throttled_rank_is_found_and_the_step_waits_for_it():
    from course_lib.triage.straggler_runs import straggler_run
    r = straggler_run(world_size=4, steps=6, slow_rank=1, factor=3.0)
    assert r["rank"] == 1 and r["ratio"] > 2.0
    assert min(r["wait_s"][q] for q in (0, 2, 3)) > r["wait_s"][1] + 0.02   # the others wait for it
    assert r["measured_s"] > max(r["compute_s"]) and r["measured_s"] < 1.5 * r["model_s"]


def test_flip_bit_and_fingerprint():
    import torch
    t = torch.ones(3)
    assert flip_bit(t, 0, 30) == 1.0 and math.isinf(float(t[0]))
    assert flip_bit(t, 1, 31) == 1.0 and float(t[1]) == -1.0
    a, b = torch.ones(4), torch.ones(4)
    assert fingerprint([a]) == fingerprint([b])
    flip_bit(b, 3, 0)
    assert fingerprint([a]) != fingerprint([b])
    with pytest.raises(ValueError, match="bit must be in 0..31"):
        flip_bit(b, 0, 32)
    with pytest.raises(ValueError, match="float32"):
        flip_bit(torch.ones(2, dtype=torch.float64), 0, 1)
    chk = Anomaly(z=3).calibrate([1.0, 1.1, 0.9, 1.0])
    assert not chk(1.05) and chk(5.0) and chk(float("nan"))


def test_sdc_slice_matches_the_stored_sweep():
    """Each detector catches what it should on a slice of trials rerun here, as in the stored sweep:
    recomputation every harmful flip before the all-reduce, the replicas' fingerprints exactly the optimizer
    flips that changed the parameters, and no detector alarms on a clean step."""
    from course_lib.triage.sdc_runs import rates, sdc_sweep
    stored = json.loads((ROOT / "data" / "triage_sdc.json").read_text())
    res = sdc_sweep(trials=40, **{k: v for k, v in stored["args"].items() if k in ("seed", "z", "batch")})
    for rows in (res["rows"], stored["rows"]):
        rt = rates(rows)
        assert rt["none"]["any"] == 0
        assert all(r["recompute"] for r in rows if r["target"] in ("gemm", "grad") and r["harm"])
        assert rt["gemm"]["fingerprint"] == rt["grad"]["fingerprint"] == 0.0
        opt = [r for r in rows if r["target"] == "optimizer"]
        assert all(r["fingerprint"] == r["harm"] for r in opt) and not any(r["recompute"] for r in opt)
    keys = ("target", "victim", "bit", "harm", "fingerprint", "recompute")
    assert [{k: r[k] for k in keys} for r in res["rows"]] == [{k: r[k] for k in keys} for r in stored["rows"][:40]]


@pytest.fixture
def shm(tmp_path):
    import shutil
    import tempfile
    root = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_killed_rank_is_restored_from_its_peers_memory_bit_identical(tmp_path, shm):
    from course_lib.triage.memory_runs import kill_and_restore
    r = kill_and_restore(tmp_path, shm, world_size=4, victim=1, steps=4, disk_step=2, elements=1 << 14)
    assert r["kill"] == "rank 1 died: killed by SIGKILL"
    src = {row["rank"]: row["source"] for row in r["rows"]}
    assert src == {0: "own memory", 1: "peer rank 2's memory", 2: "own memory", 3: "own memory"}
    assert all(row["bit_identical"] and row["step"] == 4 for row in r["rows"])
    assert all(row["memory_s"] > 0 and row["disk_s"] > 0 and row["disk_step"] == 2 for row in r["rows"])


@pytest.mark.serial
def test_the_restore_from_memory_is_faster_than_dcp_from_disk(tmp_path, shm):
    """The same ranks, the same shards (1 MiB each): the in-memory restore (own node, or the peer
    over gloo, digests checked) against chapter 12's DCP restore (verified, then loaded)."""
    from course_lib.triage.memory_runs import kill_and_restore
    r = kill_and_restore(tmp_path, shm, world_size=4, victim=1, steps=3, disk_step=2, elements=1 << 18)
    memory = sorted(row["memory_s"] for row in r["rows"])
    disk = sorted(row["disk_s"] for row in r["rows"])
    judge_timing(memory[2] < disk[2], f"restores from memory {memory} s not faster than from disk {disk} s")


@pytest.mark.parametrize("how,why", [("peer_dead", "the copy held by its peer rank 0 is gone"),
                                     ("corrupt_peer", "the copy held by its peer rank 0 is corrupt: its SHA-256")])
def test_no_good_copy_in_memory_falls_back_to_disk_by_name(tmp_path, shm, how, why):
    from course_lib.triage.memory_runs import kill_and_restore
    r = kill_and_restore(tmp_path, shm, world_size=2, victim=1, steps=3, disk_step=2, elements=1 << 12, **{how: True})
    for row in r["rows"]:
        assert row["source"] == "disk" and row["step"] == 2 and row["bit_identical"]
        assert "fell back to the disk checkpoint (step 2)" in row["message"] and "rank 1's shard" in row["message"]
        assert why in row["message"]


def test_triage_goodput_is_chapter_12s_with_the_restart_split():
    m = 86400 / llama3_interruptions_per_day()
    g = triage_goodput(m, 60.0, 1800.0, 600.0, interval_seconds=3600.0)
    assert g["goodput"] == faults.goodput(3600.0, 60.0, 2400.0, m)
    assert g["lost_per_failure_seconds"] == pytest.approx(2400.0 + 1830.0)
    fast = triage_goodput(m, 2.0, 120.0, 60.0)
    assert fast["interval_seconds"] == pytest.approx(faults.optimal_checkpoint_interval(2.0, m))
    assert fast["goodput"] > g["goodput"]
    for bad in ("mtbf_seconds", "save_seconds", "diagnose_seconds", "restart_seconds"):
        args = dict(mtbf_seconds=m, save_seconds=2.0, diagnose_seconds=1.0, restart_seconds=1.0) | {bad: -1.0}
        with pytest.raises(ValueError, match=bad):
            triage_goodput(**args)


def test_detection_rate_needed():
    from course_lib.triage.goodput import detection_rate_needed
    lam = 1e-6 * 16384 * 1296
    assert detection_rate_needed(1e-6, 16384, 1296, 0.1) == pytest.approx(1 - 0.1 / lam)
    assert detection_rate_needed(1e-9, 8, 10, 1.0) == 0.0           # fewer expected than allowed
    with pytest.raises(ValueError, match="n_gpus"):
        detection_rate_needed(1e-6, 0, 10, 0.1)
    with pytest.raises(ValueError, match="flips_per_gpu_hour"):
        detection_rate_needed(-1e-6, 8, 10, 0.1)


def test_the_stored_dumps_name_rank_1_skipping_step_3():
    """data/triage_dumps.json (a real run, read by the exercises) says what its command says it holds."""
    from course_lib.triage import analyze_dumps
    stored = json.loads((ROOT / "data" / "triage_dumps.json").read_text())
    v = analyze_dumps(stored["dumps"], stored["missing"])
    assert (v.rank, v.kind, v.seq, v.collective) == (1, "skipped", 6, "all_reduce 'step 3 grads'")
    with pytest.raises(DumpError, match="no flight-recorder dump given"):
        analyze_dumps({})


def test_a_later_dump_replaces_one_taken_while_a_span_was_only_slow(tmp_path):
    """A span slower than dump_after_s dumps, then completes; the hang after it must not be hidden
    behind that first dump."""
    import time

    from course_lib.triage import FlightRecorder
    path = dump_path(tmp_path, 0)

    def dumped_in(name: str) -> bool:     # waits on the condition, not on a clock
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if path.exists() and (json.loads(path.read_text()).get("current") or {}).get("name") == name:
                return True
            time.sleep(0.01)
        return False

    rec = FlightRecorder(tmp_path, 0, dump_after_s=0.05, poll_s=0.01)
    try:
        with rec.compute("slow"):
            assert dumped_in("slow")
        with rec.compute("stuck"):
            assert dumped_in("stuck")
        d = json.loads(path.read_text())
        assert [e["name"] for e in d["entries"]] == ["slow", "stuck"] and d["entries"][0]["state"] == "completed"
    finally:
        rec.close()
