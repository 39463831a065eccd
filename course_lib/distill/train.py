"""A real, tiny distillation: a teacher GPT, what an API would return, and three ways to learn from it.

Chapter 9 asks how much a student learns from a teacher per token bought, depending on what the
teacher's provider lets you see. Every level of access is one loss here, applied to the *same*
teacher samples:

``"text"``   what any API user gets: sampled text. Loss: cross-entropy on the sampled tokens
             (sequence-level distillation, Kim & Rush 2016, arXiv 1606.07947, who decoded with
             beam search; here the teacher samples at temperature 1, as an API does).
``"topk"``   what some APIs expose: the top-k log-probabilities at each sampled position
             (``topk_loss``; how the missing tail mass is treated is a choice, see there).
``"full"``   white-box access to the teacher's whole next-token distribution: KL(teacher‖student)
             per position (Hinton et al. 2015, arXiv 1503.02531, at temperature 1).
``"corpus"`` a baseline without any teacher: the *real* corpus continuation of the same prompt.

Why "text" is not hopeless: if the teacher samples at temperature 1, the expected cross-entropy
on a sampled token equals CE(p_T, p_S) = KL(p_T‖p_S) + H(p_T), whose gradient is the full-KL
gradient. Sampled text is an **unbiased but noisy** estimate of white-box distillation; the
noise is what extra tokens (dollars) have to average away. ``distill_noise`` measures it, and
what a top-k API hides.

The sampler (``sample_with_logits``) decodes with a key/value cache built from the modules of
``course_lib.model.GPT`` (no change to the model), and records the distribution each token was
drawn from, exactly what a logprob-returning API computes. Students are trained in lock-step on
the same purchases (``distill``), so the modes differ only in the supervision signal. The teacher
itself is trained and shipped by ``course_lib.distill.run``. Call ``torch.set_num_threads(1)`` on
a small shared machine: these models are too small for more threads to help.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import corpus as corpus_mod
from .._validate import choice, positive, positive_int
from ..model import GPT, GPTConfig
from ..train import TrainConfig, _optimizer, evaluate, lr_at

__all__ = ["MODES", "TAILS", "text_loss", "topk_loss", "full_kl_loss", "api_topk",
           "sample_with_logits", "prompt_batch", "DistillConfig", "distill",
           "kl_to_teacher"]

MODES = ("text", "topk", "full", "corpus")
TAILS = ("renormalise", "bucket")


# ----------------------------------------------------------------------------------- losses
def text_loss(student_logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the student on the sampled (or real) next tokens: (B, G, V), (B, G)."""
    return F.cross_entropy(student_logits.reshape(-1, student_logits.size(-1)), tokens.reshape(-1))


def full_kl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(p_T ‖ p_S) = Σ_v p_T(v)·(log p_T(v) − log p_S(v)), in nats."""
    lt = F.log_softmax(teacher_logits.float(), dim=-1)
    ls = F.log_softmax(student_logits, dim=-1)
    return (lt.exp() * (lt - ls)).sum(-1).mean()


def api_topk(teacher_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a logprob-returning API hands back per position: the ids of the k most likely tokens
    and their log-probabilities under the *full* distribution, shapes (..., k)."""
    k = positive_int("k", k)
    if k > teacher_logits.size(-1):
        raise ValueError(f"k must be <= vocabulary size {teacher_logits.size(-1)}, got {k}")
    logp = F.log_softmax(teacher_logits.float(), dim=-1)
    values, ids = logp.topk(k, dim=-1)
    return ids, values


def topk_loss(student_logits: torch.Tensor, topk_ids: torch.Tensor, topk_logprobs: torch.Tensor,
              tail: str = "renormalise") -> torch.Tensor:
    """Distillation loss from the teacher's top-k log-probabilities only (mean over positions).

    ``tail="renormalise"``: the teacher's k probabilities are rescaled to sum to one, i.e. the
    missing tail mass is treated as **zero** and handed to the k tokens in proportion; the loss is
    KL(p̃_T ‖ p_S) over the whole vocabulary, which pushes the student's mass into the top-k set.
    ``tail="bucket"``: the tail is kept as one extra outcome "any other token" with the teacher's
    exact mass 1 − Σ p_T(top-k) (an API's logprobs are normalised over the full vocabulary, so
    that number is known); the loss is the KL over these k + 1 outcomes and says nothing about
    how the student spreads its own tail.
    """
    choice("tail", tail, TAILS)
    ls = F.log_softmax(student_logits, dim=-1)
    ls_k = ls.gather(-1, topk_ids)
    if tail == "renormalise":
        lt = topk_logprobs - torch.logsumexp(topk_logprobs, dim=-1, keepdim=True)
        return (lt.exp() * (lt - ls_k)).sum(-1).mean()
    pt_k = topk_logprobs.exp()
    kl_k = (pt_k * (topk_logprobs - ls_k)).sum(-1)
    if topk_ids.size(-1) == student_logits.size(-1):   # k = V: there is no tail
        return kl_k.mean()
    rest_t = 1.0 - pt_k.sum(-1)
    has_rest = rest_t > 1e-6                              # below that it is rounding, not mass
    rest_t = torch.where(has_rest, rest_t, torch.ones_like(rest_t))
    ls_rest = torch.logsumexp(ls.scatter(-1, topk_ids, float("-inf")), dim=-1)  # log student tail
    kl_rest = torch.where(has_rest, rest_t * (rest_t.log() - ls_rest), torch.zeros_like(rest_t))
    return (kl_k + kl_rest).mean()


