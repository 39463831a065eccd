"""The sandbox a submission runs in: bubblewrap (``bwrap``) with every namespace unshared.

Inside, the student's kernel sees a read-only system (``/usr``, ``/etc``, the Python installation,
the virtual environment and the ``course_lib`` source *without* its question banks), an empty
``/tmp`` and home, and exactly one writable folder: ``/sandbox``, which holds this submission's
own copy (``/sandbox/work``) and the answers/progress it reports (``/sandbox/out``). It has no
network (only its own loopback), its own PID namespace (every process it starts, including ones
that left its session, dies with the namespace) and no environment but the variables passed here.
Not visible: the submissions folder, the report folder, the repository's ``solutions/``, ``.git``
and tests, the question banks, anybody's home.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import course_lib
from course_lib.grading import remote

INSIDE = Path("/sandbox")
STARTUP_LIMIT = 120.0  # seconds allowed for starting the sandbox, the executor and its kernel
_KEEP_ENV = ("LANG", "LC_ALL", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ")


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces on this machine."""


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: the grader runs every submission in "
                                 "a bwrap sandbox (Debian/Ubuntu: apt-get install bubblewrap)")
    return path


def _system_binds() -> list[str]:
    args: list[str] = []
    for top in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    for secret in ("/etc/shadow", "/etc/gshadow"):
        if Path(secret).exists():
            args += ["--ro-bind", "/dev/null", secret]
    return args


def _python_binds() -> list[str]:
    """The interpreter, the venv and course_lib (question banks hidden), read-only, same paths."""
    pkg = Path(course_lib.__file__).resolve().parent
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), pkg}
    data = pkg.parent / "data"  # the course's small data files, read by some exercises
    if data.is_dir():
        roots.add(data)
    args: list[str] = []
    for r in sorted(roots, key=lambda p: len(p.parts)):
        covered = [o for o in (*roots, Path("/usr")) if o != r and (o == r or o in r.parents)]
        if not covered:
            args += ["--ro-bind", str(r), str(r)]
    args += ["--tmpfs", str(pkg / "checks")]  # the banks: graded outside the sandbox only
    return args


def command(root: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    """The bwrap command that runs ``argv`` with host folder ``root`` as the writable /sandbox
    (working directory /sandbox/work) and only the environment ``env`` (plus a few locale and
    thread-count variables of this process)."""
    args = [bwrap_path(), "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            *_system_binds(), *_python_binds(),
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home",
            "--bind", str(root), str(INSIDE), "--chdir", str(INSIDE / "work"), "--clearenv"]
    full = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    full.update({"HOME": "/tmp/home", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                 "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                 "JUPYTER_PLATFORM_DIRS": "1"})
    full.update(env)
    for k, v in sorted(full.items()):
        args += ["--setenv", k, v]
    return [*args, "--", *argv]


class Sandbox:
    """One submission's sandbox: started on construction, :meth:`kill` ends every process in it."""

    def __init__(self, root: Path, name: str, log: Path, *, timeout_cell: float, harness_timeout: float) -> None:
        """Run the executor on ``root/work/name`` (graded mode), its stdout/stderr into ``log``."""
        inside = INSIDE
        argv = [sys.executable, "-m", "course_lib.grading._execute", str(inside / "work" / name),
                str(inside / "out" / "progress.jsonl"), str(inside / "out" / "executed.ipynb"),
                "--timeout-cell", str(timeout_cell), "--harness-timeout", str(harness_timeout)]
        env = {remote.MODE_ENV: "graded", remote.ANSWERS_ENV: str(inside / "out" / "answers.jsonl"),
               remote.SOCKET_ENV: str(inside / "out" / "grader.sock")}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(root / "out" / "grader.sock"))
        self.listener.listen(1)
        info_r, info_w = os.pipe()
        cmd = command(root, argv, env)
        cmd[1:1] = ["--info-fd", str(info_w)]
        with open(log, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         pass_fds=(info_w,), start_new_session=True)
        os.close(info_w)
        self.child = _read_child_pid(info_r)

    def connect(self, wait: float) -> socket.socket | None:
        self.listener.settimeout(wait)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return None
        return conn

    def kill(self) -> None:
        """SIGKILL the sandbox's init: the kernel then kills every process of its PID namespace,
        and bwrap exits only after that; wait for it."""
        for pid in (self.child, self.proc.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.proc.wait()
        self.listener.close()


def _read_child_pid(fd: int) -> int | None:
    """The PID (here) of the sandbox's init, from the JSON bwrap writes to ``--info-fd`` once set
    up (in several writes: read until it parses, or bwrap dies of SIGPIPE)."""
    text, end = b"", time.monotonic() + STARTUP_LIMIT
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                return None
            text += chunk
            try:
                return int(json.loads(text)["child-pid"])
            except ValueError:
                continue
            except (KeyError, TypeError):
                return None
        return None
    finally:
        os.close(fd)
