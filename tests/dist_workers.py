"""Worker functions for the launcher tests (module-level so spawned ranks can import them)."""
import os
import time


def allreduce_rank_sum(ctx, n=4):
    import torch
    import torch.distributed as dist
    t = torch.full((n,), float(ctx.rank + 1))
    dist.all_reduce(t, group=ctx.group)
    return {"rank": ctx.rank, "world": ctx.world_size, "sum": t.tolist(), "pid": os.getpid(),
            "backend": ctx.backend, "device": str(ctx.device)}


def raise_on_rank(ctx, bad_rank=1):
    if ctx.rank == bad_rank:
        raise ZeroDivisionError(f"deliberate failure on rank {ctx.rank}")
    time.sleep(30)  # the healthy ranks would wait: the launcher must not
    return ctx.rank


def hang_on_rank(ctx, bad_rank=0):
    if ctx.rank == bad_rank:
        time.sleep(3600)
    return ctx.rank


def exit_hard_on_rank(ctx, bad_rank=1):
    if ctx.rank == bad_rank:
        os._exit(7)
    time.sleep(30)
    return ctx.rank


def report_pid(ctx):
    return os.getpid()


def write_pid_then_sleep(ctx, folder):
    with open(os.path.join(folder, f"rank{ctx.rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)


def first_optimizer_step(ctx):
    """CPU seconds of this rank's first AdamW step, and whether torch._dynamo (which the step
    imports) was already loaded when the rank started."""
    import sys
    import torch
    preloaded = "torch._dynamo" in sys.modules
    model = torch.nn.Linear(4, 4)
    t0 = time.process_time()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    return preloaded, time.process_time() - t0


def die_in_collective(ctx, how, bad_rank=1):
    """Rank ``bad_rank`` dies (``how``: "exit:N" for os._exit(N), or a signal name sent to itself)
    while the other ranks are blocked in an all-reduce that waits for it."""
    import signal
    import torch
    import torch.distributed as dist
    dist.barrier(group=ctx.group)
    if ctx.rank == bad_rank:
        time.sleep(0.2)  # let the peers enter the all-reduce first
        kind, _, arg = how.partition(":")
        if kind == "exit":
            os._exit(int(arg))
        os.kill(os.getpid(), getattr(signal, kind))
        time.sleep(30)
    t = torch.ones(2)
    dist.all_reduce(t, group=ctx.group)
    return t.tolist()


def block_until_killed(ctx, folder, bad_rank=1):
    """Rank ``bad_rank`` writes its pid to ``folder``/victim.pid and sleeps, for the test to kill it
    from outside; the other ranks block in an all-reduce that waits for it."""
    import torch
    import torch.distributed as dist
    if ctx.rank == bad_rank:
        path = os.path.join(folder, "victim.pid")
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(60)
    t = torch.ones(2)
    dist.all_reduce(t, group=ctx.group)
    return t.tolist()


def raise_after_peer_lost(ctx, bad_rank=1):
    """Rank ``bad_rank`` drops its connections first (its peers, blocked in an all-reduce, report
    "Connection closed by peer" at once) and only then raises an error of its own."""
    import torch
    import torch.distributed as dist
    if ctx.rank == bad_rank:
        dist.destroy_process_group()
        time.sleep(0.5)
        raise ValueError(f"deliberate failure on rank {ctx.rank}")
    t = torch.ones(2)
    dist.all_reduce(t, group=ctx.group)
    return t.tolist()


def _zero_setup(seed=0):
    """A small model with a frozen bias and two param groups, its data, and a single-process twin."""
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))
    model[2].bias.requires_grad_(False)
    x, y = torch.randn(8, 6), torch.randn(8, 3)
    return model, x, y


def _zero_groups(model, lr):
    return [{"params": model[0].parameters(), "lr": lr}, {"params": model[2].parameters(), "lr": lr / 2}]