# ------------------------------------------------------------------------ the teacher's API
def _check_plain(model: GPT) -> None:
    if model.cfg.windows is not None and any(w is not None for w in model.cfg.windows):
        raise ValueError("sample_with_logits supports global attention only (cfg.windows must be None)")


@torch.no_grad()
def sample_with_logits(model: GPT, prompts: torch.Tensor, n_new: int,
                       generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``n_new`` tokens after each prompt at temperature 1, with a key/value cache.

    Returns ``(tokens, logits)``: tokens (B, P + n_new) int64 (prompt included) and the float32
    logits (B, n_new, V) of the distribution each new token was drawn from. The cache reuses the
    model's own modules, so the logits equal ``model(tokens)`` at the same positions (tested).
    """
    _check_plain(model)
    n_new = positive_int("n_new", n_new)
    if prompts.dim() != 2 or prompts.size(1) < 1:
        raise ValueError(f"prompts must be a (batch, length>=1) tensor, got shape {tuple(prompts.shape)}")
    B, P = prompts.shape
    if P + n_new - 1 > model.cfg.seq_len:
        raise ValueError(f"prompt length {P} + n_new {n_new} - 1 exceeds seq_len={model.cfg.seq_len}")
    was_training = model.training
    model.eval()
    H = model.cfg.n_heads
    caches: list[list[torch.Tensor]] = [[] for _ in model.blocks]

    def step(idx: torch.Tensor, start: int) -> torch.Tensor:
        S = idx.size(1)
        x = model.tok(idx) + model.pos(torch.arange(start, start + S))
        for block, cache in zip(model.blocks, caches):
            att = block.attn
            h = block.ln1(x)
            q, k, v = att.qkv(h).split(att.d_model, dim=2)
            q, k, v = (t.view(B, S, H, -1).transpose(1, 2) for t in (q, k, v))
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            qi = torch.arange(start, start + S)[:, None]
            scores = scores.masked_fill(torch.arange(k.size(2))[None, :] > qi, float("-inf"))
            y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, att.d_model)
            x = x + att.proj(y)
            x = x + block.mlp(block.ln2(x))
        return model.head(model.ln_f(x[:, -1]))

    tokens = prompts.long()
    logits_out = []
    last = step(tokens, 0)
    for i in range(n_new):
        logits_out.append(last.float())
        nxt = torch.multinomial(last.float().softmax(-1), 1, generator=generator)
        tokens = torch.cat([tokens, nxt], dim=1)
        if i + 1 < n_new:
            last = step(nxt, P + i)
    model.train(was_training)
    return tokens, torch.stack(logits_out, dim=1)


def prompt_batch(data: torch.Tensor, batch_size: int, total_len: int,
                 generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` random windows of ``total_len`` bytes of real text (int64): a prompt and,
    after it, the real continuation the ``"corpus"`` baseline learns from."""
    x, y = corpus_mod.get_batch(data, batch_size, total_len - 1, generator)
    return torch.cat([x, y[:, -1:]], dim=1)


# ---------------------------------------------------------------------------- the students
@dataclass(frozen=True)
class DistillConfig:
    """One distillation run of ``steps`` optimiser steps on batches of ``batch_size`` teacher
    completions of ``gen_len`` tokens after a ``prompt_len``-token prompt of real text.

    ``pool_batches=None`` buys a fresh batch at every step (one pass: tokens bought = steps ·
    batch_size · gen_len). ``pool_batches=n`` buys n batches up front and cycles through them
    (steps / n epochs): tokens bought = n · batch_size · gen_len, whatever the compute. Prompts
    are input tokens. ``eval_every`` (steps, 0 = only at the end) records validation curves.
    """

    steps: int
    batch_size: int = 32
    prompt_len: int = 16
    gen_len: int = 48
    k: int = 5
    tail: str = "renormalise"
    lr: float = 3e-3
    warmup_frac: float = 0.05
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    pool_batches: int | None = None
    eval_every: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "prompt_len", "gen_len", "k"):
            positive_int(name, getattr(self, name))
        if self.pool_batches is not None:
            positive_int("pool_batches", self.pool_batches)
        positive_int("eval_every", self.eval_every, minimum=0)
        choice("tail", self.tail, TAILS)
        positive("lr", self.lr)

    @property
    def purchases(self) -> int:
        """Teacher batches bought."""
        return self.pool_batches if self.pool_batches is not None else self.steps

    @property
    def output_tokens(self) -> int:
        return self.purchases * self.batch_size * self.gen_len

    @property
    def input_tokens(self) -> int:
        return self.purchases * self.batch_size * self.prompt_len

    @property
    def epochs(self) -> float:
        """Passes over the bought tokens (1 for one pass)."""
        return self.steps / self.purchases


