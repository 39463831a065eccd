"""Closed-form calculators and a discrete-event simulator of synchronous RL, asynchronous RL
with stale weights and PipelineRL.

``simulate`` follows the same rules as the real actor/learner processes (``course_lib.rl.actors``)
and returns the same ``Trace`` (``course_lib.rl.trace``: the record of a run, its metrics and its
timeline ``draw``; re-exported here), so a simulated run and a measured one are read and drawn
alike. ``replay`` simulates a measured run again with the component times it measured.

Closed forms (derived in the book, checked against the simulator in the tests):

* ``sync_utilisation``: a static batch of ``slots`` sequences runs for E[max L] decode steps and
  produces E[L] tokens per slot: utilisation E[L] / E[max_slots L] (less while the learner trains).
* ``expected_lag``: with in-flight updates, new weights arrive every Δ = B·E[L]·t/(n·S) seconds
  and a token is trained (E_tok[age] + d)/Δ versions late on average, where
  E_tok[age] = t·E[L²]/(2E[L]) is the token-weighted time from sampling to the end of its
  sequence and d the delay from a full batch to new weights in use (training + transfer). The
  simulator's exact count comes out 5–12 % lower: it moves in whole decode steps, and sequences
  that finish in the same step share a batch boundary, so they wait a little less than Δ/2.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from .._validate import choice, positive, positive_int
from .task import LengthDist, Problems, stream_seed
from .trace import MODES, Trace, draw, timeline_legend

__all__ = ["MODES", "Trace", "sync_utilisation", "pipeline_period", "expected_lag", "simulate", "replay",
           "draw", "timeline_legend"]


# ----------------------------------------------------------------------------- closed forms
def sync_utilisation(dist: LengthDist, slots: int, t_decode: float = 1.0, t_train: float = 0.0) -> float:
    """Actor utilisation of synchronous RL: ``slots`` sequences (all actors together) start
    at once and the learner needs every one of them, so a step lasts E[max L] decode steps plus
    training: E[L]·t_decode / (E[max L]·t_decode + t_train). With t_train = 0 it is the
    generation phase alone, E[L]/E[max L]: the straggler tax."""
    slots = positive_int("slots", slots)
    t_decode = positive("t_decode", t_decode)
    t_train = positive("t_train", t_train, allow_zero=True)
    return dist.mean() * t_decode / (dist.expected_max(slots) * t_decode + t_train)


def pipeline_period(dist: LengthDist, n_actors: int, slots: int, batch: int, t_decode: float,
                    t_train: float = 0.0) -> float:
    """Seconds between optimizer steps in steady-state PipelineRL: the slower of generating one
    batch, B·E[L]·t/(n·S), and training on it."""
    n, s, b = positive_int("n_actors", n_actors), positive_int("slots", slots), positive_int("batch", batch)
    return max(b * dist.mean() * positive("t_decode", t_decode) / (n * s),
               positive("t_train", t_train, allow_zero=True))


def expected_lag(dist: LengthDist, n_actors: int, slots: int, batch: int, t_decode: float,
                 t_delay: float = 0.0) -> float:
    """Token-weighted mean policy lag under in-flight updates (versions), in steady state with
    generation the bottleneck: (E_tok[age] + t_delay)/Δ with E_tok[age] = t·E[L²]/(2E[L]) and Δ
    the generation time of one batch, B·E[L]·t/(n·S). ``t_delay`` is the time from a full batch
    to the new weights being used by the actors (training + broadcast + pick-up)."""
    delta = pipeline_period(dist, n_actors, slots, batch, t_decode)
    age = t_decode * dist.moment(2) / (2 * dist.mean())
    return (age + positive("t_delay", t_delay, allow_zero=True)) / delta


# ----------------------------------------------------------------------------- the simulator
def _token_lags(s0: int, s1: int, trained_at: int, cs: list[int], cv: list[int]) -> list[tuple[int, int]]:
    """(lag, tokens) of a sequence sampled at global decode steps s0 … s1−1, given the steps
    ``cs`` at which versions ``cv`` took effect (in-flight updates)."""
    lo = int(np.searchsorted(cs, s0, side="right")) - 1
    hi = int(np.searchsorted(cs, s1 - 1, side="right")) - 1
    out = []
    for i in range(lo, hi + 1):
        a, b = max(s0, cs[i]), min(s1, cs[i + 1] if i + 1 < len(cs) else s1)
        if b > a:
            out.append((trained_at - cv[i], b - a))
    return out


def simulate(mode: str, dist: LengthDist, n_actors: int, slots: int, batch: int, steps: int,
             t_decode: float, t_train: float, t_publish: float = 0.0, t_swap: float = 0.0,
             max_lag: int | None = 4, seed: int = 0, record: bool = False) -> Trace:
    """Discrete-event simulation of ``steps`` optimizer steps of the three modes.

    Same rules as the real processes: ``n_actors`` generators with ``slots`` sequences each,
    one decode step (every slot one token) takes ``t_decode`` s; the learner trains on
    ``batch`` finished sequences in ``t_train`` s; new weights reach the actors ``t_publish`` s
    later, are picked up at the next decode-step boundary and cost ``t_swap`` s to load.
    ``sync``: rounds of batch/n_actors problems per actor (slots refilled within the round; with
    batch = n_actors × slots a round is one static batch), each round waiting for the weights
    trained on the previous one; ``async``: the same rounds, round j sampled by version j − 1;
    ``pipeline``: a finished slot takes a new problem at once and weights change in flight; an
    actor starts a sequence only while it is at most ``max_lag`` batches ahead of the learner
    (None: never throttled). Weights that arrive during a round of a static mode wait for its
    end (their load time ``t_swap`` is not simulated there). Problems come from the same seeded
    streams as the real actors'.

    ``record=True`` also keeps, in ``stats``, what a per-sequence picture needs, in global decode
    steps (all actors step together): ``"sequences"``, one (slot, first step, end step, optimizer
    step that trained it) per trained sequence; ``"versions"``, the steps
    at which each weight version took effect and its number; ``"batches"``, the step at which
    each optimizer step took its batch.
    """
    mode = choice("mode", mode, MODES)
    n, S, B = positive_int("n_actors", n_actors), positive_int("slots", slots), positive_int("batch", batch)
    steps = positive_int("steps", steps)
    t_decode, t_train = positive("t_decode", t_decode), positive("t_train", t_train, allow_zero=True)
    t_publish, t_swap = positive("t_publish", t_publish, allow_zero=True), positive("t_swap", t_swap, allow_zero=True)
    if max_lag is not None:
        max_lag = positive_int("max_lag", max_lag, minimum=0)
    if B % n:
        raise ValueError(f"batch must be a multiple of n_actors={n}, got {batch}")
    q = B // n                          # sequences per actor per optimizer step
    streams = [Problems(dist, stream_seed(seed, a + 1)) for a in range(n)]
    active, remaining = np.zeros(n * S, bool), np.zeros(n * S, np.int64)
    s_start, started, batches = np.zeros(n * S, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    todo, round_version, v_start = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n * S, np.int64)
    queues: list[list] = [[] for _ in range(n)]
    seg_t: list[tuple] = []            # (t0, t1, decode steps) of every stretch of decoding
    seg_busy: list[np.ndarray] = []    # busy slots of each actor during it
    train, cs, cv = [], [0], [0]
    lag: dict[int, int] = {}
    seq_versions, seq_lengths, seq_lag = [], [], []
    now, gs, version, done, busy_until = 0.0, 0, 0, 0, None
    arrivals: list[tuple[float, int]] = []
    trained: list[tuple[int, int, int, int]] = []        # record=True: (slot, s0, s1, step)
    taken: list[int] = []                                # the decode step each batch was taken at

    def start(i: int) -> None:
        a = i // S
        remaining[i] = streams[a].next()[1]
        active[i], s_start[i], v_start[i] = True, gs, round_version[a]
        started[a] += 1

    def refill() -> None:
        if mode == "pipeline":
            for i in np.nonzero(~active)[0]:
                if max_lag is None or started[i // S] < (version + 1 + max_lag) * q:
                    start(int(i))
            return
        busy = active.reshape(n, S).any(1)
        for a in range(n):
            need = batches[a] - (mode == "async")             # sync: fresh; async: one stale
            if todo[a] == 0 and not busy[a] and version >= need:
                todo[a], batches[a] = q, batches[a] + 1       # a new round of q problems,
                round_version[a] = max(need, 0)               # all sampled by these weights
            for i in np.nonzero(~active[a * S:(a + 1) * S])[0][:todo[a]]:
                start(a * S + int(i))
                todo[a] -= 1

    refill()
    while done < steps:
        # 1. events that are due: the learner finishing a step, weights arriving
        while True:
            if busy_until is not None and busy_until <= now + 1e-12:
                done, busy_until = done + 1, None
                if done < steps:
                    heapq.heappush(arrivals, (train[-1][1] + t_publish, done))
            elif arrivals and arrivals[0][0] <= now + 1e-12:
                version = heapq.heappop(arrivals)[1]
                cs.append(gs)
                cv.append(version)
                if mode == "pipeline" or not active.any():   # static batches swap between batches
                    now += t_swap
            else:
                break
        if done >= steps:
            break
        refill()
        # 2. the learner starts a step when it has a full batch
        if busy_until is None:
            if mode == "pipeline":      # one FIFO across actors (finish order)
                take = queues[0][:B] if len(queues[0]) >= B else None
                if take is not None:
                    del queues[0][:B]
            elif all(len(qs) >= q for qs in queues):   # round j of every actor
                take = [x for qs in queues for x in qs[:q]]
                for qs in queues:
                    del qs[:q]
            else:
                take = None
            if take is not None:
                taken.append(gs)
                for s0, s1, v0, slot in take:
                    if record:
                        trained.append((slot, s0, s1, done))
                    parts = (_token_lags(s0, s1, done, cs, cv) if mode == "pipeline"
                             else [(done - v0, s1 - s0)])
                    for k, c in parts:
                        lag[k] = lag.get(k, 0) + c
                    seq_versions.append(len(parts))
                    seq_lengths.append(s1 - s0)
                    seq_lag.append(sum(k * c for k, c in parts) / (s1 - s0))
                busy_until = now + t_train
                train.append((now, busy_until))
        # 3. decode until the next finish or the next learner/weights event
        events = ([busy_until] if busy_until is not None else []) + [t for t, _ in arrivals[:1]]
        if active.any():
            k = int(remaining[active].min())
            if events:
                k = max(1, min(k, math.ceil((min(events) - now) / t_decode - 1e-9)))
            seg_t.append((now, now + k * t_decode, k))
            seg_busy.append(active.reshape(n, S).sum(1))
            remaining[active] -= k
            gs, now = gs + k, now + k * t_decode
            for i in np.nonzero(active & (remaining == 0))[0]:
                active[i] = False
                queues[0 if mode == "pipeline" else i // S].append((int(s_start[i]), gs, int(v_start[i]), int(i)))
        elif events:
            now = max(now, min(events))
        else:
            raise RuntimeError("simulation stalled: no sequence in flight and no batch to train on "
                               "(is max_lag too small for this batch?)")
    st, sb = np.asarray(seg_t, float).reshape(-1, 3), np.asarray(seg_busy, float).reshape(-1, n)
    arr = [np.column_stack([st[:, :2], sb[:, a], st[:, 2]])[sb[:, a] > 0] for a in range(n)]
    lag_tokens = np.zeros(max(lag) + 1 if lag else 1)
    for k, c in lag.items():
        lag_tokens[k] = c
    stats = {"t_decode": t_decode, "t_train": t_train, "simulated": True}
    if record:
        stats.update(sequences=trained, versions=(list(cs), list(cv)), batches=taken)
    return Trace(mode, n, S, B, (0.0, train[-1][1]), arr, np.asarray(train, float), np.full(len(train), np.nan),
                 lag_tokens, np.asarray(seq_versions), np.asarray(seq_lengths), np.asarray(seq_lag), stats)


def replay(trace: Trace, dist: LengthDist, seed: int = 0, **changes) -> Trace:
    """Simulate the run that produced ``trace`` (same mode, sizes, steps and problem streams)
    with the component times it measured: mean decode step, mean optimizer step, weight pick-up
    latency and load time. ``changes`` override any ``simulate`` argument."""
    s = trace.stats
    args = dict(mode=trace.mode, dist=dist, n_actors=trace.n_actors, slots=trace.slots,
                batch=trace.batch, steps=len(trace.train), t_decode=s["t_decode"], t_train=s["t_train"],
                t_publish=s.get("pickup_latency", 0.0), t_swap=s.get("t_swap", 0.0), seed=seed)
    args.update(changes)
    return simulate(**args)
