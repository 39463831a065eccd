"""Measure the activation memory a pipeline stage stashes for its backward pass.

Autograd keeps, for every operation in the forward pass, the tensors its backward will need;
that stash is what grows with the number of microbatches in flight (GPipe: m, 1F1B: p − s).
``ActivationMeter`` counts it with ``torch.autograd.graph.saved_tensors_hooks`` instead of
estimating it from shapes, so the chapter's memory claims are measured on the real run.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ActivationMeter", "saved_bytes"]


class ActivationMeter:
    """Bytes that autograd keeps for the backward pass, live and peak, measured with
    ``torch.autograd.graph.saved_tensors_hooks``: each saved tensor is wrapped in a handle whose
    destruction (when autograd frees it after the backward) releases its storage's bytes.
    Parameters (saved by every Linear) are excluded; storages shared by several saved tensors
    count once."""

    def __init__(self, exclude: Sequence[torch.Tensor] = ()) -> None:
        self.exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.live = 0
        self.peak = 0
        self.saved: list[tuple[tuple[int, ...], str, int]] = []   # (shape, dtype, bytes) per new storage

    def _pack(self, t: torch.Tensor):
        key = t.untyped_storage().data_ptr()
        if key in self.exclude or t.untyped_storage().nbytes() == 0:
            return t
        if key not in self.refs:
            self.refs[key], self.size[key] = 0, t.untyped_storage().nbytes()
            self.saved.append((tuple(t.shape), str(t.dtype).removeprefix("torch."), self.size[key]))
            self.live += self.size[key]
            self.peak = max(self.peak, self.live)
        self.refs[key] += 1
        return _Held(self, key, t)

    def _release(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.live -= self.size.pop(key)
            del self.refs[key]

    def track(self):
        """Context manager: tensors saved for backward inside it are counted."""
        return torch.autograd.graph.saved_tensors_hooks(
            self._pack, lambda h: h.t if isinstance(h, _Held) else h)


def saved_bytes(fn, *args, exclude: Sequence[torch.Tensor] = ()):
    """Run ``fn(*args)`` and measure what autograd keeps for its backward: returns ``(output,
    meter)`` with ``meter.live`` the bytes held (``meter.saved`` lists them). Keep ``output``
    alive while reading the meter: freeing it frees the stash."""
    meter = ActivationMeter(exclude)
    with meter.track():
        out = fn(*args)
    return out, meter


class _Held:
    __slots__ = ("meter", "key", "t")

    def __init__(self, meter: ActivationMeter, key: int, t: torch.Tensor) -> None:
        self.meter, self.key, self.t = meter, key, t

    def __del__(self) -> None:
        self.meter._release(self.key)
