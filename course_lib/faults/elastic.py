"""A real elastic training job: the tiny GPT under ``torchrun``, killed, restarted, bit-identical.

``torchrun --standalone --nnodes 1 --nproc-per-node N --max-restarts K -m course_lib.faults.elastic
--out DIR --steps 12 --ckpt-every 3 --fault kill:5:1`` trains the course's GPT with FSDP2
(``fully_shard``) on gloo and checkpoints it with DCP every ``ckpt-every`` steps
(:class:`~course_lib.faults.checkpointer.ShardedCheckpointer`). When a rank dies, torch's elastic agent
stops the other ranks and starts the whole group again (``TORCHELASTIC_RESTART_COUNT`` counts the
attempts); the new ranks resume from the last *complete* checkpoint that verifies. Everything a
step depends on is in that checkpoint: the weights and AdamW state, the step, and the data
loader's position and random generator, so the resumed job computes exactly the same updates and ends with weights
bit-identical to a run that never failed. Work since that checkpoint is lost and redone.

Faults are injected on purpose, one per attempt (fault ``i`` fires in attempt ``i``):
``kill:S:R`` SIGKILLs rank R in the middle of step S (after its backward pass), ``save:S:R``
SIGKILLs rank R inside the save of step S after it wrote its shard (a partial checkpoint), and
``hang:S:R`` makes rank R stop responding before step S, which the process-group timeout turns
into an error and a restart. ``flip``, ``swap``, ``trunc``, ``meta`` and ``delete`` (``:S:R``)
make rank R break the checkpoint of step S once it is complete (a flipped byte in its shard, its
shard replaced by the previous checkpoint's, cut to half, DCP's ``.metadata`` flipped, the shard
deleted: ``integrity.damage``) and then SIGKILL itself: the restarted job refuses that
checkpoint, naming the file, and resumes from the one before; if no complete checkpoint
verifies, or one cannot be read, it stops (no restart) rather than start over them from step 0.
The checkpoint folder belongs to the job :func:`job_id` names (its seed, model, learning rate
and batch): a relaunch of the same job resumes it; another job, or a second copy running at the
same time, is refused. ``course_lib.faults.jobs.run_job`` launches the job from Python and reads
back what happened (``course_lib.faults.monitor`` has the straggler monitor and the hang demo).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_state_dict)

from ..corpus import get_batch
from ..model import GPT, GPTConfig
from ..stability.checkpoint import save_atomic
from .checkpointer import ShardedCheckpointer, checkpoint_dir, incomplete_steps
from .digests import full_digests
from .inject import DAMAGES, FAULT_KINDS, Fault, _DyingWriter, _sigkill_self  # noqa: F401 - Fault is public here
from .integrity import FolderError, damage

__all__ = ["DEMO_CONFIG", "Fault", "JobConfig", "job_id", "WindowLoader", "TrainState", "build_state", "train_step",
           "train"]

DEMO_CONFIG = {"vocab_size": 64, "seq_len": 16, "n_layers": 2, "n_heads": 2, "d_model": 32}
@dataclass(frozen=True)
class JobConfig:
    """What the job trains and how it checkpoints; ``faults[i]`` fires in attempt ``i``. ``keep_last``
    and ``keep_every`` are the checkpoints' retention (``ShardedCheckpointer``); ``run_id``
    names the job that owns the checkpoint folder (None: :func:`job_id`)."""

    steps: int = 12
    ckpt_every: int = 3
    global_batch: int = 8
    seed: int = 0
    lr: float = 3e-3
    model: dict = field(default_factory=lambda: dict(DEMO_CONFIG))
    faults: tuple[Fault, ...] = ()
    async_save: bool = False
    timeout_s: float = 30.0     # the process-group timeout: how long a collective may wait
    keep_last: int = 3
    keep_every: int | None = None
    run_id: str | None = None

    def argv(self, out: str | Path) -> list[str]:
        """The command-line arguments that make ``python -m course_lib.faults.elastic`` run this."""
        args = ["--out", str(out), "--steps", str(self.steps), "--ckpt-every", str(self.ckpt_every),
                "--global-batch", str(self.global_batch), "--seed", str(self.seed), "--lr", repr(self.lr),
                "--model", json.dumps(self.model), "--timeout", repr(self.timeout_s), "--keep-last",
                str(self.keep_last)]
        args += ["--keep-every", str(self.keep_every)] if self.keep_every else []
        args += ["--run-id", self.run_id] if self.run_id else []
        args += [a for f in self.faults for a in ("--fault", str(f))]
        return args + (["--async-save"] if self.async_save else [])


def job_id(job: JobConfig) -> str:
    """The id of the training a job config defines: what its checkpoints depend on (seed, model,
    learning rate, batch), not how long it runs, how often it saves, or its faults."""
    what = json.dumps([job.seed, job.lr, job.global_batch, job.model], sort_keys=True)
    return "gpt-" + hashlib.sha256(what.encode()).hexdigest()[:12]


def demo_tokens(vocab_size: int, n: int, seed: int) -> torch.Tensor:
    """A learnable token stream: a fixed cyclic pattern with 10 % of tokens replaced at random."""
    gen = torch.Generator().manual_seed(seed)
    base = (torch.arange(n) * 5 + torch.arange(n) // 7) % vocab_size
    noise = torch.randint(0, vocab_size, (n,), generator=gen)
    return torch.where(torch.rand(n, generator=gen) < 0.1, noise, base)


class WindowLoader:
    """Random windows of a token stream, drawn with the loader's own generator.

    Its state is the generator's state and the number of batches drawn: a resumed job that does
    not restore both sees different batches, and its weights diverge from the uninterrupted run.
    """

    def __init__(self, tokens: torch.Tensor, batch: int, seq_len: int, seed: int) -> None:
        self.tokens, self.batch, self.seq_len = tokens, batch, seq_len
        self.gen = torch.Generator().manual_seed(seed)
        self.position = 0

    def next(self) -> torch.Tensor:
        """The next (batch, seq_len + 1) window of token ids (the course's ``corpus.get_batch``)."""
        x, y = get_batch(self.tokens, self.batch, self.seq_len, self.gen)
        self.position += 1
        return torch.cat([x, y[:, -1:]], dim=1)

    def state_dict(self) -> dict:
        return {"generator": self.gen.get_state(), "position": torch.tensor(self.position)}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["generator"])
        self.position = int(state["position"])


