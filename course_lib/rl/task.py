"""The lab's toy RL task, its heavy-tailed length distribution, and the policy's maths.

**Task ("count on").** A problem is a start digit ``d`` and a length ``L``. The prompt is the
single token ``d``; the policy writes ``L`` digits and the verifier checks every step against
the rule "each digit is the previous one plus one, modulo 10": the perfect answer to ``(7, 5)``
is ``8 9 0 1 2``. The reward is the fraction of correct steps, a *verifiable* reward in [0, 1]
that a random policy scores 0.1 on and a perfect one 1.0. Because the verifier grades each step
(a process reward), the learner can credit each token with its own verdict, and the tiny GPT
learns the task by policy gradient in well under a hundred steps on a CPU. An outcome-only reward
(one number per answer) poses the same scheduling problem with a much weaker learning signal.

**Lengths.** ``L`` is part of the problem and drawn from a truncated power law (``LengthDist``),
so a batch of responses has a few very long ones — the stragglers of reasoning RL. The
environment stops a response after ``L`` tokens, so every run mode sees the same lengths and
the comparison between modes is about scheduling only. (In real RL the policy chooses when to
stop, and the tail grows as it learns to think longer; that only makes stragglers worse.)

**Policy maths.** ``decode_step`` is one batched, KV-cached decoding step of the course's GPT in
which every slot sits at its own position (continuous batching); ``sequence_logprobs`` is the
learner's full forward pass; ``pg_loss`` is REINFORCE with a batch-mean baseline and truncated
importance weights (Espeholt et al. 2018, arXiv 1802.01561), the objective PipelineRL uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F

from .._validate import positive, positive_int
from ..model import GPT, GPTConfig

__all__ = ["LengthDist", "Problems", "stream_seed", "VOCAB", "correct_answer", "step_correct", "reward",
           "policy_config", "make_policy", "new_cache", "decode_step", "actor_logprobs",
           "sequence_logprobs", "pg_loss"]

VOCAB = 10  # the ten digits; the prompt is one digit too


@dataclass(frozen=True)
class LengthDist:
    """A distribution of response lengths given by its probability mass function."""

    lengths: tuple[int, ...]
    probs: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.lengths) == 0 or len(self.lengths) != len(self.probs):
            raise ValueError("lengths and probs must be non-empty and of equal length")
        for length in self.lengths:
            positive_int("lengths", length)
        for p in self.probs:
            positive("probs", p, allow_zero=True)
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError("lengths must be strictly increasing")
        if not math.isclose(sum(self.probs), 1.0, rel_tol=1e-9):
            raise ValueError(f"probs must sum to 1, got {sum(self.probs)!r}")

    @classmethod
    def power_law(cls, l_min: int, l_max: int, alpha: float) -> LengthDist:
        """P(L ≥ l) ∝ l^(−alpha) for l_min ≤ l ≤ l_max (a discrete, truncated Pareto).

        Smaller ``alpha`` = heavier tail. Reasoning-RL response lengths look like this: most
        answers are short, a few run to the generation limit.
        """
        l_min = positive_int("l_min", l_min)
        l_max = positive_int("l_max", l_max, minimum=l_min)
        alpha = positive("alpha", alpha)
        ls = np.arange(l_min, l_max + 1)
        surv = (ls / l_min) ** -alpha                      # P(L >= l) before truncation
        surv_next = np.append(surv[1:], 0.0)               # everything above l_max lands on l_max
        p = surv - surv_next
        return cls(tuple(int(x) for x in ls), tuple(float(x) for x in p / p.sum()))

    @classmethod
    def lab(cls, max_len: int = 64) -> LengthDist:
        """The lab's response lengths, what ``actors.run`` draws unless told otherwise: a power
        law from 4 tokens to ``max_len`` with alpha 1.2 (most answers short, a tail to the limit)."""
        return cls.power_law(4, max_len, 1.2)

    @classmethod
    def constant(cls, length: int) -> LengthDist:
        """Every response has the same length (no stragglers)."""
        return cls((positive_int("length", length),), (1.0,))

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.lengths, dtype=float), np.asarray(self.probs, dtype=float)

    def mean(self) -> float:
        """E[L]."""
        ls, p = self._arrays()
        return float((ls * p).sum())

    def moment(self, k: int) -> float:
        """E[L^k]."""
        ls, p = self._arrays()
        return float((ls ** positive_int("k", k) * p).sum())

    def cdf(self) -> np.ndarray:
        """P(L ≤ lengths[i])."""
        return self._cdf

    @cached_property
    def _cdf(self) -> np.ndarray:
        return np.minimum(np.cumsum(self._arrays()[1]), 1.0)

    @cached_property
    def _lengths_array(self) -> np.ndarray:
        return np.asarray(self.lengths)

    def expected_max(self, n: int) -> float:
        """E[max of n independent lengths] = Σ_i l_i (F_i^n − F_{i−1}^n): the steps a static
        batch of n sequences needs."""
        n = positive_int("n", n)
        ls, _ = self._arrays()
        fn = self.cdf() ** n
        return float((ls * np.diff(np.concatenate([[0.0], fn]))).sum())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths drawn by inverse CDF with the numpy generator ``rng`` (reproducible)."""
        u = rng.random(positive_int("n", n))
        idx = np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self.lengths) - 1)
        return self._lengths_array[idx]


