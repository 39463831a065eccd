"""Parallel training from scratch, each next to PyTorch's own and a single-process reference:
data parallelism and its sharded forms (``dp``, ``zero``, ``fsdp``: chapter 4) and tensor, sequence
and context parallelism (``tensor``, ``sequence``, ``context``: chapter 11). Pipeline parallelism
(chapter 5) is the ``course_lib.pipeline`` package."""
