"""FP8 beside the planner (issue #45): NVIDIA's published benchmark rows as a held-out check,
reported apart from the runs the planner was built on, and DeepSeek-V3's untimed parts."""
from __future__ import annotations

import pytest

from course_lib.plan import published_fp8 as F, runs
from course_lib.plan.published import RUNS


@pytest.fixture(scope="module")
def held_out():
    return runs.check_fp8_held_out()


def test_rows_are_the_tables_own_figures_and_step_is_batch_over_rate(held_out):
    """Every row is a figure of the stored table (the source names its commit), its step time is
    GBS · s over the cluster's tokens per second, and the planner's step is set beside it."""
    assert "df0289c1" in F.SOURCE and "25.11" in F.SOURCE and held_out["source"] == F.SOURCE
    l8 = F.FP8_HELD_OUT[0]
    assert (l8.tokens_per_s_per_gpu, l8.global_batch, l8.n_gpus) == (14451, 128, 8)
    assert l8.step_s == pytest.approx(128 * 8192 / (14451 * 8), rel=1e-12)
    assert len(held_out["rows"]) == len(F.FP8_HELD_OUT)
    for row, b in zip(held_out["rows"], F.FP8_HELD_OUT):
        assert row["published_step_s"] == b.step_s and row["ratio"] == row["planned_step_s"] / b.step_s
        assert (row["mfu_vs_fp8"] is None) == (b.precision == "BF16")
    # H100 rows are FP8 current scaling only: the stored tables have no same-layout BF16 row on H100
    assert {b.precision for b in F.FP8_HELD_OUT if b.system == "DGX-H100"} == {"FP8-CS"}


def test_speedup_is_checked_on_the_one_same_layout_pair(held_out):
    (bf, f8), = F.SPEEDUP_PAIRS
    assert bf.layout == f8.layout and bf.shape == f8.shape and (bf.precision, f8.precision) == ("BF16", "FP8-MX")
    (s,), = [held_out["speedups"]]
    assert s["published"] == pytest.approx(4357 / 3848, rel=1e-12)
    assert s["planned"] > 1 and s["ratio"] == s["planned"] / s["published"]


def test_held_out_rows_are_apart_from_the_runs_the_planner_was_built_on():
    """The benchmark rows are a table of their own (Bench, not Run): check_published never sees them,
    and they are reported by check_fp8_held_out alone (book/13)."""
    from course_lib.plan.published import HELD_OUT
    assert not any(isinstance(r, F.Bench) for r in RUNS + HELD_OUT)
    assert all(isinstance(b, F.Bench) for b in F.FP8_HELD_OUT)
    with pytest.raises(ValueError, match=r"runs\[0\] must be a plan.runs.Run"):
        runs.check_published(F.FP8_HELD_OUT[:1])


def test_deepseek_v3_untimed_parts_are_listed_with_their_share():
    x = runs._as_run(next(r for r in RUNS if r.name == "DeepSeek-V3"))
    parts = {p["part"]: p for p in F.untimed_parts(x)}
    mla = parts["MLA attention (192-wide query-key heads)"]
    assert mla["share"] == pytest.approx(61 * 3.5 * 4096 * (128 * 192 + 128 * 128 - 2 * 7168) / (6 * 37e9))
    assert 0.03 < parts["MTP module (depth 1)"]["share"] < 0.06       # one block + projection + head of 37B
    assert all(0 < p["share"] < 0.2 for p in parts.values()) and len(parts) == 4
