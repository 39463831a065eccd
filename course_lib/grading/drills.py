"""Workers that function-question graders launch with real processes (``course_lib.dist.launch``).

They live here, not in the question banks, because in a graded run they run inside the submission's
sandbox (:func:`course_lib.grading.remote.launch_with`), which cannot see the banks.
"""
from __future__ import annotations

import time

DRILL_VERSIONS = 5
DRILL_INTERVAL = 0.05           # s the learner pauses after each delivered version


def drill_worker(ctx, swap_source: str, swap_name: str, versions: int = DRILL_VERSIONS,
                 interval: float = DRILL_INTERVAL, max_len: int = 16, budget_s: float = 15.0) -> dict:
    """Rank 0 publishes weights versions 0 … versions−1, each ``interval`` s after the previous
    one was delivered, then STOP; rank 1 decodes with a tiny policy and calls the shipped swap
    function before every step, checking the parameters against the exact published weights
    before and after each call."""
    import torch
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector
    from course_lib.rl import actors, task

    wg = dist.new_group([0, 1], backend="gloo")

    def weights(v: int):
        m = task.make_policy(max_len, seed=0)
        with torch.no_grad():
            for i, p in enumerate(m.parameters()):
                p.add_(0.01 * (v + 1) * (i + 1))          # every tensor moves differently
        return m

    if ctx.rank == 0:
        works = []
        for v in range(versions):
            works.append(actors.publish(weights(v), v, wg))
            works[-1][0].wait()                           # delivered: the actor swaps it in …
            time.sleep(interval)                          # … and keeps decoding meanwhile
        works.append(actors.publish(weights(versions), actors.STOP, wg))
        flag = torch.zeros(1)
        dist.recv(flag, src=1, group=ctx.group)
        if flag[0] == 1:                                  # complete the receive posted after STOP
            works.append(actors.publish(weights(versions), -2, wg))
        for w, _ in works:
            w.wait()
        return {}
    namespace: dict = {}
    exec(compile(swap_source, f"<your {swap_name}>", "exec"), namespace)
    swap = namespace[swap_name]
    model = task.make_policy(max_len, seed=1)
    refs = [parameters_to_vector(weights(v).parameters()).detach() for v in range(versions)]
    buf = torch.zeros(2 + refs[0].numel())
    pending = actors.post_receive(buf, wg)
    x = torch.randint(0, 10, (4, max_len), generator=torch.Generator().manual_seed(0))
    claimed, calls, nones, seen, wrong, drift, stopped = None, 0, 0, [], [], [], False
    t_end = time.monotonic() + budget_s
    while time.monotonic() < t_end:
        current = parameters_to_vector(model.parameters()).detach()
        if claimed is not None and not torch.equal(current, refs[claimed]):
            drift.append(claimed)
        pending, v = swap(model, pending, buf, wg)
        calls += 1
        if v is None:
            nones += 1
        elif int(v) == actors.STOP:
            stopped = True
            break
        else:
            seen.append(int(v))
            ok = 0 <= int(v) < versions
            if ok and torch.equal(parameters_to_vector(model.parameters()).detach(), refs[int(v)]):
                claimed = int(v)
            else:
                wrong.append(int(v))
                claimed = None
        with torch.no_grad():
            model(x)                                      # one decode step's worth of work
    reposted = hasattr(pending, "is_completed") and not pending.is_completed()
    dist.send(torch.ones(1) if reposted else torch.zeros(1), dst=0, group=ctx.group)
    if reposted:
        pending.wait()
    return {"calls": calls, "nones": nones, "seen": seen, "wrong": wrong, "drift": drift,
            "stopped": stopped, "reposted": reposted}
