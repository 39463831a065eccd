"""FSDP's mixed-precision policy: the dtypes a unit computes and communicates in (moved out of
:mod:`course_lib.parallel.fsdp_units`, which applies it)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_map

__all__ = ["MixedPrecision"]


@dataclass(frozen=True)
class MixedPrecision:
    """The dtypes FSDP computes and communicates in, as PyTorch FSDP2's ``MixedPrecisionPolicy``.

    ``param_dtype``: floating parameters are all-gathered and used in this dtype (None: their own);
    the shards the optimizer steps keep their own dtype (fp32 master weights, fp32 optimizer state).
    ``reduce_dtype``: gradients are reduce-scattered in this dtype (None: ``param_dtype``), then cast
    to the shard's dtype. ``output_dtype``: the root's floating outputs are cast to it (None: kept).
    ``cast_forward_inputs``: each unit casts its floating forward inputs to ``param_dtype``.
    """

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, torch.dtype) and v.is_floating_point):
                raise ValueError(f"{name} must be a floating-point torch.dtype or None; got {v!r}")


def _cast(tree, dtype: torch.dtype):
    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
                    else t, tree)
