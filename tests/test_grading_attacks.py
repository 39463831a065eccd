"""The grader attacked the way a student would (issues #17 and #29): attack notebooks graded in
real, sandboxed runs next to honest masters. No attack may earn a point it did not answer honestly,
crash or hang the run, invalidate a report or change another student's grade; the honest masters
keep 100 %; nothing outside the sandbox changes; nothing keeps running.

Run A grades the fixture chapter (``--chapter fx_grading --bank grading_fixture_bank``) against
cheating; run C the same chapter against the *run* (unbuildable answers, malformed notebooks, a
trickling callback socket, floods of output and logs, control characters, fork storms, memory,
files only root may read, forged status); run B takes the assignment from the file names, with the
real chapter 1 and 12 banks (a forged kill-and-resume run). All three run at once."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import xml.etree.ElementTree as ET

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "grading"
MASTER = FIX / "solutions" / "fx_grading.ipynb"
MARKER = f"course-attack-daemon-{uuid.uuid4().hex[:12]}"
FLOPS = 6 * 1e9 * 2e10

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader needs bubblewrap")

SETUP = 'from course_lib.grading import Checker\ncheck = Checker("fx_grading", bank="grading_fixture_bank")'
SECRET = f"course-secret-{uuid.uuid4().hex[:12]}"   # in the grader's environment, never in a sandbox
HOSTILE_NAME = "a17_esc\x1b[31m\x07\n# injected <x>&.ipynb"


def notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [],
                                  "execution_count": None, "source": src} for i, src in enumerate(cells)],
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}},
                       "nbformat": 4, "nbformat_minor": 5})


def attacks(p: dict[str, str]) -> dict[str, str]:
    """name -> notebook text; ``p`` holds the real paths an attacker would aim at."""
    evil = ("from course_lib.grading import Question\nQUESTIONS = [Question(q, points=n, prompt='', "
            "grader=lambda a: (1.0, '')) for q, n in [('flops', 2), ('dtype', 1), ('shape', 1), ('scale', 3)]]\n")
    daemon = (f"import time, pathlib\nout = pathlib.Path({p['out']!r})\nt = time.time()\n"
              "while time.time() - t < 120:\n"
              "    for name in ('grades.json', 'summary.md', 'junit.xml'):\n"
              "        try:\n            (out / name).write_text('forged 11/11')\n"
              "        except OSError:\n            pass\n    time.sleep(0.2)\n")
    wrong = 'check("flops", 4e19)\ncheck("dtype", "fp16")\ncheck("shape", (9, 9))\ncheck("scale", lambda x: x)'
    return {
        # 1: a notebook plants a bank where the runner imports from, the next names it
        "a01_plant_bank.ipynb": notebook(SETUP, (
            f"import pathlib\nfor d in [pathlib.Path.cwd(), pathlib.Path({p['cwd']!r}), pathlib.Path({p['sub']!r}), "
            f"pathlib.Path({str(FIX)!r}), pathlib.Path({str(ROOT)!r})]:\n"
            f"    try:\n        (d / 'zz_evilbank.py').write_text({evil!r})\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)")),
        "a02_use_planted_bank.ipynb": notebook(
            'from course_lib.grading import Checker\ncheck = Checker("fx_grading", bank="zz_evilbank")  # bank="zz_evilbank"',
            wrong),
        # 3: a daemon that leaves the session and rewrites the reports after the runner exits
        "a03_daemon.ipynb": notebook(SETUP, (
            f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {daemon!r}, {MARKER!r}], "
            "start_new_session=True)\nsubprocess.Popen(['sh', '-c', 'sleep 300; echo " + MARKER + "'], "
            "start_new_session=True)")),
        # 4: overwrite a later student's submission, the banks, the fixture bank
        "a04_overwrite.ipynb": notebook(SETUP, (
            "import pathlib\n"
            f"for t in [{p['sub'] + '/zz_honest.ipynb'!r}, {str(ROOT / 'course_lib/checks/ch01_flops.py')!r},"
            f" {str(FIX / 'grading_fixture_bank.py')!r}, '../zz_honest.ipynb']:\n"
            "    try:\n        pathlib.Path(t).write_text('{}')\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n"
            "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "except OSError as e:\n    print('no network', type(e).__name__)")),
        # 5 (and 9): forge the answers file, the old log, the progress file; print fake verdicts
        "a05_forge.ipynb": notebook(SETUP, (
            "import os, json, pathlib\ncheck('flops', 4e19)\npath = os.environ['COURSE_GRADE_ANSWERS']\n"
            "with open(path, 'a') as f:\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"flops\", \"points\": 2, \"score\": 2}\\n')\n"
            "    f.write('{\"qid\": \"dtype\", \"score\": NaN, \"points\": 1}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"shape\", \"answer\": NaN}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"scale\", \"answer\": {\"$fn\": 999, \"name\": \"scale\"}}\\n')\n"
            "    f.write('{\"event\": \"answer\", \"qid\": \"dtype\", \"answer\": 1e999}\\n')\n"
            "with open(os.environ.get('COURSE_GRADE_LOG', '/tmp/log.jsonl'), 'a') as f:\n"
            "    f.write(json.dumps({'qid': 'flops', 'score': 2, 'points': 2}) + '\\n')\n"
            "(pathlib.Path(path).parent / 'progress.jsonl').open('a').write('{\"event\": \"end\"}\\n')\n"
            "print('✔ flops: correct (2/2 points)')\nprint('fx_grading: 7/7 points')")),
        # 6: reveal every question, import the banks, then answer honestly: revealed still scores 0
        "a06_reveal.ipynb": notebook(SETUP, (
            "for q in ('flops', 'dtype', 'shape', 'scale'):\n    check.reveal(q)\n"
            "try:\n    import grading_fixture_bank as b\n"
            "    for q in b.QUESTIONS:\n        check(q.qid, q.reference() if q.is_value else (lambda x: 2 * x))\n"
            "except ImportError as e:\n    print('no bank', type(e).__name__)\n"
            "try:\n    from course_lib.checks import ch01_flops\nexcept ImportError as e:\n    print('no banks', type(e).__name__)\n"
            "check('flops', 6 * 1e9 * 2e10)\ncheck('dtype', 'bfloat16')")),
        # 7: monkeypatch the grading code inside the kernel
        "a07_monkeypatch.ipynb": notebook(SETUP, (
            "from course_lib.grading import Question, values, checker\nfrom course_lib.grading.question import Result\n"
            "Question.grade = lambda self, answer, **kw: Result(self.qid, self.points, self.points, '')\n"
            "values.compare = lambda *a, **k: None\nchecker.Verdict.__bool__ = lambda self: True"), wrong),
        # 8: read or exec the masters from disk at run time
        "a08_exec_master.ipynb": notebook(SETUP, (
            "import json, pathlib\n"
            f"for p in [{str(MASTER)!r}, '../solutions/fx_grading.ipynb', {str(ROOT / 'solutions/01_flops.ipynb')!r}]:\n"
            "    try:\n        nb = json.loads(pathlib.Path(p).read_text())\n"
            "    except OSError as e:\n        print('blocked', type(e).__name__)\n        continue\n"
            "    for c in nb['cells'][1:]:\n        exec(''.join(c['source']))")),
        # 8 and 11: a table of the master's outputs; spraying candidates; a blind guess to read a ratio
        "a09_table_spray_guess.ipynb": notebook(SETUP, (
            "table = {1.0: 2.0, 0.0: 0.0, -3.5: -7.0, 1e6: 2e6}\n"
            "def scale(x):\n    return table.get(x, 0.0)\ncheck('scale', scale)\n"
            "for k in range(15, 25):\n    check('flops', 1.2 * 10.0 ** k)\n"
            "check('flops', 1.0)\ncheck('shape', [float('nan'), float('inf')])\ncheck('dtype', float('nan'))")),
        "zz_honest.ipynb": MASTER.read_text(encoding="utf-8"),
    }


def _tensor_line(qid: str, t: dict) -> str:
    return json.dumps({"event": "answer", "qid": qid, "answer": {"$tensor": t}})


def run_attacks() -> dict[str, str]:
    """name -> notebook text: attacks on the grading run itself (run C)."""
    lines = [_tensor_line("flops", {"kind": "numpy", "dtype": "int8", "shape": [1], "data": [300]}),
             _tensor_line("dtype", {"kind": "numpy", "dtype": "float64", "shape": [1] * 65, "data": [1.0]}),
             _tensor_line("shape", {"kind": "numpy", "dtype": "U999999999", "shape": [150], "data": [1] * 150}),
             _tensor_line("scale", {"kind": "fake", "dtype": "float32", "shape": [1], "data": ["x"]})]
    torch_lines = [_tensor_line("flops", {"kind": "torch", "dtype": "int8", "shape": [1], "data": [300]}),
                   _tensor_line("dtype", {"kind": "torch", "dtype": "float128", "shape": [1], "data": [1]}),
                   _tensor_line("shape", {"kind": "torch", "dtype": "int64", "shape": [1], "data": [2 ** 70]}),
                   json.dumps({"event": "answer", "qid": "scale", "answer": {"$fn": "x", "name": "scale"}})]

    def inject(rows: list[str]) -> str:
        return ("import os\nwith open(os.environ['COURSE_GRADE_ANSWERS'], 'a') as f:\n"
                + "".join(f"    f.write({r + chr(10)!r})\n" for r in rows))
    raw = json.loads(notebook(SETUP, "x = 1"))
    raw["cells"] += [dict(raw["cells"][1], id=f"r{i}", source=src)
                     for i, src in enumerate([5, {"a": 1}, [1, "check('flops', 4e19)"], None, True])]
    trickle = (  # connect to the callback socket first; after the first request, reply a byte a second
        "import os, socket, threading, time, signal\n"
        "s = socket.socket(socket.AF_UNIX)\ns.connect(os.environ['COURSE_GRADE_SOCKET'])\n"
        "def drip():\n    s.recv(100)\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
        "    while True:\n        s.send(b'1')\n        time.sleep(1)\n"
        "threading.Thread(target=drip, daemon=True).start()\n"
        "def scale(x):\n    return 2 * x\ncheck('scale', scale)")
    root_only = (
        "import os, json\nread = []\n"
        "for d, dirs, files in os.walk('/etc'):\n    for n in files:\n        p = os.path.join(d, n)\n"
        "        try:\n            open(p, 'rb').read(1)\n            read.append(p)\n        except OSError:\n            pass\n"
        "for p in ['/etc/shadow-', '/etc/gshadow-', '/etc/security/opasswd', '/etc/shadow', '/etc/gshadow']:\n"
        "    try:\n        print('READ', p, len(open(p, 'rb').read()))\n    except OSError as e:\n        print('blocked', p)\n"
        "print('READABLE=' + json.dumps(read))\n"
        f"print('SECRET SEEN' if any({SECRET!r} in v for v in os.environ.values()) else 'no secret')")
    forge_status = (
        "import os, pathlib\nppid = os.getppid()\nopened = []\n"
        "for fd in range(64):\n    try:\n        os.open(f'/proc/{ppid}/fd/{fd}', os.O_WRONLY)\n        opened.append(fd)\n"
        "    except OSError:\n        pass\n"
        "print('OPENED', opened)\n"
        "try:\n    open(f'/proc/{ppid}/environ').read()\n    print('ENVIRON READ')\nexcept OSError:\n    print('environ blocked')\n"
        "p = pathlib.Path('/sandbox/out/progress.jsonl')\np.write_text('{\"event\": \"cells_done\"}\\n')\n"
        "check('flops', 4e19)")
    return {
        "c00_honest.ipynb": MASTER.read_text(encoding="utf-8"),
        "c10_unbuildable_numpy.ipynb": notebook(SETUP, inject(lines)),
        "c11_unbuildable_torch.ipynb": notebook(SETUP, inject(torch_lines)),
        "c12_source_not_text.ipynb": json.dumps(raw),
        "c13_not_an_object.ipynb": "[1, 2, 3]",
        "c13_nested_too_deep.ipynb": '{"cells": ' + "[" * 200_000 + "]" * 200_000 + "}",   # json's recursion
        "c14_trickle.ipynb": notebook(SETUP, trickle),
        "c15_huge_output.ipynb": notebook(SETUP, "check('flops', 4e19)\nprint('x' * (20 << 20))"),
        "c16_log_flood.ipynb": notebook(SETUP, (
            "import os\ntry:\n    os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\n    print('REOPENED')\n"
            "except OSError as e:\n    print('reopen blocked', type(e).__name__)\n"
            "try:\n    os.lseek(1, 1 << 40, 0)\n    print('SEEKED')\nexcept OSError as e:\n    print('no seek', type(e).__name__)\n"
            "import fcntl, stat\nchunk, hit = b'y' * (1 << 20), 0\n"
            "for fd in range(3, 256):\n    try:\n        st = os.fstat(fd)\n    except OSError:\n        continue\n"
            "    if stat.S_ISFIFO(st.st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY \\\n"
            "            and st.st_ino not in (os.fstat(1).st_ino, os.fstat(2).st_ino):  # not ipykernel's capture\n"
            "        hit += 1\n        for _ in range(64):\n            os.write(fd, chunk)\n"
            "print('flooded', hit)\n"
            "check('flops', 4e19)")),
        HOSTILE_NAME: notebook(SETUP, "check('dtype', 'x\\x1b[2J\\x00')",
                               "E = type('Boom\\x1b[2J\\u202e', (Exception,), {})\n"
                               "check('shape', (9, 9))\nraise E('msg\\x00\\x1b[31m\\n# Heading <a>&\\x07')\n"
                               "check('scale', None)"),
        "c18_fork_storm.ipynb": notebook(SETUP, "check('flops', 4e19)", (
            "import os, time\nfor i in range(1500):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)"),
            "check('dtype', 'fp16')"),
        "c19_root_only_files.ipynb": notebook(SETUP, root_only),
        "c20_forge_status.ipynb": notebook(SETUP, forge_status),
        "c21_kill_executor.ipynb": notebook(SETUP, "check('flops', 4e19)",
                                            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
        "c22_memory.ipynb": notebook(SETUP, (
            "try:\n    b = bytearray(24 << 30)\n    print('ALLOCATED')\nexcept MemoryError:\n    print('memory blocked')\n"
            "import os\ntry:\n    with open('big', 'wb') as f:\n        f.truncate(1 << 40)\n    print('BIG FILE')\n"
            "except OSError as e:\n    print('file blocked', e.errno)\ncheck('flops', 4e19)")),
        "c26_fill_the_disk.ipynb": notebook(SETUP, (
            "import os\ntry:\n    with open('/tmp/fill', 'wb') as f:\n        for _ in range(40):\n"
            "            f.write(b'z' * (16 << 20))\n    print('TMP FILLED')\nexcept OSError as e:\n"
            "    print('tmp full', e.errno)\nos.remove('/tmp/fill')\ncheck('flops', 4e19)"), (
            "import os, time\nfor i in range(48):\n    with open(f'/sandbox/work/f{i}', 'wb') as f:\n"
            "        f.write(os.urandom(16 << 20))\ntime.sleep(30)"),
            "check('dtype', 'fp16')"),
        "c23_huge_answer.ipynb": notebook(SETUP, "check('shape', 'x' * (17 << 20))\ncheck('flops', [1e20] * 200_000)"),
        "c24_symlinked_copy.ipynb": notebook(SETUP, (
            "import os, subprocess, sys\n"
            "code = 'import os, time\\nwhile True:\\n    try:\\n        os.remove(\"/sandbox/out/executed.ipynb\")\\n"
            "    except OSError:\\n        pass\\n    try:\\n        os.symlink(\"/etc/passwd\", \"/sandbox/out/executed.ipynb\")\\n"
            "    except OSError:\\n        pass\\n    time.sleep(0.001)'\n"
            "subprocess.Popen([sys.executable, '-c', code], start_new_session=True)\ncheck('flops', 4e19)")),
        "c25_prereply.ipynb": notebook(SETUP, (
            "import os, socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(os.environ['COURSE_GRADE_SOCKET'])\n"
            "s.send(b'{\"ok\": 1.0}\\n' * 100 + b'{\"ok\": {\"$tensor\": {\"kind\": \"numpy\", \"dtype\": \"U99999999\", '\n"
            "       b'\"shape\": [1], \"data\": [1]}}}\\n')\n"
            "def scale(x):\n    return 2 * x\ncheck('scale', scale)")),
        "zz_honest.ipynb": MASTER.read_text(encoding="utf-8"),
    }


def _grade(sub: Path, out: Path, cwd: Path, *extra: str, cell: str = "20") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(FIX), COURSE_TEST_SECRET=SECRET)
    return subprocess.Popen([sys.executable, "-m", "course_lib.grading", "grade", str(sub), "--out", str(out),
                             "--timeout-cell", cell, "--timeout-notebook", "60", "--seed", "1234", *extra],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _digest(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _strict(text: str) -> dict:
    def bad(name):
        raise ValueError(name)
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    cwd, sub_a, sub_b, sub_c = base / "cwd", base / "sub_a", base / "sub_b", base / "sub_c"
    for d in (cwd, sub_a, sub_b, sub_c):
        d.mkdir()
    out_a, out_b, out_c = base / "out_a", base / "out_b", base / "out_c"
    for name, text in run_attacks().items():
        (sub_c / name).write_text(text, encoding="utf-8")
    for name, text in attacks({"cwd": str(cwd), "sub": str(sub_a), "out": str(out_a)}).items():
        (sub_a / name).write_text(text, encoding="utf-8")
    shutil.copy(ROOT / "solutions" / "01_flops.ipynb", sub_b / "01_flops.ipynb")
    from course_lib.checks.ch02_scaling import QUESTIONS as CH02
    (sub_b / "01_flops-fixture-bank.ipynb").write_text(notebook(
        SETUP, f"check('flops', {FLOPS!r})\ncheck('dtype', 'bfloat16')\ncheck('shape', (2, 3))"))
    (sub_b / "01_flops-own-chapter.ipynb").write_text(notebook(
        'from course_lib.grading import Checker\ncheck = Checker("ch02_scaling")',
        "\n".join(f"check({q.qid!r}, 1.0)" for q in CH02)))
    (sub_b / "my_homework.ipynb").write_text(notebook(SETUP))
    (sub_b / "01_flops-array.ipynb").write_text("[]")        # not an object, with --solutions
    (sub_b / "12_failures-forged.ipynb").write_text(notebook(   # evidence forged in the kernel
        'from course_lib.grading import Checker\ncheck = Checker("ch12_failures")',
        "import course_lib.dist, course_lib.faults.drill as drill, course_lib.grading.remote as remote\n"
        "def fake(worker, world_size, timeout=None, **kw):\n"
        "    k = kw.get('kill_at', 5)\n"
        "    return [{'bit_identical': True, 'resumed_from': k // 4 * 4, 'steps_redone': k % 4, 'error': None}]\n"
        "course_lib.dist.launch = fake\ndrill.kill_and_resume = lambda *a, **k: fake(None, 1, **k)[0]\n"
        "remote.run_request = lambda req: fake(None, 1, **dict(req.get('kwargs', {})))\n"
        "def train_resumable(ckpt_dir, total_steps, every):\n    return None\n"
        "check('resume', train_resumable)"))
    watched = [ROOT / "course_lib/checks/ch01_flops.py", FIX / "grading_fixture_bank.py", sub_a / "zz_honest.ipynb"]
    before = _digest(watched)
    t0 = time.monotonic()
    procs = [_grade(sub_a, out_a, cwd, "--chapter", "fx_grading", "--bank", "grading_fixture_bank"),
             _grade(sub_b, out_b, cwd, "--solutions", str(ROOT / "solutions")),
             _grade(sub_c, out_c, cwd, "--chapter", "fx_grading", "--bank", "grading_fixture_bank", cell="10")]
    results = [(p, *p.communicate(timeout=600)) for p in procs]
    (pa, out_txt_a, err_a), (pb, out_txt_b, err_b), (pc, out_txt_c, err_c) = results
    wall = time.monotonic() - t0
    time.sleep(1.0)  # anything left alive would now rewrite the reports
    return {"a": (pa.returncode, out_txt_a + err_a, out_a), "b": (pb.returncode, out_txt_b + err_b, out_b),
            "c": (pc.returncode, out_txt_c, err_c, out_c), "wall": wall,
            "cwd": cwd, "sub": sub_a, "before": before, "after": _digest(watched)}


def _report(out: Path) -> dict:
    return _strict((out / "grades.json").read_text())


def _scores(out: Path) -> dict[str, dict[str, dict]]:
    return {n["notebook"]: {q["qid"]: q for q in n["questions"]} for n in _report(out)["notebooks"]}


def test_honest_master_keeps_full_marks(runs):
    rc, log, out = runs["a"]
    assert rc == 1, log                            # attacks are below the pass mark
    honest = _scores(out)["zz_honest.ipynb"]
    assert all(q["score"] == q["points"] for q in honest.values()), honest
    assert "zz_honest.ipynb (fx_grading): 7/7 points (100.0%) pass" in log


def test_no_attack_earns_a_point(runs):
    scores = _scores(runs["a"][2])
    assert len(scores) == 10
    for name, rows in scores.items():
        if name != "zz_honest.ipynb":
            assert all(q["score"] == 0 for q in rows.values()), (name, rows)


def test_reveal_costs_the_question_and_shows_nothing(runs):
    rows = _scores(runs["a"][2])["a06_reveal.ipynb"]
    assert all(r["message"].startswith("revealed") for r in rows.values()), rows
    executed = (runs["a"][2] / "executed" / "a06_reveal.ipynb").read_text()
    assert "no reference answer in a graded run" in executed and "1.2e+20" not in executed
    assert "no bank ModuleNotFoundError" in executed and "no banks" in executed


def test_graded_feedback_gives_the_kind_not_the_value(runs):
    rows = _scores(runs["a"][2])["a09_table_spray_guess.ipynb"]
    assert rows["flops"]["message"] == "Your answer is not within the tolerance ±2% of the expected value."
    assert "×" not in json.dumps(_report(runs["a"][2]), ensure_ascii=False)
    assert rows["scale"]["score"] == 0             # the table misses the inputs drawn by this run


def test_forged_lines_are_no_answers(runs):
    rows = _scores(runs["a"][2])["a05_forge.ipynb"]
    assert rows["flops"]["message"].startswith("A third")   # the one real answer, graded
    assert rows["shape"]["message"].startswith("not attempted")
    assert rows["dtype"]["message"].startswith("not attempted")   # NaN literal and 1e999 rejected


def test_nothing_outside_the_sandbox_changed(runs):
    assert runs["before"] == runs["after"]
    for d in (runs["cwd"], runs["sub"], FIX, ROOT):
        assert not (d / "zz_evilbank.py").exists()
    executed = (runs["a"][2] / "executed" / "a04_overwrite.ipynb").read_text()
    assert executed.count("blocked") >= 1 and "no network" in executed


def test_no_process_survives_and_reports_are_the_runs(runs):
    alive = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if MARKER.encode() in cmd.read_bytes():
                alive.append(cmd.parent.name)
        except OSError:
            pass
    assert alive == []
    out = runs["a"][2]
    assert "forged" not in (out / "summary.md").read_text() + (out / "junit.xml").read_text()
    report = _report(out)
    assert report["seed"] == 1234 and report["feedback"] == "graded"


def test_assignment_comes_from_the_file_name(runs):
    rc, log, out = runs["b"]
    assert rc == 1, log
    scores = _scores(out)
    assert all(q["score"] == q["points"] for q in scores["01_flops.ipynb"].values())
    assert scores["01_flops-array.ipynb"]["(notebook)"]["message"].startswith("error: not a readable notebook")
    for name in ("01_flops-fixture-bank.ipynb", "01_flops-own-chapter.ipynb"):
        assert all(q["score"] == 0 for q in scores[name].values()), scores[name]
        assert {n["chapter"] for n in _report(out)["notebooks"] if n["notebook"] == name} == {"ch01_flops"}
    assert scores["my_homework.ipynb"]["(notebook)"]["message"].startswith("error: cannot tell the assignment")


def test_copies_of_the_master_are_flagged(runs):
    notes = {n["notebook"]: n["notes"] for n in _report(runs["b"][2])["notebooks"]}
    assert notes["01_flops.ipynb"] and "copies of 01_flops.ipynb" in notes["01_flops.ipynb"][0]
    assert notes["01_flops-own-chapter.ipynb"] == []


# --------------------------------------------------------------------------- attacks on the run (C)
def _outputs(executed: Path) -> str:
    """What an executed notebook printed (its stream outputs), not its source."""
    nb = json.loads(executed.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))


def test_evidence_forged_in_the_kernel_scores_nothing(runs):
    """Chapter 12's resume is launched by the grader in a fresh sandbox: replacing launch,
    kill_and_resume or run_request in the student's kernel changes nothing it trusts."""
    rows = _scores(runs["b"][2])["12_failures-forged.ipynb"]
    assert rows["resume"]["score"] == 0, rows["resume"]
    assert "returned NoneType, not the model" in rows["resume"]["message"], rows["resume"]


