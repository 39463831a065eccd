"""An FP8 linear layer: the three GEMMs of a Linear in FP8, as a drop-in ``nn.Module``.

A linear layer runs three GEMMs per step (chapter 1): the forward ``y = x Wᵀ``, the input
gradient ``dx = dy W`` and the weight gradient ``dW = dyᵀ x``. FP8 training (arXiv 2209.05433
§4; DeepSeek-V3, arXiv 2412.19437 §3.3) runs all three with FP8 operands: x and W in E4M3 (they
need precision), the output gradient dy in E5M2 (it needs range), each operand scaled along the
dimension the GEMM contracts, the product accumulated in float32 and returned in the input's
dtype. Master weights, optimizer state and the bias stay in float32.

How each GEMM runs (``FP8Linear.kernel`` says which):

* ``kernel="scaled_mm"`` (recipes ``"tensor"``, ``"tensor_delayed"``, ``"row"``): ``torch._scaled_mm``
  on the FP8 tensors; PyTorch 2.13 runs it on CPU for per-tensor and per-row float32 scales,
  E4M3 × E5M2 included. The scales passed are the dequantization factors 1/scale, as torchao
  passes them. The default on a CUDA device.
* ``kernel="dequantize"``: dequantize each FP8 operand (exactly the values an FP8 tensor core
  reads) and multiply in float32. The only path for the block and MX recipes (``_scaled_mm``
  has no CPU path for block scales), and the default on CPU for all recipes, because the CPU
  ``_scaled_mm`` is a reference kernel: measured at ~0.4 s for one 128×128×512 GEMM on this
  course's 2-core machine, hundreds of times the float32 matmul. Both kernels multiply the same
  FP8 values; they differ by float32 rounding only (tested).

``"deepseek"`` is DeepSeek-V3's mix: 1×128 tiles for x and dy, 128×128 blocks for W.

Delayed scaling keeps one :class:`AmaxHistory` per operand in the module (no global state).
:func:`convert_gpt` swaps the Linear layers inside the tiny GPT's blocks; the embeddings and the
output head stay in high precision, as DeepSeek-V3 keeps them (§3.3, "Mixed Precision Framework").
"""
from __future__ import annotations

import torch
from torch import nn

from .._validate import choice
from .recipes import RECIPES, AmaxHistory, dequantize, quantize

__all__ = ["FP8Linear", "convert_gpt", "LINEAR_RECIPES", "KERNELS", "kernel_for"]

LINEAR_RECIPES = RECIPES + ("deepseek",)
_SCALED_MM = ("tensor", "tensor_delayed", "row")
_LAYOUT_FREE = ("tensor", "tensor_delayed")      # one scale: quantize once, transpose freely


KERNELS = ("auto", "scaled_mm", "dequantize")


def kernel_for(recipe: str, kernel: str = "auto", device: str | torch.device = "cpu") -> str:
    """Which kernel the GEMMs of ``recipe`` run: ``"scaled_mm"`` (``torch._scaled_mm``) or
    ``"dequantize"`` (dequantize, then a float32 matmul). ``"auto"``: scaled_mm on CUDA where
    the recipe allows it, dequantize otherwise. ValueError for scaled_mm with block scales."""
    recipe = choice("recipe", recipe, LINEAR_RECIPES)
    kernel = choice("kernel", kernel, KERNELS)
    if kernel == "scaled_mm" and recipe not in _SCALED_MM:
        raise ValueError(f"kernel='scaled_mm' takes per-tensor or per-row scales; recipe={recipe!r} "
                         "has block scales: use kernel='dequantize'")
    if kernel == "auto":
        return "scaled_mm" if recipe in _SCALED_MM and torch.device(device).type == "cuda" else "dequantize"
    return kernel


def _operand_recipe(recipe: str, role: str) -> str:
    if recipe == "deepseek":
        return "block_128x128" if role == "w" else "block_1x128"
    return recipe


class _Operand:
    """One GEMM operand quantized with its contraction dim last: (values, scales, recipe)."""

    def __init__(self, t: torch.Tensor, recipe: str, fmt: str, history: AmaxHistory | None) -> None:
        self.recipe = recipe
        self.values, self.scales = quantize(t, recipe, fmt, history=history)

    def t(self) -> _Operand:
        """The transpose, valid for a per-tensor scale only (one scale has no layout)."""
        out = object.__new__(_Operand)
        out.recipe, out.values, out.scales = self.recipe, self.values.t().contiguous(), self.scales
        return out