def stream_seed(seed: int, actor: int) -> int:
    """Seed of actor ``actor``'s problem stream (actors are numbered from 1, like their ranks)."""
    return 1000 * int(seed) + int(actor)


class Problems:
    """An endless, reproducible stream of problems ``(start digit, length)``; the real actors
    and the simulator draw from the same streams when given the same seed."""

    def __init__(self, dist: LengthDist, seed: int) -> None:
        self.dist = dist
        self.rng = np.random.default_rng(int(seed))

    def next(self) -> tuple[int, int]:
        d = int(self.rng.integers(0, VOCAB))
        return d, int(self.dist.sample(1, self.rng)[0])


def correct_answer(start: int, length: int) -> list[int]:
    """The perfect response: ``start+1, start+2, …`` modulo 10, ``length`` digits."""
    return [(start + i + 1) % VOCAB for i in range(positive_int("length", length, minimum=0))]


def step_correct(tokens: torch.Tensor) -> torch.Tensor:
    """The verifier on a (B, T) batch of prompt + response: entry i says whether token i+1 is
    token i plus one (mod 10). Shape (B, T − 1), dtype float (1.0 = correct step)."""
    return (tokens[:, 1:] == (tokens[:, :-1] + 1) % VOCAB).float()


def reward(start: int, response: list[int] | torch.Tensor) -> float:
    """Fraction of correct steps of one response (0 for an empty one)."""
    resp = [int(t) for t in response]
    if not resp:
        return 0.0
    return int(step_correct(torch.tensor([[int(start)] + resp])).sum()) / len(resp)


# ----------------------------------------------------------------------------- the policy
def policy_config(max_len: int, d_model: int = 32, n_layers: int = 2, n_heads: int = 2) -> GPTConfig:
    """The course GPT sized for the task: 10-token vocabulary, prompt + ``max_len`` positions."""
    return GPTConfig(vocab_size=VOCAB, seq_len=1 + positive_int("max_len", max_len),
                     n_layers=n_layers, n_heads=n_heads, d_model=d_model)


def make_policy(max_len: int, seed: int = 0, **shape) -> GPT:
    """A freshly initialised policy (same weights for the same seed on every rank)."""
    return GPT(policy_config(max_len, **shape), seed=seed)


