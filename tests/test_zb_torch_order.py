"""Issue #46: why ZB-V and DualPipeV idle about (p−1)/2 stage-times per step in our simulator at
T_F = T_B = T_W, where the ZB paper (arXiv 2401.10241 §6) says ZB-V's bubble is zero and the
DualPipe table (arXiv 2412.19437 Table 2) states (PP/2−1)(F&B + B − 3W).

1. PyTorch's own order (``ScheduleZBVZeroBubble`` / ``ScheduleDualPipeV``'s ``pipeline_order``,
   read by ``torch_pipelining.torch_order``) replayed in our simulator beside ours: the two are the
   same op lists, so they idle the same and hold the same peak.
2. A synchronous step (all ranks start together, the optimizer step waits for the last) cannot idle
   less than (p−1) chunk forwards = (p−1)·T_F/2 per rank: the last rank of the V cannot start before
   the first microbatch reaches it. Both schedules sit exactly on that floor at 1:1:1 once m ≥ 2p.
3. The paper's zero is for steps run back to back (its §4 replaces the synchronisation before the
   optimizer step with a check after it): replayed so, ZB-V idles 0 per step at 1:1:1, ZB-H1 still
   (p−1)(T_F+T_B−T_W) (its paper's figure), DualPipeV still its synchronous floor.
4. DualPipeV against DeepSeek's formula with F&B = F + B (our simulator and executor run the pair's
   compute one after the other; they do not model two kernels sharing a GPU): an upper bound,
   twice the replayed idle at 1:1:1.
"""
from __future__ import annotations

import itertools

import pytest

from course_lib import pipeline
from course_lib.layout import bubble
from course_lib.pipeline.schedules import schedule
from course_lib.pipeline.torch_pipelining import torch_order

pytest.importorskip("torch.distributed.pipelining")

TORCH = {"zb-v": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}
PS = (2, 4, 8)


def _replay(orders, m: int, fbw=(1.0, 1.0, 1.0)) -> tuple[float, float]:
    f, b, w = fbw
    t = pipeline.simulate(orders, t_forward=f, t_backward=b + w, w_share=w / (b + w), placement="v")
    return t.makespan() - m * (f + b + w), max(t.peak_in_flight)


def _ms(name: str, p: int) -> list[int]:
    low = 2 * p if name == "dualpipev" else 1       # DualPipeV needs m ≥ 2p (PyTorch's too)
    return sorted({low, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p, 4 * p} - set(range(low)))


@pytest.mark.parametrize("name", list(TORCH))
def test_torch_order_replays_exactly_as_ours(name: str) -> None:
    for p in PS:
        for m in _ms(name, p):
            theirs, ours = torch_order(TORCH[name], p, m), schedule(name, p, m)
            assert theirs.placement == ours.placement == "v"
            for fbw in ((1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.0, 2.0, 1.0)):
                idle_t, peak_t = _replay(theirs, m, fbw)
                idle_o, peak_o = _replay(ours, m, fbw)
                assert idle_o <= idle_t + 1e-9 and peak_o <= peak_t, (name, p, m, fbw)
                assert (idle_o, peak_o) == (idle_t, peak_t), (name, p, m, fbw)   # the same order, in fact:
            assert [list(r) for r in theirs] == [list(r) for r in ours], (name, p, m)


def test_torch_order_names_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="^name must be one of 'ScheduleZBVZeroBubble', 'ScheduleDualPipeV'"):
        torch_order("Schedule1F1B", 2, 4)
    with pytest.raises(ValueError, match="^p must be"):
        torch_order("ScheduleZBVZeroBubble", 0, 4)


@pytest.mark.parametrize("name", list(TORCH))
def test_v_schedules_sit_on_the_synchronous_floor(name: str) -> None:
    for p in PS:
        floor = (p - 1) * 1.0 / 2                       # p−1 chunk forwards of T_F/2 before rank p−1 starts
        for m in _ms(name, p):
            idle, peak = _replay(schedule(name, p, m), m)
            assert idle >= floor                        # no synchronous step idles less
            if m >= 2 * p:
                assert idle == floor, (name, p, m)
                assert peak == (p if name == "zb-v" else p + 0.5)   # ZB-V keeps 1F1B's p stages' worth
            assert bubble.replay(name, p, m) == (idle, peak)


def test_the_papers_zero_is_for_steps_back_to_back() -> None:
    for p, m in itertools.product(PS, (2, 4)):
        m *= p
        assert bubble.idle_back_to_back("zb-v", p, m) == 0.0                        # arXiv 2401.10241 §6
        assert bubble.replay("zb-v", p, m)[0] == (p - 1) / 2                        # synchronous: the floor
        assert bubble.idle_back_to_back("zb-h1", p, m) == (p - 1) * (1 + 1 - 1)     # (p−1)(T_F+T_B−T_W)
        assert bubble.replay("zb-h1", p, m)[0] == (p - 1) * (1 + 1 - 1)
        assert bubble.idle_back_to_back("1f1b", p, m) == (p - 1) * 3                # (p−1)(T_F+T_B+T_W)
        assert bubble.idle_back_to_back("dualpipev", p, m) == (p - 1) / 2           # no parallelogram
    with pytest.raises(ValueError, match="^steps must be >= 2, got 1"):
        bubble.idle_back_to_back("zb-v", 2, 4, steps=1)


def test_dualpipev_under_deepseeks_formula() -> None:
    ratios = [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (1.0, 1.5, 0.5), (2.0, 2.0, 1.0), (1.0, 1.0, 0.5),
              (1.0, 2.0, 2.0), (1.0, 1.0, 2.0), (2.0, 1.0, 1.0)]
    for p, (f, b, w) in itertools.product(PS, ratios):
        m = 4 * p
        idle, _ = _replay(schedule("dualpipev", p, m), m, (f, b, w))
        cf, cb, cw = f / 2, (b + w) / 2, w / 2           # per chunk of PP = 2p stages; B a whole backward
        deepseek = (p - 1) * ((cf + cb) + cb - 3 * cw)   # (PP/2−1)(F&B + B − 3W), F&B = F + B
        assert idle <= deepseek + 1e-9, (p, (f, b, w))
        if f == b == w:
            assert idle == deepseek / 2
