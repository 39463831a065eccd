"""DataParallel and ZeroOptimizer as components of a user's own training loop (issue #18).

Two gloo ranks each train small models of awkward shapes — frozen parameters, buffers that differ
between ranks before wrapping, tied weights, fp32 next to bf16, a container with no parameters
of its own — with their own optimizer (SGD with momentum, AdamW), their own ``zero_grad`` in
every mode, ``no_sync`` accumulation, param groups, LR schedulers and a state_dict round trip, on
their slice of each batch, and compare with a single-process copy that saw the whole batch (see
``course_lib.parallel.component_runs``). One launch runs all cases of a component.
"""
import pytest
import torch
import torch.nn as nn

from course_lib.dist import launch
from course_lib.parallel import component_runs as C
from course_lib.parallel.counting import as_comm
from course_lib.parallel.dp import make_buckets
from course_lib.parallel.zero import ZeroOptimizer


def _no_mismatch(results):
    for rank, errors in enumerate(results):
        assert errors == [], f"rank {rank}:\n" + "\n".join(errors[:20])


def test_the_cases_cover_what_the_issue_lists():
    dp, zero = C.dp_cases(), C.zero_cases()
    for cases in (dp, zero):
        assert {c["model"] for c in cases} == set(C.MODELS)
        assert {c["optim"] for c in cases} == {"sgd", "adamw"}
        assert {c["comm"] for c in cases} == {"ring", "group"}
    for z in C.ZEROINGS:    # every zeroing mode meets every (optimizer, overlap) combination
        assert {(c["optim"], c["overlap"]) for c in dp if c["zeroing"] == z} == set(C.COMBOS)
    assert {c["model"] for c in dp if c.get("microbatches") == 2} == set(C.MODELS)
    assert {(c["stage"], c["set_to_none"]) for c in zero} == {(1, True), (1, False), (2, True), (2, False)}
    assert {c["sched"] for c in zero} == {None, "lambda", "step"}
    assert {c["model"] for c in zero if c.get("resume")} == set(C.MODELS)
    assert {c["stage"] for c in zero if c.get("groups")} == {1, 2}     # per-group lr, empty groups


def test_data_parallel_matches_one_process_in_user_code():
    _no_mismatch(launch(C.dp_checks_worker, 2, timeout=240))


def test_zero_optimizer_matches_one_process_in_user_code():
    _no_mismatch(launch(C.zero_checks_worker, 2, timeout=240))


def test_buckets_split_by_dtype_keep_reverse_order_and_pad():
    a, b, c = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(5, dtype=torch.bfloat16)), nn.Parameter(torch.zeros(4))
    buckets = make_buckets([a, b, c], None, 4)
    assert [[p is q for p, q in zip(bk.params, want)] for bk, want in zip(buckets, ([c, a], [b]))] == [[True, True], [True]]
    assert [bk.numel for bk in buckets] == [8, 8]
    assert [len(bk.params) for bk in make_buckets([a, b, c], 0, 1)] == [1, 1, 1]
    # the bf16 parameter between the fp32 ones does not close their bucket; the cap does
    assert [len(bk.params) for bk in make_buckets([a, b, c], 16, 1)] == [1, 1, 1]
    assert [len(bk.params) for bk in make_buckets([a, b, c], 28, 1)] == [2, 1]


@pytest.mark.parametrize("call, name", [
    (lambda: ZeroOptimizer([nn.Parameter(torch.zeros(2))], torch.nn.Linear), "optimizer_cls"),
    (lambda: ZeroOptimizer([nn.Parameter(torch.zeros(2))], stage=0), "stage"),
    (lambda: as_comm("world"), "comm"),
    (lambda: as_comm(object(), object()), "process_group"),
])
def test_bad_input_raises_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