class TrainState:
    """Everything a step depends on, as one DCP ``Stateful``: sharded model and optimizer state
    (via ``get_state_dict``, so they reshard on load), the loader, and the step count."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: WindowLoader) -> None:
        self.model, self.optimizer, self.loader, self.step = model, optimizer, loader, 0

    def state_dict(self) -> dict:
        msd, osd = get_state_dict(self.model, self.optimizer)
        return {"model": msd, "optim": osd, "loader": self.loader.state_dict(), "step": torch.tensor(self.step)}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.loader.load_state_dict(state["loader"])
        self.step = int(state["step"])


def build_state(job: JobConfig, group: dist.ProcessGroup) -> TrainState:
    """The FSDP2-sharded GPT, its AdamW and its loader, identical on every attempt."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    cfg = GPTConfig(**job.model)
    model = GPT(cfg, seed=job.seed)
    mesh = DeviceMesh.from_group(group, "cpu")
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=job.lr, weight_decay=0.1, foreach=False)
    loader = WindowLoader(demo_tokens(cfg.vocab_size, 4096, job.seed), job.global_batch, cfg.seq_len, job.seed + 1)
    return TrainState(model, opt, loader)


def train_step(state: TrainState, group: dist.ProcessGroup, before_update=None) -> float:
    """One optimizer step on this rank's slice of the next global batch; return the mean loss
    over all ranks. ``before_update`` runs between the backward pass and the update."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    per = state.loader.batch // world
    batch = state.loader.next()[rank * per:(rank + 1) * per]
    loss = state.model(batch[:, :-1], batch[:, 1:])[1]
    loss.backward()
    if before_update is not None:
        before_update()
    state.optimizer.step()
    state.optimizer.zero_grad()
    state.step += 1
    mean = loss.detach().clone()
    dist.all_reduce(mean, group=group)
    return mean.item() / world


def train(job: JobConfig, out: str | Path, group: dist.ProcessGroup, ckpt_group: dist.ProcessGroup,
          attempt: int = 0) -> dict:
    """Run (or resume) the job on this rank; return the final weights' and optimizer's digests.

    Collective over ``group`` (training) and ``ckpt_group`` (checkpoints; a separate group so
    async saves never interleave with training collectives). Rank 0 appends one JSON line per
    event to ``out/log.jsonl`` and writes the final full weights to ``out/final.pt``.
    """
    out = Path(out)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if job.global_batch % world:
        raise ValueError(f"global_batch ({job.global_batch}) must be divisible by the world size ({world})")
    fault = job.faults[attempt] if attempt < len(job.faults) else None
    mine = fault if fault is not None and fault.rank == rank else None
    doomed = str(checkpoint_dir(out / "ckpt", mine.step)) if mine and mine.kind == "save" else None
    writer = lambda path: (_DyingWriter if path == doomed else FileSystemWriter)(path)  # noqa: E731
    ckpt = ShardedCheckpointer(out / "ckpt", ckpt_group, run_id=job.run_id or job_id(job), keep_last=job.keep_last,
                               keep_every=job.keep_every, use_async=job.async_save, storage_writer=writer)
    log = _Log(out / "log.jsonl", attempt) if rank == 0 else None
    state = build_state(job, group)
    start = ckpt.latest()
    if log:
        log("start", resumed_from=start or 0, incomplete=incomplete_steps(out / "ckpt"), world=world,
            refused=ckpt.refused, ignored=ckpt.ignored)
    if start is not None:
        ckpt.load({"train": state}, start)
    while state.step < job.steps:
        step = state.step + 1
        if mine and mine.kind == "hang" and step == mine.step:
            time.sleep(100 * job.timeout_s)    # stops responding; the peers' collectives time out
        die = mine is not None and mine.kind == "kill" and step == mine.step
        loss = train_step(state, group, before_update=_sigkill_self if die else None)
        if log:
            log("step", step=step, loss=round(loss, 6))
        if step % job.ckpt_every == 0 or step == job.steps:
            blocked = ckpt.save({"train": state}, step)
            if log:
                log("saved", step=step, blocking_s=round(blocked, 6))
            if fault is not None and fault.kind in DAMAGES and step == fault.step:
                ckpt.wait()                        # on every rank: the checkpoint is complete
                if mine:
                    damage(checkpoint_dir(out / "ckpt", step), mine.kind, rank, checkpoint_dir(
                        out / "ckpt", step - job.ckpt_every))
                    _sigkill_self()
    ckpt.close()
    weights = get_model_state_dict(state.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    result = full_digests(state)
    if rank == 0:
        save_atomic({"model": weights, "step": state.step}, out / "final.pt")
        log("done", **result)
    return result


class _Log:
    """Rank 0's event log: one JSON object per line, flushed at once (a kill loses at most one)."""

    def __init__(self, path: Path, attempt: int) -> None:
        self.path, self.attempt = path, attempt

    def __call__(self, event: str, **fields) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, "attempt": self.attempt, "t": time.time(), **fields}) + "\n")


