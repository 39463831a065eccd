"""Chapter 14: expert parallelism and the all-to-all.

* ``ep`` — the expert-parallel MoE layer (:class:`ExpertParallelMoE`): chapter 8's routers, a
  dispatch and a combine all-to-all in autograd, EP groups carved from DP, gradient reduction.
* ``balance`` — load balancing without an auxiliary loss (:class:`BiasBalancedRouter`, DeepSeek-V3's
  per-expert bias for top-k selection, updated by ±γ after each step), beside the Switch loss.
* ``overlap`` — the dispatch all-to-all issued asynchronously (``dispatch_async``) and hidden under
  the shared expert's compute (``forward``), bitwise equal to the serial order.
* ``ulysses`` — DeepSpeed-Ulysses sequence parallelism: attention with an all-to-all over heads.
* ``ep_runs`` — the expert-parallel drivers on real ranks (equivalence against one process, bytes
  against ``course_lib.comm.ep_bytes_per_layer``, the hot-expert straggler); ``overlap_runs`` — the
  serial vs overlapped forward traced on real ranks (its timelines, the hidden fraction, the page's
  cache); ``labs`` — the lab's drivers: every check in one launch (``lab_demo``) and the
  one-process load-balancing comparison (``balance_run``: auxiliary loss, bias, none).

The byte calculators live with the other communication calculators in ``course_lib.comm``
(``ep_bytes_per_layer``, ``ep_node_bytes``).
"""
from .balance import BiasBalancedRouter, bias_balance, bias_update, drop_share, load_imbalance
from .ep import AllToAll, ExpertParallelMoE, all_to_all, ep_groups, expert_parallel, reduce_gradients

__all__ = ["AllToAll", "ExpertParallelMoE", "all_to_all", "ep_groups", "expert_parallel", "reduce_gradients",
           "BiasBalancedRouter", "bias_balance", "bias_update", "drop_share", "load_imbalance"]
