"""Chapter 14: the dispatch all-to-all overlapped with the shared expert (``expert.overlap``).

One 2-rank launch of small sizes: the overlapped forward equals the serial one and the layer's own
forward bit for bit, the dispatch sends the formula's bytes, and every repeat's trace holds the
expected events in the expected order (overlapped: the shared expert computes between issuing the
dispatch and waiting for it; whether the exchange is still in flight then depends on its size, and
the lab's 8 MB checks it). Times are not checked (a shared machine); the lab shows them.
"""
import pytest

from course_lib import comm as C
from course_lib.dist import launch
from course_lib.expert import overlap_runs as O
from course_lib.pipeline import gantt

SMALL = dict(tokens=256, d_model=64, d_ff=32, n_experts=4, top_k=2, repeats=1)


@pytest.fixture(scope="module")
def res():
    return launch(O.overlap_worker, 2, threads_per_rank=1, timeout=120, **SMALL)


def test_outputs_bitwise_and_bytes(res):
    assert all(r["bitwise"] for r in res)
    # the dispatch is a quarter of the layer's all-to-all bytes (dispatch + combine, fwd + bwd)
    want = C.ep_bytes_per_layer(SMALL["tokens"], SMALL["d_model"], SMALL["top_k"], 2, bytes_per_value=4) / 4
    assert [r["dispatch_bytes"] for r in res] == [want, want]


def test_trace_order(res):
    for step in (0, 1):                       # repeat 0 serial, then overlapped
        for rank in (0, 1):
            tl = O.timeline(res, step)
            ev = {e.kind: e for e in tl.of(2 * rank)[::-1]}      # the first "recv" is the dispatch's wait
            comm = {e.kind: e for e in tl.of(2 * rank + 1)}
            assert set(comm) == {"dispatch", "combine"} and {"route", "shared", "experts", "recv"} <= set(ev)
            d, s = comm["dispatch"], ev["shared"]
            assert ev["route"].end <= d.start <= s.start <= s.end <= ev["experts"].start
            assert d.end <= ev["experts"].start <= ev["experts"].end <= comm["combine"].start
            w = ev["recv"]
            if step == 0:                              # serial: waited for before the shared expert
                assert d.end <= w.end <= s.start
            else:                                      # overlapped: the shared expert before the wait
                assert s.end <= w.start and d.end <= w.end
    s = O.summary(res)
    assert s["serial_repeat"] == 0 and s["overlap_repeat"] == 1 and s["dispatch"] > 0


def test_draw_rows(res):
    import matplotlib.pyplot as plt
    ax = O.draw(res, 1)
    assert [t.get_text() for t in ax.get_yticklabels()][::-1] == [
        "rank 0 compute", "rank 0 all-to-all", "rank 1 compute", "rank 1 all-to-all"]
    assert "shared\nexpert" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig, axes = O.draw_both(res)
    assert axes[0].get_xlim() == axes[1].get_xlim()
    with pytest.raises(ValueError, match="rows"):
        gantt.draw(O.timeline(res, 1), rows=["one"])
    plt.close("all")


def test_cache_the_book_reads():
    """The cached run (``overlap_runs.OVERLAP_COMMAND``) is what its config and events say."""
    cache = O.load_overlap_cache()
    cfg = cache["config"]
    assert cfg == O.OVERLAP and all(r["bitwise"] for r in cache["ranks"])
    want = C.ep_bytes_per_layer(cfg["tokens"], cfg["d_model"], cfg["top_k"], 2, bytes_per_value=4) / 4
    assert [r["dispatch_bytes"] for r in cache["ranks"]] == [want, want]
    assert O.summary(cache["ranks"]) == pytest.approx(cache["summary"]) == cache["summaries"][0]
