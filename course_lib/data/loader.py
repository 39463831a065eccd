"""Feeding the model: a deterministic, data-parallel, resumable loader over packed shards, the
on-the-fly alternative that tokenises raw pages during training, and the measurements that
compare them with the tiny GPT's appetite.

``PackedLoader`` order: epoch ``e`` visits every row once in the permutation drawn from
``numpy.random.default_rng([seed, e])``. Step ``i`` of the epoch takes the ``batch_size ×
world_size`` rows at positions ``[i·B·W, (i+1)·B·W)`` of it, and rank ``r`` gets the ``r``-th
slice of ``batch_size`` rows. So the ranks never overlap, their union is exactly the global batch
a single process with batch ``B·W`` would read, and the position is just ``(epoch, step)``:
``state_dict()`` saves it, ``load_state_dict()`` resumes at exactly the next batch. Rows that do
not fill a last global batch of an epoch are skipped that epoch (and counted in
``rows_skipped_per_epoch``); a new permutation next epoch gives them their turn.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

from .._validate import positive, positive_int
from . import dedup, quality, tokenize
from .shards import ShardWriter, open_shards

__all__ = ["PackedLoader", "OnTheFlyLoader", "StepTimes", "time_steps", "loader_tokens_per_s",
           "train_on_loader", "dedup_experiment", "loader_worker"]


class PackedLoader:
    """Batches ``(x, y)`` (int64 tensors of shape ``(batch_size, seq_len)``) for one rank."""

    def __init__(self, shard_dir: str | Path, batch_size: int, *, rank: int = 0, world_size: int = 1,
                 seed: int = 0, shuffle: bool = True) -> None:
        self.batch_size = positive_int("batch_size", batch_size)
        self.world_size = positive_int("world_size", world_size)
        self.rank = positive_int("rank", rank, minimum=0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank={rank} must be < world_size={world_size}")
        self.seed = positive_int("seed", seed, minimum=0)
        self.shuffle = bool(shuffle)
        self.index, maps = open_shards(shard_dir)
        self._maps = [np.asarray(m) for m in maps]  # plain views of the mappings: faster indexing
        self.seq_len = self.index["seq_len"]
        self._starts = np.cumsum([0] + [m.shape[0] for m in self._maps])
        self.n_rows = int(self._starts[-1])
        self.steps_per_epoch = self.n_rows // (self.batch_size * self.world_size)
        if self.steps_per_epoch < 1:
            raise ValueError(f"{self.n_rows} rows cannot fill one global batch of "
                             f"{self.batch_size}×{self.world_size}")
        self.rows_skipped_per_epoch = self.n_rows - self.steps_per_epoch * self.batch_size * self.world_size
        self.epoch, self.step = 0, 0
        self._perm_epoch, self._perm = -1, np.empty(0, np.int64)

    @property
    def tokens_per_batch(self) -> int:
        return self.batch_size * self.seq_len

    def _order(self) -> np.ndarray:
        if self._perm_epoch != self.epoch:
            self._perm = (np.random.default_rng([self.seed, self.epoch]).permutation(self.n_rows)
                          if self.shuffle else np.arange(self.n_rows))
            self._perm_epoch = self.epoch
        return self._perm

    def row_ids(self) -> np.ndarray:
        """Global row ids of the batch the next call will return (without advancing)."""
        start = (self.step * self.world_size + self.rank) * self.batch_size
        return self._order()[start:start + self.batch_size]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` as an int64 array ``(len(ids), seq_len + 1)``, read from the memory maps."""
        shard = np.searchsorted(self._starts, ids, side="right") - 1
        local = ids - self._starts[shard]
        out = np.empty((len(ids), self.seq_len + 1), dtype=np.int64)
        for s in np.flatnonzero(np.bincount(shard, minlength=len(self._maps))):
            sel = shard == s
            out[sel] = self._maps[s][local[sel]]
        return out

    def next_batch(self):
        """The next ``(x, y)`` of this rank; advances the position (and the epoch at its end)."""
        import torch
        batch = torch.from_numpy(self.rows(self.row_ids()))
        self.step += 1
        if self.step == self.steps_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0
        return batch[:, :-1], batch[:, 1:]

    def __iter__(self) -> Iterator:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        """The position, plus what must match for a resume to be exact."""
        return {"epoch": self.epoch, "step": self.step, "seed": self.seed, "shuffle": self.shuffle,
                "batch_size": self.batch_size, "world_size": self.world_size, "n_rows": self.n_rows,
                "shards": [s["sha256"] for s in self.index["shards"]]}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``; ``ValueError`` naming the field if the data or layout differ."""
        mine = self.state_dict()
        for key in ("seed", "shuffle", "batch_size", "world_size", "n_rows", "shards"):
            if state.get(key) != mine[key]:
                raise ValueError(f"cannot resume: {key} differs (saved {state.get(key)!r}, now {mine[key]!r})")
        step = positive_int("step", state["step"], minimum=0)
        if step >= self.steps_per_epoch:
            raise ValueError(f"step={step} is beyond an epoch of {self.steps_per_epoch} steps")
        self.epoch, self.step = positive_int("epoch", state["epoch"], minimum=0), step


class OnTheFlyLoader:
    """The same batches' shape, made during training from raw pages: decode, normalise, quality
    rules, tokenise, pack. What a training job does when nobody pre-tokenised its data."""

    def __init__(self, pages: Sequence, tok, batch_size: int, seq_len: int, *, seed: int = 0,
                 filter_quality: bool = True) -> None:
        self.pages, self.tok = list(pages), tok
        self.batch_size, self.seq_len = positive_int("batch_size", batch_size), positive_int("seq_len", seq_len)
        self.filter_quality = filter_quality
        self.eos = tokenize.eos_id(tok)
        self._order = np.random.default_rng(seed).permutation(len(self.pages))
        self._pos, self._buffer = 0, np.empty(0, np.int64)
        self.skipped: dict[str, int] = {}

    @property
    def tokens_per_batch(self) -> int:
        return self.batch_size * self.seq_len

    def _next_doc(self) -> np.ndarray:
        page = self.pages[self._order[self._pos % len(self.pages)]]
        self._pos += 1
        try:
            text = dedup.decode_page(page.raw, page.charset)
        except dedup.PageError as e:
            self.skipped[e.reason] = self.skipped.get(e.reason, 0) + 1
            return np.empty(0, np.int64)
        if self.filter_quality and quality.failed_rules(text):
            self.skipped["quality"] = self.skipped.get("quality", 0) + 1
            return np.empty(0, np.int64)
        return np.append(np.asarray(self.tok.encode(text).ids, dtype=np.int64), self.eos)

    def next_batch(self):
        import torch
        need = self.batch_size * (self.seq_len + 1)
        parts = [self._buffer]
        have = self._buffer.size
        while have < need:
            doc = self._next_doc()
            parts.append(doc)
            have += doc.size
        stream = np.concatenate(parts)
        self._buffer = stream[need:]
        batch = torch.from_numpy(stream[:need].reshape(self.batch_size, self.seq_len + 1))
        return batch[:, :-1], batch[:, 1:]

    def __iter__(self) -> Iterator:
        while True:
            yield self.next_batch()


def loader_tokens_per_s(loader, n_batches: int = 50) -> float:
    """Input tokens per second the loader alone delivers (best of 3 runs of ``n_batches``)."""
    n_batches = positive_int("n_batches", n_batches)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n_batches):
            loader.next_batch()
        best = min(best, time.perf_counter() - t0)
    return n_batches * loader.tokens_per_batch / best


@dataclass
class StepTimes:
    """Per-step wall time spent waiting for data and computing (forward, backward, update)."""

    data_s: np.ndarray
    compute_s: np.ndarray
    tokens_per_step: int

    @property
    def idle_fraction(self) -> float:
        """Share of the step the model waits for its batch (synchronous loading)."""
        return float(self.data_s.sum() / (self.data_s.sum() + self.compute_s.sum()))

    @property
    def model_tokens_per_s(self) -> float:
        return self.tokens_per_step / float(np.median(self.compute_s))

    @property
    def step_s(self) -> float:
        return float(np.median(self.data_s + self.compute_s))


def time_steps(model, loader, n_steps: int = 20, lr: float = 1e-3, warmup: int = 2) -> StepTimes:
    """Train ``model`` for ``n_steps`` steps from ``loader``, timing the wait for each batch and
    the compute of each step separately (the first ``warmup`` steps are run but not recorded)."""
    import torch
    n_steps, warmup = positive_int("n_steps", n_steps), positive_int("warmup", warmup, minimum=0)
    opt = torch.optim.AdamW(model.parameters(), lr=positive("lr", lr))
    data, comp = [], []
    for i in range(warmup + n_steps):
        t0 = time.perf_counter()
        x, y = loader.next_batch()
        t1 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        if i >= warmup:
            data.append(t1 - t0)
            comp.append(t2 - t1)
    return StepTimes(np.array(data), np.array(comp), loader.tokens_per_batch)


def train_on_loader(model_cfg, loader, n_steps: int, val: torch.Tensor, lr: float = 3e-3,
                    seed: int = 0) -> dict:
    """Train a fresh ``GPT(model_cfg, seed)`` for ``n_steps`` batches of ``loader`` (AdamW, the
    course's warmup + cosine schedule, clip 1.0); return the mean training loss of the last tenth
    of the steps and the full-pass validation loss on the token tensor ``val``."""
    import torch
    from ..model import GPT
    from ..train import evaluate, lr_at
    n_steps = positive_int("n_steps", n_steps)
    model = GPT(model_cfg, seed=seed)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    losses = []
    for step in range(n_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, n_steps, lr)
        x, y = loader.next_batch()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    tail = losses[-max(1, n_steps // 10):]
    return {"model": model, "train_loss": float(np.mean(tail)), "val_loss": evaluate(model, val),
            "tokens": n_steps * loader.tokens_per_batch}


def dedup_experiment(streams: dict[str, Sequence[str]], val_texts: Sequence[str],
                     repeated_texts: Sequence[str], tok, model_cfg, workdir: str | Path, *,
                     steps: int, batch_size: int = 16, lr: float = 3e-3, seeds: Sequence[int] = (0,)) -> list[dict]:
    """Same model, same token budget (``steps`` × ``batch_size`` × seq_len), different data: for
    each named stream of texts and each seed, pack the stream into shards under ``workdir``,
    train, and report the validation loss and the loss on ``repeated_texts`` (the pages that
    were copied most often), both in nats per token."""
    import torch
    from ..train import evaluate
    eos = tokenize.eos_id(tok)

    def tokens(texts: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([np.append(a, eos) for a in tokenize.encode_texts(tok, texts)])
                                .astype(np.int64))

    val, repeated = tokens(val_texts), tokens(repeated_texts)
    rows = []
    for name, texts in streams.items():
        out_dir = Path(workdir) / name.replace(" ", "_")
        with ShardWriter(out_dir, model_cfg.seq_len, eos, tok.get_vocab_size(), rows_per_shard=1024) as w:
            for ids in tokenize.encode_texts(tok, texts):
                w.add(ids)
        for seed in seeds:
            ld = PackedLoader(out_dir, batch_size, seed=seed)
            run = train_on_loader(model_cfg, ld, steps, val, lr=lr, seed=seed)
            rows.append({"stream": name, "seed": seed, "stream_tokens": ld.n_rows * (ld.seq_len + 1),
                         "epochs": steps * batch_size / ld.n_rows, "val_loss": run["val_loss"],
                         "repeated_loss": evaluate(run["model"], repeated)})
    return rows


def loader_worker(ctx, shard_dir: str, batch_size: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """One data-parallel rank: read ``steps`` batches with ``PackedLoader(rank=ctx.rank, ...)``,
    all-gather the row ids over ``ctx.group`` and check that no two ranks read the same row.
    Returns this rank's row ids per step (for comparison with a single-process reference)."""
    import torch
    import torch.distributed as dist
    loader = PackedLoader(shard_dir, batch_size, rank=ctx.rank, world_size=ctx.world_size, seed=seed)
    mine = []
    for _ in range(steps):
        ids = loader.row_ids().copy()
        loader.next_batch()
        gathered = [torch.empty(batch_size, dtype=torch.int64) for _ in range(ctx.world_size)]
        dist.all_gather(gathered, torch.from_numpy(ids), group=ctx.group)
        every = torch.cat(gathered)
        if every.unique().numel() != every.numel():
            raise RuntimeError(f"ranks read overlapping rows at step {len(mine)}")
        mine.append(ids)
    return mine
