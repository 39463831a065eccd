"""Why sampled text is a noisier teacher than the full distribution, and what top-k hides.

A student trained on text sampled at temperature 1 follows, in expectation, the gradient of
KL(teacher‖student): sampled text is unbiased. Its noise is what extra purchased tokens must
average away. ``sampled_gradient_error`` measures the gradient error as the number of samples
grows (it should fall like 1/√M), ``target_noise`` the per-position noise of a sampled target
against its closed form, and ``topk_stats`` the probability mass a top-k API leaves out.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .._validate import positive_int
from .train import api_topk, full_kl_loss, text_loss
from ..model import GPT

__all__ = ["sampled_gradient_error", "target_noise", "topk_stats"]


def sampled_gradient_error(student: GPT, tokens: torch.Tensor, teacher_logits: torch.Tensor,
                           prompt_len: int, n_samples: Sequence[int], generator: torch.Generator) -> dict:
    """Relative error ‖ḡ_M − g_KL‖/‖g_KL‖ of the text-mode gradient averaged over M sampled target
    sets, for each M in ``n_samples``.

    Contexts are held fixed (``tokens``, e.g. from ``sample_with_logits``); at each position a
    fresh target is drawn from the recorded teacher distribution, the student's cross-entropy
    gradient is taken, and the M gradients are averaged. ``g_KL`` is the gradient of
    ``full_kl_loss``. If sampled text is unbiased, the error falls as err(1)/√M.
    """
    params = [p for p in student.parameters() if p.requires_grad]

    def grad(loss: torch.Tensor) -> torch.Tensor:
        gs = torch.autograd.grad(loss, params)
        return torch.cat([g.reshape(-1) for g in gs])

    s_logits = student(tokens[:, :-1])[:, prompt_len - 1:]
    g_kl = grad(full_kl_loss(s_logits, teacher_logits))
    probs = teacher_logits.float().softmax(-1)
    ms = sorted({positive_int("n_samples", m) for m in n_samples})
    acc = torch.zeros_like(g_kl)
    out: dict = {"n_samples": ms, "rel_error": [], "grad_norm_full": float(g_kl.norm())}
    done = 0
    for m in ms:
        while done < m:
            y = torch.multinomial(probs.reshape(-1, probs.size(-1)), 1, generator=generator)
            s_logits = student(tokens[:, :-1])[:, prompt_len - 1:]
            acc += grad(text_loss(s_logits, y.view(probs.shape[:-1])))
            done += 1
        out["rel_error"].append(float((acc / done - g_kl).norm() / g_kl.norm()))
    return out


@torch.no_grad()
def target_noise(teacher_logits: torch.Tensor, n_draws: int, generator: torch.Generator) -> dict:
    """Extra noise of a sampled target over the full distribution, at the student's logits.

    The text gradient w.r.t. the student's logits is softmax(z) − e_y, the full-KL one softmax(z) − p;
    they differ by e_y − p. ``measured`` averages ‖e_y − p‖² over ``n_draws`` samples y ~ p at every
    position; ``theory`` is its expectation 1 − Σ_v p(v)², both averaged over positions.
    """
    n_draws = positive_int("n_draws", n_draws)
    p = teacher_logits.float().softmax(-1).reshape(-1, teacher_logits.size(-1))
    y = torch.multinomial(p, n_draws, replacement=True, generator=generator)       # (positions, draws)
    p_y = p.gather(1, y)
    sq = 1.0 - 2.0 * p_y + (p * p).sum(-1, keepdim=True)                          # ‖e_y − p‖² exactly
    return {"measured": float(sq.mean()), "theory": float((1.0 - (p * p).sum(-1)).mean())}


@torch.no_grad()
def topk_stats(teacher_logits: torch.Tensor, k: int) -> dict:
    """Tail mass t = 1 − Σ top-k probabilities, and the L1 distance between the renormalised top-k
    target and the full distribution (theory: exactly 2t), both averaged over positions."""
    p = teacher_logits.float().softmax(-1)
    ids, lp = api_topk(teacher_logits, k)
    tail = 1.0 - lp.exp().sum(-1)
    renorm = torch.zeros_like(p).scatter(-1, ids, (lp - torch.logsumexp(lp, -1, keepdim=True)).exp())
    return {"k": k, "tail_mass": float(tail.mean()), "l1_measured": float((renorm - p).abs().sum(-1).mean()),
            "l1_theory": float(2 * tail.mean())}
