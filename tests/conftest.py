"""Shared fixtures for the book and website tests (tests/test_book.py, tests/test_site.py).

The book is built ONCE per test session, exactly as `make book-strict` builds it (warnings are
errors), into the normal `_build/` folder so the jupyter cache in `_build/.jupyter_cache` is
reused: a repeat run re-reads every page (so every warning is reported again) but re-executes
only the chapter pages whose code changed.

Set COURSE_BOOK_REUSE=1 to skip the build and test the HTML already in `_build/html` (handy while
working on the site test; never in CI).
Set COURSE_HTML_DIR=/path/to/html to test HTML built elsewhere (e.g. with --path-output).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build"
HTML_DIR = BUILD_DIR / "html"
TOC = ROOT / "book" / "_toc.yml"
ARTIFACTS = ROOT / "build" / "test-artifacts"
BOOK_CMD = ["build", ".", "--config", "book/_config.yml", "--toc", "book/_toc.yml"]
STRICT_FLAGS = ["-W", "-n", "--keep-going", "--all"]
# Pages Sphinx writes besides the TOC pages; the site test visits them too.
EXTRA_PAGES = ("search", "genindex")


def toc_docnames(toc: Path = TOC) -> list[str]:
    """Every document in the Jupyter Book TOC, in reading order, without suffix."""
    data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    names = [data["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries or []:
            if "file" in entry:
                names.append(entry["file"])
            for key in ("chapters", "sections", "parts"):
                walk(entry.get(key, []))

    for key in ("parts", "chapters", "sections"):
        walk(data.get(key, []))
    return [n.removesuffix(".md").removesuffix(".ipynb") for n in names]


def site_pages() -> list[str]:
    return toc_docnames() + list(EXTRA_PAGES)


BROWSER_SKIP_MARK = "the site test drives Debian's Chromium"   # tests/test_site.py's skip reason


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    """Say in one line, at the end of the run, that the browser check did not run and how to get it."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if BROWSER_SKIP_MARK in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"BROWSER CHECK DID NOT RUN: {len(skipped)} site tests skipped, no Chromium at "
            f"{os.environ.get('COURSE_CHROMIUM', '/usr/bin/chromium')}. Install the system prerequisites "
            "(README: apt-get install chromium chromium-driver fonts-wqy-microhei bubblewrap) and rerun.",
            yellow=True, bold=True)


# The per-page browser tests are split over three files so that pytest-xdist (--dist loadfile, one
# file per worker) spreads them over both workers: each file's pages, by the module that asks.
# test_site.py takes every page the other two do not.
# The notebook twins (notebooks/zh, solutions/zh) render the English notebook's cells with Chinese prose
# around them: the browser drives a sample of them (the first chapter's pair and the widest tables,
# chapter 13's), not all 34, to keep make test within its budget; tests/test_twins.py holds every twin
# to its English notebook, whose page the browser does drive.
ZH_TWIN_SAMPLE = ("notebooks/zh/01_flops_lab", "solutions/zh/01_flops", "notebooks/zh/13_plan_lab")


def _notebook_twin(page: str) -> bool:
    return page.split("/")[0] in ("notebooks", "solutions") and page.split("/")[1:2] == ["zh"]


SITE_PAGE_FILES = {
    "test_site_zh": lambda page: page.startswith("book/zh/") or page in ZH_TWIN_SAMPLE,   # the Chinese edition
    "test_site_labs": lambda page: page.split("/")[0] in ("notebooks", "solutions") and not _notebook_twin(page),
}


def pages_of(module: str) -> list[str]:
    """The site pages whose per-page tests run in ``module`` (a test file's module name)."""
    if module in SITE_PAGE_FILES:
        return [p for p in site_pages() if SITE_PAGE_FILES[module](p)]
    return [p for p in site_pages() if not any(claims(p) for claims in SITE_PAGE_FILES.values())
            and not _notebook_twin(p)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # One site test per page: a failure names the page.
    if "site_page" in metafunc.fixturenames:
        pages = pages_of(metafunc.module.__name__)
        metafunc.parametrize("site_page", pages, ids=pages)


@pytest.fixture(scope="session")
def toc_pages() -> list[str]:
    """Docnames in book/_toc.yml, e.g. ["book/index", "book/01_flops", ...]."""
    return toc_docnames()


@dataclass(frozen=True)
class BookBuild:
    returncode: int
    log: str
    html_dir: Path
    seconds: float
    reused: bool = False

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.splitlines()[-n:])


