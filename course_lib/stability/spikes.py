"""Loss-spike detection, and the controller that rolls back to a healthy checkpoint and skips data.

The remedy has a documented origin: PaLM (Chowdhery et al. 2022, arXiv 2204.02311, §5.1) saw
about 20 loss spikes training its 540B model, and each time "restarted training from a checkpoint
roughly 100 steps before the spike started, and skipped roughly 200–500 data batches". OPT-175B's
logbook (Zhang et al. 2022, arXiv 2205.01068) records the same kind of manual restarts, often with
a lower learning rate. This module automates it at toy scale:

- :class:`SpikeDetector` flags a step whose loss is non-finite or exceeds the running mean of the
  last ``window`` healthy losses by more than ``max(threshold·σ, min_jump)``. Flagged losses are
  not added to the history, so one spike does not hide the next.
- :func:`plan_rollback` picks the newest checkpoint at least ``min_distance`` steps before the
  spike and a new data position just past the spike plus ``skip_margin`` batches.
- :func:`guarded_run` trains with checkpoints every ``ckpt_every`` steps (real files, written
  atomically) and applies the plan whenever the detector fires, logging every event.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._validate import positive, positive_int
from . import checkpoint
from .loop import StepRecord, Trainer

__all__ = ["SpikeDetector", "detect_spikes", "RollbackPlan", "plan_rollback", "GuardConfig",
           "GuardedRun", "guarded_run"]


class SpikeDetector:
    """Online spike test against the mean and standard deviation of recent healthy losses.

    ``update(loss)`` returns True for a spike: the loss is not finite, or at least ``window``
    healthy losses have been seen and ``loss > μ + max(threshold·σ, min_jump)``, with μ and σ the
    mean and (population) standard deviation of the last ``window`` healthy losses. ``min_jump``
    (in nats) keeps a very quiet stretch, where σ is tiny, from flagging ordinary noise.
    """

    def __init__(self, window: int = 20, threshold: float = 5.0, min_jump: float = 0.3) -> None:
        self.window = positive_int("window", window, minimum=2)
        self.threshold = positive("threshold", threshold)
        self.min_jump = positive("min_jump", min_jump, allow_zero=True)
        self.history: deque[float] = deque(maxlen=self.window)

    def bound(self) -> float:
        """The loss above which the next step is a spike (inf until the window is full)."""
        if len(self.history) < self.window:
            return math.inf
        mean = sum(self.history) / len(self.history)
        std = math.sqrt(sum((x - mean) ** 2 for x in self.history) / len(self.history))
        return mean + max(self.threshold * std, self.min_jump)

    def update(self, loss: float) -> bool:
        loss = float(loss)
        if not math.isfinite(loss) or loss > self.bound():
            return True
        self.history.append(loss)
        return False

    def state_dict(self) -> dict:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.history = deque((float(x) for x in state["history"]), maxlen=self.window)


def detect_spikes(losses: Sequence[float], window: int = 20, threshold: float = 5.0,
                  min_jump: float = 0.3) -> list[int]:
    """Indices of the spikes in a loss trace, by the :class:`SpikeDetector` rule."""
    det = SpikeDetector(window, threshold, min_jump)
    return [i for i, loss in enumerate(losses) if det.update(loss)]


@dataclass(frozen=True)
class RollbackPlan:
    """Restore the checkpoint taken at ``restore_step`` (data position ``restore_position``) and
    continue reading data at ``resume_position``: batches in between are skipped."""

    restore_step: int
    restore_position: int
    resume_position: int

    @property
    def skipped_batches(self) -> int:
        return self.resume_position - self.restore_position


def plan_rollback(checkpoints: Sequence[tuple[int, int]], spike_step: int, spike_position: int,
                  min_distance: int = 0, skip_margin: int = 0) -> RollbackPlan:
    """Choose where to roll back to and which data to skip.

    ``checkpoints`` are ``(step, data_position)`` pairs of the saved checkpoints (the step counter
    and the loader position differ once data has been skipped). Restore the newest one whose step
    is ≤ ``spike_step − min_distance``; resume the data at ``spike_position + 1 + skip_margin``, so
    every batch read since that checkpoint, the spiking one and ``skip_margin`` more are skipped.
    """
    spike_step = positive_int("spike_step", spike_step, minimum=0)
    spike_position = positive_int("spike_position", spike_position, minimum=0)
    min_distance = positive_int("min_distance", min_distance, minimum=0)
    skip_margin = positive_int("skip_margin", skip_margin, minimum=0)
    ok = [(int(s), int(p)) for s, p in checkpoints if s <= spike_step - min_distance]
    if not ok:
        raise ValueError(f"checkpoints has none at or before step {spike_step - min_distance} "
                         f"(spike_step {spike_step} − min_distance {min_distance})")
    step, position = max(ok)
    return RollbackPlan(step, position, max(position, spike_position + 1 + skip_margin))


@dataclass(frozen=True)
class GuardConfig:
    """Detector settings, checkpoint cadence and the rollback policy of :func:`guarded_run`."""

    window: int = 20
    threshold: float = 5.0
    min_jump: float = 0.3
    ckpt_every: int = 10
    min_distance: int = 5
    skip_margin: int = 20
    max_rollbacks: int = 3

    def __post_init__(self) -> None:
        positive_int("window", self.window, minimum=2)
        positive("threshold", self.threshold)
        positive("min_jump", self.min_jump, allow_zero=True)
        positive_int("ckpt_every", self.ckpt_every)
        positive_int("min_distance", self.min_distance, minimum=0)
        positive_int("skip_margin", self.skip_margin, minimum=0)
        positive_int("max_rollbacks", self.max_rollbacks, minimum=0)


@dataclass
class GuardedRun:
    """What a guarded run did. ``records`` holds every executed step in execution order;
    ``abandoned[i]`` is True for steps later undone by a rollback. ``events`` is the log."""

    records: list[StepRecord] = field(default_factory=list)
    abandoned: list[bool] = field(default_factory=list)
    spikes: list[int] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    rollbacks: int = 0
    skipped_batches: int = 0
    checkpoints_written: int = 0
    val_loss: float = float("nan")

    @property
    def wasted_steps(self) -> int:
        """Optimizer steps computed and then thrown away by rollbacks."""
        return sum(self.abandoned)

    def kept(self) -> list[StepRecord]:
        return [r for r, a in zip(self.records, self.abandoned) if not a]


def guarded_run(trainer: Trainer, directory: str | Path, guard: GuardConfig = GuardConfig(),
                eval_batches: int = 8) -> GuardedRun:
    """Train ``trainer`` to ``trainer.cfg.steps`` with spike detection, atomic checkpoints in
    ``directory`` every ``guard.ckpt_every`` steps, and rollback + data skipping on each spike
    (at most ``guard.max_rollbacks`` times; after that spikes are only logged)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    det = SpikeDetector(guard.window, guard.threshold, guard.min_jump)
    run = GuardedRun()
    ckpts: list[tuple[int, int, Path]] = []
    last_spike_step = -10

    def save() -> None:
        path = directory / f"step{trainer.step:05d}.ckpt"
        info = checkpoint.save_atomic({"trainer": trainer.state_dict(), "detector": det.state_dict()}, path)
        ckpts.append((trainer.step, trainer.data.position, path))
        run.checkpoints_written += 1
        run.events.append(f"step {trainer.step:4d}: checkpoint (data position {trainer.data.position}, "
                          f"sha256 {info.sha256[:8]})")

    save()
    while trainer.step < trainer.cfg.steps:
        bound = det.bound()
        rec = trainer.train_step()
        run.records.append(rec)
        run.abandoned.append(False)
        if det.update(rec.loss):
            run.spikes.append(len(run.records) - 1)
            run.events.append(f"step {rec.step:4d}: SPIKE loss {rec.loss:.2f} > bound {bound:.2f} "
                              f"(data position {rec.position})")
            if abs(rec.step - last_spike_step) <= 3:
                run.events.append(f"step {rec.step:4d}: the spike came back at the same point of the run "
                                  f"(last one at step {last_spike_step}) on different data: suspect the "
                                  f"model state or the schedule, not the data")
            last_spike_step = rec.step
            if run.rollbacks >= guard.max_rollbacks:
                run.events.append(f"step {rec.step:4d}: rollback budget ({guard.max_rollbacks}) spent: "
                                  f"accept the new loss level (detector history reset), continue")
                det.history.clear()
                continue
            plan = plan_rollback([(s, p) for s, p, _ in ckpts], rec.step, rec.position,
                                 guard.min_distance, guard.skip_margin)
            state = checkpoint.load(next(path for s, p, path in ckpts if s == plan.restore_step))
            trainer.load_state_dict(state["trainer"])
            det.load_state_dict(state["detector"])
            trainer.data.position = plan.resume_position
            for i in range(len(run.records) - 1, -1, -1):     # undo the live branch back to the checkpoint
                if run.abandoned[i]:
                    continue
                if run.records[i].step < plan.restore_step:
                    break
                run.abandoned[i] = True
            ckpts = [c for c in ckpts if c[0] <= plan.restore_step]
            run.rollbacks += 1
            run.skipped_batches += plan.skipped_batches
            run.events.append(f"step {rec.step:4d}: ROLLBACK to step {plan.restore_step}, skip data "
                              f"positions {plan.restore_position}..{plan.resume_position - 1} "
                              f"({plan.skipped_batches} batches)")
        elif trainer.step % guard.ckpt_every == 0:
            save()
    run.val_loss = trainer.evaluate(eval_batches)
    run.events.append(f"step {trainer.step:4d}: done, validation loss {run.val_loss:.3f}")
    return run
