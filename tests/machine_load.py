"""How busy the machine is, so that the tests' waits stretch with it instead of failing on it.

A reader's laptop is rarely idle: with other work beside ``make test`` (a build, a browser, two CPU
hogs), a page that loads in 1 s on a quiet machine can take 20. Waits and time limits in tests are
therefore ``patience(base)``: the base, sized for a quiet machine, times how many processes compete for
each core (Linux's 1-minute load average over the core count, at least 1, at most ``MAX_STRETCH``).
A wait that is a condition (``wait_for_function``) costs nothing when the condition comes early, so a
generous limit never slows a quiet run; it only stops a busy one from failing."""
from __future__ import annotations

import os
import time

MAX_STRETCH = 8.0


def stretch() -> float:
    """Processes per core competing now (1-minute load average / cores), clamped to [1, MAX_STRETCH]."""
    try:
        load = os.getloadavg()[0]
    except OSError:                      # no load average on this platform: assume quiet
        return 1.0
    return min(MAX_STRETCH, max(1.0, load / (os.cpu_count() or 1)))


def patience(base_ms: float) -> int:
    """A wait of ``base_ms`` on a quiet machine, stretched by how busy this one is (milliseconds)."""
    return int(base_ms * stretch())


def others_cpu_share(seconds: float = 1.0) -> float:
    """Share of all cores that other processes used over ``seconds`` while this one slept (0..1), from
    /proc/stat; 0.0 where that file does not exist. A timing test calls it when its bound fails, to
    tell a slow mechanism from a machine that was busy with something else."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return 0.0
    total = total1 - total0
    return 0.0 if total <= 0 else 1.0 - (idle1 - idle0) / total


BUSY_SHARE = 0.25   # others using a quarter of all cores: a timing bound is not judged


def judge_timing(ok: bool, what: str) -> None:
    """Pass, fail or skip a wall-clock bound: a miss on a machine that other processes keep busy
    (``others_cpu_share`` above BUSY_SHARE, sampled once the test's own work is done) is skipped, saying
    so, rather than failed; on a quiet machine, such as CI's, it fails."""
    import pytest
    if ok:
        return
    busy = others_cpu_share()
    if busy > BUSY_SHARE:
        pytest.skip(f"{what}: missed while other processes used {busy:.0%} of the cores; timing not judged "
                    "on a busy machine (rerun on a quiet one)")
    pytest.fail(f"{what} (the machine was quiet: {busy:.0%} of the cores used by others)")
