"""The faults the elastic job injects into itself, one per attempt (see ``course_lib.faults.elastic``):
a :class:`Fault` names the kind, the step and the rank; a SIGKILL of oneself is a hardware fault
(no exception, no cleanup), and :class:`_DyingWriter` is a DCP writer cut short after its shard."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from torch.distributed.checkpoint import FileSystemWriter

from .integrity import DAMAGES

__all__ = ["FAULT_KINDS", "Fault"]

FAULT_KINDS = ("kill", "save", "hang", *DAMAGES)


@dataclass(frozen=True)
class Fault:
    """A failure to inject: ``kind`` (kill | save | hang | a damage) hits rank ``rank`` at step ``step``."""

    kind: str
    step: int
    rank: int

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``"kill:5:1"`` -> Fault("kill", 5, 1)."""
        kind, step, rank = text.split(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {kind!r}")
        return cls(kind, int(step), int(rank))

    def __str__(self) -> str:
        return f"{self.kind}:{self.step}:{self.rank}"


def _sigkill_self() -> None:
    """Die at once, as on a hardware fault: no exception, no cleanup, no goodbye to the peers."""
    os.kill(os.getpid(), signal.SIGKILL)


class _DyingWriter(FileSystemWriter):
    """A DCP writer whose rank SIGKILLs itself right after writing its shard: a save cut short."""

    def write_data(self, plan, planner):
        future = super().write_data(plan, planner)
        future.wait()
        _sigkill_self()