def _jupyter_book() -> str:
    exe = Path(sys.executable).with_name("jupyter-book")
    if exe.exists():
        return str(exe)
    found = shutil.which("jupyter-book")
    if not found:
        pytest.fail("jupyter-book is not installed in this environment (pip install -r requirements.txt)")
    return found


def _build_book() -> BookBuild:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    start = time.monotonic()
    proc = subprocess.run(
        [_jupyter_book(), *BOOK_CMD, *STRICT_FLAGS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    seconds = time.monotonic() - start
    log = proc.stdout + "\n" + proc.stderr
    (ARTIFACTS / "book-build.log").write_text(f"# {seconds:.1f} s, exit {proc.returncode}\n{log}")
    return BookBuild(proc.returncode, log, HTML_DIR, seconds)


# Test files that need the built book. Under pytest-xdist they run after the unit tests, while the
# book is built in the background from the start of the run (see pytest_sessionstart), so no worker
# sits waiting; the longest first, so it is not the last file left running on one worker while the other idles
# (test_handout.py builds the students' site, reusing this build's jupyter cache once it is done)
BOOK_TEST_FILES = ("test_handout.py", "test_site.py", "test_site_labs.py", "test_site_zh.py",
                   "test_site_layout.py", "test_site_calculators.py", "test_book.py", "test_site_static.py", "test_claims.py",
                   "test_site_zh_prose.py")
BOOK_JOB_ENV = "COURSE_BOOK_JOB"   # set by the xdist controller: where the background build reports


def _book_wanted() -> bool:
    return os.environ.get("COURSE_BOOK_REUSE") != "1" and not os.environ.get("COURSE_HTML_DIR")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """On the controller of a parallel run that includes book tests: start the book build now, in
    its own process, so it uses a core while the workers run everything else; the workers (started
    after this hook, with this environment) wait for its exit status in ``book_build``."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None) or not _book_wanted():
        return
    args = [str(a) for a in config.args]
    paths = [Path(a.split("::")[0]) for a in args]   # a node id names its file before "::"
    if not any(p.name in BOOK_TEST_FILES or p.resolve() == ROOT / "tests" for p in paths):
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    job = ARTIFACTS / f"book-build-{os.getpid()}-{time.time_ns()}"
    for old in ARTIFACTS.glob("book-build-*"):
        if old.is_file():
            old.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    script = ("import subprocess, sys, time\n"
              "t = time.monotonic()\n"
              "with open(sys.argv[1] + '.log', 'w') as log:\n"
              "    rc = subprocess.call(sys.argv[3:], cwd=sys.argv[2], stdout=log, stderr=subprocess.STDOUT)\n"
              "open(sys.argv[1] + '.tmp', 'w').write(f'{rc} {time.monotonic() - t:.1f}')\n"
              "import os; os.replace(sys.argv[1] + '.tmp', sys.argv[1] + '.rc')\n")
    config._course_book_job = subprocess.Popen(
        [sys.executable, "-c", script, str(job), str(ROOT), _jupyter_book(), *BOOK_CMD, *STRICT_FLAGS],
        env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    os.environ[BOOK_JOB_ENV] = str(job)


def pytest_sessionfinish(session: pytest.Session) -> None:
    job = getattr(session.config, "_course_book_job", None)
    if job is not None and job.poll() is None:   # the run ended before the book did (e.g. -x)
        os.killpg(job.pid, 9)
        job.wait()


def _phase(item: pytest.Item, labs: list[str]) -> tuple[int, int]:
    """Where an item runs: the unit tests first (the book builds meanwhile, ~6 min), then the
    book's tests and the labs taken in turn, then the worked answers, many short files that fill
    both workers to the end. In turn, because a browser test waits on its page (a load, MathJax, a
    quiet network) while a lab computes: a worker on each keeps both cores busy, where two browser
    tests side by side left 15 % of the cores idle (vmstat, a fresh clone)."""
    path = Path(str(item.fspath))
    if path.name in BOOK_TEST_FILES:
        return 1, 2 * BOOK_TEST_FILES.index(path.name) + 1
    if path.suffix == ".py":
        return 0, 0
    if path.parent.name == "notebooks":
        return 1, 2 * labs.index(path.name)
    return 2, 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the session by ``_phase`` (a stable sort, the same on every worker), so a parallel
    run reaches the book's tests once the background build is done and ends on short files."""
    labs = sorted({Path(str(i.fspath)).name for i in items if Path(str(i.fspath)).parent.name == "notebooks"})
    items.sort(key=lambda item: _phase(item, labs))


def _wait_for_book_job(job: str) -> BookBuild:
    rc_file, log_file = Path(job + ".rc"), Path(job + ".log")
    deadline = time.monotonic() + 1200
    while not rc_file.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"the background book build did not finish in 20 minutes (log: {log_file})")
        time.sleep(1)
    rc, seconds = rc_file.read_text().split()
    log = log_file.read_text(errors="replace")
    (ARTIFACTS / "book-build.log").write_text(f"# {seconds} s, exit {rc}\n{log}")
    return BookBuild(int(rc), log, HTML_DIR, float(seconds))


@pytest.fixture(scope="session")
def book_build() -> BookBuild:
    """Build the book once (warnings as errors) and return the result; never raises on failure.

    In a parallel run the controller has started the build already (``pytest_sessionstart``) and
    each worker waits for it. Otherwise (a single process, or workers started by hand) the first
    worker to ask builds while holding a file lock and the others read its result."""
    if os.environ.get("COURSE_BOOK_REUSE") == "1" and (HTML_DIR / "index.html").is_file():
        return BookBuild(0, "(COURSE_BOOK_REUSE=1: build skipped)", HTML_DIR, 0.0, reused=True)
    if os.environ.get("COURSE_HTML_DIR"):   # test a book built elsewhere (--path-output DIR: DIR/_build/html)
        return BookBuild(0, "(COURSE_HTML_DIR: build skipped)", Path(os.environ["COURSE_HTML_DIR"]), 0.0, reused=True)
    if os.environ.get(BOOK_JOB_ENV):
        return _wait_for_book_job(os.environ[BOOK_JOB_ENV])
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return _build_book()
    from filelock import FileLock
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    done = ARTIFACTS / f"book-build-{run_id}.json"
    with FileLock(str(ARTIFACTS / "book-build.lock"), timeout=1200):
        if done.is_file():
            saved = json.loads(done.read_text())
            return BookBuild(saved["returncode"], saved["log"], Path(saved["html_dir"]), saved["seconds"])
        for old in ARTIFACTS.glob("book-build-*.json"):   # earlier runs' results
            old.unlink()
        result = _build_book()
        done.write_text(json.dumps({"returncode": result.returncode, "log": result.log,
                                    "html_dir": str(result.html_dir), "seconds": result.seconds}))
        return result


@pytest.fixture(scope="session")
def html_dir(book_build: BookBuild) -> Path:
    if not (book_build.html_dir / "index.html").is_file():
        pytest.fail(f"the book build wrote no {book_build.html_dir}/index.html:\n{book_build.tail()}")
    return book_build.html_dir


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        pass


@pytest.fixture(scope="session")
def site_url(html_dir: Path) -> Iterator[str]:
    """Serve _build/html on a free local port for the browser test."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread for a test module (``pytestmark = pytest.mark.usefixtures(...)``):
    the course's models are tiny, and on a shared 2-core machine OpenMP's spinning second thread
    makes them 10-100x slower."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
