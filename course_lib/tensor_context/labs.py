"""Chapter 11's measurements, each one call: TP/SP/CP exactness and bytes, PyTorch's DTensor TP
beside ours, and the activation memory of one layer under every scheme (measured, with the exact
count for the tiny GPT's architecture beside it).

The demos (``*_demo()``) launch :mod:`.runs`' workers on gloo CPU ranks and return plain numbers,
each in a few seconds. References: Shoeybi et al. 2019 (arXiv 1909.08053), Korthikanti et al. 2022
(arXiv 2205.05198), Liu et al. 2023 (arXiv 2310.01889).
"""
from __future__ import annotations

from . import runs

__all__ = ["tp_demo", "cp_demo", "dtensor_demo", "activation_demo", "torch_context_parallel_error"]


def tp_demo(world_size: int = 2) -> dict:
    """TP and SP GPTs trained 3 steps beside the unsplit GPT, and one layer's counted bytes beside
    the formula (rank 0's view): {"train": {...}, "bytes": {...}, "formula": {...}}."""
    cases = [dict(check="train"), dict(check="train", sequence_parallel=True),
             dict(check="bytes"), dict(check="bytes", sequence_parallel=True)]
    res = _launch(runs.tp_cases_worker, world_size, cases=cases)[0]
    cfg = runs.TINY
    return {"train": {"tp": res[0], "sp": res[1]}, "bytes": {"tp": res[2], "sp": res[3]},
            "formula": {"tp": runs.tp_layer_bytes_formula(cfg.seq_len, 2, cfg.d_model, world_size),
                        "sp": runs.tp_layer_bytes_formula(cfg.seq_len, 2, cfg.d_model, world_size,
                                                          sequence_parallel=True)}}


def cp_demo(world_size: int = 4, seq_len: int = 64) -> dict:
    """Ring attention on ``world_size`` ranks, both splits: per scheme, every rank's gaps to full
    attention, bytes sent forward / backward, and score entries computed (its causal work)."""
    cases = [dict(check="ring", scheme=s, seq_len=seq_len) for s in ("contiguous", "zigzag")]
    by_rank = _launch(runs.tp_cases_worker, world_size, cases=cases)
    return {c["scheme"]: [res[i] for res in by_rank] for i, c in enumerate(cases)}


def dtensor_demo(world_size: int = 2, steps: int = 4) -> dict:
    """Our TP next to PyTorch's ``parallelize_module`` (rank 0's result of :func:`.runs.dtensor_worker`)."""
    return _launch(runs.dtensor_worker, world_size, steps=steps)[0]


def activation_demo(world_size: int = 4) -> list[dict]:
    """Rank 0's rows of :func:`.runs.activation_worker`: measured bytes per layer beside the exact count."""
    return _launch(runs.activation_worker, world_size)[0]


def torch_context_parallel_error(world_size: int = 2) -> str | None:
    """What PyTorch's ``context_parallel`` raises here (None if it ran and matched full attention)."""
    res = _launch(runs.torch_context_parallel_worker, world_size)[0]
    return None if res["ok"] and res["gap"] < 1e-5 else res.get("error", f"gap {res.get('gap')}")


def _launch(worker, world_size: int, **kwargs):
    from ..dist import launch
    return launch(worker, world_size, threads_per_rank=1, timeout=120, **kwargs)
