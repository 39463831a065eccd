"""Reinforcement learning with verifiable rewards, three ways: synchronous, asynchronous on stale
weights, and PipelineRL's in-flight weight updates (chapter 10).

* ``task`` — the toy task (count on from a digit, every step verified), its heavy-tailed length
  distribution ``LengthDist`` with E[L], E[L²] and E[max of n], the policy (the course's tiny GPT)
  with a KV-cached, continuously batched decoder, and the truncated-importance-weight
  policy-gradient loss.
* ``actors`` — real processes on ``torch.distributed``: one learner and n actors that exchange
  finished sequences (point-to-point) and weights (an asynchronous broadcast each actor polls
  between two decode steps: ``swap_weights``). ``actors.run(mode)`` returns a measured ``Trace``.
* ``actor`` — one actor process (``slots`` sequences decoded together, new weights swapped in
  between two decode steps) and the two channels it shares with the learner; ``actors`` holds the
  learner and ``run`` and re-exports the channel functions.
* ``trace`` — the ``Trace`` that real and simulated runs both return, its metrics (utilisation,
  tokens/s, lag), and ``draw`` for timelines of real and simulated runs alike.
* ``simulate`` — the closed forms (``sync_utilisation``, ``pipeline_period``, ``expected_lag``) and
  a discrete-event simulator that follows the same rules as the real processes and draws from the
  same problem streams (it re-exports ``Trace`` and ``draw``).
"""
