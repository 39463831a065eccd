"""FSDP's all-gather in FP8: send each weight shard as one byte a value, with a scale every rank agrees on.

FSDP (chapter 4) keeps 1/n of every weight on each rank and all-gathers the full weight before a
layer runs. When the layer then casts that weight to FP8 anyway, the cast can happen *before* the
gather: each rank casts its own shard, and the all-gather moves one byte a value instead of BF16's
two. torchao does this for FSDP2 (``Float8LinearConfig(enable_fsdp_float8_all_gather=True)``);
this module does it on the course's :class:`~course_lib.parallel.counting.CountingComm`, whose ring
counts every byte it sends.

The catch is the scale. A per-tensor scale is ``max / amax`` of the *whole* weight, and no rank
holds the whole weight. Three ways to scale the shards (``scaling=``):

``"global"``  every rank shares its shard's amax (an all-gather of one float32 a weight), takes
              the max, and casts its shard with the scale of that global amax: the gathered FP8
              weight is bit for bit the one a single process casts from the full weight
              (torchao all-reduces the amax for the same reason).
``"local"``   each rank scales its shard by its own amax and the scales travel with the values
              (one float32 a shard): every rank holds the same weight, but it is scaled per shard,
              a block recipe of its own, not the per-tensor cast (different FP8 codes, and a GEMM
              that needs one scale cannot take it).
``"bf16"``    the reference path without FP8 in the collective: gather the BF16 shards, then cast
              the full BF16 weight. Its codes differ from the FP32 weight's own cast where the
              rounding to BF16 moved a value across an FP8 rounding boundary.

Shards are dim-0 slices, as FSDP2 shards each parameter (``Shard(0)``); every weight's rows must
divide by the number of ranks. All weights of a unit go in one flat buffer and one all-gather, as
FSDP2's ``foreach_all_gather`` does; the FP8 bytes travel as ``uint8`` (gloo has no FP8 type).
"""
from __future__ import annotations

import torch

from .._validate import choice
from .formats import element_dtype
from .recipes import cast_scaled, scale_for_amax

__all__ = ["SCALINGS", "shard_rows", "gather_weights", "dequantize_gathered"]

SCALINGS = ("global", "local", "bf16")


def shard_rows(weight: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s dim-0 shard of ``weight`` (a contiguous copy); ValueError when the rows do
    not divide by ``world_size``."""
    if weight.dim() < 1 or weight.shape[0] % world_size:
        raise ValueError(f"weight of shape {tuple(weight.shape)} has rows not divisible by world_size="
                         f"{world_size}: FSDP would pad it; pick shapes that divide")
    return weight.detach().chunk(world_size, dim=0)[rank].contiguous()


def _gather_flat(comm, pieces: list[torch.Tensor], dtype: torch.dtype) -> list[torch.Tensor]:
    """All-gather the concatenation of ``pieces`` (each flattened, viewed as ``dtype``) in one
    call; returns, per piece, the (world_size, numel) gathered rows."""
    flat = torch.cat([p.reshape(-1).view(dtype) for p in pieces])
    out = torch.empty(flat.numel() * comm.world_size, dtype=dtype)
    comm.all_gather(out, flat)
    rows = out.view(comm.world_size, flat.numel())
    got, at = [], 0
    for p in pieces:
        n = p.numel() * p.element_size() // torch.empty((), dtype=dtype).element_size()
        got.append(rows[:, at:at + n])
        at += n
    return got


def gather_weights(comm, shards: list[torch.Tensor], shapes: list[tuple[int, ...]], *, scaling: str = "global",
                   fmt: str = "e4m3") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """All-gather this rank's ``shards`` (dim-0 slices of weights of full ``shapes``) through
    ``comm`` (a CountingComm) and return, per weight, ``(values, scales)``:

    * ``scaling="global"``: FP8 ``values`` of the full shape and one float32 scale (shape ``()``);
    * ``"local"``: FP8 values and ``world_size`` float32 scales, shard r's rows scaled by scale r;
    * ``"bf16"``: BF16 values gathered, then cast to FP8 with the full tensor's own scale.

    Every rank gets the same result. Dequantize with :func:`dequantize_gathered`."""
    scaling = choice("scaling", scaling, SCALINGS)
    dt = element_dtype(fmt)
    if len(shards) != len(shapes):
        raise ValueError(f"shards and shapes must have one entry per weight, got {len(shards)} and {len(shapes)}")
    if scaling == "bf16":
        rows = _gather_flat(comm, [s.to(torch.bfloat16) for s in shards], torch.bfloat16)
        out = []
        for r, shape in zip(rows, shapes):
            full = r.reshape(shape).float()
            s = scale_for_amax(full.abs().max(), fmt)
            out.append((cast_scaled(full, s, fmt), s))
        return out
    amax = torch.stack([s.detach().abs().max().float() for s in shards])
    amaxes = _gather_flat(comm, [amax], torch.float32)[0]          # (n, weights): every shard's amax
    if scaling == "global":
        scales = [scale_for_amax(a, fmt) for a in amaxes.amax(0)]
        mine = [cast_scaled(s, sc, fmt) for s, sc in zip(shards, scales)]
    else:
        scales = [scale_for_amax(amaxes[:, i], fmt) for i in range(len(shards))]   # (n,) per weight
        mine = [cast_scaled(s, sc[comm.rank], fmt) for s, sc in zip(shards, scales)]
    rows = _gather_flat(comm, [m.view(torch.uint8) for m in mine], torch.uint8)
    return [(r.contiguous().view(dt).reshape(shape), sc) for r, shape, sc in zip(rows, shapes, scales)]


def dequantize_gathered(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The float32 weight a gathered ``(values, scales)`` stands for: ``values / scale`` with one
    scale, or each of ``scales.numel()`` dim-0 shards divided by its own."""
    v = values.float()
    if scales.numel() == 1:
        return v / scales.reshape(())
    if v.shape[0] % scales.numel():
        raise ValueError(f"{scales.numel()} shard scales do not divide the {v.shape[0]} rows of values")
    return torch.cat([c / s for c, s in zip(v.chunk(scales.numel(), dim=0), scales)], dim=0)
