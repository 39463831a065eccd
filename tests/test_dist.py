"""Behaviour of course_lib.dist.launch on real processes: results, failures, hangs, no orphans."""
import os
import re
import time

import psutil
import pytest

from course_lib import dist
from dist_workers import (allreduce_rank_sum, block_until_killed, die_in_collective, exit_hard_on_rank,
                          first_optimizer_step, hang_before_collective, hang_on_rank, hang_then_slow_error,
                          mismatched_collectives, raise_after_peer_lost, raise_on_rank, report_pid,
                          start_child_then)


def _alive(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _ranks_left():
    """Live processes forked by multiprocessing's fork server (the ranks' parent), if any."""
    left = []
    for server in psutil.Process().children():
        try:
            if "forkserver" in " ".join(server.cmdline()):
                left += _alive([c.pid for c in server.children(recursive=True)])
        except psutil.NoSuchProcess:
            pass
    return left


def test_results_come_back_in_rank_order():
    out = dist.launch(allreduce_rank_sum, world_size=3, n=2)
    assert [o["rank"] for o in out] == [0, 1, 2]
    assert all(o["sum"] == [6.0, 6.0] for o in out)      # 1 + 2 + 3 through a real all-reduce
    assert {o["backend"] for o in out} == {"gloo"}
    assert len({o["pid"] for o in out}) == 3              # three distinct processes
    assert not _alive([o["pid"] for o in out])


def test_ranks_start_with_what_the_first_optimizer_step_imports():
    # the fork server preloads torch._dynamo (imported by every torch.optim step): without it each
    # rank of each launch spends ~1.5 CPU-s importing it on its first step
    out = dist.launch(first_optimizer_step, world_size=2)
    assert all(preloaded for preloaded, _ in out)
    assert all(cpu_s < 0.5 for _, cpu_s in out), out


def test_failing_rank_raises_with_its_traceback_and_leaves_nothing():
    t0 = time.monotonic()
    with pytest.raises(dist.RankError) as info:
        dist.launch(raise_on_rank, world_size=3, bad_rank=2, timeout=60)
    assert info.value.rank == 2
    assert "ZeroDivisionError: deliberate failure on rank 2" in info.value.remote_traceback
    assert "raise_on_rank" in str(info.value)
    assert time.monotonic() - t0 < 20                    # did not wait for the sleeping ranks
    assert not _ranks_left()


def test_hanging_rank_times_out_and_is_killed():
    t0 = time.monotonic()
    with pytest.raises(dist.RankHung, match=r"^rank 0 hung: it did not finish within the run's timeout, 4 s: "
                                            r"in hang_on_rank at tests/dist_workers\.py:\d+: time\.sleep\(3600\)"):
        dist.launch(hang_on_rank, world_size=2, timeout=4)
    assert time.monotonic() - t0 < 15
    assert not _ranks_left()


def test_rank_hung_before_a_collective_is_named_not_the_peer_that_waited():
    # rank 1 sleeps while rank 0 waits in the all-reduce: rank 0 times out first (the collective
    # timeout is shorter than the run's), and the launcher names rank 1 and where it is stuck,
    # from its progress stamps. Three trials: the verdict must not depend on who reports first.
    for trial in range(3):
        t0 = time.monotonic()
        with pytest.raises(dist.RankHung) as info:
            dist.launch(hang_before_collective, world_size=2, timeout=6, collective_timeout=2)
        err, msg = info.value, str(info.value)
        assert isinstance(err, TimeoutError) and not isinstance(err, dist.RankError)
        assert err.rank == 1 and err.ranks == [1], (trial, msg)
        assert re.match(r"rank 1 hung: it stopped making progress while its peers waited for it .*: "
                        r"in hang_before_collective at tests/dist_workers\.py:\d+: time\.sleep\(3600\) "
                        r"for the last \d+\.\d s", msg), (trial, msg)
        assert list(err.secondary) == [0] and "Timed out waiting" in err.secondary[0], (trial, msg)
        assert "rank 0: last seen in torch.distributed.all_reduce (called from hang_before_collective" in msg
        assert time.monotonic() - t0 < 20, trial            # the collective timeout (2 s) + a grace
        assert not _ranks_left()


def test_a_waiting_rank_is_described_where_its_worker_was_not_where_it_reported():
    """Rank 0 times out in its all-reduce and then spends 1.5 s building its error's text (in
    CI, formatting a first traceback on a loaded machine took long enough): its stamp kept
    saying where the worker was, not the traceback code it was in when the launcher read it."""
    with pytest.raises(dist.RankHung) as info:
        dist.launch(hang_then_slow_error, world_size=2, timeout=8, collective_timeout=2)
    err, msg = info.value, str(info.value)
    assert err.ranks == [1] and list(err.secondary) == [0], msg
    waited = err.progress[0]
    assert "hang_then_slow_error" in waited and "__str__" not in waited and "traceback" not in waited, msg
    assert "forwarded: " in err.secondary[0]
    assert not _ranks_left()


def test_a_deadlock_names_every_rank_and_its_collective():
    with pytest.raises(dist.RankHung) as info:
        dist.launch(mismatched_collectives, world_size=2, timeout=6, collective_timeout=2)
    err, msg = info.value, str(info.value)
    assert sorted(err.ranks) == [0, 1], msg
    assert "every rank timed out waiting inside a collective" in msg
    assert msg.count("last seen in torch.distributed.broadcast (called from mismatched_collectives") == 2, msg


def _wait_gone(pids, seconds=30.0):
    """The pids still running after waiting, up to ``seconds``, for all of them to end."""
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(pids)


def _wait_for(paths, seconds=120.0):
    deadline = time.monotonic() + seconds     # a loaded machine takes a while to start ranks
    while not all(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [int(p.read_text()) for p in paths if p.exists()]


@pytest.mark.parametrize("how", ["plain", "session", "daemon"])
@pytest.mark.parametrize("then, error", [("raise", dist.RankError), ("hang", dist.RankHung), ("return", None),
                                         ("die", dist.RankError)])
def test_no_process_a_rank_started_outlives_the_launch(tmp_path, how, then, error):
    # rank 1 starts `sleep 1000` (in its process group, in a session of its own, or as a
    # double-forked daemon that init would adopt); whether it then raises, hangs, returns or dies,
    # that process is killed before launch comes back
    kwargs = dict(world_size=2, timeout=5 if then == "hang" else 60, folder=str(tmp_path), then=then, how=how)
    if error is None:
        assert dist.launch(start_child_then, **kwargs) == [0, 1]
    else:
        with pytest.raises(error) as info:
            dist.launch(start_child_then, **kwargs)
        assert info.value.rank == 1
        if then == "die":
            assert "exited with code 3" in str(info.value)
    child = int((tmp_path / "child.pid").read_text())
    assert not _alive([child]), f"{how}, {then}: the rank's child {child} is still running"
    assert not _ranks_left()


@pytest.mark.parametrize("handler, how, code", [("default", "plain", -15), ("exits", "session", 5)])
def test_sigterm_to_the_launching_process_stops_everything_then_terminates_it(tmp_path, handler, how, code):
    """SIGTERM to the caller (a scheduler, `kill`, a kernel shutdown) cleans up as Ctrl-C does, then
    ends it as it would have ended: killed by SIGTERM, or by its own SIGTERM handler's exit."""
    import signal
    import subprocess
    import sys
    script = tmp_path / "parent.py"
    script.write_text(
        "import signal, sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from course_lib import dist\n"
        "from dist_workers import start_child_then\n"
        "if __name__ == '__main__':\n"
        f"    if {handler!r} == 'exits':\n"
        "        signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))\n"
        f"    dist.launch(start_child_then, world_size=2, folder={str(tmp_path)!r}, then='hang', how={how!r},\n"
        "                timeout=300)\n"
        "    print('launch returned')\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        pids = _wait_for([tmp_path / "rank0.pid", tmp_path / "rank1.pid", tmp_path / "child.pid"])
        assert len(pids) == 3 and len(_alive(pids[1:])) == 2    # rank 1 hangs, its child runs
        parent.send_signal(signal.SIGTERM)
        out, _ = parent.communicate(timeout=120)
    finally:
        parent.kill()                       # a failed test leaves no launching process behind
    assert parent.returncode == code and b"launch returned" not in out
    assert not _wait_gone(pids), "ranks or the rank's child outlived a SIGTERM to the launching process"


def test_the_caller_is_never_a_subreaper_and_gets_its_sigterm_handler_back(tmp_path):
    """The caller is often a notebook kernel: were it a child subreaper, it would adopt the orphans
    of every program it runs and, never reaping them, fill up with zombies. While a launch runs, a
    daemon the caller's other code starts is not its child, and SIGTERM is the launch's to handle;
    afterwards the caller's own handler is back."""
    import ctypes
    import signal
    import subprocess
    import sys
    import threading

    from dist_workers import _DAEMON, wait_for_release
    libc = ctypes.CDLL(None, use_errno=True)

    def subreaper():
        flag = ctypes.c_int(-1)
        assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0   # PR_GET_CHILD_SUBREAPER
        return flag.value

    seen = {}

    def meanwhile():
        try:
            _wait_for([tmp_path / "rank0.pid", tmp_path / "rank1.pid"])
            seen["handler"] = signal.getsignal(signal.SIGTERM)
            seen["subreaper"] = subreaper()
            path = tmp_path / "daemon.pid"
            subprocess.run([sys.executable, "-c", _DAEMON, str(path)], check=True)
            daemon = _wait_for([path])[0]
            seen["daemon_parent"] = psutil.Process(daemon).ppid()
            os.kill(daemon, signal.SIGKILL)
        finally:
            (tmp_path / "release").write_text("")

    before = signal.getsignal(signal.SIGTERM)
    helper = threading.Thread(target=meanwhile, daemon=True)
    helper.start()
    assert dist.launch(wait_for_release, world_size=2, folder=str(tmp_path), timeout=150) == [0, 1]
    helper.join()
    assert seen["subreaper"] == 0 == subreaper()
    assert seen["daemon_parent"] != os.getpid()
    assert seen["handler"] is not before              # SIGTERM would have stopped the run first
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_pid_given_again_to_another_process_is_not_killed():
    """The launcher kills what it recorded of a rank's tree by pid and start time: a pid the system
    gave to a new process since is that process's, and left alone."""
    import subprocess

    from course_lib import dist_reap
    other = subprocess.Popen(["sleep", "1000"])
    try:
        start = dist_reap.identify([other.pid])[other.pid]
        dist_reap.stop_trees({other.pid: start + 1})
        assert _alive([other.pid])
        dist_reap.stop_trees({other.pid: start})
        assert other.wait(timeout=30) == -9
    finally:
        other.kill()


def test_without_prctl_or_proc_the_reaper_does_what_it_can(monkeypatch):
    """Not Linux: no subreaper (the process groups still catch a rank's ordinary children), and no
    /proc: no tree to read, nothing killed by mistake."""
    from types import SimpleNamespace

    from course_lib import dist_reap
    monkeypatch.setattr(dist_reap.ctypes, "CDLL", lambda *a, **k: SimpleNamespace())
    assert dist_reap.become_subreaper() is False

    def no_proc(path):
        raise FileNotFoundError(path)
    monkeypatch.setattr(dist_reap.os, "listdir", no_proc)
    assert dist_reap.identify([os.getpid()]) == {} and dist_reap.group_members({os.getpgid(0)}) == []
    dist_reap.stop_trees({os.getpid(): 0})


def test_a_lambda_worker_is_refused_before_any_process_starts(monkeypatch):
    # its source is the caller's whole line: every rank ran `dist.launch(...)` itself, and then
    # failed to find a function named "<lambda>"
    monkeypatch.setattr(dist, "_mp_context", lambda: pytest.fail("a process was started"))
    with pytest.raises(ValueError, match=r"worker <lambda> .* is a lambda.*define it with def at module level"):
        dist.launch(lambda ctx: ctx.rank, 2)


def test_a_closure_or_nested_worker_is_refused_naming_what_it_would_lose(monkeypatch):
    from dist_workers import make_closure_worker, make_nested_worker
    monkeypatch.setattr(dist, "_mp_context", lambda: pytest.fail("a process was started"))
    with pytest.raises(ValueError, match=r"worker 'make_closure_worker.<locals>.closure_worker' uses k from the "
                                         r"function it is defined in.*at module level.*keyword argument"):
        dist.launch(make_closure_worker(1), 2)
    with pytest.raises(ValueError, match=r"worker 'make_nested_worker.<locals>.nested_worker' is defined inside "
                                         r"a function.*at module level"):
        dist.launch(make_nested_worker(), 2)


def test_a_notebook_worker_that_uses_the_notebooks_names_is_refused(monkeypatch):
    # a notebook-defined worker is shipped as source: the names of the notebook it uses (not imported
    # inside it) would be NameErrors in every rank
    src = ("import math\n"
           "SCALE = 3\n"
           "def nb_uses_globals(ctx):\n"
           "    return [SCALE * math.pi, len(range(ctx.rank))]\n")
    namespace = {"__name__": "__main__"}
    import linecache
    linecache.cache["<notebook-cell-2>"] = (len(src), None, src.splitlines(True), "<notebook-cell-2>")
    exec(compile(src, "<notebook-cell-2>", "exec"), namespace)
    monkeypatch.setattr(dist, "_mp_context", lambda: pytest.fail("a process was started"))
    with pytest.raises(ValueError, match=r"worker 'nb_uses_globals' uses SCALE, math from the notebook or script "
                                         r"it is defined in.*import.*inside"):
        dist.launch(namespace["nb_uses_globals"], 2)


def test_rank_that_dies_without_a_traceback_is_named():
    with pytest.raises(dist.RankError, match="exited with code 7") as info:
        dist.launch(exit_hard_on_rank, world_size=2, timeout=30)
    assert info.value.rank == 1


PEER_LOST = "Connection closed by peer"


@pytest.mark.parametrize("how, world_size, headline", [
    ("exit:1", 2, "rank 1 died: exited with code 1"),
    ("exit:3", 2, "rank 1 died: exited with code 3"),
    ("exit:0", 2, "rank 1 died: exited with code 0 without reporting a result"),
    ("SIGSEGV", 3, "rank 1 died: killed by SIGSEGV"),
])
def test_rank_that_dies_in_a_collective_is_blamed_not_its_peers(how, world_size, headline):
    # the peers blocked in the all-reduce fail with "Connection closed by peer", often before the
    # launcher sees the dead rank's exit: the dead rank must still be the one named, first
    with pytest.raises(dist.RankError) as info:
        dist.launch(die_in_collective, world_size=world_size, how=how, timeout=30)
    err, msg = info.value, str(info.value)
    assert err.rank == 1 and msg.startswith(headline), msg
    assert err.exitcode == (-11 if how == "SIGSEGV" else int(how[5:]))
    assert sorted(err.secondary) == [r for r in range(world_size) if r != 1]
    assert all(PEER_LOST in err.secondary[r] for r in err.secondary)
    assert msg.index(PEER_LOST) > msg.index("consequences of rank 1")
    assert "__main__" not in msg          # exit code 1 here has nothing to do with a main guard
    assert not _ranks_left()


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_rank_killed_from_outside_is_blamed(tmp_path, sig):
    import signal
    import threading

    def kill_the_victim():
        victim = tmp_path / "victim.pid"
        while not victim.exists():
            time.sleep(0.02)
        time.sleep(0.2)                   # the peer is blocked in its all-reduce by now
        pid = int(victim.read_text())
        seen.extend(_ranks_left())
        os.kill(pid, getattr(signal, sig))
        seen.append(pid)

    seen = []

    killer = threading.Thread(target=kill_the_victim, daemon=True)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(dist.RankError) as info:
        dist.launch(block_until_killed, world_size=2, folder=str(tmp_path), timeout=30)
    killer.join()
    assert seen[-1] in seen[:-1]          # _ranks_left() does see running ranks
    assert info.value.rank == 1 and str(info.value).startswith(f"rank 1 died: killed by {sig}")
    assert PEER_LOST in info.value.secondary[0]
    assert time.monotonic() - t0 < 10
    assert not _ranks_left()


def test_rank_that_raised_is_blamed_even_after_its_peers_lost_it():
    # rank 1 drops its connections, so rank 0's "Connection closed" arrives first; rank 1's own
    # ValueError half a second later is still the error named first, with its traceback
    with pytest.raises(dist.RankError) as info:
        dist.launch(raise_after_peer_lost, world_size=2, timeout=30)
    assert info.value.rank == 1
    assert str(info.value).startswith("rank 1 failed:\nTraceback")
    assert info.value.remote_traceback.rstrip().endswith("ValueError: deliberate failure on rank 1")
    assert PEER_LOST in info.value.secondary[0]
    assert not _ranks_left()


def test_no_rank_survives_any_outcome():
    pids = dist.launch(report_pid, world_size=4)
    time.sleep(0.2)
    assert not _alive(pids)
    # the only long-lived helper is multiprocessing's fork server, which has no rank children left
    for child in psutil.Process().children(recursive=True):
        assert child.pid not in pids


def test_notebook_defined_worker_is_shipped_by_source():
    # Simulate a function defined in a notebook cell: its module is __main__.
    src = (
        "def nb_worker(ctx, k):\n"
        "    import torch, torch.distributed as dist\n"
        "    t = torch.tensor([float(k * (ctx.rank + 1))])\n"
        "    dist.all_reduce(t, group=ctx.group)\n"
        "    return t.item()\n"
    )
    import linecache
    filename = "<notebook-cell-1>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(src, filename, "exec"), namespace)
    assert dist.launch(namespace["nb_worker"], world_size=2, k=5) == [15.0, 15.0]


@pytest.mark.parametrize("bad, match", [
    (dict(world_size=0), "world_size"),
    (dict(world_size=2, timeout=-1), "timeout"),
    (dict(world_size=2, backend="mpi"), "backend"),
    (dict(world_size=2, timeout=10, collective_timeout=10), "collective_timeout .* must be shorter than timeout"),
    (dict(world_size=2, collective_timeout=0), "collective_timeout"),
])
def test_bad_arguments_name_themselves(bad, match):
    with pytest.raises(ValueError, match=match):
        dist.launch(report_pid, **bad)


def test_concurrent_launches_never_share_a_rendezvous():
    # the launcher holds each run's store on a port the OS gave it: four runs at once (other
    # notebooks, parallel test workers) all meet their own ranks
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda n: dist.launch(allreduce_rank_sum, world_size=2, n=n), [1, 2, 3, 4]))
    assert [[o["sum"] for o in out] for out in runs] == [[[3.0] * n] * 2 for n in (1, 2, 3, 4)]


def test_free_port_is_bindable():
    import socket
    port = dist.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA devices (NCCL path)")
def test_nccl_path_on_gpus():
    import torch
    n = min(2, torch.cuda.device_count())
    out = dist.launch(allreduce_rank_sum, world_size=n, n=2)
    assert {o["backend"] for o in out} == {"nccl"}
    assert all(o["sum"] == [3.0, 3.0] for o in out) if n == 2 else True
    assert out[0]["device"].startswith("cuda")


def test_ranks_die_when_the_launching_process_is_killed(tmp_path):
    """A notebook kernel killed mid-run must not leave ranks behind (PR_SET_PDEATHSIG chain)."""
    import signal
    import subprocess
    import sys
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from course_lib import dist\n"
        "from dist_workers import write_pid_then_sleep\n"
        "if __name__ == '__main__':\n"
        f"    dist.launch(write_pid_then_sleep, world_size=2, folder={str(tmp_path)!r}, timeout=300)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120      # a loaded machine takes a while to start two ranks
    while len(list(tmp_path.glob("rank*.pid"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
    assert len(pids) == 2 and _alive(pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 15
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pids)


def test_script_without_main_guard_gets_a_plain_hint(tmp_path):
    """A script that calls launch() at its top level is re-imported by every rank; the user must
    see one RankError that says what to do, not a multiprocessing assertion from the cleanup."""
    import subprocess
    import sys
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from course_lib import dist\n"
        "from dist_workers import allreduce_rank_sum\n"
        "dist.launch(allreduce_rank_sum, world_size=2, n=1, timeout=60)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    tail = proc.stderr[proc.stderr.rindex("Traceback"):]     # the parent's own error, last
    assert re.search(r"course_lib\.dist\.RankError: rank \d died: exited while starting", tail), tail
    assert "if __name__ == '__main__':" in tail, tail
    assert "AssertionError" not in proc.stderr and "bootstrapping phase" not in proc.stderr


def test_demo_workers_under_launch():
    from course_lib import dist_check
    assert all(r["ok"] for r in dist.launch(dist_check.allreduce_check, world_size=3))
    bw = dist.launch(dist_check.allreduce_bandwidth, world_size=2, sizes_bytes=[4096], repeats=2)
    assert bw[0][0]["bytes"] == 4096 and bw[0][0]["busbw"] > 0


def test_same_worker_runs_under_torchrun(tmp_path):
    import subprocess
    import sys
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    # --standalone: a rendezvous on a free port, not torchrun's fixed default 29500; --log-dir: its
    # per-rank logs here, not in a folder of the system's temp folder that nothing removes
    out = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--log-dir", str(tmp_path),
                          "-m", "course_lib.dist",
                          "course_lib.dist_check:allreduce_check", "--kwargs", '{"n": 3}'],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "rank 0: {'rank': 0" in out.stdout and "'ok': True" in out.stdout
    assert "rank 1: {'rank': 1" in out.stdout


def test_progress_stamp_survives_a_frame_without_a_line_number():
    """Python 3.11 can show another thread a frame whose f_lineno is None (between instructions):
    the progress thread stamps it without its source line instead of dying with a TypeError in
    linecache (which also printed a traceback into a book page's stderr)."""
    from types import SimpleNamespace

    from course_lib.dist_progress import _where
    frame = SimpleNamespace(f_code=test_progress_stamp_survives_a_frame_without_a_line_number.__code__,
                            f_lineno=None, f_back=None)
    key, fields = _where(frame)
    assert "test_progress_stamp_survives_a_frame_without_a_line_number" in fields["doing"]
    assert fields["collective"] is False


def test_a_progress_stamp_of_long_non_ascii_text_still_parses():
    """A frame's source line of non-ASCII text is escaped six bytes a character in JSON: cutting
    the encoded stamp to its slot left JSON the launcher could not read; the text is cut instead."""
    import json

    from course_lib import dist_progress
    stamp = {"t": 1.0, "since": 0.5, "pid": 7, "doing": "in f at x.py:1: " + "梯度" * 400, "collective": False,
             "work": "在 " * 500}
    data = dist_progress._encode(stamp)
    assert len(data) < dist_progress.SLOT - 8
    back = json.loads(data)
    assert back["doing"].startswith("in f at x.py:1: 梯度") and back["pid"] == 7
    buf = bytearray(dist_progress.SLOT)
    dist_progress._write(buf, 0, stamp)
    assert dist_progress.read(buf, 1)[0]["t"] == 1.0
