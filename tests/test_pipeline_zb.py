"""Zero-bubble schedules: the V orders in the simulator (ZB-V, DualPipeV), the split backward
and their execution on real gloo ranks against one process."""
from __future__ import annotations

import pytest
from machine_load import judge_timing

from course_lib import pipeline
from course_lib.pipeline import zb_runs
from course_lib.pipeline.schedules import V_SCHEDULES, Op, format_ops, schedule, stage_of


@pytest.mark.parametrize("name", V_SCHEDULES)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_v_orders_are_complete_deadlock_free_and_beat_zb_h1(name, p):
    for m in range(2 * p, 2 * p + 5):
        orders = schedule(name, p, m)
        assert orders.placement == "v"
        tl = pipeline.simulate(orders, t_forward=1.0, t_backward=2.0)    # raises on a deadlock
        done = {(e.kind, e.mb, e.rank, e.chunk): e for e in tl.events}
        assert all(done["B", e.mb, e.rank, e.chunk].end <= e.start for e in tl.events if e.kind == "W")
        zb = pipeline.simulate("zb-h1", p, m, t_forward=1.0, t_backward=2.0)
        assert tl.makespan() <= zb.makespan() + 1e-9
        if p > 1:
            assert tl.bubble_fraction() < pipeline.bubble_fraction(p, m)


def test_v_placement_turns_round_on_the_last_rank_without_a_message():
    assert [stage_of(r, c, 4, "v") for c in (0, 1) for r in range(4)] == [0, 1, 2, 3, 7, 6, 5, 4]
    assert [stage_of(r, c, 4) for c in (0, 1) for r in range(4)] == list(range(8))
    # two stages on one rank: a hop between them costs nothing, so t_comm adds 2(p-1) hops, not 2p-1
    fast = pipeline.simulate("zb-v", 2, 4, t_comm=0.0).makespan()
    slow = pipeline.simulate(schedule("zb-v", 2, 4), t_comm=0.1)
    assert slow.makespan() > fast
    with pytest.raises(ValueError, match="placement"):
        pipeline.simulate(schedule("zb-v", 2, 4), placement="w")


def test_peak_in_flight_of_the_v_schedules():
    # ZB-V: 1F1B's memory (p stages' worth on each rank); DualPipeV: PP+1 chunks = p + 1/2 stages
    for p, m in [(2, 4), (4, 8), (4, 11)]:
        assert [pipeline.peak_in_flight("zb-v", p, m, s) for s in range(p)] == [p] * p
        assert pipeline.simulate("dualpipev", p, m).peak_in_flight == [p + 0.5] * p


def test_dualpipev_follows_the_reference_phases_and_needs_2p_microbatches():
    # p=2, rank 0: nF0 | F0F1 | B1W1F1 (zero bubble) | F0B1F1B0 | B1F1B0 | B1B0 (split) | WB0 | W
    assert format_ops(schedule("dualpipev", 2, 4)[0]) == (
        "F0 F1 F2 F0.1 B0.1 W0.1 F1.1 F3 B1.1 W1.1 F2.1 B0 W0 B2.1 W2.1 F3.1 B1 W1 B3.1 W3.1 B2 W2 B3 W3")
    with pytest.raises(ValueError, match=r"m must be at least 2p = 8"):
        schedule("dualpipev", 4, 7)
    with pytest.raises(ValueError, match="v must be 2"):
        schedule("zb-v", 2, 4, v=3)
    assert schedule("zb-v", 2, 4, v=2) == schedule("zb-v", 2, 4)
    for m in range(1, 7):                                  # any m ≥ 1 for ZB-V
        pipeline.simulate(schedule("zb-v", 3, m))


# ------------------------------------------------------------------------------ split backward, real ranks
def test_split_backward_equals_the_whole_backward_bit_for_bit():
    rows = zb_runs.split_check(zb_runs.ZB, n_stages=4, m=2)
    assert [r["stage"] for r in rows] == [0, 1, 2, 3]
    assert all(r["weights_equal"] and r["input_equal"] and r["max_diff"] == 0.0 for r in rows), rows


