"""Chapter 4's data parallelism from scratch, each next to PyTorch's own and a single-process
reference: plain data parallelism (``dp``), ZeRO's sharded optimizer (``zero``) and FSDP (``fsdp``), with
``counting.CountingComm``, the collectives that count their own bytes (chapters 11 and 14 use it too).
Tensor, sequence and context parallelism (chapter 11) are the ``course_lib.tensor_context`` package;
pipeline parallelism (chapter 5) is ``course_lib.pipeline``."""
