"""Chapter 11: tensor, sequence and context parallelism, from scratch, each beside the unsplit model.

* ``tensor``: Megatron-style column/row-parallel linears and :class:`~.tensor.TensorParallelGPT`, made
  from an ordinary :class:`~course_lib.model.GPT` (Shoeybi et al. 2019, arXiv 1909.08053).
* ``sequence``: sequence parallelism's scatter/gather around the norms and dropout (Korthikanti et al.
  2022, arXiv 2205.05198).
* ``context``: ring attention over a context-parallel group, contiguous and zig-zag splits (Liu et al.
  2023, arXiv 2310.01889).
* ``activation_meter``: the bytes autograd really saves for the backward (``saved_tensors_hooks``);
  chapter 5's executor uses it too.

Lab drivers, apart from the library: ``runs`` holds the workers that run on real ranks (tests and the
lab launch them), ``labs`` the one-call measurements the page and the lab show.
Bytes are counted by chapter 4's :class:`~course_lib.parallel.counting.CountingComm`."""
