"""Stages 1-4 in parallel worker processes, with an honest speed-up measurement, and the whole
crawl → clean documents pipeline with per-stage accounting.

The pipeline is split the way every distributed data engine splits it:

- a **map** over chunks of pages, embarrassingly parallel because each page's features are a pure
  function of the page: decode + normalise + content hash (stage 1), MinHash signature
  (stage 2), Gopher statistics (stage 3); later, tokenisation (stage 4);
- a **reduce** that needs all pages at once but only their small features: exact dedup is a
  group-by on the hash, near-dedup an LSH index over the signatures.

On one machine the map runs in a ``ProcessPoolExecutor`` (start method "spawn" or "forkserver":
workers start clean, with no copy of the parent's threads or locks). When one machine is not
enough, the same pure functions are what you hand to Ray Data (``map_batches``), Apache Spark
(``mapPartitions`` then a ``groupBy`` on the hash / the band keys) or Hugging Face datatrove
(pipeline steps on Slurm or local executors); the reduce becomes a shuffle keyed by hash or band.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, is_dataclass

import numpy as np

from .._validate import choice, positive_int
from . import dedup, quality

__all__ = ["chunked", "parallel_map", "Speedup", "measure_speedup", "PageFeatures",
           "featurize_chunk", "PipelineResult", "map_args", "run_pipeline", "reduce_pipeline",
           "with_copies", "most_copied"]


def _init_worker() -> None:
    """Runs once in every worker: no tokenizer threads inside workers, and die with the parent."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import course_lib._forkserver_guard  # noqa: F401  (PR_SET_PDEATHSIG: no orphaned workers)


def _noop(x: int) -> int:
    return x


