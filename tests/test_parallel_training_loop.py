"""DP, ZeRO and FSDP in a real training loop (issue #31), on 2 and 4 gloo ranks against one process
on the whole batch and against PyTorch's DDP / FSDP2 in the same run: gradient clipping by the
global norm, FSDP with replicated parameters, activation checkpointing in every pattern FSDP2
supports, and a user's loop (checkpointing + clipping + LR schedule) saved on 2 ranks, resumed on 4,
then on one process with a plain AdamW. One launch per world size runs every case
(``course_lib.parallel.checkpoint_runs.suite``)."""
import pytest
import torch
import torch.nn as nn

from course_lib.dist import launch
from course_lib.parallel import checkpoint_runs as K
from course_lib.parallel import loop_runs as L
from course_lib.parallel.grad_clip import clip_grads_
from course_lib.train import clip_gradients

# Bounds. SGD: the distributed run sums the same fp32 products in another order (half-batch means,
# then the average), a few ulps of the gradient; momentum and lr 0.05 over 3 steps keep that below
# 1e-6 in weights of size ~0.1 (measured 4e-9). AdamW (lr 1e-3) divides by sqrt(v): a gradient
# entry near eps moves its weight by a visible fraction of lr when its last bits change, so 5% of
# one step, 5e-5 (measured <= 1e-6), as in test_fsdp_components. The norm: fp64 sum of squares of
# shards against torch's fp32 per-tensor norms: relative 1e-5 is ~100 fp32 ulps (measured 1e-7).
SGD_TOL, ADAM_TOL, NORM_RTOL = 1e-6, 5e-5, 1e-5
WORLDS = (2, 4)


@pytest.fixture(scope="module")
def runs():
    two = launch(K.suite, 2, timeout=400)
    four = launch(K.suite, 4, timeout=400, saved=two[0]["loop"], step0=2)
    return {2: two, 4: four}


@pytest.mark.parametrize("world", WORLDS)
def test_clipping_uses_the_global_norm_everywhere(runs, world):
    """DataParallel, ZeroOptimizer 1/2 and FSDP (sharded, or with the rest replicated) clip by the
    norm one process measures on the whole batch, SGD and AdamW, 2- and inf-norm, and land where
    one process lands; so do DDP and FSDP2 with torch's own function. Every rank reports the same
    norm. The norm is ~30x max_norm: clipping acts at every step (an unclipped run is 0.1 off)."""
    ranks = runs[world]
    for name, r in ranks[0]["clip"].items():
        if name.startswith("torch_clip_on_"):
            continue
        assert all(other["clip"][name]["norms"] == r["norms"] for other in ranks), name
        assert min(r["ref_norms"]) > 3 * L.MAX_NORM, name
        assert r["norms"] == pytest.approx(r["ref_norms"], rel=NORM_RTOL), name
        assert r["diff"] < (SGD_TOL if "/sgd/" in name else ADAM_TOL), (name, r["diff"])
    assert {n.split("/")[0] for n in ranks[0]["clip"]} >= {"dp", "zero1", "zero2", "fsdp", "fsdp_replicate",
                                                            "ddp", "fsdp2"}


@pytest.mark.parametrize("world", WORLDS)
def test_torch_clip_on_zero_parameters_raises_naming_the_method(runs, world):
    for rank in runs[world]:
        said = rank["clip"]["torch_clip_on_zero"]
        assert "zero_optimizer.clip_grad_norm_" in said and "held in ZeroOptimizer" in said, said


@pytest.mark.parametrize("world", WORLDS)
def test_torch_clip_on_fsdp_shards_raises_and_fsdps_own_clip_still_matches_one_process(runs, world):
    """On FSDP's shard gradients torch's clip (per-tensor and foreach) raises naming the method; the
    same gradients then clip with fsdp.clip_grad_norm_ and step, in both zero_grad modes, and
    land where one process lands (a wrong per-rank clip first would leave them ~1e-5 off)."""
    for rank in runs[world]:
        got = rank["clip"]["torch_clip_on_fsdp"]
        assert len(got["said"]) == 4
        for said in got["said"]:
            assert "fsdp.clip_grad_norm_" in said and "shard" in said, said
        assert got["diff"] < 5e-6, got["diff"]


def test_shard_grad_is_a_plain_gradient_except_for_its_norm():
    """Optimizers, zero_grad, arithmetic and deepcopy work on a ShardGrad; norms raise."""
    import copy

    from course_lib.parallel.grad_clip import ShardGrad, shard_grad
    model, twin = nn.Linear(4, 3), nn.Linear(4, 3)
    twin.load_state_dict(model.state_dict())
    for m in (model, twin):
        m(torch.ones(2, 4)).sum().backward()
    for p in model.parameters():
        p.grad = shard_grad(p.grad)
    for m in (model, twin):
        torch.optim.AdamW(m.parameters(), lr=0.1).step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))
    g = model.weight.grad
    assert type(g * 2) is torch.Tensor and isinstance(copy.deepcopy(g), ShardGrad)
    assert float(torch.linalg.vector_norm(g.local())) == float(torch.linalg.vector_norm(twin.weight.grad))
    for call in (lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), lambda: g.norm(),
                 lambda: torch.linalg.norm(g), lambda: torch.nn.utils.get_total_norm([g])):
        with pytest.raises(RuntimeError, match="fsdp.clip_grad_norm_"):
            call()
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad(set_to_none=False)
    assert isinstance(model.weight.grad, ShardGrad) and not model.weight.grad.local().any()


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp_keeps_chosen_parameters_replicated(runs, world):
    """Shard every Linear and Embedding, replicate the rest (LayerNorms: whole tensors on every
    rank, gradients all-reduced, equal everywhere, also after no_sync accumulation); or replicate
    one module next to block units. Both match one process."""
    for rank in runs[world]:
        for name, r in rank["replicate"].items():
            assert r["same_grads"] and r["full_shapes"], name
            assert r["diff"] < ADAM_TOL, (name, r["diff"])
    got = runs[world][0]["replicate"]
    assert got["linear_embedding"]["replicated"] and all(".ln" in k or k.startswith("ln_f")
                                                         for k in got["linear_embedding"]["replicated"])
    assert got["ln_f"]["replicated"] == ["ln_f.bias", "ln_f.weight"]


