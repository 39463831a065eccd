"""ZeroOptimizer's unsharded state dict: gathered on 2 gloo ranks it equals a plain AdamW's on one
process, a plain AdamW resumes from it, and ZeroOptimizer resumes from it on another world size."""
import pytest
import torch

from course_lib import dist
from dist_workers import zero_full_state, zero_reference


def _same_state(got: dict, want: dict, atol=1e-6) -> None:
    assert sorted(got["state"]) == sorted(want["state"])          # frozen bias: no state, like torch
    for i, st in want["state"].items():
        assert sorted(got["state"][i]) == sorted(st), i
        for k, v in st.items():
            assert torch.allclose(torch.as_tensor(got["state"][i][k]), torch.as_tensor(v), atol=atol), (i, k)
    strip = [{k: v for k, v in g.items() if k in ("lr", "betas", "eps", "weight_decay", "params")}
             for g in want["param_groups"]]
    assert [{k: g[k] for k in s} for g, s in zip(got["param_groups"], strip)] == strip


def _same_weights(got: dict, want: dict, atol=1e-6) -> None:
    for k, v in want.items():
        assert torch.allclose(got[k], v, atol=atol), k


@pytest.mark.parametrize("stage", [1, 2])
def test_full_state_dict_is_what_an_unsharded_adamw_saves(stage):
    ranks = dist.launch(zero_full_state, world_size=2, steps=3, stage=stage)
    ref = zero_reference(steps=3)
    for out in ranks:                                              # every rank gets the whole dict
        _same_state(out["state"], ref["state"])
        _same_weights(out["weights"], ref["weights"])
    # a plain AdamW over the same params loads it and continues exactly as the reference does
    resumed = zero_reference(steps=2, saved=ranks[0]["state"], saved_weights=ranks[0]["weights"])
    _same_weights(resumed["weights"], zero_reference(steps=5)["weights"], atol=1e-5)


def test_saved_on_two_ranks_resumes_on_one_and_on_four():
    first = dist.launch(zero_full_state, world_size=2, steps=3)[0]
    # other world sizes cut other shards (and pad buckets to other multiples): same training
    again = dist.launch(zero_full_state, world_size=1, steps=0, saved=first["state"],
                        saved_weights=first["weights"])[0]
    _same_state(again["state"], first["state"])
    out = dist.launch(zero_full_state, world_size=4, steps=2, saved=first["state"], saved_weights=first["weights"])
    ref = zero_reference(steps=5)
    for o in out:
        _same_weights(o["weights"], ref["weights"], atol=1e-5)
        _same_state(o["state"], ref["state"], atol=1e-5)
