"""Bounds for tests that compare floats computed two ways (split across ranks vs. whole, one
kernel vs. another), derived from the computation instead of picked, so that they hold on any
CPU's kernels and still catch a real bug (which moves results by orders of magnitude more).

- ``fp32_sum_gap``: two fp32 sums of the same n terms, added in different orders (a sharded
  matmul plus an all-reduce, another CPU's vector width), differ by at most 2·γ_n·Σ|terms|,
  γ_n = n·u / (1 − n·u), u = 2⁻²⁴ the unit roundoff (Higham, *Accuracy and Stability of
  Numerical Algorithms*, 2nd ed., §4.2: each order's error is at most γ_{n−1}·Σ|terms|).
- ``adam_param_gap``: how far apart two AdamW runs from the same start can drift in k steps
  when their gradients differ only by rounding. Adam's update m̂/(√v̂ + ε) does not shrink with
  the gradient: for an element whose gradient is at the rounding level, the two runs may step
  in opposite directions. Each step of one run moves an element by at most lr·c_t, with
  c_t = max over gradient sequences of |m̂_t|/√v̂_t = √(Σ_i a_i²/b_i) by Cauchy–Schwarz, where
  a_i, b_i are the bias-corrected weights of gradient i in m̂_t and v̂_t (c_t ≈ 1.00 for the
  first steps with the default betas; Kingma & Ba, arXiv:1412.6980, §2.1 bound it by
  (1−β1)/√(1−β2) in general). The decoupled weight decay multiplies both runs' gap by
  (1 − lr·λ) ≤ 1 each step. So gap_k ≤ Σ_t 2·lr·c_t·(1 − lr·λ)^(k−t).
"""
from __future__ import annotations

import math

U32 = 2.0 ** -24   # fp32 unit roundoff (round to nearest)
# The tiny GPT's gradients after one backward, split across ranks vs. whole (tensor and context
# parallel tests): measured 6.7e-8 to 9.7e-8 on AVX-512, AVX2 and default kernels. 1e-6 is 10x
# that; a missing all-reduce or a wrong shard moves a gradient by its own size (~1e-2), 10^4x more.
# (A derived bound would need each gradient's sum of |terms|, which the workers do not report.)
GRAD_GAP = 1e-6


def gamma(n: int, u: float = U32) -> float:
    """γ_n = n·u / (1 − n·u): the relative error bound of n floating-point operations in a chain."""
    assert n * u < 1, n
    return n * u / (1 - n * u)


def fp32_sum_gap(n: int, magnitude: float) -> float:
    """The most two fp32 evaluations of a sum of n terms with Σ|terms| ≤ ``magnitude`` can differ."""
    return 2 * gamma(n) * magnitude


def adam_step_bound(t: int, betas: tuple[float, float] = (0.9, 0.999)) -> float:
    """max |m̂_t| / √v̂_t over every gradient sequence (Cauchy–Schwarz over the EMA weights)."""
    b1, b2 = betas
    a = [(1 - b1) * b1 ** (t - i) / (1 - b1 ** t) for i in range(1, t + 1)]
    b = [(1 - b2) * b2 ** (t - i) / (1 - b2 ** t) for i in range(1, t + 1)]
    return math.sqrt(sum(ai * ai / bi for ai, bi in zip(a, b)))


def adam_param_gap(lr: float, steps: int, weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999)) -> float:
    """The most one element of two AdamW runs can differ after ``steps`` steps, whatever the
    gradients (see the module docstring): a sign flip of every update, shrunk by the decay."""
    gap = 0.0
    for t in range(1, steps + 1):
        gap = gap * (1 - lr * weight_decay) + 2 * lr * adam_step_bound(t, betas)
    return gap


def gpt_loss_depth(cfg, batch: int = 2) -> int:
    """The longest chain of fp32 additions behind one loss value of ``course_lib.model.GPT``: per
    layer the two LayerNorms, the QKV, output and MLP-up products (d_model terms each), the
    MLP-down product (4·d_model), the attention scores (head_dim), softmax and A·V (seq_len
    each); then the final LayerNorm, the logits (d_model), the log-sum-exp over the vocabulary
    and the mean over the batch·seq_len tokens."""
    d, s = cfg.d_model, cfg.seq_len
    per_layer = 2 * d + 3 * d + 4 * d + d // cfg.n_heads + 2 * s
    return cfg.n_layers * per_layer + 2 * d + cfg.vocab_size + batch * s


def sgd_param_gap(lr: float, momentum: float, steps: int, grad_gap: float) -> float:
    """Two SGD-with-momentum runs whose gradients differ by at most ``grad_gap`` per step: the
    gap of step s reaches the parameters through lr·Σ_{t≥s} μ^(t−s). The factor 2 covers the
    gradients' feedback from the parameters' own gap (curvature × a gap of this size, far below
    ``grad_gap`` for the course's tiny models)."""
    return lr * sum(momentum ** i for t in range(steps) for i in range(t + 1)) * 2 * grad_gap
