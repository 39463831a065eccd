"""Traces of RL runs (real or simulated), their metrics, closed-form calculators, and a
discrete-event simulator of synchronous RL, asynchronous RL with stale weights and PipelineRL.

A ``Trace`` is what both the real actor/learner processes (``course_lib.rl.actors``) and
``simulate`` return, so every metric and every figure treats them the same way:

* actor utilisation = Σ (decode-step time × busy slots / slots) / (actors × wall time): the share
  of the generators' slot-seconds that produced a token (idle waits and finished-but-padded
  slots both count as waste);
* tokens/s = generated response tokens / wall time; the wall time is the window from the first
  weight publication to the end of the last optimizer step;
* lag of a token = learner version when it is trained − policy version that sampled it.

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
from dataclasses import dataclass, field

import numpy as np

from .._validate import choice, positive, positive_int
from .task import LengthDist, Problems, stream_seed

__all__ = ["MODES", "Trace", "sync_utilisation", "pipeline_period", "expected_lag", "simulate", "replay",
           "draw"]

MODES = ("sync", "async", "pipeline")


@dataclass
class Trace:
    """One RL run. ``gen[a]`` rows are (t0, t1, busy slots, decode steps) of actor ``a``;
    ``train`` rows are (t0, t1) of the learner's optimizer steps; ``lag_tokens[k]`` counts
    trained tokens that were k versions old and ``seq_lag`` is the mean lag of each trained
    sequence's tokens; times are seconds from the first publication."""

    mode: str
    n_actors: int
    slots: int
    batch: int
    window: tuple[float, float]
    gen: list[np.ndarray]
    train: np.ndarray
    rewards: np.ndarray
    lag_tokens: np.ndarray
    seq_versions: np.ndarray
    seq_lengths: np.ndarray
    seq_lag: np.ndarray
    stats: dict = field(default_factory=dict)

    @property
    def wall(self) -> float:
        return self.window[1] - self.window[0]

    def _clipped(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: seconds inside the window, and the fraction of the row that is inside."""
        if len(g) == 0:
            return np.zeros(0), np.zeros(0)
        t0, t1 = np.maximum(g[:, 0], self.window[0]), np.minimum(g[:, 1], self.window[1])
        inside = np.clip(t1 - t0, 0.0, None)
        return inside, np.divide(inside, g[:, 1] - g[:, 0], out=np.zeros(len(g)), where=g[:, 1] > g[:, 0])

    def utilisation(self) -> float:
        """Share of the actors' slot-seconds that produced tokens."""
        busy = sum(float((self._clipped(g)[0] * g[:, 2]).sum()) for g in self.gen if len(g))
        return busy / (self.slots * self.n_actors * self.wall)

    def slot_utilisation(self) -> float:
        """Busy slot-steps / all slot-steps while decoding (ignores time spent not decoding)."""
        steps = sum(float(g[:, 3].sum()) for g in self.gen if len(g))
        busy = sum(float((g[:, 2] * g[:, 3]).sum()) for g in self.gen if len(g))
        return busy / (self.slots * steps)

    def tokens_per_s(self) -> float:
        """Response tokens generated per second inside the window, all actors together."""
        return sum(float((self._clipped(g)[1] * g[:, 2] * g[:, 3]).sum()) for g in self.gen if len(g)) / self.wall

    def steps_per_s(self) -> float:
        return len(self.train) / self.wall

    def decode_steps_per_update(self) -> float:
        """Decode steps per actor per optimizer step (steps started inside the window): the
        machine-independent cost of one update on the generators' critical path."""
        steps = sum(float(g[g[:, 0] < self.window[1], 3].sum()) for g in self.gen if len(g))
        return steps / (self.n_actors * len(self.train))

    def mean_lag(self) -> float:
        """Token-weighted mean lag (versions)."""
        k = np.arange(len(self.lag_tokens))
        return float((k * self.lag_tokens).sum() / self.lag_tokens.sum())

    def time_to_reward(self, threshold: float, smooth: int = 5) -> float:
        """Seconds until the running mean of ``smooth`` step rewards first reaches ``threshold``
        (inf if never)."""
        r = np.convolve(self.rewards, np.ones(smooth) / smooth, mode="valid")
        hit = np.nonzero(r >= threshold)[0]
        return float(self.train[hit[0] + smooth - 1, 1] - self.window[0]) if len(hit) else math.inf

    def summary(self) -> dict:
        """The headline numbers, rounded for printing."""
        return {"mode": self.mode, "wall_s": round(self.wall, 2), "steps": len(self.train),
                "utilisation": round(self.utilisation(), 3), "tokens_per_s": round(self.tokens_per_s()),
                "mean_lag": round(self.mean_lag(), 2),
                "multi_version_seqs": round(float((self.seq_versions > 1).mean()), 3),
                "final_reward": round(float(self.rewards[-5:].mean()), 3)}


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
             max_lag: int | None = 4, seed: int = 0) -> Trace:
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
                for s0, s1, v0 in take:
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
                queues[0 if mode == "pipeline" else i // S].append((int(s_start[i]), gs, int(v_start[i])))
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
    return Trace(mode, n, S, B, (0.0, train[-1][1]), arr, np.asarray(train, float), np.full(len(train), np.nan),
                 lag_tokens, np.asarray(seq_versions), np.asarray(seq_lengths), np.asarray(seq_lag),
                 {"t_decode": t_decode, "t_train": t_train, "simulated": True})


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


def draw(trace: Trace, ax=None, t_max: float | None = None, title: str | None = None):
    """Timeline of a trace: the learner's optimizer steps on top, then one row per actor whose
    decode steps are shaded by the share of busy slots (dark = all busy, pale = stragglers
    only, blank = waiting). Returns the axes."""
    from matplotlib.colors import LinearSegmentedColormap
    from .. import plots
    if ax is None:
        _, ax = plots.figure(figsize=(7.2, 0.5 * trace.n_actors + 1.6))
    t_max = trace.window[1] if t_max is None else positive("t_max", t_max)
    cmap = LinearSegmentedColormap.from_list("busy", ["#e3eef0", plots.THEORY])
    n = trace.n_actors
    for a, g in enumerate(trace.gen):
        g = g[g[:, 0] < t_max]
        if len(g) == 0:
            continue
        # merge consecutive steps with the same number of busy slots, for a light figure
        cut = np.nonzero((np.diff(g[:, 2]) != 0) | (g[1:, 0] - g[:-1, 1] > 1e-3))[0] + 1
        for seg in np.split(g, cut):
            t0, t1 = seg[0, 0], min(seg[-1, 1], t_max)
            ax.broken_barh([(t0, t1 - t0)], (n - 1 - a - 0.4, 0.8), facecolors=cmap(seg[0, 2] / trace.slots),
                           linewidth=0)
    tr = trace.train[trace.train[:, 0] < t_max]
    ax.broken_barh([(t0, min(t1, t_max) - t0) for t0, t1 in tr], (n - 0.4, 0.8), facecolors=plots.ACCENT,
                   edgecolors="white", linewidth=0.3)
    ax.set_yticks(range(n + 1), [f"actor {n - i}" for i in range(n)] + ["learner"])
    ax.set_xlim(0, t_max)
    ax.set_ylim(-0.6, n + 0.6)
    ax.set_xlabel("time (s)")
    ax.grid(False)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