def _mm(a: _Operand, b: _Operand, kernel: str) -> torch.Tensor:
    """``a @ bᵀ`` in float32 for a (M, K) and b (N, K), both quantized along K."""
    if kernel == "scaled_mm":
        sa = a.scales.reciprocal().reshape(-1, 1) if a.recipe == "row" else a.scales.reciprocal()
        sb = b.scales.reciprocal().reshape(1, -1) if b.recipe == "row" else b.scales.reciprocal()
        return torch._scaled_mm(a.values, b.values.t(), sa, sb, out_dtype=torch.float32)
    return dequantize(a.values, a.scales, a.recipe) @ dequantize(b.values, b.scales, b.recipe).t()


class _FP8MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w, layer):
        r = layer.recipe
        hx, hw = (layer.histories["x"], layer.histories["w"]) if r == "tensor_delayed" else (None, None)
        qx = _Operand(x2, _operand_recipe(r, "x"), "e4m3", hx)
        qw = _Operand(w, _operand_recipe(r, "w"), "e4m3", hw)
        ctx.layer = layer
        ctx.save_for_backward(x2, w)
        ctx.q = (qx, qw) if r in _LAYOUT_FREE else None
        return _mm(qx, qw, layer.kernel)

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        layer, r = ctx.layer, ctx.layer.recipe
        hdy = layer.histories["dy"] if r == "tensor_delayed" else None
        dy = dy.contiguous()
        if r in _LAYOUT_FREE:
            qx, qw = ctx.q
            qdy = _Operand(dy, r, "e5m2", hdy)
            dx = _mm(qdy, qw.t(), layer.kernel)        # dy (M,N) · W (N,K): W quantized once
            dw = _mm(qdy.t(), qx.t(), layer.kernel)    # dyᵀ (N,M) · x (M,K)
        else:                                          # re-scale each operand along the new contraction dim
            ra, rw = _operand_recipe(r, "x"), _operand_recipe(r, "w")
            dx = _mm(_Operand(dy, ra, "e5m2", None), _Operand(w.t().contiguous(), rw, "e4m3", None),
                     layer.kernel)
            dw = _mm(_Operand(dy.t().contiguous(), ra, "e5m2", None),
                     _Operand(x2.t().contiguous(), ra, "e4m3", None), layer.kernel)
        return dx, dw, None


class FP8Linear(nn.Linear):
    """``nn.Linear`` whose three GEMMs run in FP8 under ``recipe`` (one of :data:`LINEAR_RECIPES`).

    Same parameters and state dict as ``nn.Linear``; ``from_linear`` copies one. Inputs of any
    leading shape; the block recipes need every dim a GEMM contracts (in_features, out_features
    and the number of tokens) divisible by 128 ("mx": by 32), and say so otherwise.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, recipe: str = "tensor",
                 history_length: int = 16, kernel: str = "auto") -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.recipe = choice("recipe", recipe, LINEAR_RECIPES)
        self.kernel_choice = kernel
        kernel_for(self.recipe, kernel)            # refuse scaled_mm with block scales now, not mid-step
        self.histories = {k: AmaxHistory(history_length) for k in ("x", "w", "dy")}

    @property
    def kernel(self) -> str:
        """The kernel the GEMMs run on the weight's device (see :func:`kernel_for`)."""
        return kernel_for(self.recipe, self.kernel_choice, self.weight.device)

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: str = "tensor", history_length: int = 16,
                    kernel: str = "auto") -> FP8Linear:
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        new = cls(linear.in_features, linear.out_features, linear.bias is not None, recipe=recipe,
                  history_length=history_length, kernel=kernel)
        new.weight, new.bias = linear.weight, linear.bias      # share the Parameters: same optimizer view
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        group = {"mx": 32, "row": 1, "tensor": 1, "tensor_delayed": 1}.get(self.recipe, 128)
        if x2.shape[0] % group and torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            raise ValueError(f"recipe={self.recipe!r} scales the weight gradient's GEMM along the tokens: "
                             f"{x2.shape[0]} tokens (x of shape {tuple(x.shape)}) is not divisible by {group}")
        y = _FP8MatMul.apply(x2, self.weight, self)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self.recipe!r}, kernel={self.kernel!r}"


def convert_gpt(model: nn.Module, recipe: str = "tensor", *, history_length: int = 16) -> list[str]:
    """Replace, in place, every ``nn.Linear`` inside ``model.blocks`` (the course GPT's attention
    and MLP projections) by an :class:`FP8Linear` sharing its parameters. Embeddings and the
    output head stay high precision. Returns the converted modules' names."""
    recipe = choice("recipe", recipe, LINEAR_RECIPES)
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.Module):
        raise ValueError(f"model must be a course_lib.model.GPT (with .blocks), got {type(model).__name__}")
    done = []
    for name, mod in list(blocks.named_modules()):
        for child_name, child in list(mod.named_children()):
            if type(child) is nn.Linear:
                setattr(mod, child_name, FP8Linear.from_linear(child, recipe, history_length))
                done.append(f"blocks.{name + '.' if name else ''}{child_name}")
    return done
