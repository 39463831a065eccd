"""Low-precision all-reduce on real processes: who adds what, in which order, in which dtype.

A data-parallel step sums every rank's gradient. In a ring all-reduce the partial sum of each
chunk travels from rank to rank *in the tensor's dtype*, so with FP16 every hop rounds to FP16:
the sum of n ranks is a chain of n − 1 FP16 additions, the seed's ``1 + 1 + … + 1`` again. A tree
order rounds each value only ⌈log2 n⌉ times; reducing in FP32 rounds (almost) only once.

``allreduce_worker`` runs one algorithm on the ranks of a ``course_lib.dist.launch`` run:

- ``"gloo"``: ``torch.distributed.all_reduce`` itself (gloo on CPU). Measured, not assumed: gloo
  adds FP16 in FP16 along a ring of 2·n segments; chunk c is summed in rank order
  c−1, c−2, …, c (see :func:`gloo_chunk_bounds`; the tests check this model bit for bit).
- ``"ring"``: our own reduce-scatter + all-gather with ``send``/``recv``; chunk c summed c, c+1, ….
- ``"tree"``: binomial-tree reduce to rank 0 with ``send``/``recv`` (pairwise order), then a
  broadcast.
- ``"fp32"``: the fix: upcast to FP32, ``all_reduce``, round once back to the dtype.

:func:`reference_allreduce` computes each algorithm's result in one process with exactly the same
rounding order, which lets the chapter extend the measurements to hundreds of ranks.
"""
from __future__ import annotations

import math

import torch

from .._validate import choice, positive, positive_int
from . import format_info, resolve_dtype, running_sum

__all__ = ["ALGORITHMS", "rank_gradients", "allreduce_worker", "gloo_chunk_bounds",
           "reference_allreduce", "relative_rms_error", "theory_relative_rms_error",
           "run_allreduce"]

ALGORITHMS = ("gloo", "ring", "tree", "fp32")


def rank_gradients(world_size: int, n_elements: int, *, scale: float = 1.0, mean: float = 0.0,
                   seed: int = 0) -> torch.Tensor:
    """FP32 gradient-like values, one row per rank: ``mean + scale · N(0, 1)``; row r depends only
    on (seed, r), so a rank can make its own row and a reference can make all of them."""
    world_size = positive_int("world_size", world_size)
    n_elements = positive_int("n_elements", n_elements)
    scale = positive("scale", scale)
    if not math.isfinite(mean):
        raise ValueError(f"mean must be finite, got {mean!r}")
    return torch.stack([_rank_row(n_elements, scale, mean, seed, r) for r in range(world_size)])


