"""FSDP's optimizer state, unsharded: save on any number of ranks, resume on any other.

Under :class:`~course_lib.parallel.fsdp.FSDP` the user's optimizer steps this rank's shards, so its
``state_dict()`` holds, for every parameter, the state of this rank's 1-D piece (Adam's ``exp_avg``
of 1056 elements on one rank of two where the parameter has 2048): it loads back only on the same
world size. :func:`full_optim_state_dict` all-gathers every *elementwise* state tensor (one shaped
like the shard) group by group, exactly as the parameters are gathered, and cuts it back into one
tensor per parameter shaped like the parameter; anything else (Adam's ``step``, the same on every
rank) is copied. The result is keyed and laid out as the same optimizer over the unwrapped model's
``parameters()`` would save it on one process, so a plain ``torch.optim.AdamW`` loads it, and
:func:`load_full_optim_state_dict` hands each rank its pieces on any world size.
"""
from __future__ import annotations

import torch

__all__ = ["full_optim_state_dict", "load_full_optim_state_dict"]


def _where(fsdp) -> dict[int, tuple]:
    """id(shard) -> (group, index of its parameter in the group)."""
    return {id(s): (g, i) for u in fsdp.units for g in u.groups for i, s in enumerate(g.shards)}


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in the order its ``state_dict()`` numbers them."""
    return [p for g in optimizer.param_groups for p in g["params"]]


def _elementwise(key: str, value, shape: torch.Size) -> bool:
    return torch.is_tensor(value) and key != "step" and value.shape == shape


@torch.no_grad()
def full_optim_state_dict(fsdp, optimizer: torch.optim.Optimizer, rank0_only: bool = False) -> dict:
    """``optimizer``'s state (over ``fsdp.parameters()``) unsharded, in ``optimizer``'s own
    ``state_dict()`` format: integer keys in param-group order, every state tensor shaped like its
    full parameter. A collective: every rank calls it (groups in the same order everywhere);
    ``rank0_only``: the other ranks get ``{}``."""
    saved = optimizer.state_dict()
    full: dict[int, dict] = {}                            # id(shard) -> key -> full tensor
    for u in fsdp.units:
        for g in u.groups:
            if not g.requires_grad:
                continue
            shards = g.shards
            states = [optimizer.state.get(s, {}) for s in shards]
            keys = sorted({k for s, st in zip(shards, states) for k, v in st.items() if _elementwise(k, v, s.shape)})
            for key in keys:
                like = next(st[key] for st in states if key in st)
                flat = torch.empty(g.numel, dtype=like.dtype, device=like.device)
                fsdp.comm.all_gather(flat, g.fill_mine(flat, [st.get(key) for st in states]))
                for s, v in zip(shards, g.views(flat)):
                    full.setdefault(id(s), {})[key] = v.clone()
    if rank0_only and fsdp.comm.rank != 0:
        return {}
    state = {}
    for idx, p in enumerate(_params(optimizer)):
        if idx not in saved["state"]:
            continue
        mine = full.get(id(p), {})
        state[idx] = {k: mine[k] if k in mine else (v.clone() if torch.is_tensor(v) else v)
                      for k, v in saved["state"][idx].items()}
    return {"state": state, "param_groups": saved["param_groups"]}


@torch.no_grad()
def load_full_optim_state_dict(fsdp, optimizer: torch.optim.Optimizer, state_dict: dict) -> None:
    """Load an unsharded optimizer state into ``optimizer`` (over ``fsdp.parameters()``): each
    elementwise tensor (shaped like its full parameter) is cut to this rank's piece, the rest is
    copied; then ``optimizer.load_state_dict`` checks the param groups as it always does."""
    where, params = _where(fsdp), _params(optimizer)
    saved = state_dict["state"]
    if len(state_dict["param_groups"]) != len(optimizer.param_groups):
        raise ValueError(f"state_dict has {len(state_dict['param_groups'])} param groups; the "
                         f"optimizer has {len(optimizer.param_groups)}")
    mine = {}
    for idx, p in enumerate(params):
        st = saved.get(idx, saved.get(str(idx)))
        if st is None:
            continue
        if id(p) not in where:                            # replicated (or not FSDP's): a copy (torch's
            mine[idx] = {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()}   # load keeps
            continue                                      # ``step`` as given, and the caller's may be shared)
        g, i = where[id(p)]
        (a, b), off = g.pieces[i], g.offsets[i]
        out = {}
        for k, v in st.items():
            if _elementwise(k, v, g.shapes[i]):
                out[k] = v.reshape(-1)[g.start + a - off:g.start + b - off].clone()
            elif torch.is_tensor(v) and k != "step" and v.dim() > 0:
                raise ValueError(f"state {k!r} of parameter {idx} has shape {tuple(v.shape)}, not the "
                                 f"parameter's {tuple(g.shapes[i])}: a sharded state_dict? this loads "
                                 "full_optim_state_dict's (or a plain optimizer's) output")
            else:
                out[k] = v.clone() if torch.is_tensor(v) else v
        mine[idx] = out
    optimizer.load_state_dict({"state": mine, "param_groups": state_dict["param_groups"]})