def test_no_attack_on_the_run_earns_a_point_or_breaks_it(runs):
    rc, out_txt, err, out = runs["c"]
    assert rc == 1, out_txt + err                      # a normal run: attacks below the pass mark
    scores = _scores(out)
    assert len(scores) == len(run_attacks()), sorted(scores)
    for honest in ("c00_honest.ipynb", "zz_honest.ipynb"):  # before and after every attack: 100 %
        assert all(q["score"] == q["points"] for q in scores[honest].values()), scores[honest]
    for name, rows in scores.items():
        if "honest" not in name:
            assert all(q["score"] == 0 for q in rows.values()), (name, rows)
        assert not any(q["message"].startswith("grader error") for q in rows.values()), (name, rows)
    for name in ("c13_not_an_object.ipynb", "c13_nested_too_deep.ipynb"):
        assert scores[name]["(notebook)"]["message"].startswith("error: not a readable notebook"), scores[name]
    for name in ("c10_unbuildable_numpy.ipynb", "c11_unbuildable_torch.ipynb"):
        assert sorted(scores[name]) == ["dtype", "flops", "scale", "shape"], scores[name]
    assert sorted(scores["c12_source_not_text.ipynb"]) == ["dtype", "flops", "scale", "shape"]
    # the trickled reply ends with the call's limit (10 s), not the notebook's (60 s) or never
    suites = {s.get("name"): s for s in ET.parse(out / "junit.xml").getroot().iter("testsuite")}
    assert float(suites["c14_trickle.ipynb"].get("time")) < 45, suites["c14_trickle.ipynb"].get("time")
    assert "did not answer within" in scores["c14_trickle.ipynb"]["scale"]["message"]
    assert runs["wall"] < 400, runs["wall"]


