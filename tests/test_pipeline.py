"""Chapter 5, pipeline parallelism: calculators, schedules, the exact simulator, the partitioner,
the real multi-process executor against the unsplit model and against torch.distributed.pipelining,
and the question bank against the library."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.pipeline import gantt
from course_lib import pipeline
from course_lib.model import GPTConfig
from course_lib.pipeline import partition, run as pipeline_run, torch_pipelining as pipeline_torch, schedules as ps
from course_lib.report import max_abs_diff

SMALL = GPTConfig(vocab_size=64, seq_len=16, n_layers=4, n_heads=2, d_model=32, tie_embeddings=False)


# ------------------------------------------------------------------------------ calculators
def test_bubble_values_from_the_papers():
    assert pipeline.bubble_fraction(8, 32) == pytest.approx(7 / 39)       # 17.9 % of wall time
    assert pipeline.bubble_overhead(8, 32) == pytest.approx(7 / 32)       # 21.9 % of ideal time
    assert pipeline.bubble_fraction(4, 8, v=2) == pytest.approx(3 / 19)
    assert pipeline.bubble_overhead(4, 8, v=2) == pytest.approx(3 / 16)
    assert pipeline.bubble_fraction(1, 5) == 0.0
    assert pipeline.min_microbatches(8, 7 / 39) == 32
    assert pipeline.min_microbatches(16, 0.05) == 285
    assert pipeline.min_microbatches(1, 0.01) == 1
    assert pipeline.step_time(4, 8, 1.0, 2.0) == pytest.approx(33.0)


@given(p=st.integers(1, 64), m=st.integers(1, 512), v=st.integers(1, 8))
def test_fraction_and_overhead_describe_the_same_bubble(p, m, v):
    f, o = pipeline.bubble_fraction(p, m, v), pipeline.bubble_overhead(p, m, v)
    assert o == pytest.approx(f / (1 - f))                  # idle/ideal = idle/(wall − idle)
    assert pipeline.bubble_fraction(p, m + 1, v) <= f       # more microbatches never hurt


@given(p=st.integers(1, 64), f=st.floats(0.001, 1.0), v=st.integers(1, 8))
def test_min_microbatches_is_the_smallest_that_reaches_the_target(p, f, v):
    m = pipeline.min_microbatches(p, f, v)
    assert pipeline.bubble_fraction(p, m, v) <= f
    assert m == 1 or pipeline.bubble_fraction(p, m - 1, v) > f


@pytest.mark.parametrize("call, name", [
    (lambda: pipeline.bubble_fraction(0, 4), "p"), (lambda: pipeline.bubble_fraction(4, -1), "m"),
    (lambda: pipeline.bubble_fraction(4, 4, v=1.5), "v"), (lambda: pipeline.bubble_overhead(2, 0), "m"),
    (lambda: pipeline.bubble_overhead(2.5, 4), "p"), (lambda: pipeline.min_microbatches(4, 0), "target_fraction"),
    (lambda: pipeline.min_microbatches(4, 1.5), "target_fraction"),
    (lambda: pipeline.min_microbatches(4, float("nan")), "target_fraction"),
    (lambda: pipeline.min_microbatches(4, 0.1, v=0), "v"), (lambda: pipeline.step_time(2, 4, 0, 1), "t_forward"),
    (lambda: pipeline.peak_in_flight("zb", 2, 4, 0), "name"), (lambda: pipeline.peak_in_flight("1f1b", 2, 4, 2), "stage"),
    (lambda: ps.interleaved_1f1b(4, 6, 0, 2), "m"), (lambda: ps.schedule("1f1b", 4, 8, v=2), "v"),
    (lambda: partition.balanced_partition([1, 2], 3), "p"), (lambda: partition.balanced_partition([1, -2], 1), "costs"),
    (lambda: partition.stage_costs([1, 2, 3], [2, 2]), "sizes"), (lambda: partition.even_partition(3, 0), "p"),
    (lambda: ps.parse_ops(["F0", "X1"]), "ops"),
])
def test_bad_input_raises_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ------------------------------------------------------------------------------ schedules + simulator
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (2, 4), (4, 3), (4, 8), (8, 32)])
def test_simulated_bubble_equals_the_formula(name, p, m):
    tl = pipeline.simulate(name, p, m, t_forward=1.0, t_backward=2.0)
    assert tl.makespan() == pytest.approx(pipeline.step_time(p, m, 1.0, 2.0))
    assert tl.bubble_fraction() == pytest.approx(pipeline.bubble_fraction(p, m))
    want = [m] * p if name == "gpipe" else [min(p - s, m) for s in range(p)]
    assert tl.peak_in_flight == want
    assert [pipeline.peak_in_flight(name, p, m, s) for s in range(p)] == want


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), groups=st.integers(1, 4), v=st.integers(1, 4),
       tf=st.floats(0.1, 5.0), ratio=st.floats(0.5, 3.0))
def test_interleaved_simulation_matches_megatron_formula(p, groups, v, tf, ratio):
    m = p * groups
    tl = pipeline.simulate("interleaved", p, m, v=v, t_forward=tf, t_backward=tf * ratio)
    assert tl.makespan() == pytest.approx(pipeline.step_time(p, m, tf, tf * ratio, v), rel=1e-9)
    assert tl.bubble_fraction() == pytest.approx(pipeline.bubble_fraction(p, m, v), abs=1e-9)
    ideal = m * (tf + tf * ratio)
    assert (tl.makespan() - ideal) / ideal == pytest.approx(pipeline.bubble_overhead(p, m, v), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), extra=st.integers(0, 24), tf=st.floats(0.1, 5.0), tb=st.floats(0.2, 6.0),
       share=st.floats(0.05, 0.5))
def test_zero_bubble_h1_meets_the_papers_bubble_at_1f1bs_memory(p, extra, tf, tb, share):
    """Qi et al. 2023 (arXiv 2401.10241), ZB-H1: with m >= p and T_W no longer than T_F or T_B (a
    weight-gradient GEMM against the forward's one GEMM and the input-gradient's), a step lasts
    m(T_F + T_B + T_W) + (p-1)(T_F + T_B - T_W), against 1F1B's (m + p - 1)(T_F + T_B + T_W),
    with p microbatches in flight at most (counted until each W), 1F1B's peak."""
    m = p + extra
    zb = pipeline.simulate("zb-h1", p, m, t_forward=tf, t_backward=tb, w_share=share)
    t_b, t_w = tb * (1 - share), tb * share
    assert zb.makespan() <= pipeline.step_time(p, m, tf, tb) * (1 + 1e-12)     # never slower than 1F1B
    if t_w <= tf:
        assert zb.makespan() == pytest.approx(m * (tf + tb) + (p - 1) * (tf + t_b - t_w), rel=1e-9)
    assert zb.peak_in_flight == [min(p, m)] * p
    assert [pipeline.peak_in_flight("zb-h1", p, m, s) for s in range(p)] == [min(p, m)] * p
    # every W starts after its own B on the same rank; the total work is 1F1B's
    done = {(e.kind, e.mb, e.rank): e for e in zb.events}
    assert all(done["B", e.mb, e.rank].end <= e.start + 1e-12 for e in zb.events if e.kind == "W")
    assert sum(zb.busy(r) for r in range(p)) == pytest.approx(p * m * (tf + tb), rel=1e-9)


