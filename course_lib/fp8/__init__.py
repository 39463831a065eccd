"""Chapter 15: FP8 training — formats, scaling recipes, accumulation, FP8 linears, the bill.

* ``formats`` — E4M3, E5M2 and E8M0 read from PyTorch's dtypes (``torch.finfo``), E2M1 from its
  bit layout: max, smallest normal and subnormal, spacing at 1, inf/NaN (arXiv 2209.05433,
  2310.10537).
* ``recipes`` — ``quantize(x, recipe, fmt) -> (values, scales)`` and ``dequantize(values,
  scales, recipe)`` for the six recipes (per-tensor delayed with a caller-owned
  :class:`AmaxHistory`, per-tensor current, row-wise, DeepSeek-V3's 1×128 and 128×128 tiles,
  MX 1×32 with E8M0 scales), bit for bit torchao 0.18's where torchao has the recipe.
* ``accumulate`` — a K-long FP8 dot product with a ~14-bit accumulator, and DeepSeek-V3's
  promotion to FP32 every 128 elements (arXiv 2412.19437 §3.3.2); the error against K.
* ``linear`` — :class:`FP8Linear` (forward E4M3, gradients E5M2, any recipe; ``torch._scaled_mm``
  or dequantize-then-matmul) and ``convert_gpt`` for the course's tiny GPT.
* ``runs`` — what the chapter measures: ``error_stats`` (SNR, underflow, saturation),
  ``outlier_tensor`` (the channel that breaks per-tensor scaling, arXiv 2409.12517) and
  ``train`` (the tiny GPT in FP32, BF16 and FP8 under each recipe, same data and seed).
* ``capture`` — :class:`LinearCapture` (every Linear's input, weight and output gradient, per
  layer, on the steps it is armed for) and ``grow_outliers`` (a captured activation with a few
  channels grown on a few tokens, arXiv 2409.12517); driver ``capture_runs`` (the tiny GPT
  trained on the corpus, every tensor scored per recipe; cached in ``data/fp8_capture.json``).
* ``allgather`` — FSDP's all-gather in FP8 on a counting ring: the global amax agreed first, or
  each shard's own, or BF16 gathered and cast after; driver ``fsdp_runs`` (real gloo ranks, and
  torchao's FSDP2 FP8 all-gather compared bit for bit).
* ``bill`` — ``fp8_mfu``: an FP8 run's MFU against the BF16 peak, the FP8 peak and the mixed peak.
"""
from .accumulate import dot, error_vs_k
from .bill import fp8_mfu, mixed_peak
from .formats import FORMATS, FormatSpec, format_table, spec
from .linear import FP8Linear, convert_gpt
from .recipes import RECIPES, AmaxHistory, dequantize, quantize, scale_shape

__all__ = ["quantize", "dequantize", "scale_shape", "RECIPES", "AmaxHistory", "FORMATS", "FormatSpec",
           "format_table", "spec", "dot", "error_vs_k", "FP8Linear", "convert_gpt", "fp8_mfu", "mixed_peak"]
