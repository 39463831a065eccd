"""Bytes a rank really holds, measured from the tensors' storages rather than computed from shapes.

Chapter 4 sets these beside ZeRO's and FSDP's formulas: a view of a flat buffer counts once, a shard
counts its shard, a freed buffer (resized to 0, as FSDP does after a layer) counts nothing.
"""
from __future__ import annotations

import torch

__all__ = ["storage_bytes", "optimizer_state_bytes"]


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (None entries skipped): views of one
    buffer count once, and a buffer whose storage was freed (resized to 0) counts 0. This is how
    the course *measures* a rank's memory for parameters, gradients and optimizer state."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):  # a DTensor (PyTorch FSDP2): count the local shard
            t = t.to_local()
        st = t.untyped_storage()
        seen[st.data_ptr() if st.nbytes() else id(st)] = st.nbytes()
    return sum(seen.values())


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (Adam: exp_avg, exp_avg_sq, step)."""
    return storage_bytes(v for state in optimizer.state.values() for v in state.values()
                         if isinstance(v, torch.Tensor))