def _rank_row(n_elements: int, scale: float, mean: float, seed: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s FP32 gradients. Drawn in FP64 and rounded once: PyTorch's FP32 ``randn`` of
    16 or more values takes a vectorised path whose last bit differs between CPUs (AVX2 or not),
    the FP64 one uses the C library on every CPU, so every machine gets the same gradients."""
    g = torch.randn(n_elements, generator=torch.Generator().manual_seed(seed * 100_003 + rank),
                    dtype=torch.float64)
    return (g * scale + mean).float()


def gloo_chunk_bounds(n_elements: int, world_size: int, element_size: int) -> list[int]:
    """Element offsets of the chunks gloo's ring gives each rank: 2·n segments of
    ⌈bytes / 2n⌉ bytes rounded up to whole elements, two segments per chunk."""
    seg = math.ceil(n_elements * element_size / (2 * world_size))
    seg_elems = math.ceil(seg / element_size)
    return [min(c * 2 * seg_elems, n_elements) for c in range(world_size + 1)]


def _ring(t: torch.Tensor, ctx) -> torch.Tensor:
    import torch.distributed as dist
    n, r = ctx.world_size, ctx.rank
    chunks = list(torch.tensor_split(t.clone(), n))
    right, left = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):                                 # reduce-scatter
        send_c, recv_c = (r - s) % n, (r - s - 1) % n
        buf = torch.empty_like(chunks[recv_c])
        req = dist.isend(chunks[send_c].contiguous(), right, group=ctx.group)
        dist.recv(buf, left, group=ctx.group)
        req.wait()
        chunks[recv_c] = buf + chunks[recv_c]               # rounded to the dtype, every hop
    for s in range(n - 1):                                 # all-gather
        send_c, recv_c = (r + 1 - s) % n, (r - s) % n
        buf = torch.empty_like(chunks[recv_c])
        req = dist.isend(chunks[send_c].contiguous(), right, group=ctx.group)
        dist.recv(buf, left, group=ctx.group)
        req.wait()
        chunks[recv_c] = buf
    return torch.cat(chunks)


def _tree(t: torch.Tensor, ctx) -> torch.Tensor:
    import torch.distributed as dist
    n, r, acc, k = ctx.world_size, ctx.rank, t.clone(), 1
    while k < n:
        if r % (2 * k) == k:
            dist.send(acc, r - k, group=ctx.group)
        elif r % (2 * k) == 0 and r + k < n:
            buf = torch.empty_like(acc)
            dist.recv(buf, r + k, group=ctx.group)
            acc = acc + buf
        k *= 2
    dist.broadcast(acc, src=0, group=ctx.group)
    return acc


def allreduce_worker(ctx, *, algorithm: str, n_elements: int, dtype: str = "fp16",
                     scale: float = 1.0, mean: float = 0.0, seed: int = 0) -> torch.Tensor:
    """One rank: make this rank's gradients, cast them to ``dtype``, sum over all ranks with
    ``algorithm`` and return the summed tensor (in ``dtype``)."""
    import torch.distributed as dist
    algorithm = choice("algorithm", algorithm, ALGORITHMS)
    dt = resolve_dtype(dtype)
    t = _rank_row(n_elements, scale, mean, seed, ctx.rank).to(dt).to(ctx.device)
    if algorithm == "gloo":
        dist.all_reduce(t, group=ctx.group)
    elif algorithm == "fp32":
        wide = t.float()
        dist.all_reduce(wide, group=ctx.group)
        t = wide.to(dt)
    elif algorithm == "ring":
        t = _ring(t, ctx)
    else:
        t = _tree(t, ctx)
    return t.cpu()


def reference_allreduce(inputs: torch.Tensor, algorithm: str) -> torch.Tensor:
    """What ``algorithm`` returns for ``inputs`` (shape ranks × elements, already in the dtype),
    computed in one process with the same additions in the same order."""
    algorithm = choice("algorithm", algorithm, ALGORITHMS)
    if inputs.dim() != 2:
        raise ValueError(f"inputs must be 2-D (ranks × elements), got shape {tuple(inputs.shape)}")
    n, m = inputs.shape
    if algorithm == "tree":
        acc, k = list(inputs.clone()), 1
        while k < n:
            for r in range(0, n - k, 2 * k):
                acc[r] = acc[r] + acc[r + k]
            k *= 2
        return acc[0]
    if algorithm == "ring":
        sizes = [len(c) for c in torch.tensor_split(torch.arange(m), n)]
        owner = torch.repeat_interleave(torch.arange(n), torch.tensor(sizes))
        order = (owner[None, :] + torch.arange(n)[:, None]) % n           # c, c+1, …
    else:
        b = gloo_chunk_bounds(m, n, 4 if algorithm == "fp32" else inputs.element_size())
        owner = torch.repeat_interleave(torch.arange(n), torch.tensor(b[1:]) - torch.tensor(b[:-1]))
        order = (owner[None, :] - 1 - torch.arange(n)[:, None]) % n       # c−1, c−2, …, c
    x = inputs.float() if algorithm == "fp32" else inputs
    total = running_sum(x.gather(0, order), x.dtype)
    return total.to(inputs.dtype)


def relative_rms_error(result: torch.Tensor, target: torch.Tensor) -> float:
    """‖result − target‖ / ‖target‖ over the elements (float64); inf if anything overflowed."""
    r, t = result.double(), target.double()
    if not bool(torch.isfinite(r).all()):
        return math.inf
    return float((r - t).norm() / t.norm())


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _mean_sq_rounding(mu: float, var: float, dtype, *, cast: bool) -> float:
    """E[rounding error²] when s ~ N(mu, var) is rounded to nearest in ``dtype``: ulp²/12 per
    binade (uniform error). A ``cast`` of an arbitrary real also loses what underflows (error = s
    below half the smallest subnormal); a sum of two values of the format is exact below twice the
    smallest normal number (both lie on the subnormal grid). inf if overflow is plausible."""
    info = format_info(dtype)
    sd = math.sqrt(var)

    def cdf(z: float) -> float:
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))

    def p_abs_below(a: float) -> float:   # P(|s| < a)
        return cdf((a - mu) / sd) - cdf((-a - mu) / sd)

    if 1 - p_abs_below(info.max) > 1e-6:
        return math.inf
    e_lo = math.floor(math.log2(info.smallest_normal))
    total = 0.0
    if cast:
        half = info.smallest_subnormal / 2
        a, b = (-half - mu) / sd, (half - mu) / sd          # E[s² ; |s| < half], closed form
        dphi = cdf(b) - cdf(a)
        total += (mu * mu * dphi + 2 * mu * sd * (_phi(a) - _phi(b))
                  + var * (dphi + a * _phi(a) - b * _phi(b)))
        prev = p_abs_below(half)
    else:
        e_lo, prev = e_lo + 1, p_abs_below(2 * info.smallest_normal)
    for e in range(e_lo - 1 if cast else e_lo, math.floor(math.log2(info.max)) + 1):
        p = p_abs_below(2.0 ** (e + 1))
        spacing = max(2.0 ** (e - info.mantissa_bits), info.smallest_subnormal)
        total += (p - prev) * spacing ** 2 / 12
        prev = p
    return total


def theory_relative_rms_error(algorithm: str, world_size: int, dtype: str = "fp16", *,
                              scale: float = 1.0, mean: float = 0.0) -> float:
    """Predicted relative RMS error of the all-reduced sum against the exact FP32 sum, for ranks
    holding independent ``N(mean, scale²)`` values: every rounding (each rank's cast to the dtype,
    then each addition, whose partial sum of k ranks is ~ N(k·mean, k·scale²)) adds an
    independent error of variance E[ulp²]/12. Chain (ring, gloo): n − 1 additions of growing
    partial sums; tree: merges of blocks; fp32: one final rounding."""
    algorithm = choice("algorithm", algorithm, ALGORITHMS)
    n = positive_int("world_size", world_size)
    dt = resolve_dtype(dtype)
    scale = positive("scale", scale)
    var = n * _mean_sq_rounding(mean, scale ** 2, dt, cast=True)  # casting the inputs
    if algorithm in ("ring", "gloo"):
        sizes = list(range(2, n + 1))
    elif algorithm == "tree":
        sizes, k = [], 1
        while k < n:
            sizes += [min(2 * k, n - r) for r in range(0, n - k, 2 * k)]
            k *= 2
    else:
        sizes = [n]
    var += sum(_mean_sq_rounding(s * mean, s * scale ** 2, dt, cast=False) for s in sizes)
    return math.sqrt(var / (n * n * mean * mean + n * scale ** 2))


def run_allreduce(algorithm: str, world_size: int, n_elements: int = 4096, dtype: str = "fp16", *,
                  scale: float = 1.0, mean: float = 0.0, seed: int = 0, backend: str = "gloo",
                  timeout: float = 120.0) -> dict:
    """Launch ``world_size`` real processes, all-reduce with ``algorithm`` and compare.

    ``backend="nccl"`` (one GPU per rank) runs the same workers on GPUs; ``"gloo"`` then means
    NCCL's own ``all_reduce``, which need not follow gloo's order (``matches_reference`` says).

    Returns ``ranks_agree`` (every rank got bit-identical results), ``matches_reference`` (the
    result equals :func:`reference_allreduce` bit for bit), the relative RMS ``error`` against the
    exact sum of the FP32 gradients, the ``theory`` prediction and ``overflowed`` (share of inf).
    """
    from ..dist import launch
    algorithm = choice("algorithm", algorithm, ALGORITHMS)
    dt = resolve_dtype(dtype)
    outs = launch(allreduce_worker, world_size, backend=backend, timeout=timeout, algorithm=algorithm,
                  n_elements=n_elements, dtype=format_info(dt).name, scale=scale, mean=mean, seed=seed)
    grads = rank_gradients(world_size, n_elements, scale=scale, mean=mean, seed=seed)
    ref = reference_allreduce(grads.to(dt), algorithm)
    exact = grads.double().sum(0)
    return {"algorithm": algorithm, "world_size": world_size,
            "ranks_agree": all(torch.equal(outs[0], o) for o in outs),
            "matches_reference": torch.equal(outs[0], ref),
            "error": relative_rms_error(outs[0], exact),
            "theory": theory_relative_rms_error(algorithm, world_size, dtype, scale=scale, mean=mean),
            "overflowed": float((~torch.isfinite(outs[0].double())).double().mean()),
            "result": outs[0]}