def test_split_backward_orders_are_checked_whole():
    """W ops parse, and an order that splits the backward must hold a W for every B."""
    assert ps.parse_ops("F0 B0 W0") == [ps.Op("F", 0), ps.Op("B", 0), ps.Op("W", 0)]
    assert ps.EXECUTABLE == ps.SCHEDULES       # the executor runs every schedule the simulator replays
    with pytest.raises(pipeline.ScheduleError, match="every F, B and W of microbatches 0..0 .* missing W0"):
        pipeline.simulate([["F0", "B0", "W0"], ["F0", "B0"]])
    with pytest.raises(ValueError, match="w_share"):
        pipeline.simulate("zb-h1", 2, 2, w_share=1.0)


def test_simulator_catches_deadlocks_and_broken_orders():
    orders = ps.schedule("1f1b", 2, 2)
    orders[1] = [ps.Op("B", 0)] + [o for o in orders[1] if o != ps.Op("B", 0)]   # backward before forward
    with pytest.raises(pipeline.ScheduleError, match="deadlock"):
        pipeline.simulate(orders)
    with pytest.raises(pipeline.ScheduleError, match="missing B1"):
        pipeline.simulate([["F0", "F1", "B0"], ["F0", "B0", "F1", "B1"]])
    with pytest.raises(pipeline.ScheduleError, match="repeated F0"):
        pipeline.simulate([["F0", "F0", "B0"], ["F0", "B0"]])


