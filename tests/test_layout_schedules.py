"""The planner's pipeline schedules (issue #46 item 6): each schedule's bubble and activations in
flight come from chapter 5's simulator at the layout's p and m (``course_lib.layout.bubble``), not
from a constant share, and DualPipe's second copy of the weights is counted in memory."""
from __future__ import annotations

import math

import pytest

from course_lib import layout as L
from course_lib import pipeline
from course_lib.layout import bubble
from course_lib.memory import _breakdown

V2 = dict(n_params=21e9, n_layers=60, d_model=5120, n_heads=128, seq_len=4096,
          global_batch_tokens=9216 * 4096, gpu="H800")          # DeepSeek-V2's dense shape, m = 72


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (8, 3, 1), (4, 8, 2), (8, 16, 4)])
def test_1f1b_closed_form_is_what_the_simulator_replays(p, m, v):
    name = "interleaved" if v > 1 else "1f1b"
    t = pipeline.simulate(name, p, m, v=v, t_forward=1.0, t_backward=2.0)
    assert bubble.bubble_share("1f1b", p, m, v) == pytest.approx((t.makespan() - 3 * m) / (3 * m), rel=1e-12)
    assert bubble.in_flight("1f1b", p, m, v) == pytest.approx(pipeline.peak_in_flight(name, p, m, 0, v=v))


def test_zb_h1_below_m_equal_p_and_at_a_measured_ratio_is_not_the_old_third():
    """The constant ZB_H1_BUBBLE_SHARE = 1/3 held only for m >= p at T_F = T_B = T_W; the replay
    gives the rest (these assertions fail against the constant)."""
    assert bubble.bubble_share("zb-h1", 8, 32) == pytest.approx(bubble.bubble_share("1f1b", 8, 32) / 3)
    few = bubble.bubble_share("zb-h1", 8, 4) / bubble.bubble_share("1f1b", 8, 4)
    assert not math.isclose(few, 1 / 3, rel_tol=0.01)
    # attention's backward has no W: a stage with T_W half of T_B saves less of 1F1B's bubble
    light_w = bubble.bubble_share("zb-h1", 8, 32, fbw=(1.0, 1.5, 0.5)) / bubble.bubble_share("1f1b", 8, 32)
    assert light_w > 1 / 3 + 0.05
    x = L.estimate(1, 1, 16, 128, schedule="zb-h1", fbw=(1.0, 1.5, 0.5), **V2)
    y = L.estimate(1, 1, 16, 128, schedule="zb-h1", **V2)
    assert x.bubble_s > y.bubble_s and x.compute_s == y.compute_s


@pytest.mark.parametrize("name", [s for s in bubble.SCHEDULES if s != "1f1b"])
def test_each_schedule_is_replayed_and_memory_counts_its_peak_and_copies(name):
    p, m = 16, 72
    idle, peak = bubble.replay(name, p, m)
    t = pipeline.simulate(bubble._SIMULATED.get(name, name), p, m, t_forward=1.0, t_backward=2.0)
    assert idle == pytest.approx(t.makespan() - 3 * m) and peak == max(t.peak_in_flight)
    base, x = (L.estimate(1, 1, 16, 128, schedule=s, **V2) for s in ("1f1b", name))
    assert x.bubble_s == pytest.approx(base.bubble_s * idle / (3 * (p - 1)), rel=1e-9)   # 1F1B idles 3(p-1)
    assert x.bubble_s < base.bubble_s and x.shape().endswith(")" + " · DP 128")
    per_stage = math.ceil(60 / 16)
    assert x.activation_bytes / base.activation_bytes == pytest.approx(
        per_stage * peak / (per_stage * min(p, m)), rel=1e-9)
    copies = bubble.PARAMETER_COPIES.get(name, 1)
    extra = (copies - 1) * _breakdown(21e9 / 16, 128, 1, 2.0, 2.0, 0.0).total
    assert x.states_bytes == pytest.approx(base.states_bytes + extra, rel=1e-12)


