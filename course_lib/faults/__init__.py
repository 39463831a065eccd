"""Chapter 12, failures at scale: the failure arithmetic (``arithmetic``: MTBF, checkpoint
interval, goodput, checkpoint sizes and save times) and, in their own modules, the real runs on
CPU processes — an elastic ``torchrun`` job that survives SIGKILL (``elastic``, launched and read
back by ``jobs``, its faults in ``inject``), sharded and asynchronous ``torch.distributed.checkpoint``
saves (``checkpointer``; the lab's demos in ``labs``) that are verified against their files' digests
before loading, kept in a folder one job owns and pruned by a retention policy (``integrity``), a
straggler monitor (``monitor``) and a small job for practising resume-from-checkpoint, with the
harness that kills it (``drill``)."""
from .arithmetic import (LLAMA3, LLAMA3_GPU_MTBF_S, async_blocking_seconds, async_goodput, checkpoint_bytes_per_rank, cluster_mtbf,
                         daly_checkpoint_interval, expected_lost_seconds, goodput, goodput_exponential,
                         implied_gpu_mtbf, optimal_checkpoint_interval, save_seconds, simulate_goodput,
                         storage_rate_needed)

__all__ = ["LLAMA3", "LLAMA3_GPU_MTBF_S", "cluster_mtbf", "implied_gpu_mtbf", "optimal_checkpoint_interval",
           "daly_checkpoint_interval", "goodput", "goodput_exponential", "expected_lost_seconds",
           "checkpoint_bytes_per_rank", "save_seconds", "async_blocking_seconds", "simulate_goodput",
           "async_goodput", "storage_rate_needed"]