def test_comm_latency_adds_to_every_hop_of_the_fill_and_drain():
    tl = pipeline.simulate("1f1b", 4, 8, t_forward=1.0, t_backward=2.0, t_comm=0.25)
    # the critical path crosses 3 hops forward and 3 backward once more than the ideal pipe
    assert tl.makespan() > pipeline.step_time(4, 8, 1.0, 2.0) + 6 * 0.25 - 1e-9


def test_replay_with_op_times_follows_the_slowest_path():
    uniform = {(k, mb, g): (1.0 if k == "F" else 2.0) for k in "FB" for mb in range(4) for g in range(2)}
    tl = pipeline.simulate("1f1b", 2, 4, op_times=uniform)
    assert tl.bubble_fraction() == pytest.approx(pipeline.bubble_fraction(2, 4))
    # one slow backward on the last stage delays everything after it in the zero-slack steady state
    slow = {**uniform, ("B", 1, 1): 3.5}
    assert pipeline.simulate("1f1b", 2, 4, op_times=slow).makespan() == pytest.approx(tl.makespan() + 1.5)
    # ops it does not list keep t_forward / t_backward
    assert pipeline.simulate("1f1b", 2, 4, op_times={}).makespan() == pytest.approx(tl.makespan())
    with pytest.raises(ValueError, match="op_times"):
        pipeline.simulate("1f1b", 2, 4, op_times={("F", 0, 0): -1.0})


def test_parse_and_format_round_trip():
    ops = ps.interleaved_1f1b(2, 4, 0, v=2)
    assert ps.parse_ops(ps.format_ops(ops)) == ops
    assert ps.parse_ops("F0, F1 b0") == [ps.Op("F", 0), ps.Op("F", 1), ps.Op("B", 0)]


# ------------------------------------------------------------------------------ partitioner + gantt
@settings(max_examples=60, deadline=None)
@given(costs=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=9), data=st.data())
def test_balanced_partition_is_optimal(costs, data):
    import itertools
    p = data.draw(st.integers(1, len(costs)))
    sizes = partition.balanced_partition(costs, p)
    assert len(sizes) == p and sum(sizes) == len(costs) and min(sizes) >= 1
    best = min(max(partition.stage_costs(costs, [b - a for a, b in zip((0,) + c, c + (len(costs),))]))
               for c in itertools.combinations(range(1, len(costs)), p - 1))
    assert max(partition.stage_costs(costs, sizes)) == pytest.approx(best)


def test_partition_examples():
    assert partition.balanced_partition([1, 1, 1, 1, 1, 1, 3], 3) == [3, 3, 1]
    assert partition.even_partition(10, 4) == [3, 3, 2, 2]
    assert partition.bounds([3, 2]) == [(0, 3), (3, 5)]


def test_gantt_measures_and_draws():
    tl = gantt.Timeline(2, [gantt.Event(0, "F", 0, 0.0, 1.0), gantt.Event(1, "F", 0, 1.0, 2.0),
                            gantt.Event(1, "B", 0, 2.0, 4.0), gantt.Event(0, "B", 0, 4.0, 6.0),
                            gantt.Event(0, "recv", 0, 1.0, 4.0)])
    assert tl.makespan() == 6.0
    assert tl.bubble_fraction() == pytest.approx(0.5)       # (p−1)/(m+p−1) with m=1, p=2
    ax = gantt.draw(tl, title="t")
    assert len(ax.patches) + len(ax.collections) >= 5
    import matplotlib.pyplot as plt
    plt.close("all")