def parse_args(argv: list[str] | None = None) -> tuple[JobConfig, Path]:
    """The job and output directory from ``python -m course_lib.faults.elastic`` arguments."""
    p = argparse.ArgumentParser(prog="python -m course_lib.faults.elastic", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--ckpt-every", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--model", type=json.loads, default=dict(DEMO_CONFIG))
    p.add_argument("--timeout", type=float, default=30.0, help="process-group timeout, seconds")
    p.add_argument("--fault", action="append", default=[], type=Fault.parse, help="kind:step:rank")
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--keep-last", type=int, default=3, help="retention: the newest checkpoints kept")
    p.add_argument("--keep-every", type=int, default=None, help="retention: steps whose multiples are kept")
    p.add_argument("--run-id", default=None, help="the job owning the checkpoint folder (default: job_id)")
    a = p.parse_args(argv)
    job = JobConfig(a.steps, a.ckpt_every, a.global_batch, a.seed, a.lr, a.model, tuple(a.fault),
                    a.async_save, a.timeout, a.keep_last, a.keep_every, a.run_id)
    return job, a.out


def _init_process_group(attempt: int, timeout: datetime.timedelta) -> None:
    """Join this attempt's gloo group. torchrun's agent keeps one key-value store for all attempts
    (TORCHELASTIC_USE_AGENT_STORE), where the dead ranks' addresses stay: without a prefix per
    attempt, a new rank may read a dead peer's address and fail with "Connection refused"."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo", timeout=timeout)
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt_{attempt}", store), rank=rank,
                            world_size=world, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    """Entry point of one rank under torchrun: set up both process groups, train, tear down."""
    from ..dist_rank import _die_with_parent
    _die_with_parent()                  # if the elastic agent is killed, its ranks die with it
    job, out = parse_args(argv)
    torch.set_num_threads(1)            # the same kernels on every attempt and under any launcher
    timeout = datetime.timedelta(seconds=job.timeout_s)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    _init_process_group(attempt, timeout)
    ckpt_group = dist.new_group(backend="gloo", timeout=timeout)
    try:
        train(job, out, dist.group.WORLD, ckpt_group, attempt)
    except FolderError as e:
        # no restart can fix this (another job's or a busy folder, a RUN that names no job, an
        # unreadable file, checkpoints none of which verifies): rank 0 says why, then asks
        # torchrun's agent to stop, not restart
        if os.environ.get("TORCHELASTIC_RUN_ID") and dist.get_rank() == 0:
            print(f"job refused: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGTERM)
        raise
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
