"""Parallel training from scratch: data parallel, sharded data parallel (ZeRO/FSDP) and pipeline
parallel, each next to PyTorch's own implementation and a single-process reference."""
