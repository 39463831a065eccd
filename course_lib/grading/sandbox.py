"""The sandbox a submission runs in: bubblewrap (``bwrap``) with every namespace unshared.

Inside, the student's kernel sees a read-only system (``/usr``, ``/etc`` without the files only
root may read, the Python installation, the virtual environment (at its real path and at the one
the grader names it by, when a link makes them differ), its site-packages and the grader's own
``course_lib`` source *without* its question banks), an empty ``/tmp`` and home, and exactly one
writable folder: ``/sandbox``, which holds this submission's own copy (``/sandbox/work``) and the
answers/progress it reports (``/sandbox/out``). It has no network (only its own loopback), its own
PID namespace (every process it starts, including ones that left its session, dies with the
namespace), no environment but the variables passed here, and resource limits (processes, address
space, file size: :data:`LIMITS`, set by the executor before the kernel starts).
Not visible: the submissions folder, the report folder, the repository's ``solutions/``, ``.git``
and tests, the question banks, anybody's home.

The grader learns how far the executor got from a *status pipe* (``--status-fd``), not from a
file in ``/sandbox``: the executor closes it for its children and makes itself non-dumpable, so
the student's kernel can neither write to it nor reopen it through ``/proc``. The sandbox's
stdout/stderr go to a second pipe, drained here and capped at :data:`LOG_CAP` bytes.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import course_lib
from course_lib.grading import remote, wire
from course_lib.grading._pipes import STARTUP_LIMIT
from course_lib.grading._pipes import Pipe as _Pipe
from course_lib.grading._pipes import count_procs as _count_procs
from course_lib.grading._pipes import disk_use as _disk_use
from course_lib.grading._pipes import read_child_pid as _read_child_pid

INSIDE = Path("/sandbox")
LOG_CAP = 1 << 20      # bytes of the sandbox's stdout/stderr kept for the report's log
MAX_PROCS = 256        # processes in one sandbox before the grader ends it (a fork storm)
# Disk: the writable host folder (/sandbox) may hold at most DISK_CAP bytes of real data in at most
# MAX_FILES entries before the grader ends the sandbox (RLIMIT_FSIZE caps one file, not how many);
# /tmp and the home inside are a tmpfs of TMP_SIZE bytes (memory), full at that size.
DISK_CAP = 512 << 20
MAX_FILES = 20_000
TMP_SIZE = 512 << 20
# per-process limits inside the sandbox: tasks (threads count), address space, file size
LIMITS = {"nproc": 2048, "as": 16 << 30, "fsize": 512 << 20}
_KEEP_ENV = ("LANG", "LC_ALL", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TZ")
_USERNS_FIX = ("allow unprivileged user namespaces: `sudo sysctl -w kernel.unprivileged_userns_clone=1` "
               "and, on Ubuntu 23.10+, `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`; "
               "in a container, run it with user namespaces allowed (e.g. docker --security-opt seccomp=unconfined)")


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces on this machine."""


class SandboxFailure(RuntimeError):
    """The sandbox could not run on this machine: the grader's failure, not the student's."""


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: the grader runs every submission in "
                                 "a bwrap sandbox (Debian/Ubuntu: apt-get install bubblewrap)")
    return path


