"""Fingerprints of training state: the SHA-256 digests by which "bit-identical" is checked.

:func:`digest` hashes a (nested) state dict's tensors' bytes and its numbers in key order;
:func:`full_digests` gathers a sharded training state's whole weights and optimizer state and
digests both, so that a job that failed and resumed can be compared with one that never failed.
"""
from __future__ import annotations

import hashlib

import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict)

__all__ = ["digest", "full_digests"]


def digest(state: dict) -> str:
    """SHA-256 of a (nested) state dict's tensors' bytes and its numbers, in key order."""
    h = hashlib.sha256()

    def feed(prefix: str, obj) -> None:
        if isinstance(obj, dict):
            for k in sorted(obj, key=str):
                feed(f"{prefix}.{k}", obj[k])
        elif isinstance(obj, torch.Tensor):
            h.update(prefix.encode())
            h.update(obj.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
        else:
            h.update(f"{prefix}={obj!r}".encode())
    feed("", state)
    return h.hexdigest()


def full_digests(state) -> dict:
    """Digests of a training state's whole (unsharded) weights and optimizer state, and its step
    (``state`` has ``model``, ``optimizer`` and ``step``, like ``elastic.TrainState``; collective)."""
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(state.model, options=full)
    optim = get_optimizer_state_dict(state.model, state.optimizer, options=full)
    return {"weights_sha256": digest(weights), "optim_sha256": digest(optim), "steps": state.step}
