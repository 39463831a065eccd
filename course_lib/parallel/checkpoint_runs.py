"""Lab and test driver: activation checkpointing under the from-scratch FSDP and FSDP2, same run.

``torch.utils.checkpoint`` drops a block's activations in forward and recomputes them in backward.
Under FSDP the recompute needs the block's full parameters while only shards are held, so the two
mechanisms must agree on who gathers when. The patterns a user writes (each on course_lib's GPT,
every block wrapped in :class:`~course_lib.parallel.loop_runs.CheckpointedBlock`):

* ``block/reentrant``, ``block/non_reentrant``: the FSDP unit is the checkpointed block itself;
* ``block/non_reentrant/no_early_stop``: the same, recomputing the whole block
  (``torch.utils.checkpoint.set_checkpoint_early_stop(False)``), so the unit's post-forward runs;
* ``wrapper/reentrant``, ``wrapper/non_reentrant``: the unit is the wrapper that calls checkpoint.

:func:`checkpoint_cases` trains each pattern a few steps with the course's FSDP and with PyTorch's
``fully_shard`` on the same units, and one process with the same checkpointing on whole batches.
"""
from __future__ import annotations

import contextlib
import traceback

import torch
import torch.nn as nn

from ..model import GPT
from .counting import CountingComm
from .fsdp import FSDP
from .loop_runs import SMALL, CheckpointedBlock, batches

__all__ = ["PATTERNS", "checkpoint_cases"]

PATTERNS = ("block/reentrant", "block/non_reentrant", "block/non_reentrant/no_early_stop",
            "wrapper/reentrant", "wrapper/non_reentrant")


def _model(pattern: str) -> GPT:
    model = GPT(SMALL, seed=0)
    model.blocks = nn.ModuleList(CheckpointedBlock(b, use_reentrant="/reentrant" in pattern)
                                 for b in model.blocks)
    return model


def _units(model: GPT, pattern: str) -> list[nn.Module]:
    return [w.block if pattern.startswith("block") else w for w in model.blocks]


def _early_stop(pattern: str):
    return (torch.utils.checkpoint.set_checkpoint_early_stop(False) if pattern.endswith("no_early_stop")
            else contextlib.nullcontext())


def _train(model, fwd, params, pattern: str, steps: int, rank_slice) -> None:
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1)
    for b in batches(steps):
        with _early_stop(pattern):
            fwd(rank_slice(b)[:, :-1], rank_slice(b)[:, 1:])[1].backward()
        opt.step()
        opt.zero_grad()


def _diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


def checkpoint_cases(ctx, steps: int = 3, patterns=PATTERNS) -> dict[str, dict]:
    """Per pattern: ``ours`` and ``fsdp2``, the largest weight difference from one process after
    ``steps`` AdamW steps (or ``"error"``: the traceback), and ``ours_vs_fsdp2``; ``shards_back``:
    after training, every parameter the model holds is this rank's 1-D shard again."""
    per = batches(1).shape[1] // ctx.world_size
    mine = lambda b: b[ctx.rank * per:(ctx.rank + 1) * per]        # noqa: E731
    out = {}
    for pattern in patterns:
        ref = _model(pattern)
        _train(ref, ref, ref.parameters(), pattern, steps, lambda b: b)
        want, res = ref.state_dict(), {}
        try:
            model = _model(pattern)
            f = FSDP(model, CountingComm(ctx.group), units=_units(model, pattern))
            _train(model, f, f.parameters(), pattern, steps, mine)
            res["shards_back"] = all(p.dim() == 1 for p in model.parameters())
            ours = f.full_state_dict()
            res["ours"] = _diff(ours, want)
        except Exception:                                           # noqa: BLE001
            res["ours"], ours = "error: " + traceback.format_exc(), None
        try:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            model = _model(pattern)
            mesh = init_device_mesh("cpu", (ctx.world_size,))
            for u in _units(model, pattern):
                fully_shard(u, mesh=mesh)
            fully_shard(model, mesh=mesh)
            _train(model, model, model.parameters(), pattern, steps, mine)
            theirs = {k: v.full_tensor() for k, v in model.state_dict().items()}
            res["fsdp2"] = _diff(theirs, want)
            if ours is not None:
                res["ours_vs_fsdp2"] = _diff(ours, theirs)
        except Exception:                                           # noqa: BLE001
            res["fsdp2"] = "error: " + traceback.format_exc()
        out[pattern] = res
        torch.distributed.barrier(group=ctx.group)
    return out


def suite(ctx, saved: dict | None = None, step0: int = 0, loop_steps: int = 2) -> dict:
    """Everything of issue #31 in one launch (start-up paid once): clipping, replication and
    checkpointing cases, then a stage of the user's loop (from ``saved`` at ``step0``, if given)."""
    from .loop_runs import clip_cases, loop_stage, replicate_cases
    return {"clip": clip_cases(ctx), "replicate": replicate_cases(ctx), "checkpoint": checkpoint_cases(ctx),
            "loop": loop_stage(ctx, loop_steps, saved, step0)}