# ------------------------------------------------------------------------------ real ranks
def _check_against_reference(res, clip):
    for r in res:
        g, params, losses = pipeline_run.reference_step(SMALL, 2 * r.m, steps=2, clip=clip)
        assert max_abs_diff(g, r.grads) < 1e-6, r.schedule
        assert max_abs_diff(params, r.params) < 1e-6, r.schedule
        assert r.loss == pytest.approx(losses, rel=1e-5)


def test_two_ranks_gpipe_1f1b_interleaved_match_the_unsplit_model():
    runs = [{"schedule": "gpipe", "m": 4, "steps": 2, "memory": True},
            {"schedule": "1f1b", "m": 4, "steps": 2, "memory": True},
            {"schedule": "interleaved", "m": 4, "v": 2, "steps": 2, "memory": True}]
    res = pipeline_run.run_pipeline(SMALL, 2, runs, grads=True, params=True, clip=0.5, timeout=120)
    _check_against_reference(res, clip=0.5)
    gp, fb, il = res
    # activation memory, measured by the saved-tensor hook: GPipe holds m microbatches, 1F1B p − s
    assert gp.peak_bytes == [4 * b for b in gp.mb_bytes]
    assert fb.peak_bytes == [2 * fb.mb_bytes[0], fb.mb_bytes[1]]
    assert fb.mb_bytes == gp.mb_bytes and fb.mb_bytes[0] > 0
    # every forward and backward of every microbatch ran on each rank, in the schedule's order
    for r in res:
        for rank in range(2):
            ops = [ps.Op(e.kind, e.mb, e.chunk) for e in r.timeline.of(rank, ("F", "B"), step=0)]
            assert ops == ps.schedule(r.schedule, 2, r.m, r.v)[rank]


def test_four_ranks_1f1b_matches_and_memory_is_bounded_by_p():
    res = pipeline_run.run_pipeline(SMALL, 4, [{"schedule": "1f1b", "m": 6, "steps": 2, "memory": True}],
                                    grads=True, params=True, timeout=120)
    _check_against_reference(res, clip=None)
    r = res[0]
    assert r.peak_bytes == [(4 - s) * b for s, b in enumerate(r.mb_bytes)]


def test_torch_pipelining_computes_the_same_gradients():
    out = pipeline_torch.compare_with_torch(SMALL, 2, "1f1b", m=4, repeats=1)
    assert out["max_grad_diff"] < 1e-6
    assert out["ours_s"] > 0 and out["torch_s"] > 0


def test_bubble_parts_add_up_and_replay_the_measured_op_times():
    r = pipeline_run.run_pipeline(SMALL, 2, [{"schedule": "1f1b", "m": 4, "steps": 3}])[0]
    for s in range(3):
        parts = r.bubble_parts(s)
        assert parts["schedule"] == pipeline.bubble_fraction(2, 4)
        assert parts["schedule"] + parts["op_times"] + parts["transfer"] == pytest.approx(parts["measured"])
        assert parts["measured"] == pytest.approx(r.bubbles()[s])
        real = sorted((e.rank, e.kind, e.mb, round(e.duration, 12)) for e in r.timeline.of(kinds=("F", "B"), step=s))
        sim = sorted((e.rank, e.kind, e.mb, round(e.duration, 12)) for e in r.replay(s).of(kinds=("F", "B")))
        assert real == sim                            # the replay runs the real durations, in the same order
        assert r.replay(s).makespan() <= r.timeline.makespan(s) + 1e-9   # messages only ever add time
    st = r.steadiest_step()
    assert r.bubble() == r.bubbles()[st]
    assert abs(r.bubble_parts()["op_times"]) == min(abs(r.bubble_parts(s)["op_times"]) for s in range(3))
    assert r.median_bubble() == sorted(r.bubbles())[1]
    table = pipeline_run.bubble_table([r]).splitlines()
    assert len(table) == 2 and table[1].startswith("1f1b        m=4 v=1")


ATTEMPTS = 6
TOLERANCE = 0.03   # issue #6: the measured bubble within 3 percentage points of the formula


