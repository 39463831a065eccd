"""Chapter 16: the batch size, measured — gradient noise scale, critical batch, ramps and µP.

* ``noise`` — ``noise_scale``: B_simple = tr(Σ)/|G|² from squared gradient norms at two batch
  sizes (McCandlish et al. 2018, arXiv 1812.06162, App. A.1); ``noise_scale_stats`` with its
  standard error over draws; ``grad_sq_norms`` takes one paired draw on the tiny GPT.
* ``pareto`` — ``pareto_fit(batch_sizes, steps) -> (S_min, E_min, B_crit)``: the front
  (S/S_min − 1)(E/E_min − 1) = 1 fitted to steps to a target loss; ``steps_to_target``.
* ``law`` — the planner's batch ceiling: ``critical_batch_tokens(loss)`` (Kaplan et al. 2020's
  B_*/L^(1/α_B), or this chapter's own fit), ``largest_useful_batch``, ``dp_ceiling``,
  ``gpus_allowed``; each law's constants with their provenance and limits (``law``).
* ``muparam`` — µP (arXiv 2203.03466) for the tiny GPT from scratch, and ``compare_with_mup``:
  the same initial tensors, per-parameter learning rates and trained parameters as Microsoft's
  ``mup`` package, bit for bit.
* ``runs`` — the chapter's sweeps (stored as data/batch_*.json; ``python -m course_lib.batch.runs``).
"""
from .law import LAWS, critical_batch_tokens, dp_ceiling, gpus_allowed, largest_useful_batch, law
from .noise import noise_scale, noise_scale_stats
from .pareto import pareto_fit, pareto_steps, steps_to_target

__all__ = ["noise_scale", "noise_scale_stats", "pareto_fit", "pareto_steps", "steps_to_target", "LAWS", "law",
           "critical_batch_tokens", "largest_useful_batch", "dp_ceiling", "gpus_allowed"]
