"""Small workers that exercise the launcher's whole path: a correctness all-reduce and an
all-reduce bandwidth probe (the number an interconnect datasheet promises, measured)."""
from __future__ import annotations

import time


def allreduce_check(ctx, n: int = 4) -> dict:
    """All-reduce ``rank + 1`` over the world group; every rank must end with Σ(r+1)."""
    import torch
    import torch.distributed as dist
    t = torch.full((n,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t, group=ctx.group)
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    return {"rank": ctx.rank, "backend": ctx.backend, "device": str(ctx.device),
            "ok": bool(torch.all(t == expected).item())}


def allreduce_bandwidth(ctx, sizes_bytes=(1 << 16, 1 << 20, 1 << 24), repeats: int = 5) -> list[dict]:
    """Time ring all-reduces of fp32 tensors; report algorithm and bus bandwidth per size.

    Bus bandwidth = size · 2(n−1)/n / time: the bytes each rank actually sends, the figure
    nccl-tests reports and the one to compare with a link's datasheet bandwidth.
    """
    import torch
    import torch.distributed as dist
    out = []
    n = ctx.world_size
    for size in sizes_bytes:
        t = torch.ones(max(1, size // 4), dtype=torch.float32, device=ctx.device)
        dist.all_reduce(t, group=ctx.group)  # warm-up (connection set-up)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier(group=ctx.group)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            t0 = time.perf_counter()
            dist.all_reduce(t, group=ctx.group)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            best = min(best, time.perf_counter() - t0)
        nbytes = t.numel() * 4
        out.append({"bytes": nbytes, "seconds": best, "algbw": nbytes / best,
                    "busbw": nbytes * 2 * (n - 1) / n / best})
    return out