@pytest.mark.parametrize("p", [2, 4])
def test_zero_bubble_schedules_on_real_ranks_equal_one_process_bit_for_bit(p):
    out = zb_runs.check_exact(["zb-h1", "zb-v", "dualpipev"], p, 2 * p, timeout=90)
    for name, r in out.items():
        assert (r["loss"], r["grads"], r["params"]) == (True, True, True), name
        run = r["run"]
        orders = schedule(name, p, 2 * p)
        for rank in range(p):      # every F, B and W ran, in the schedule's order
            ops = [Op(e.kind, e.mb, e.chunk) for e in run.timeline.of(rank, ("F", "B", "W"), step=1)]
            assert ops == orders[rank], (name, rank)
        # the graphs each rank really held at once: the schedule's promise (p; DualPipeV p + 1/2)
        assert run.in_flight == [pipeline.peak_in_flight(name, p, 2 * p, s) for s in range(p)], name


# ------------------------------------------------------------------------------ measured
def test_stored_sweep_holds_the_chapters_claims():
    """data/zero_bubble_sweep.json (python -m course_lib.pipeline.zb_runs) is what the page shows."""
    import json
    from pathlib import Path
    d = json.loads((Path(__file__).parents[1] / "data" / "zero_bubble_sweep.json").read_text())
    assert {(r["p"], r["m"]) for r in d["paced"]} == {(2, 4), (2, 8), (4, 8), (4, 12)}
    for r in d["paced"]:
        assert abs(r["measured"] - r["simulated"]) < 0.03, r        # within 3 points of the simulator
        assert r["in_flight"] == r["promised"], r
    for p, m in {(r["p"], r["m"]) for r in d["overlap"]}:
        hid = {r["schedule"]: r["hidden"] for r in d["overlap"] if (r["p"], r["m"]) == (p, m)}
        assert hid["dualpipev"] > hid["zb-h1"] > hid["1f1b"], hid
    assert len(d["torch"]) == 6 and all(r["bitwise"] for r in d["torch"])


@pytest.mark.serial
def test_paced_zero_bubble_lands_within_3_points_of_the_simulator():
    """Op durations emulated (60 ms a stage's F, B, W), order and messages real, 2 ranks."""
    for _attempt in range(2):                    # a busy machine may stall one run: measure it again
        rows = zb_runs.bubble_points(["zb-v", "dualpipev"], 2, 4, times=(0.06, 0.06, 0.06), steps=2, timeout=90)
        for r in rows:
            assert r["in_flight"] == r["promised"], r["schedule"]
        if all(abs(r["measured"] - r["simulated"]) < 0.03 for r in rows):
            break
    # wall-clock bounds: judged on a quiet machine, skipped (saying so) when other processes take the cores
    judge_timing(all(abs(r["measured"] - r["simulated"]) < 0.03 for r in rows),
                 f"measured vs simulated bubble: {[(r['schedule'], r['measured'], r['simulated']) for r in rows]}")
    judge_timing(all(r["measured"] < pipeline.bubble_fraction(2, 4) / 2 for r in rows),   # 1F1B's is 0.2
                 f"measured bubbles {[(r['schedule'], r['measured']) for r in rows]} not under half of 1F1B's")


def test_dualpipev_hides_more_of_a_slow_link_than_1f1b():
    rows = {r["schedule"]: r for r in zb_runs.overlap_runs(["1f1b", "dualpipev"], 2, 4, (0.02, 0.02, 0.02),
                                                            link=0.01, steps=2, timeout=90)}
    assert rows["1f1b"]["messages"] == 2 * 4 and rows["dualpipev"]["messages"] == 4 * 4   # per step, received
    assert rows["dualpipev"]["hidden"] > rows["1f1b"]["hidden"] + 0.15, rows
    assert all(0.0 <= r["hidden"] <= 1.0 for r in rows.values())


def test_torch_dualpipev_computes_our_gradients_bit_for_bit():
    from course_lib.pipeline import torch_pipelining
    out = torch_pipelining.compare_with_torch(zb_runs.ZB, 2, "ScheduleDualPipeV", m=4, repeats=1,
                                              sizes=zb_runs.v_sizes(zb_runs.ZB, 4), timeout=60)
    assert out["bitwise"] and out["max_grad_diff"] == 0.0
    with pytest.raises(ValueError, match="schedule_name"):
        torch_pipelining.compare_with_torch(zb_runs.ZB, 2, "ScheduleNope", m=4)
