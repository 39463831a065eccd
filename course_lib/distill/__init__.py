"""Chapter 9, distillation: what buying a teacher's outputs costs next to training a model, and
what a student learns from each kind of teacher output.

=================  ===============================================================================
``costs``          API prices and the cost calculators: ``api_cost``, ``distillation_cost``,
                   ``gpu_hours``, ``pretraining_cost``, ``inference_cost``, ``break_even_tokens``
``information``    entropy, cross-entropy and KL divergence of discrete distributions (in nats)
``explore``        the chapter's calculator (``distill_calculator``), its widget and the cost figure
``train``          a real, tiny distillation: a teacher GPT, what an API returns, three losses
``run``            the experiment: the teacher trained once, students at several token budgets
``noise``          why sampled text is a noisier teacher than the full distribution
=================  ===============================================================================

The first three are re-exported here, so ``course_lib.distill.api_cost`` and the rest keep their
paths; ``ASSUMED_GPU_HOUR_PRICE`` is an explicit **assumption** (see ``costs``).
"""
from __future__ import annotations

from .costs import (ASSUMED_GPU_HOUR_PRICE, MTOK, PRICES, PUBLISHED_RUNS, ApiPrice, api_cost,
                    break_even_tokens, distillation_cost, gpu_hours, inference_cost, pretraining_cost)
from .explore import cost_figure, distill_calculator, distill_widget, render_distill
from .information import cross_entropy, entropy, kl_divergence

__all__ = ["MTOK", "ASSUMED_GPU_HOUR_PRICE", "ApiPrice", "PRICES", "PUBLISHED_RUNS", "api_cost",
           "distillation_cost", "gpu_hours", "pretraining_cost", "inference_cost", "break_even_tokens",
           "entropy", "cross_entropy", "kl_divergence", "distill_calculator", "render_distill",
           "cost_figure", "distill_widget"]