def _loss(mode: str, s_logits: torch.Tensor, gen: torch.Tensor, t_logits: torch.Tensor,
          real: torch.Tensor, cfg: DistillConfig) -> torch.Tensor:
    if mode == "text":
        return text_loss(s_logits, gen)
    if mode == "corpus":
        return text_loss(s_logits, real)
    if mode == "full":
        return full_kl_loss(s_logits, t_logits)
    ids, lp = api_topk(t_logits, cfg.k)           # the student sees only what the API returns
    return topk_loss(s_logits, ids, lp, cfg.tail)


@torch.no_grad()
def kl_to_teacher(student: GPT, teacher: GPT, data: torch.Tensor, n_windows: int = 128) -> float:
    """Mean KL(teacher ‖ student) per byte on the first ``n_windows`` seq_len-windows of ``data``
    (real text): how close the student's predictions are to the teacher's."""
    n_windows = positive_int("n_windows", n_windows)
    S = student.cfg.seq_len
    n = min(n_windows, (data.numel() - 1) // S)
    x = data[: n * S].long().view(n, S)
    s_was, t_was = student.training, teacher.training
    student.eval(), teacher.eval()
    out = float(full_kl_loss(student(x), teacher(x)))
    student.train(s_was), teacher.train(t_was)
    return out


def distill(teacher: GPT, student_cfg: GPTConfig, cfg: DistillConfig, modes: Sequence[str] = MODES,
            split: corpus_mod.CorpusSplit | None = None,
            progress: Callable[[int, int], None] | None = None, stop_after: int | None = None) -> dict:
    """Train one fresh student per mode in lock-step on the same teacher samples; return, per mode,
    the final validation loss (whole validation split, nats/byte), the KL to the teacher on
    validation text, and the validation curve; plus the tokens bought and the wall time.

    Every student starts from ``GPT(student_cfg, seed=cfg.seed)``; prompts and samples follow from
    ``cfg.seed`` alone, so a run is reproducible and adding a mode does not change the others.
    ``stop_after`` ends the run early (the schedule still spans ``cfg.steps``): a cheap way to
    check a stored curve point.
    """
    for m in modes:
        choice("modes", m, MODES)
    if student_cfg.seq_len < cfg.prompt_len + cfg.gen_len - 1:
        raise ValueError(f"student seq_len={student_cfg.seq_len} is shorter than prompt_len + gen_len - 1")
    last = cfg.steps if stop_after is None else min(cfg.steps, positive_int("stop_after", stop_after))
    split = split if split is not None else corpus_mod.load()
    train_cfg = TrainConfig(n_tokens=1, lr=cfg.lr, weight_decay=cfg.weight_decay, seed=cfg.seed)
    students = {m: GPT(student_cfg, seed=cfg.seed) for m in modes}
    opts = {m: _optimizer(s, train_cfg) for m, s in students.items()}
    gen_prompt = torch.Generator().manual_seed(cfg.seed + 1)
    gen_sample = torch.Generator().manual_seed(cfg.seed + 2)
    P, G = cfg.prompt_len, cfg.gen_len

    def purchase() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        window = prompt_batch(split.train, cfg.batch_size, P + G, gen_prompt)
        tokens, t_logits = sample_with_logits(teacher, window[:, :P], G, gen_sample)
        return window, tokens, t_logits

    t0 = time.perf_counter()
    pool = [purchase() for _ in range(cfg.pool_batches)] if cfg.pool_batches is not None else None
    curve: dict = {"steps": [], "val_loss": {m: [] for m in modes}}
    for step in range(last):
        lr = lr_at(step, cfg.steps, cfg.lr, cfg.warmup_frac, cfg.min_lr_ratio)
        window, tokens, t_logits = pool[step % len(pool)] if pool is not None else purchase()
        for m, student in students.items():
            seq = window if m == "corpus" else tokens
            s_logits = student(seq[:, :-1])[:, P - 1:]      # positions that predict the G new tokens
            loss = _loss(m, s_logits, tokens[:, P:], t_logits, window[:, P:], cfg)
            for group in opts[m].param_groups:
                group["lr"] = lr
            opts[m].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.grad_clip)
            opts[m].step()
        done = step + 1
        if cfg.eval_every and done % cfg.eval_every == 0 and done < last:
            curve["steps"].append(done)
            for m, student in students.items():
                curve["val_loss"][m].append(evaluate(student, split.val, 64, None))
        if progress is not None:
            progress(done, last)
    out = {"output_tokens": cfg.output_tokens, "input_tokens": cfg.input_tokens, "epochs": cfg.epochs,
           "steps_run": last, "wall_s": time.perf_counter() - t0, "modes": {}}
    curve["steps"].append(last)
    for m, student in students.items():
        student.eval()
        val = evaluate(student, split.val, 64, None)
        curve["val_loss"][m].append(val)
        out["modes"][m] = {"val_loss": val, "kl_to_teacher": kl_to_teacher(student, teacher, split.val)}
    if cfg.eval_every:
        out["curve"] = curve
    return out
