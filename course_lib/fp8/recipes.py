"""FP8 scaling recipes: how a float tensor becomes FP8 values plus scales, and back.

An FP8 value alone spans only ~18 binades (E4M3) around 1, so every recipe first multiplies a
group of values by a scale chosen so the group's largest magnitude (its *amax*) lands on the
format's max, then casts with saturation. The recipes differ in the group one scale serves:

``"tensor"``          one scale per tensor from this tensor's amax ("current" scaling; torchao's
                      tensorwise ``Float8Linear``).
``"tensor_delayed"``  one scale per tensor from the amax *history* of earlier steps (Transformer
                      Engine's DelayedScaling; arXiv 2209.05433 §4): no extra pass over the data,
                      but a tensor larger than its history saturates. The caller owns the
                      :class:`AmaxHistory` and passes it in: no global state.
``"row"``             one scale per row (last-dim groups; torchao's rowwise recipe).
``"block_1x128"``     one scale per 1×128 tile of the last dim (DeepSeek-V3's activations, arXiv
                      2412.19437 §3.3.1).
``"block_128x128"``   one scale per 128×128 block of a 2-D tensor (DeepSeek-V3's weights, same §).
``"mx"``              one power-of-two E8M0 scale per 1×32 block (OCP MX, arXiv 2310.10537 §5;
                      torchao's ``MXTensor.to_mx`` with its default FLOOR rounding of the scale).

Conventions. The float32 scales of the first five recipes are torchao's and Transformer
Engine's: ``values = saturate(x · scale)``, ``x ≈ values / scale``, scale = max / amax computed in
float64 then rounded to float32 (torchao ``amax_to_scale``), amax clamped at 1e-12 so an all-zero
group gets a finite scale. MX scales are E8M0 tensors that multiply on the way out, as the MX
spec defines them: ``x ≈ values · 2**e``. Both are bit for bit torchao 0.18's (tests/test_fp8.py).
"""
from __future__ import annotations

import collections
import math

import torch

from .._validate import choice, flag, positive_int
from .formats import element_dtype, spec

__all__ = ["RECIPES", "AmaxHistory", "quantize", "dequantize", "scale_shape", "scale_for_amax", "cast_scaled",
           "EPS", "MX_BLOCK", "TILE"]

RECIPES = ("tensor_delayed", "tensor", "row", "block_1x128", "block_128x128", "mx")
EPS = 1e-12      # torchao float8_utils.EPS: the amax floor that keeps an all-zero group's scale finite
TILE = 128       # DeepSeek-V3's tile and block edge (arXiv 2412.19437 §3.3.1)
MX_BLOCK = 32    # OCP MX block size k = 32 (arXiv 2310.10537 §5, Table 1)
_F32_TINY = torch.finfo(torch.float32).tiny   # torchao clamps an MX scale of 2**-127 to this


class AmaxHistory:
    """The last ``length`` amaxes of one tensor (one per quantization), for delayed scaling.

    Transformer Engine's DelayedScaling recipe scales a tensor by the max over a window of
    earlier amaxes ("max" algorithm), recording the current amax for later steps. Each tensor
    of each layer needs its own history (``FP8Linear`` keeps three: input, weight, gradient).
    """

    def __init__(self, length: int = 16) -> None:
        self.length = positive_int("length", length, maximum=1 << 20)
        self._amaxes: collections.deque[float] = collections.deque(maxlen=self.length)

    def __len__(self) -> int:
        return len(self._amaxes)

    def amax(self) -> float | None:
        """The window's max amax, or None before the first record."""
        return max(self._amaxes) if self._amaxes else None

    def record(self, amax: float) -> None:
        self._amaxes.append(float(amax))

    def __repr__(self) -> str:
        return f"AmaxHistory(length={self.length}, amaxes={list(self._amaxes)})"


def _check_x(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point torch.Tensor, got {type(x).__name__}"
                         + (f" of dtype {x.dtype}" if isinstance(x, torch.Tensor) else ""))
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu):
        raise ValueError(f"x is already {x.dtype}: quantize a float32/bf16/fp16 tensor")
    if x.numel() == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)}): there is no amax to scale by")
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        n_nan = int(torch.isnan(x).sum())
        raise ValueError(f"x contains {n_nan} NaN and {bad - n_nan} infinite values: the amax, and "
                         "with it every scale, would be NaN or inf. Find where they came from first")
    return x.detach().to(torch.float32).contiguous()


