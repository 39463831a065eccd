"""Chapter 17: finding the fault — hangs, stragglers, silent data corruption, in-memory restarts.

* ``recorder`` — :class:`FlightRecorder`: a rank's bounded ring of its collectives (seq, op, group,
  sizes, dtype, state, times) and compute spans, the wrapper training code calls collectives
  through, dumped atomically on a timeout; ``check=True`` compares each collective's fingerprint
  across ranks first (as ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does).
* ``analyze`` — :func:`analyze`: the rank that never entered the collective its peers wait in, and
  what it was doing instead; a rank with no dump named as such.
* ``telemetry`` — per-rank step telemetry (compute vs waiting), the straggler found by name, and
  the step model (the step waits for the slowest rank).
* ``sdc`` — bit flips and the detectors that hold at scale: replicas' fingerprints, a
  deterministic recomputation on another rank, loss and gradient-norm anomaly checks.
* ``memory`` — in-memory checkpoints: each rank's shard also held by a peer, sent over gloo.
* ``goodput`` — goodput with fast diagnosis and in-memory restarts (chapter 12's arithmetic).
* drivers: ``hang_runs``, ``straggler_runs``, ``sdc_runs``, ``memory_runs`` (what the lab and
  tests run on real ranks).
"""
from .analyze import DumpError, Verdict, analyze, analyze_dumps, read_dumps
from .recorder import CollectiveMismatch, FlightRecorder, dump_path

__all__ = ["FlightRecorder", "CollectiveMismatch", "dump_path", "analyze", "analyze_dumps", "read_dumps", "DumpError", "Verdict"]
