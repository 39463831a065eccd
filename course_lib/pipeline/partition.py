"""Split a stack of layers into pipeline stages so that the slowest stage is as fast as possible.

In a pipeline every stage processes every microbatch, so in steady state the step advances at
the pace of the *slowest* stage: with stage times t_s the step lasts about
``Σ t_s + (m − 1)·max t_s`` (a flow shop with identical jobs). Balancing therefore means
minimising ``max_s t_s`` over the ways of cutting the layer sequence into ``p`` contiguous,
non-empty pieces — the "linear partition" problem, solved exactly here by dynamic programming
in O(p·n²) (n layers is at most a few hundred, so this is instant).

The second half of the module cuts the course's tiny GPT: ``gpt_layers`` views it as the list
``embed``, ``blocks.0`` … ``blocks.{L−1}``, ``head`` (final LayerNorm + LM head), ``build_stage``
keeps a contiguous run of them, and ``measure_layer_costs`` times each layer, because costs
should be *measured*: an LM head with a big vocabulary, an embedding lookup and a sliding-window
attention layer do not cost what their parameter counts suggest.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._validate import positive, positive_int
from ..model import GPT, GPTConfig

__all__ = ["balanced_partition", "even_partition", "stage_costs", "bounds", "check_sizes",
           "Embed", "Head", "gpt_layers", "StageModule", "build_stage", "make_batch",
           "measure_layer_costs", "simulated_step", "DEMO"]

# The lab's model: 4 blocks of width 256 and a small vocabulary, so the blocks dominate and equal
# block counts give equal stage times; one microbatch of 2 × 64 tokens is a few ms per block.
DEMO = GPTConfig(vocab_size=64, seq_len=64, n_layers=4, n_heads=4, d_model=256, tie_embeddings=False)


def _costs(costs: Sequence[float]) -> list[float]:
    try:
        values = list(costs)
    except TypeError:
        raise ValueError(f"costs must be a sequence of layer costs, got {costs!r}") from None
    if not values:
        raise ValueError("costs must hold at least one layer cost")
    return [positive("costs", c, allow_zero=True) for c in values]


def check_sizes(sizes: Sequence[int], n_layers: int, p: int | None = None) -> list[int]:
    """Validate stage sizes (layers per stage): integers ≥ 1 that add up to ``n_layers``."""
    try:
        out = [positive_int("sizes", s) for s in sizes]
    except TypeError:
        raise ValueError(f"sizes must be a list of layer counts, got {sizes!r}") from None
    if sum(out) != n_layers:
        raise ValueError(f"sizes must add up to the {n_layers} layers, got {out} (sum {sum(out)})")
    if p is not None and len(out) != p:
        raise ValueError(f"sizes must have one entry per stage (p={p}), got {len(out)}")
    return out


def bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Stage sizes ``[3, 2, 3]`` → layer index ranges ``[(0, 3), (3, 5), (5, 8)]``."""
    out, start = [], 0
    for s in sizes:
        out.append((start, start + int(s)))
        start += int(s)
    return out


def stage_costs(costs: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """Total cost of each stage when layers with ``costs`` are cut into stages of ``sizes``."""
    c = _costs(costs)
    sizes = check_sizes(sizes, len(c))
    return [sum(c[a:b]) for a, b in bounds(sizes)]


def even_partition(n_layers: int, p: int) -> list[int]:
    """The naive split: the same number of layers per stage (earlier stages take the remainder)."""
    n, p = positive_int("n_layers", n_layers), positive_int("p", p)
    if p > n:
        raise ValueError(f"p must be at most n_layers={n} (every stage needs a layer), got {p!r}")
    return [n // p + (1 if s < n % p else 0) for s in range(p)]


def balanced_partition(costs: Sequence[float], p: int) -> list[int]:
    """Layers per stage minimising the most expensive stage (contiguous, every stage non-empty).

    Ties between optimal splits are broken deterministically (each stage boundary is placed at
    the earliest position that keeps the optimum). Example: costs
    ``[1, 1, 1, 1, 1, 1, 3]`` on 3 stages → ``[3, 3, 1]`` (the heavy last layer gets its own stage).
    """
    c = _costs(costs)
    p = positive_int("p", p)
    n = len(c)
    if p > n:
        raise ValueError(f"p must be at most the number of layers ({n}), got {p!r}")
    prefix = [0.0]
    for x in c:
        prefix.append(prefix[-1] + x)
    inf = float("inf")
    # best[k][i]: smallest possible max-stage cost for the first i layers on k stages
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for i in range(k, n - (p - k) + 1):
            for j in range(k - 1, i):
                val = max(best[k - 1][j], prefix[i] - prefix[j])
                if val < best[k][i] - 1e-12 * max(1.0, abs(val)):
                    best[k][i], cut[k][i] = val, j
    sizes, i = [], n
    for k in range(p, 0, -1):
        j = cut[k][i]
        sizes.append(i - j)
        i = j
    return sizes[::-1]


# ------------------------------------------------ the tiny GPT as a list of cuttable layers

class Embed(nn.Module):
    """Token + position embeddings: the first layer of the pipeline."""

    def __init__(self, tok: nn.Embedding, pos: nn.Embedding) -> None:
        super().__init__()
        self.tok, self.pos = tok, pos

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))