def _check_shape(shape: torch.Size, recipe: str, name: str = "x") -> None:
    """ValueError naming the shape when it does not tile into the recipe's groups."""
    if recipe in ("row", "block_1x128", "mx") and len(shape) == 0:
        raise ValueError(f"recipe={recipe!r} groups the last dim: {name} must have at least 1 dim, got a scalar")
    if recipe == "block_1x128" and shape[-1] % TILE:
        raise ValueError(f"recipe='block_1x128' needs {name}'s last dim divisible by {TILE}, got shape {tuple(shape)}")
    if recipe == "mx" and shape[-1] % MX_BLOCK:
        raise ValueError(f"recipe='mx' needs {name}'s last dim divisible by {MX_BLOCK}, got shape {tuple(shape)}")
    if recipe == "block_128x128" and (len(shape) != 2 or shape[0] % TILE or shape[1] % TILE):
        raise ValueError(f"recipe='block_128x128' needs a 2-D {name} with both dims divisible by {TILE}, "
                         f"got shape {tuple(shape)}")


def scale_shape(shape: tuple[int, ...] | torch.Size, recipe: str) -> tuple[int, ...]:
    """The shape of the scales ``quantize`` returns for a tensor of ``shape``."""
    recipe = choice("recipe", recipe, RECIPES)
    shape = torch.Size(shape)
    _check_shape(shape, recipe)
    if recipe in ("tensor", "tensor_delayed"):
        return ()
    if recipe == "row":
        return (*shape[:-1], 1)
    if recipe == "block_1x128":
        return (*shape[:-1], shape[-1] // TILE)
    if recipe == "mx":
        return (*shape[:-1], shape[-1] // MX_BLOCK)
    return (shape[0] // TILE, shape[1] // TILE)


def _amax_to_scale(amax: torch.Tensor, fmax: float, pow2: bool) -> torch.Tensor:
    """torchao's ``amax_to_scale``: max / clamp(amax, EPS) in float64, rounded to float32, and
    optionally rounded down to a power of two (exact rescaling, no new rounding error)."""
    s = (fmax / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)
    return torch.exp2(torch.floor(torch.log2(s))) if pow2 else s


def scale_for_amax(amax: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """The float32 scale the per-tensor recipes pick for a tensor whose amax is ``amax``
    (``max / amax``, torchao's arithmetic): for a tensor split over ranks, the scale of the
    global amax is the one a single process computes (chapter 15's FP8 all-gather)."""
    return _amax_to_scale(torch.as_tensor(amax, dtype=torch.float32), spec(fmt).max, False)


def cast_scaled(x: torch.Tensor, scale: torch.Tensor, fmt: str = "e4m3") -> torch.Tensor:
    """``saturate(x · scale)`` cast to ``fmt``: the FP8 values of ``x`` under a scale chosen elsewhere."""
    return _saturate(_check_x(x) * scale, element_dtype(fmt))


def _saturate(v: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """Clamp to ±max, then cast: values beyond max become max, never inf or NaN (E4M3 has no inf)."""
    m = torch.finfo(dt).max
    return v.clamp(min=-m, max=m).to(dt)


def _blocks_128x128(t: torch.Tensor) -> torch.Tensor:
    m, k = t.shape
    return t.reshape(m // TILE, TILE, k // TILE, TILE)


def _mx(xf: torch.Tensor, fmt: str, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX with the FLOOR rule (arXiv 2310.10537 §6.3; torchao ``to_mx``): the scale is
    2**(floor(log2 amax) − emax_elem), emax_elem the exponent of the element format's largest
    power of two (8 for E4M3, 15 for E5M2), clamped to E8M0's range [−127, 127]."""
    fs = spec(fmt)
    emax_elem = int(math.floor(math.log2(fs.max)))
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(-1, keepdim=True)
    exp = ((amax.view(torch.int32) >> 23) & 0xFF) - 127          # floor(log2 amax), read off the bits
    biased = (exp - emax_elem).clamp(min=-127, max=128) + 127
    scale_f32 = (biased << 23).view(torch.float32).clamp(min=_F32_TINY)
    values = _saturate(blocks / scale_f32, dt).reshape(xf.shape)
    return values, biased.to(torch.uint8).view(torch.float8_e8m0fnu).squeeze(-1)


def quantize(x: torch.Tensor, recipe: str, fmt: str = "e4m3", *, history: AmaxHistory | None = None,
             pow2_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to FP8 under ``recipe``; returns ``(values, scales)``.

    ``values`` has x's shape and dtype ``float8_e4m3fn`` or ``float8_e5m2`` (``fmt``); ``scales``
    has :func:`scale_shape`'s shape (float32, or E8M0 for ``"mx"``). ``history`` is required by
    ``"tensor_delayed"`` (and updated with x's amax); ``pow2_scales`` rounds float32 scales down
    to powers of two (torchao's ``round_scales_to_power_of_2``, its rowwise default).
    ValueError names the bad argument: unknown recipe or fmt, shapes that do not tile, NaN/inf.
    """
    recipe = choice("recipe", recipe, RECIPES)
    dt = element_dtype(fmt)
    pow2 = flag("pow2_scales", pow2_scales)
    if recipe == "tensor_delayed" and not isinstance(history, AmaxHistory):
        raise ValueError("recipe='tensor_delayed' needs history=AmaxHistory(...) (the amaxes of earlier "
                         f"steps of this tensor), got {type(history).__name__}")
    if recipe != "tensor_delayed" and history is not None:
        raise ValueError(f"history is only used by recipe='tensor_delayed', not {recipe!r}")
    if not isinstance(x, torch.Tensor):
        _check_x(x)
    _check_shape(x.shape, recipe)
    xf = _check_x(x)
    fmax = spec(fmt).max
    if recipe == "mx":
        return _mx(xf, fmt, dt)
    if recipe in ("tensor", "tensor_delayed"):
        amax = xf.abs().max()
        if recipe == "tensor_delayed":
            past = history.amax()
            history.record(float(amax))
            if past is not None:      # the first step has nothing to delay: it scales by its own amax
                amax = torch.tensor(past, dtype=torch.float32)
        s = _amax_to_scale(amax, fmax, pow2)
        return _saturate(xf * s, dt), s
    if recipe == "row":
        s = _amax_to_scale(xf.abs().amax(-1, keepdim=True), fmax, pow2)
        return _saturate(xf * s, dt), s
    if recipe == "block_1x128":
        tiles = xf.reshape(*xf.shape[:-1], xf.shape[-1] // TILE, TILE)
        s = _amax_to_scale(tiles.abs().amax(-1), fmax, pow2)
        return _saturate(tiles * s.unsqueeze(-1), dt).reshape(xf.shape), s
    blocks = _blocks_128x128(xf)
    s = _amax_to_scale(blocks.abs().amax(dim=(1, 3)), fmax, pow2)
    return _saturate(blocks * s[:, None, :, None], dt).reshape(xf.shape), s


def _e8m0_to_float(scales: torch.Tensor) -> torch.Tensor:
    """2**(bits − 127) as float32, computed as torchao's ``get_fp_scale`` does; 0xFF is NaN."""
    off = scales.view(torch.uint8).to(torch.int16) - 127
    s = torch.pow(torch.full_like(off, 2.0, dtype=torch.float32), off)
    return torch.where(scales.view(torch.uint8) != 255, s, torch.full_like(s, math.nan))


def dequantize(values: torch.Tensor, scales: torch.Tensor, recipe: str) -> torch.Tensor:
    """The float32 tensor ``(values, scales)`` stands for (x's shape): ``values / scale`` for the
    float32-scaled recipes, ``values · 2**e`` for ``"mx"``. ValueError names a mismatch."""
    recipe = choice("recipe", recipe, RECIPES)
    if not isinstance(values, torch.Tensor) or values.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError("values must be a float8_e4m3fn or float8_e5m2 tensor, got "
                         + (str(values.dtype) if isinstance(values, torch.Tensor) else type(values).__name__))
    if not isinstance(scales, torch.Tensor):
        raise ValueError(f"scales must be a torch.Tensor, got {type(scales).__name__}")
    want = scale_shape(values.shape, recipe)
    if tuple(scales.shape) != want:
        raise ValueError(f"scales has shape {tuple(scales.shape)}, but recipe={recipe!r} on values of shape "
                         f"{tuple(values.shape)} needs {want}")
    want_dt = torch.float8_e8m0fnu if recipe == "mx" else torch.float32
    if scales.dtype != want_dt:
        raise ValueError(f"scales must be {want_dt} for recipe={recipe!r}, got {scales.dtype}")
    v = values.to(torch.float32)
    if recipe in ("tensor", "tensor_delayed", "row"):
        return v / scales
    if recipe == "block_1x128":
        tiles = v.reshape(*v.shape[:-1], v.shape[-1] // TILE, TILE)
        return (tiles / scales.unsqueeze(-1)).reshape(v.shape)
    if recipe == "block_128x128":
        return (_blocks_128x128(v) / scales[:, None, :, None]).reshape(v.shape)
    blocks = v.reshape(-1, MX_BLOCK)
    return (blocks * _e8m0_to_float(scales).reshape(-1, 1)).reshape(v.shape)