def chunked(items: Sequence, n_chunks: int) -> list[list]:
    """Split ``items`` into ``n_chunks`` contiguous chunks of near-equal size (order kept)."""
    n_chunks = positive_int("n_chunks", n_chunks)
    bounds = np.linspace(0, len(items), n_chunks + 1).round().astype(int)
    return [list(items[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _pool(workers: int, start_method: str) -> ProcessPoolExecutor:
    choice("start_method", start_method, ("spawn", "forkserver"))
    return ProcessPoolExecutor(max_workers=positive_int("workers", workers),
                               mp_context=mp.get_context(start_method), initializer=_init_worker)


def parallel_map(fn: Callable, items: Sequence, workers: int = 2, start_method: str = "spawn") -> list:
    """``[fn(x) for x in items]`` computed by ``workers`` processes, results in input order.
    ``fn`` must be importable (a module-level function of course_lib). ``workers=1`` runs inline."""
    if positive_int("workers", workers) == 1:
        return [fn(x) for x in items]
    with _pool(workers, start_method) as ex:
        return list(ex.map(fn, items))


@dataclass(frozen=True)
class Speedup:
    """One serial and one parallel run of the same map over the same chunks."""

    workers: int
    serial_s: float
    startup_s: float
    parallel_s: float
    identical: bool
    results: list = field(default_factory=list, repr=False, compare=False)

    @property
    def speedup(self) -> float:
        """Serial time / parallel time, pool start-up excluded (it is paid once per job)."""
        return self.serial_s / self.parallel_s

    @property
    def speedup_with_startup(self) -> float:
        return self.serial_s / (self.parallel_s + self.startup_s)


def measure_speedup(fn: Callable, chunks: Sequence, workers: int = 2, start_method: str = "spawn",
                    compare: Callable = lambda result: result) -> Speedup:
    """Time ``fn`` over ``chunks`` in this process, then in a pool of ``workers`` processes
    (started and warmed up first, and timed separately), and check that ``compare(result)`` is
    identical for every chunk (leave out anything legitimately run-dependent, like timers).
    Amdahl and the machine bound the answer: at most ``workers``×, and less when the chunks are
    uneven, the results are large to send back, or other programs share the cores."""
    t0 = time.perf_counter()
    serial = [fn(c) for c in chunks]
    serial_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _pool(workers, start_method) as ex:
        list(ex.map(_noop, range(workers)))
        startup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        par = list(ex.map(fn, chunks))
        parallel_s = time.perf_counter() - t0
    return Speedup(positive_int("workers", workers), serial_s, startup_s, parallel_s,
                   all(_equal(compare(a), compare(b)) for a, b in zip(serial, par, strict=True)), par)


def _equal(a, b) -> bool:
    """Deep equality that understands numpy arrays and dataclasses (``==`` on them does not
    return a bool, and pickled bytes depend on object sharing, not just on values)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if is_dataclass(a):
        return _equal(vars(a), vars(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------------------------ the pipeline
@dataclass
class PageFeatures:
    """What the map stage computes for one page; ``reason`` is set if stage 1 rejected it."""

    page_id: int
    n_bytes: int
    reason: str | None = None
    text: str | None = None
    hash: str | None = None
    signature: np.ndarray | None = None
    failed: list[str] = field(default_factory=list)


STAGE_TIMERS = ("normalise", "minhash", "quality")


def featurize_chunk(args: tuple) -> tuple[list[PageFeatures], dict[str, float]]:
    """Map worker: ``(pages, k, num_perm, seed, max_bytes)`` → features of each page and the CPU
    seconds spent in each stage. Pure: the same pages give the same features in any process."""
    pages, k, num_perm, seed, max_bytes = args
    timers = dict.fromkeys(STAGE_TIMERS, 0.0)
    out = []
    for page in pages:
        t0 = time.process_time()
        f = PageFeatures(page.page_id, len(page.raw))
        try:
            f.text = dedup.decode_page(page.raw, page.charset, max_bytes)
            f.hash = dedup.content_hash(f.text)
        except dedup.PageError as e:
            f.reason = e.reason
        t1 = time.process_time()
        timers["normalise"] += t1 - t0
        if f.text is not None:
            f.signature = dedup.signature(f.text, k, num_perm, seed)
            t2 = time.process_time()
            f.failed = quality.failed_rules(f.text)
            timers["minhash"] += t2 - t1
            timers["quality"] += time.process_time() - t2
        out.append(f)
    return out, timers


@dataclass
class PipelineResult:
    """Per-page fate and per-stage accounting of a pipeline run."""

    fate: dict[int, str]                 # page_id -> "kept", a stage-1 reason, "exact_dup",
    texts: dict[int, str]                # "near_dup" or "quality:<first rule failed>"
    features: dict[int, PageFeatures]
    stages: list[dict]
    cpu_s: dict[str, float]

    @property
    def kept(self) -> list[int]:
        return [pid for pid, f in self.fate.items() if f == "kept"]

    def removed(self, prefix: str) -> set[int]:
        return {pid for pid, f in self.fate.items() if f.startswith(prefix)}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.fate.values():
            out[f] = out.get(f, 0) + 1
        return out


def map_args(pages: Sequence, n_chunks: int, *, k: int = 5, num_perm: int = 128, seed: int = 1,
             max_bytes: int = 1 << 20) -> list[tuple]:
    """The arguments of ``featurize_chunk`` for ``pages`` cut into ``n_chunks`` chunks."""
    return [(c, k, num_perm, seed, max_bytes) for c in chunked(list(pages), n_chunks)]


def run_pipeline(pages: Sequence, *, workers: int = 1, k: int = 5, num_perm: int = 128,
                 bands: int = 14, rows: int = 9, verify: float | None = None, seed: int = 1,
                 max_bytes: int = 1 << 20, n_chunks: int | None = None,
                 start_method: str = "spawn") -> PipelineResult:
    """Stages 1-3 over ``pages`` in crawl order: the map (``featurize_chunk`` on ``workers``
    processes), then ``reduce_pipeline``."""
    args = map_args(pages, n_chunks or 4 * positive_int("workers", workers), k=k, num_perm=num_perm,
                    seed=seed, max_bytes=max_bytes)
    mapped = parallel_map(featurize_chunk, args, workers, start_method)
    return reduce_pipeline(pages, mapped, bands=bands, rows=rows, verify=verify, seed=seed)


def reduce_pipeline(pages: Sequence, mapped: list, *, bands: int = 14, rows: int = 9,
                    verify: float | None = None, seed: int = 1) -> PipelineResult:
    """Apply the stages in order to the mapped features: decode rejections, exact dedup,
    MinHash-LSH near-dedup, Gopher rules (first failing rule). Every page ends with exactly one
    fate, so the counts always add up to ``len(pages)``: nothing is lost silently."""
    feats = {f.page_id: f for fs, _ in mapped for f in fs}
    cpu = {name: sum(t[name] for _, t in mapped) for name in STAGE_TIMERS}
    order = [p.page_id for p in pages]
    fate: dict[int, str] = {pid: feats[pid].reason for pid in order if feats[pid].reason}
    t0 = time.process_time()
    alive = [pid for pid in order if pid not in fate]
    for pid, dup_of in dedup.exact_dedup((pid, feats[pid].hash) for pid in alive):
        if dup_of is not None:
            fate[pid] = "exact_dup"
    t1 = time.process_time()
    alive = [pid for pid in order if pid not in fate]
    near = dedup.near_dedup([(pid, feats[pid].signature) for pid in alive], bands, rows, verify, seed)
    for pid, dup_of in near.items():
        if dup_of is not None:
            fate[pid] = "near_dup"
    cpu.update(exact_reduce=t1 - t0, lsh_reduce=time.process_time() - t1)
    for pid in order:
        if pid not in fate:
            fate[pid] = f"quality:{feats[pid].failed[0]}" if feats[pid].failed else "kept"
    texts = {pid: feats[pid].text for pid in order if fate[pid] == "kept"}
    stages, remaining = [], set(order)
    for name, test in (("1 decode + normalise", lambda f: f in dedup.REJECT_REASONS),
                       ("1 exact dedup", lambda f: f == "exact_dup"),
                       ("2 near dedup (MinHash-LSH)", lambda f: f == "near_dup"),
                       ("3 quality rules", lambda f: f.startswith("quality:"))):
        gone = {pid for pid in remaining if test(fate[pid])}
        stages.append({"stage": name, "pages_in": len(remaining), "pages_removed": len(gone),
                       "bytes_in": sum(feats[pid].n_bytes for pid in remaining),
                       "bytes_removed": sum(feats[pid].n_bytes for pid in gone)})
        remaining -= gone
    return PipelineResult(fate, texts, feats, stages, cpu)


def with_copies(result: PipelineResult, pages: Sequence) -> list[int]:
    """The kept pages plus every decodable copy of them that dedup removed (by the crawl's
    ground-truth clusters), in crawl order: the same documents with their duplicates put back."""
    kept = {p.cluster for p in pages if result.fate[p.page_id] == "kept"}
    return [p.page_id for p in pages if p.cluster in kept and not p.is_low_quality
            and result.features[p.page_id].text is not None]


def most_copied(ids: Sequence[int], pages: Sequence, n: int = 3) -> list[int]:
    """First page id of each of the ``n`` clusters with the most pages among ``ids``."""
    by_id = {p.page_id: p for p in pages}
    members: dict[int, list[int]] = {}
    for pid in ids:
        members.setdefault(by_id[pid].cluster, []).append(pid)
    top = sorted(members.values(), key=lambda m: (-len(m), m[0]))[:positive_int("n", n)]
    return [min(m) for m in top]