@pytest.mark.serial
def test_measured_bubble_matches_the_formula_on_a_quiet_machine():
    """Issue #6's criterion: GPipe and 1F1B on 2 real processes, m = 1, 2, 4, 8, the measured
    bubble (steadiest of 5 steps) within 3 percentage points of (p−1)/(m+p−1); and the executor's
    own cost (the transfer part, median step) no more than those same 3 points, so that the
    messages and the Python between ops never use up the tolerance on their own.

    The transfer part is a machine's message latency as much as the executor's: this machine
    measures 0.3–1.3 % at every point, while CI's 2-vCPU VM, where a rank's gloo thread waits for a
    core both ranks are computing on, measured 2.1 % at 1F1B m = 8 in six launches in a row (and
    2.6 % once at GPipe m = 8), each time with the bubble itself within the 3 points. A virtual
    machine's op times also wander by 5–10 %, which now and then pushes one point past a bound
    (here 1F1B m = 8 once came out 5.9 points over). Noise only adds idle time, so such a point is
    measured again, in fresh launches of 8 steps (at most ATTEMPTS − 1 times, a few seconds each),
    before it counts as a miss."""
    def measure(points, steps=5):
        return pipeline_run.run_pipeline(pipeline_run.DEMO, 2, [{"schedule": s, "m": m, "steps": steps, "warmup": 1}
                                                                 for s, m in points], mb_size=pipeline_run.TIMING_MB)

    res = measure([(s, m) for s in ("gpipe", "1f1b") for m in (1, 2, 4, 8)])
    share = min(r.timeline.cpu_share() for r in res)
    assert 0 < share <= 1.05
    if share < 0.9:
        pytest.skip(f"other programs took the cores (CPU share {share:.2f}); the timing check needs an idle machine")

    def miss(r):
        """What is off in one point, or None: the bubble past 3 points of the formula, or the executor's
        own cost (messages and the Python between ops, median over the steps) past those 3 points."""
        off = r.bubble() - pipeline.bubble_fraction(2, r.m)
        transfer = sorted(r.bubble_parts(s)["transfer"] for s in range(r.steps))[r.steps // 2]
        if abs(off) > TOLERANCE or not -0.005 <= transfer <= TOLERANCE:
            return (r.schedule, r.m, round(off, 3), round(transfer, 3))
        return None

    for attempt in range(ATTEMPTS):
        missed = [m for m in map(miss, res) if m]
        if not missed or attempt == ATTEMPTS - 1:
            break
        res = measure([(s, m) for s, m, *_ in missed], steps=8)
    assert not missed, f"(schedule, m, measured − formula, transfer) missed {ATTEMPTS} times: {missed}"


def test_measured_layer_costs_cover_every_layer():
    costs = partition.measure_layer_costs(SMALL, repeats=1)
    assert [c["layer"] for c in costs] == ["embed"] + [f"block {i}" for i in range(4)] + ["head + loss"]
    assert all(c["forward"] > 0 and c["backward"] > 0 for c in costs)
    assert torch.get_num_threads() >= 1


# ------------------------------------------------------------------------------ question bank
def test_question_bank_agrees_with_the_library():
    from course_lib.checks import ch05_pipeline as bank
    qs = {q.qid: q for q in bank.QUESTIONS}
    for q in qs.values():
        if q.is_value:
            assert math.isfinite(float(q.reference()))
    assert qs["bubble_p8_m32"].reference() == pytest.approx(pipeline.bubble_fraction(8, 32))
    assert qs["min_mb_p16"].grade(pipeline.min_microbatches(16, 0.05)).correct
    assert qs["order_1f1b"].grade(ps.format_ops(ps.one_f_one_b(4, 6, 1)).split()).correct
    gp = qs["order_1f1b"].grade([str(o) for o in ps.gpipe(4, 6, 1)])
    assert gp.score == 0 and "deadlock" in gp.message          # GPipe and 1F1B neighbours never finish
    eager = qs["order_1f1b"].grade("F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5")
    assert 0 < eager.score < eager.points and "memory" in eager.message
    assert qs["order_1f1b"].grade(["F0", "B0"]).score == 0
    assert qs["imbalanced_step_ms"].reference() == pytest.approx(570.0)   # Σ t + (m−1)·max, per phase
    assert qs["partition"].grade(partition.balanced_partition(bank.PARTITION_COSTS, bank.PARTITION_P)).correct
    assert not qs["partition"].grade(partition.even_partition(len(bank.PARTITION_COSTS), bank.PARTITION_P)).correct