def test_the_reports_stay_valid_with_hostile_names_and_messages(runs):
    rc, out_txt, err, out = runs["c"]
    ET.parse(out / "junit.xml")                        # well-formed XML, checked by a parser
    report = _report(out)                              # strict JSON
    text = json.dumps(report, ensure_ascii=False)
    assert not any(ch in text for ch in "\x1b\x07\x00\u202e")
    names = [n["notebook"] for n in report["notebooks"]]
    assert "a17_esc\\x1b[31m\\x07 # injected <x>&.ipynb" in names, names
    summary = (out / "summary.md").read_text()
    assert not any(line.startswith("# injected") or line.startswith("# Heading") for line in summary.splitlines())
    assert "\x1b" not in summary and "\x1b" not in out_txt
    rows = _scores(out)["a17_esc\\x1b[31m\\x07 # injected <x>&.ipynb"]
    assert rows["scale"]["message"].startswith("not attempted (its cell raised Boom\\x1b[2J\\u202e: msg\\x00")


def test_floods_are_capped_and_links_not_followed(runs):
    from course_lib.grading.runner import EXECUTED_CAP
    from course_lib.grading.sandbox import LOG_CAP
    executed = runs["c"][3] / "executed"
    log = (executed / "c16_log_flood.log").read_bytes()
    assert len(log) < LOG_CAP + 1000 and b"more bytes not kept" in log
    flood = _outputs(executed / "c16_log_flood.ipynb")
    assert "reopen blocked" in flood and "no seek" in flood and "REOPENED" not in flood
    assert "flooded 0" not in flood          # it found the log pipe (the kernel's original stdout)
    assert not (executed / "c15_huge_output.ipynb").exists()          # 20 MiB of output: not kept
    assert "not kept" in (executed / "c15_huge_output.skipped").read_text()
    assert all(p.stat().st_size <= EXECUTED_CAP for p in executed.iterdir())
    copy = executed / "c24_symlinked_copy.ipynb"
    assert not copy.is_symlink() and "root:" not in (copy.read_text() if copy.exists() else "")


