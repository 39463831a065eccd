"""Why a :func:`course_lib.dist.launch` run failed, in words that name the rank to look at.

The launcher (:mod:`course_lib.dist`) collects each rank's report or death; this module turns
them into the error it raises: ``RankError`` for a rank that raised or died, with the ranks that
merely lost it listed as consequences.
"""
from __future__ import annotations

import signal
import time

__all__ = ["RankError", "RankHung"]


class RankError(RuntimeError):
    """A rank raised or died. ``rank`` is the rank to look at first: a rank that died is named
    before the peers that merely lost it. ``remote_traceback`` is its traceback, or how it died
    (then ``exitcode`` holds its exit code, negative for a signal); ``secondary`` maps the other
    failed ranks to their errors, most likely consequences of the first."""

    __module__ = "course_lib.dist"   # its public home, where users import it from

    def __init__(self, rank: int, remote_traceback: str, *, died: bool = False,
                 exitcode: int | None = None, secondary: dict[int, str] | None = None) -> None:
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.exitcode = exitcode
        self.secondary = dict(secondary or {})
        msg = (f"rank {rank} died: {remote_traceback}" if died
               else f"rank {rank} failed:\n{remote_traceback.rstrip()}")
        deaths = {r: t for r, t in self.secondary.items() if t.startswith("died: ")}
        msg += "".join(f"\nrank {r} died too: {t[len('died: '):]}" for r, t in deaths.items())
        errors = {r: t for r, t in self.secondary.items() if r not in deaths}
        if errors:
            msg += f"\nthe other ranks' errors, most likely consequences of rank {rank}'s failure:" + "".join(
                f"\n  rank {r}: {_last_line(t)}" for r, t in errors.items())
        super().__init__(msg)


def _last_line(text: str) -> str:
    """The last non-blank line of a traceback: the exception itself."""
    return ([ln for ln in text.splitlines() if ln.strip()] or [""])[-1].strip()


# A rank exits with this code when, while starting, it re-imports a script that calls launch() at
# its top level (see launch()); the launcher then tells the user about the missing main guard.
_UNGUARDED_MAIN_EXIT = 78
_MAIN_HINT = ("every rank imports the launching script, and this one calls launch() at its top "
              "level: move the call under `if __name__ == '__main__':`")
# A peer's error with one of these texts is what a rank sees when another rank's process is gone.
_PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "remote process exited", "NCCL communicator was aborted", "ncclRemoteError")
# After the first failure, how long to wait for the other ranks' reports and exit statuses.
_GRACE_S = 1.0


def _death(proc) -> str:
    """Why a rank's process ended without a report: its exit code or the signal that killed it."""
    code = proc.exitcode
    if code == _UNGUARDED_MAIN_EXIT:
        return f"exited while starting ({_MAIN_HINT})"
    if code is None:
        return "closed its connection to the launcher without reporting a result"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} without reporting a result"


def _blame(reports: dict[int, tuple], died: list[int], procs: list) -> RankError:
    """The error of a failed run: a rank that died comes first (its peers' errors are most likely
    consequences), then a rank that raised on its own, then one that raised for a lost peer."""
    errors = [r for r in reports if reports[r][0] == "error"]   # in arrival order
    own = [r for r in errors if not any(m in reports[r][1] for m in _PEER_LOST)]
    first, *rest = died + own + [r for r in errors if r not in own]
    text = {r: f"died: {_death(procs[r])}" for r in died} | {r: reports[r][1] for r in errors}
    secondary = {r: text[r] for r in rest}
    if first in died:
        return RankError(first, _death(procs[first]), died=True, exitcode=procs[first].exitcode,
                         secondary=secondary)
    return RankError(first, text[first], secondary=secondary)


# What a rank's error says when it gave up waiting for a peer, in a collective or at the store.
_WAITED = ("Timed out waiting", "Watchdog caught collective operation timeout", "Socket Timeout",
           "wait timeout after")


class RankHung(TimeoutError):
    """A rank stopped making progress: it neither finished nor failed, while its peers timed out
    waiting for it (or the run's own timeout passed). ``rank`` is the rank to look at first,
    ``ranks`` every rank that hung, ``progress`` what each rank's progress stamp last said
    (:mod:`course_lib.dist_progress`), and ``secondary`` the errors of the ranks that waited.

    A ``TimeoutError``, not a ``RankError``: code that tells a rank that raised from a run that
    hung (``except RankError: ... except TimeoutError: ...``) keeps telling them apart."""

    __module__ = "course_lib.dist"

    def __init__(self, ranks: list[int], headline: str, progress: dict[int, str],
                 secondary: dict[int, str] | None = None) -> None:
        self.rank, self.ranks = ranks[0], list(ranks)
        self.progress = dict(progress)
        self.secondary = dict(secondary or {})
        msg = f"rank {ranks[0]} hung: {headline}: {progress[ranks[0]]}" + "".join(
            f"\nrank {r} hung too: {progress[r]}" for r in ranks[1:])
        if self.secondary:
            msg += "\nthe ranks that waited for it:" + "".join(
                f"\n  rank {r}: {progress[r]}; then {_last_line(t)}"
                for r, t in self.secondary.items())
        super().__init__(msg)


def _waited(text: str) -> bool:
    """Whether a rank's error is only that of waiting for a peer that did not come (or left)."""
    return any(m in text for m in _WAITED + _PEER_LOST)


def _hang(pending: list[int], reports: dict[int, tuple], stamps: dict[int, dict], *,
          timeout: float, collective_timeout: float) -> RankHung:
    """The error of a run in which no rank failed on its own: the ranks still running (or, if
    none is, every rank that timed out) are the ones that hung; among them, those not waiting in
    a collective (or whose heartbeat stopped) are named first, since the others wait for them."""
    from . import dist_progress
    now = time.time()
    errors = [r for r in reports if reports[r][0] == "error"]
    errors.sort(key=lambda r: not any(m in reports[r][1] for m in _WAITED))   # who timed out, first
    # where a rank that reported an error was when its worker ended, not its reporting since
    progress = {r: (f"last seen {stamps[r].get('work') or stamps[r]['doing']}" if r in stamps else "no progress stamp")
                for r in errors}
    if not pending:
        headline = (f"every rank timed out waiting inside a collective (after {collective_timeout:g} s): "
                    f"they do not call the same collectives, or one waits for a rank that never calls it")
        return RankHung(errors, headline, {r: f"{progress[r]}; then {_last_line(reports[r][1])}"
                                           for r in errors})

    def stuck(r: int) -> bool:
        s = stamps.get(r)
        return not s or not s["collective"] or now - s["t"] > 1.0
    hung = [r for r in pending if stuck(r)] or pending
    waiting = {r: "still waiting when the run was stopped" for r in pending if r not in hung}
    progress |= {r: dist_progress.describe(stamps.get(r), now) for r in pending}
    if errors:
        headline = (f"it stopped making progress while its peers waited for it "
                    f"(they timed out after the collective timeout, {collective_timeout:g} s)")
    else:
        headline = f"it did not finish within the run's timeout, {timeout:g} s"
    return RankHung(hung, headline, progress, {r: reports[r][1] for r in errors} | waiting)