def _private(top: Path, limit: int = 5000) -> list[str]:
    """Files and folders under ``top`` that not everyone on the machine may read (``/etc/shadow-``,
    ``/etc/security/opasswd``, ...): inside, the student's uid maps to the grader's, so these are
    hidden instead of trusting file modes. Folders not searchable by others are hidden whole."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & need != need:
                out.append(p)
                if name in dirnames:
                    dirnames.remove(name)
        if len(out) > limit:
            break
    return out


def _mask(paths: list[str]) -> list[str]:
    args: list[str] = []
    for p in paths:
        args += ["--tmpfs", p] if os.path.isdir(p) else ["--ro-bind", "/dev/null", p]
    return args


def _system_binds() -> list[str]:
    args: list[str] = []
    for top in ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    return args + _mask(_private(Path("/etc")))


def _python_roots() -> list[Path]:
    """What the kernel imports from: the Python installation, the venv, every site-packages folder
    on ``sys.path`` (a ``.pth`` may add one outside the venv) and course_lib with its data; the
    outermost only (a root inside another one is covered by it)."""
    pkg = Path(course_lib.__file__).resolve().parent
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), pkg,
             Path(sys.executable).resolve().parent}
    for entry in sys.path:
        p = Path(entry).resolve() if entry else None
        if p is not None and p.name in ("site-packages", "dist-packages") and p.is_dir():
            roots.add(p)
    if (pkg.parent / "data").is_dir():  # the course's small data files, read by some exercises
        roots.add(pkg.parent / "data")
    return [r for r in sorted(roots, key=lambda p: (len(p.parts), str(p)))
            if not any(o != r and o in r.parents for o in (*roots, Path("/usr")))]


def _apparent_binds() -> list[str]:
    """The interpreter's folders at the paths this process knows them by, where a symbolic link
    makes these differ from the real paths bound above (a checkout whose ``.venv`` is a link to a
    venv elsewhere, or to another checkout's): ``sys.executable`` and the ``pyvenv.cfg`` beside it
    are then found inside the sandbox as outside. Each is the real folder, read-only, again."""
    seen: list[Path] = []
    args: list[str] = []
    sites = [p for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")]
    for p in (sys.prefix, os.path.dirname(sys.executable), sys.base_prefix, *sites):
        apparent = Path(os.path.abspath(p))
        real = apparent.resolve()
        if apparent == real or not real.is_dir() or any(s == apparent or s in apparent.parents for s in seen):
            continue
        seen.append(apparent)
        args += ["--ro-bind", str(real), str(apparent)]
    return args


def _python_binds() -> list[str]:
    """The roots above, read-only, at the same paths (after ``/tmp``'s tmpfs, which would hide any
    under the temp folder), then the banks and private files of course_lib hidden."""
    args = ["--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
    for r in _python_roots():
        args += ["--ro-bind", str(r), str(r)]
    args += _apparent_binds()
    pkg = Path(course_lib.__file__).resolve().parent
    args += ["--tmpfs", str(pkg / "checks")]  # the banks: graded outside the sandbox only
    return args + _mask([p for p in _private(pkg) if not p.startswith(str(pkg / "checks"))])


def command(root: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    """The bwrap command that runs ``argv`` with host folder ``root`` as the writable /sandbox
    (working directory /sandbox/work) and only the environment ``env`` (plus a few locale and
    thread-count variables of this process)."""
    args = [bwrap_path(), "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            *_system_binds(), "--proc", "/proc", "--dev", "/dev", *_python_binds(), "--dir", "/tmp/home",
            "--bind", str(root), str(INSIDE), "--chdir", str(INSIDE / "work"), "--clearenv"]
    full = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    full.update({"HOME": "/tmp/home", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                 "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                 "JUPYTER_PLATFORM_DIRS": "1",
                 # the course_lib bound here, whatever the venv's editable install points at (a venv
                 # shared by two checkouts points at one of them; only this one is visible inside)
                 "PYTHONPATH": str(Path(course_lib.__file__).resolve().parent.parent)})
    full.update(env)
    for k, v in sorted(full.items()):
        args += ["--setenv", k, v]
    return [*args, "--", *argv]


def limit_args() -> list[str]:
    return ["--limits", ",".join(f"{k}={v}" for k, v in LIMITS.items())]


def explain(log: str, rc: int | None) -> str:
    """One line naming why a sandbox did not start, and the fix, from bwrap's or Python's words."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    last = lines[-1][:300] if lines else f"exit status {rc}"
    low = log.lower()
    if "namespace" in low or "uid map" in low or "operation not permitted" in low:
        return f"bwrap cannot create the sandbox's namespaces ({last}): {_USERNS_FIX}"
    if "execvp" in low:
        return (f"the interpreter {sys.executable} is not visible inside the sandbox ({last}): "
                "a bug of the grader's binds; report it with this line")
    if "error" in low and ("import" in low or "module" in low):
        return f"Python cannot import the grader's packages inside the sandbox ({last}): reinstall the course's requirements"
    return f"the sandbox failed to start ({last})"


class Sandbox:
    """One sandbox running ``argv`` (the executor, or a fresh launcher): started on construction,
    :meth:`kill` ends every process in it. ``status`` holds the events of the status pipe."""

    def __init__(self, root: Path, argv: list[str], env: dict[str, str] | None = None, *,
                 listen: bool = False) -> None:
        self.listener = None
        if listen:
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(str(root / "out" / "grader.sock"))
            self.listener.listen(1)
        self.log, self.status = _Pipe(LOG_CAP), _Pipe(wire.MAX_TEXT)
        info_r, info_w = os.pipe()
        cmd = command(root, [*argv, "--status-fd", str(self.status.write_fd)], dict(env or {}))
        cmd[1:1] = ["--info-fd", str(info_w)]
        self.root = root
        self.ended: str | None = None  # why the watchdog ended the sandbox (a fork storm, a full disk)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log.write_fd,
                                     stderr=self.log.write_fd, pass_fds=(info_w, self.status.write_fd),
                                     start_new_session=True)
        os.close(info_w)
        self.log.start()
        self.status.start()
        self.child = _read_child_pid(info_r)
        self._stop = threading.Event()
        if self.child:
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """End the sandbox when it holds more than MAX_PROCS processes, or its folder more than
        DISK_CAP bytes or MAX_FILES entries: a fork storm or a disk filler must not take the
        machine's process table or disk from the grader and the other sandboxes."""
        try:
            ns = os.readlink(f"/proc/{self.child}/ns/pid")
        except OSError:
            return
        tick = 0
        while not self._stop.wait(0.25):
            tick += 1
            if _count_procs(ns) > MAX_PROCS:
                self.ended = f"it started more than {MAX_PROCS} processes"
            elif tick % 4 == 0 and (used := _disk_use(self.root, DISK_CAP, MAX_FILES)) is not None:
                self.ended = used
            if self.ended:
                self.kill()
                return

    def events(self) -> list[dict]:
        """The executor's status events so far (trusted: only the executor can write them)."""
        out = []
        for line in bytes(self.status.data).splitlines():
            try:
                row = wire.loads(line)
            except wire.WireError:
                continue
            if isinstance(row, dict):
                out.append(row)
        return out

    def connect(self, wait: float) -> socket.socket | None:
        if self.listener is None:
            return None
        self.listener.settimeout(wait)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return None
        return conn

    def kill(self) -> None:
        """SIGKILL the sandbox's init: the kernel then kills every process of its PID namespace,
        and bwrap exits only after that; wait for it and for its pipes to drain."""
        self._stop.set()
        for pid in (self.child, self.proc.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.proc.wait()
        if threading.current_thread() is not self.log.thread:
            self.log.thread.join(5)
            self.status.thread.join(5)
        if self.listener is not None:
            self.listener.close()


def preflight(root: Path) -> None:
    """Start one sandbox that imports what the executor needs; raise :class:`SandboxFailure` with
    the cause and the fix when it cannot (bwrap without namespaces, an interpreter it cannot see)."""
    (root / "work").mkdir(parents=True, exist_ok=True)
    (root / "out").mkdir(exist_ok=True)
    box = Sandbox(root, [sys.executable, "-m", "course_lib.grading._launch", "--check"])
    try:
        box.proc.wait(timeout=STARTUP_LIMIT)
    except subprocess.TimeoutExpired:
        pass
    box.kill()
    if not any(e.get("event") == "ready" for e in box.events()):
        raise SandboxFailure(explain(box.log.text(), box.proc.returncode))


def run_worker(worker: str, world_size: int, timeout: float, kwargs: object, tmp: Path) -> object:
    """``course_lib.dist.launch(worker, world_size, timeout=..., **kwargs)`` in a *fresh* sandbox
    (not the student's kernel, which could replace ``launch``), for graders that must see a real
    run; returns the wire-encoded result or raises what the launch raised."""
    root = Path(tmp)
    (root / "work").mkdir(parents=True)
    (root / "out").mkdir()
    (root / "work" / "request.json").write_text(wire.dumps(
        {"worker": worker, "world_size": world_size, "timeout": timeout, "kwargs": kwargs}))
    box = Sandbox(root, [sys.executable, "-m", "course_lib.grading._launch", *limit_args()])
    try:
        box.proc.wait(timeout=timeout + STARTUP_LIMIT / 4)
    except subprocess.TimeoutExpired:
        pass
    box.kill()
    reply = next((e for e in box.events() if e.get("event") == "result"), None)
    if reply is None:
        raise remote.CallTimeout(f"the worker sandbox gave no result ({explain(box.log.text(), box.proc.returncode)})")
    return reply