class Head(nn.Module):
    """Final LayerNorm + LM head: the last layer of the pipeline (returns logits)."""

    def __init__(self, ln_f: nn.LayerNorm, head: nn.Linear) -> None:
        super().__init__()
        self.ln_f, self.head = ln_f, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(x))


def gpt_layers(model: GPT) -> list[tuple[str, nn.Module]]:
    """``model`` as a pipeline-cuttable list of (name prefix in the GPT, module)."""
    if model.cfg.tie_embeddings:
        raise ValueError("cfg.tie_embeddings must be False to cut the GPT into pipeline stages: the "
                         "tied matrix would live on the first and the last stage (Megatron-LM keeps "
                         "two copies and all-reduces their gradients)")
    return ([("", Embed(model.tok, model.pos))]
            + [(f"blocks.{i}", b) for i, b in enumerate(model.blocks)]
            + [("", Head(model.ln_f, model.head))])


class StageModule(nn.Module):
    """A contiguous run of GPT layers; ``full_names`` maps its parameters to the GPT's names."""

    def __init__(self, layers: Sequence[tuple[str, nn.Module]], d_model: int) -> None:
        super().__init__()
        self.d_model = d_model   # width of the activations that enter and leave the stage
        self.layers = nn.ModuleList(m for _, m in layers)
        self.full_names: dict[str, str] = {}
        for i, (prefix, mod) in enumerate(layers):
            for n, _ in mod.named_parameters():
                self.full_names[f"layers.{i}.{n}"] = f"{prefix}.{n}" if prefix else n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def named_full_parameters(self) -> dict[str, nn.Parameter]:
        return {self.full_names[n]: p for n, p in self.named_parameters()}


def build_stage(cfg: GPTConfig, sizes: Sequence[int], stage: int, seed: int = 0) -> StageModule:
    """Global stage ``stage`` of ``GPT(cfg, seed)`` cut into ``sizes`` layers per stage."""
    layers = gpt_layers(GPT(cfg, seed=seed))
    sizes = check_sizes(sizes, len(layers))
    a, b = bounds(sizes)[stage]
    return StageModule(layers[a:b], cfg.d_model)


def make_batch(cfg: GPTConfig, batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch of random token sequences and their next-token targets."""
    gen = torch.Generator().manual_seed(1_000_003 * seed + 17)
    tokens = torch.randint(cfg.vocab_size, (batch_size, cfg.seq_len + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def measure_layer_costs(cfg: GPTConfig = DEMO, mb_size: int = 2, repeats: int = 5,
                        seed: int = 0) -> list[dict]:
    """Median forward and backward seconds of every pipeline layer for one microbatch, measured
    in this process on one thread (as each pipeline rank runs): the costs to partition by."""
    repeats = positive_int("repeats", repeats)
    layers = gpt_layers(GPT(cfg, seed=seed))
    x, y = make_batch(cfg, positive_int("mb_size", mb_size), seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times: list[dict[str, list[float]]] = [{"forward": [], "backward": []} for _ in layers]
        for _ in range(repeats + 1):       # the first round warms up
            h: torch.Tensor = x
            for i, (_, layer) in enumerate(layers):
                inp = h.detach().requires_grad_(i > 0)
                t0 = time.perf_counter()
                out = layer(inp)
                if i == len(layers) - 1:
                    out = F.cross_entropy(out.flatten(0, 1), y.flatten())
                t1 = time.perf_counter()
                out.backward(torch.ones_like(out) if out.dim() else None)
                t2 = time.perf_counter()
                times[i]["forward"].append(t1 - t0)
                times[i]["backward"].append(t2 - t1)
                h = out
    finally:
        torch.set_num_threads(threads)
    names = ["embed"] + [f"block {i}" + ("" if not cfg.windows or cfg.windows[i] is None
                                         else f" (window {cfg.windows[i]})") for i in range(cfg.n_layers)] + ["head + loss"]
    return [{"layer": n, "forward": statistics.median(t["forward"][1:]),
             "backward": statistics.median(t["backward"][1:])} for n, t in zip(names, times)]


def simulated_step(costs: Sequence[dict], sizes: Sequence[int], m: int, schedule: str = "1f1b") -> float:
    """Step time the exact simulator predicts for ``schedule`` with ``m`` microbatches when the
    layers, with the measured ``costs`` (``measure_layer_costs``), are cut into ``sizes``: each
    stage's forward and backward time is the sum of its layers'."""
    from . import simulate
    t_f = stage_costs([c["forward"] for c in costs], sizes)
    t_b = stage_costs([c["backward"] for c in costs], sizes)
    return simulate(schedule, len(sizes), m, t_forward=t_f, t_backward=t_b).makespan()