@pytest.mark.parametrize("world", WORLDS)
def test_activation_checkpointing_in_every_pattern_matches_one_process_and_fsdp2(runs, world):
    for rank in runs[world]:
        for pattern in K.PATTERNS:
            r = rank["checkpoint"][pattern]
            for k in ("ours", "fsdp2"):
                assert not isinstance(r[k], str), f"{pattern} {k}: {r[k]}"
            assert r["shards_back"], pattern
            assert max(r["ours"], r["fsdp2"], r["ours_vs_fsdp2"]) < ADAM_TOL, (pattern, r)


def _close(got: dict, want: dict, atol: float) -> None:
    for k, v in want.items():
        assert torch.allclose(got[k].float(), v.float(), atol=atol, rtol=0), k


def _close_optim(got: dict, want: dict, atol: float) -> None:
    assert sorted(got["state"]) == sorted(want["state"])
    for i, st in want["state"].items():
        for k, v in st.items():
            assert got["state"][i][k].shape == v.shape, (i, k)
            assert torch.allclose(got["state"][i][k].float(), v.float(), atol=atol, rtol=0), (i, k)
    assert [g["lr"] for g in got["param_groups"]] == [g["lr"] for g in want["param_groups"]]


def test_a_users_loop_resumes_on_another_world_size(runs):
    """Checkpointed blocks as FSDP units, the rest replicated, AdamW with an LR schedule, clipping:
    2 steps on 2 ranks, full model and optimizer states saved, 2 more on 4 ranks, 2 more on one
    process with a plain AdamW — at each stage the states one process reaches in as many steps."""
    two, four = runs[2][0]["loop"], runs[4][0]["loop"]
    for saved, steps in ((two, 2), (four, 4)):
        ref = L.loop_reference(steps)
        _close(saved["model"], ref["model"], ADAM_TOL)
        _close_optim(saved["optim"], ref["optim"], ADAM_TOL)
    _close(L.loop_reference(2, saved=four, step0=4)["model"], L.loop_reference(6)["model"], ADAM_TOL)
    for world in WORLDS:
        for rank in runs[world]:
            assert "sharded state_dict" in rank["loop"]["sharded_refused"]
            assert rank["loop"]["digest"] == runs[world][0]["loop"]["digest"]   # gathered on all ranks
        want = [float(v.double().sum()) for st in runs[world][0]["loop"]["optim"]["state"].values()
                for v in st.values()]
        assert runs[world][0]["loop"]["digest"] == want                       # = the rank-0 gather


def test_clip_gradients_asks_the_owner_of_the_gradients_first():
    model = nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert float(clip_gradients(model, opt, 1e-3)) == pytest.approx(float(torch.linalg.vector_norm(
        torch.tensor([2.0, 2.0, 2.0, 2.0]))))

    class Owner(torch.optim.SGD):
        def clip_grad_norm_(self, max_norm):
            return torch.tensor(-max_norm)
    assert float(clip_gradients(model, Owner(model.parameters(), lr=0.1), 7.0)) == -7.0


@pytest.mark.parametrize("kwargs, name", [(dict(max_norm=-1.0, norm_type=2.0), "max_norm"),
                                          (dict(max_norm=1.0, norm_type=0.0), "norm_type")])
def test_clip_bad_input_raises_value_error_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        clip_grads_([], [], comm=None, **kwargs)


def test_held_grad_placeholder_fails_loudly_and_survives_a_deepcopy():
    """What ZeroOptimizer leaves in p.grad: no memory, the parameter's shape; torch's clip, any
    arithmetic and an optimizer stepping the parameter raise naming the method; deepcopy works."""
    import copy

    from course_lib.parallel.grad_clip import HeldGrad, held_grad
    model = nn.Linear(4, 3)
    for p in model.parameters():
        p.grad = held_grad(p)
    assert model.weight.grad.shape == (3, 4) and model.weight.grad.stride() == (0, 0)
    for call in (lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0),
                 lambda: model.weight.grad.norm(),
                 lambda: torch.optim.SGD(model.parameters(), lr=0.1).step()):
        with pytest.raises(RuntimeError, match="zero_optimizer.clip_grad_norm_"):
            call()
    copy.deepcopy(model)
    twin = copy.deepcopy(model.weight.grad)
    assert isinstance(twin, HeldGrad) and "clip_grad_norm_" in repr(twin)