def new_cache(model: GPT, slots: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Empty key and value caches: per layer a (slots, heads, seq_len, head_dim) tensor."""
    c = model.cfg
    shape = (slots, c.n_heads, c.seq_len, c.d_model // c.n_heads)
    return ([torch.zeros(shape) for _ in range(c.n_layers)],
            [torch.zeros(shape) for _ in range(c.n_layers)])


@torch.no_grad()
def decode_step(model: GPT, cache: tuple[list, list], tokens: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
    """Feed ``tokens[s]`` at ``positions[s]`` for every slot ``s``; return next-token logits.

    Each slot writes its key and value into the cache at its own position and attends to
    positions ≤ it, so slots can be at different points of different sequences. Cache entries
    keep whatever weights computed them: after an in-flight weight swap the old keys and values
    stay (PipelineRL does the same), one more way a sequence mixes policy versions.
    """
    c = model.cfg
    if c.windows is not None and any(w is not None for w in c.windows):
        raise ValueError("decode_step supports global attention only (model.cfg.windows must be None)")
    S, D, H = tokens.shape[0], c.d_model, c.n_heads
    rows = torch.arange(S)
    keep = torch.arange(c.seq_len)[None, :] <= positions[:, None]          # (S, T)
    x = model.tok(tokens) + model.pos(positions)                           # (S, D)
    for layer, blk in enumerate(model.blocks):
        q, k, v = blk.attn.qkv(blk.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(S, H, D // H) for t in (q, k, v))
        cache[0][layer][rows, :, positions] = k
        cache[1][layer][rows, :, positions] = v
        scores = torch.einsum("shd,shtd->sht", q, cache[0][layer]) / math.sqrt(D // H)
        att = scores.masked_fill(~keep[:, None, :], float("-inf")).softmax(-1)
        y = torch.einsum("sht,shtd->shd", att, cache[1][layer]).reshape(S, D)
        x = x + blk.attn.proj(y)
        x = x + blk.mlp(blk.ln2(x))
    return model.head(model.ln_f(x))


@torch.no_grad()
def actor_logprobs(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """The inference engine's log-probabilities of ``tokens[:, 1:]``: the same numbers as
    ``sequence_logprobs`` in exact arithmetic, computed token by token through the KV cache in
    the model's own dtype (run a bf16 copy of the model to see the engines disagree)."""
    B, T = tokens.shape
    dtype = next(model.parameters()).dtype
    cache = tuple([c.to(dtype) for c in part] for part in new_cache(model, B))
    out = []
    for p in range(T - 1):
        logits = decode_step(model, cache, tokens[:, p], torch.full((B,), p))
        out.append(torch.log_softmax(logits.float(), -1).gather(1, tokens[:, p + 1:p + 2])[:, 0])
    return torch.stack(out, 1)


def sequence_logprobs(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of ``tokens[:, 1:]`` under ``model`` (one full forward pass).

    ``tokens`` is (B, T): the prompt digit then the response, right-padded; the result is
    (B, T − 1), entry i being log π(tokens[:, i+1] | tokens[:, :i+1]).
    """
    logits = model(tokens[:, :-1])
    return torch.gather(F.log_softmax(logits.float(), -1), 2, tokens[:, 1:, None])[..., 0]


def pg_loss(logp: torch.Tensor, behaviour_logp: torch.Tensor, step_rewards: torch.Tensor,
            mask: torch.Tensor, clip: float = 5.0) -> tuple[torch.Tensor, dict]:
    """REINFORCE with a batch-mean baseline and truncated importance weights, per token.

    loss = −Σ_t min(ρ_t, clip)·A_t·log π(a_t) / Σ_t 1, with ρ_t = π(a_t)/μ(a_t) the ratio of the
    learner's probability of each sampled token to the actor's (behaviour) probability, and
    A_t = r_t − mean(r) the token's verdict minus the batch mean. All tensors are (B, T);
    ``mask`` marks real response tokens. ρ = 1 only when the data are on-policy *and* both
    engines compute the same numbers; the returned statistics say how far from that the batch was.
    """
    mask = mask.float()
    log_ratio = (logp.detach() - behaviour_logp) * mask
    rho = log_ratio.exp()
    weight = rho.clamp(max=positive("clip", clip))
    n_tok = mask.sum().clamp(min=1.0)
    adv = step_rewards - (step_rewards * mask).sum() / n_tok
    loss = -(weight * adv * logp * mask).sum() / n_tok
    stats = {"mean_abs_log_ratio": float(log_ratio.abs().sum() / n_tok),
             "max_ratio": float((rho * mask).max()),
             "clipped_fraction": float(((rho > clip).float() * mask).sum() / n_tok)}
    return loss, stats