def _zero_train(model, opt, x, y, steps):
    import torch.nn.functional as F
    for _ in range(steps):
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def zero_full_state(ctx, steps=3, stage=1, saved=None, saved_weights=None):
    """ZeroOptimizer(AdamW) on this rank's slice of the batch; returns its full_state_dict and the
    weights. With ``saved``, first loads that unsharded state (saved on any number of ranks) and
    those weights, then trains ``steps`` more."""
    import torch
    from course_lib.parallel.zero import ZeroOptimizer
    model, x, y = _zero_setup()
    if saved_weights is not None:
        model.load_state_dict(saved_weights)
    opt = ZeroOptimizer(_zero_groups(model, 1e-2), torch.optim.AdamW, comm=ctx.group, stage=stage,
                        weight_decay=0.1)
    if saved is not None:
        opt.load_full_state_dict(saved)
    n, r = ctx.world_size, ctx.rank
    _zero_train(model, opt, x[r::n], y[r::n], steps)   # equal slices: the mean of means is the mean
    return {"state": opt.full_state_dict(), "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def zero_reference(steps=3, saved=None, saved_weights=None):
    """The same training on one process with a plain AdamW (optionally resumed from ``saved``)."""
    import torch
    model, x, y = _zero_setup()
    if saved_weights is not None:
        model.load_state_dict(saved_weights)
    opt = torch.optim.AdamW(_zero_groups(model, 1e-2), weight_decay=0.1)
    if saved is not None:
        opt.load_state_dict(saved)
    _zero_train(model, opt, x, y, steps)
    return {"state": opt.state_dict(), "weights": model.state_dict()}


def hang_before_collective(ctx, bad_rank=1):
    """Rank ``bad_rank`` sleeps forever just before an all-reduce that its peers are blocked in."""
    import torch
    import torch.distributed as dist
    if ctx.rank == bad_rank:
        time.sleep(3600)
    t = torch.ones(2)
    dist.all_reduce(t, group=ctx.group)
    return t.tolist()


class _SlowToFormat(RuntimeError):
    """An error whose text takes a while to build: its rank formats its traceback for that long
    after the worker has ended, while its progress thread goes on stamping."""

    def __str__(self):
        time.sleep(1.5)
        return "forwarded: " + super().__str__()


def hang_then_slow_error(ctx, bad_rank=1):
    """Like ``hang_before_collective``, but the waiting rank reports its time-out slowly."""
    import torch
    import torch.distributed as dist
    if ctx.rank == bad_rank:
        time.sleep(3600)
    try:
        dist.all_reduce(torch.ones(2), group=ctx.group)
    except RuntimeError as e:
        raise _SlowToFormat(str(e)) from None


def mismatched_collectives(ctx):
    """Rank 0 waits in a broadcast from rank 1, rank 1 in a broadcast from rank 0: a deadlock in
    which every rank is inside a collective."""
    import torch
    import torch.distributed as dist
    t = torch.ones(2)
    dist.broadcast(t, src=1 - ctx.rank, group=ctx.group)
    return t.tolist()


def _write_pid(path, pid):
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.replace(path + ".tmp", path)


# A daemon the classic way: fork, the parent exits; setsid; fork again, the session leader exits.
# What is left is in a session of its own and an orphan; it writes its pid, then becomes `sleep`.
_DAEMON = ("import os, sys\n"
           "if os.fork(): os._exit(0)\n"
           "os.setsid()\n"
           "if os.fork(): os._exit(0)\n"
           "path = sys.argv[1]\n"
           "open(path + '.tmp', 'w').write(str(os.getpid()))\n"
           "os.replace(path + '.tmp', path)\n"
           "os.execvp('sleep', ['sleep', '1000'])\n")


def start_child_then(ctx, folder, then, how="plain", bad_rank=1):
    """Every rank writes its pid to ``folder``/rank<r>.pid; rank ``bad_rank`` starts a ``sleep 1000``
    process, writes its pid to ``folder``/child.pid, then ``then``: "raise" (a ZeroDivisionError),
    "hang" (sleeps forever), "return", or "die" (exits with code 3 a second later, reporting nothing).
    ``how`` the child is started: "plain" (a child in the rank's process group), "session" (in a
    session of its own, ``start_new_session=True``) or "daemon" (a double-forked daemon)."""
    import subprocess
    import sys
    _write_pid(os.path.join(folder, f"rank{ctx.rank}.pid"), os.getpid())
    if ctx.rank == bad_rank:
        path = os.path.join(folder, "child.pid")
        if how == "daemon":
            subprocess.run([sys.executable, "-c", _DAEMON, path], check=True)
            while not os.path.exists(path):   # written by the daemon itself, once it is one
                time.sleep(0.01)
        else:
            child = subprocess.Popen(["sleep", "1000"], start_new_session=how == "session")
            _write_pid(path, child.pid)
        if then == "raise":
            raise ZeroDivisionError(f"deliberate failure on rank {ctx.rank}")
        if then == "hang":
            time.sleep(3600)
        if then == "die":
            time.sleep(1.0)   # a rank that runs on a while (longer than the launcher's poll), then dies
            os._exit(3)
    return ctx.rank


def wait_for_release(ctx, folder):
    """Every rank writes its pid to ``folder``/rank<r>.pid, then waits (up to 120 s) for
    ``folder``/release to exist."""
    _write_pid(os.path.join(folder, f"rank{ctx.rank}.pid"), os.getpid())
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
        time.sleep(0.02)
    return ctx.rank


def make_closure_worker(k):
    def closure_worker(ctx):
        return ctx.rank + k
    return closure_worker


def make_nested_worker():
    def nested_worker(ctx):
        return ctx.rank
    return nested_worker