def test_dualpipe_holds_two_copies_and_needs_two_microbatches_per_stage():
    if "dualpipe" not in bubble.SCHEDULES:
        pytest.skip("chapter 5's simulator has no DualPipeV yet")
    one, two = (L.estimate(1, 1, 16, 128, schedule=s, **V2) for s in ("dualpipev", "dualpipe"))
    assert two.bubble_s == one.bubble_s and two.states_bytes > one.states_bytes
    few = dict(V2, global_batch_tokens=128 * 20 * 4096)     # m = 20 < 2·PP = 32
    with pytest.raises(ValueError, match=r"2·PP"):
        L.estimate(1, 1, 16, 128, schedule="dualpipe", **few)
    with pytest.raises(ValueError, match="m=20"):
        bubble.replay("dualpipev", 16, 20)


def test_large_steps_extrapolate_the_steady_state_exactly(monkeypatch):
    """Past MAX_REPLAY operations the idle time is replayed at 4p and 8p and extended linearly; on a
    size that can still be replayed the two agree."""
    for name in [s for s in bubble.SCHEDULES if s != "1f1b"]:
        direct = bubble.replay(name, 4, 50)
        bubble.replay.cache_clear()
        monkeypatch.setattr(bubble, "MAX_REPLAY", 10)
        assert bubble.replay(name, 4, 50) == pytest.approx(direct, rel=1e-12)
        monkeypatch.setattr(bubble, "MAX_REPLAY", 30_000)
        bubble.replay.cache_clear()


def test_the_search_takes_a_schedule_and_refuses_bad_ones():
    shape = dict(n_params=8e9, n_layers=32, d_model=4096, n_heads=32, kv_heads=8, seq_len=8192,
                 global_batch_tokens=2 ** 20, n_gpus=32)
    plans = L.plan_layouts(**shape, schedule="zb-h1")
    assert plans and all(x.v == 1 and x.schedule == "zb-h1" for x in plans)
    with pytest.raises(ValueError, match="schedule"):
        L.layout(**shape, schedule="gpipe")
    with pytest.raises(ValueError, match="fbw"):
        L.layout(**shape, fbw=(1, 0, 1))


def test_the_command_line_takes_a_schedule_and_a_ratio(capsys):
    """``python -m course_lib layout/plan --schedule zb-h1 --fbw 1:1.5:0.5``: the ratio arrives as text
    ("1:1.5:0.5" or the default's "(1.0, 1.0, 1.0)") and is read as three numbers; a bad one exits 2."""
    from course_lib.__main__ import main
    assert bubble._check_fbw("1:1.5:0.5") == (1.0, 1.5, 0.5) == bubble._check_fbw("(1.0, 1.5, 0.5)")
    args = ["layout", "--n-params", "8e9", "--n-layers", "32", "--d-model", "4096", "--n-heads", "32",
            "--seq-len", "8192", "--global-batch-tokens", "1e6", "--n-gpus", "32"]
    assert main(args + ["--schedule", "zb-h1", "--fbw", "1:1.5:0.5"]) == 0
    assert main(["plan", "--n-params", "8B", "--n-tokens", "1T", "--n-gpus", "32", "--global-batch-tokens", "1M",
                 "--schedule", "zb-h1"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(args + ["--fbw", "1:0:1"])
    assert exc.value.code == 2 and "fbw" in capsys.readouterr().err


def test_the_page_calculator_s_1f1b_is_chapter_5_s_closed_form() -> None:
    """The page's calculator reports 1F1B (interleaved or not) with pipeline.bubble_fraction and
    bubble_overhead, the formulas chapter 5 derives, not a replay."""
    from course_lib import pipeline
    from course_lib.layout import bubble
    for p, m, v in [(p, m, v) for p in (1, 2, 4, 8, 32) for m in (1, 4, 8, 32, 1000) for v in (1, 2, 4)]:
        got = bubble.page_calculator(p, m, v, "1f1b")
        assert abs(got["fraction"] - pipeline.bubble_fraction(p, m, v)) <= 1e-12, (p, m, v)
        assert abs(got["overhead"] - pipeline.bubble_overhead(p, m, v)) <= 1e-12, (p, m, v)