def test_sandbox_limits_hold(runs):
    executed, rows = runs["c"][3] / "executed", _scores(runs["c"][3])
    memory = _outputs(executed / "c22_memory.ipynb")
    assert "memory blocked" in memory and "file blocked 27" in memory     # EFBIG
    assert "processes" in rows["c18_fork_storm.ipynb"]["dtype"]["message"], rows["c18_fork_storm.ipynb"]
    # the in-memory /tmp is full at its size (ENOSPC); the folder on disk is ended at its cap
    assert "tmp full 28" in _outputs(executed / "c26_fill_the_disk.ipynb")
    assert "MiB to its folder" in rows["c26_fill_the_disk.ipynb"]["dtype"]["message"], rows["c26_fill_the_disk.ipynb"]
    status = _outputs(executed / "c20_forge_status.ipynb")
    assert "OPENED []" in status and "environ blocked" in status
    assert rows["c20_forge_status.ipynb"]["flops"]["message"].startswith("A third")   # graded as the student's


def test_nothing_only_root_may_read_is_readable(runs):
    """Inside, uid 1000 maps to the grader's uid (root here): files of /etc that not everyone may
    read must still be unreadable, and the grader's environment must not leak."""
    out = _outputs(runs["c"][3] / "executed" / "c19_root_only_files.ipynb")
    assert "READ " not in out and out.count("blocked /etc/") == 5, out[:2000]
    readable = json.loads(out.split("READABLE=")[1].splitlines()[0])
    assert readable, "the attack could not read /etc at all"
    private = [p for p in readable if Path(p).exists() and not os.stat(p).st_mode & 0o004]
    assert private == [], private
    assert "no secret" in out and SECRET not in out
