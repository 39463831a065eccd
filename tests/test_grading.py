"""The course's grader: value checks, mistakes, the in-notebook API, the exercise generator, the
answer wire format and the headless, sandboxed runner (on small fixture notebooks in
tests/fixtures/grading, whose question bank ``grading_fixture_bank`` is importable through sys.path
here and PYTHONPATH in the grader's process). Attacks on the runner: tests/test_grading_attacks.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from course_lib.grading import Checker, MarkerError, Mistake, Question, generate, remote, render, wire
from course_lib.grading.__main__ import main as cli
from course_lib.grading._notebook import normalise_executed
from course_lib.grading.copies import copied_blocks
from course_lib.grading.generate import exercise_notebook, strip_code
from course_lib.grading.grades import Row
from course_lib.grading.reports import grades_json
from course_lib.grading.runner import Options, chapter_for, grade_dir

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader needs bubblewrap")

FIX = Path(__file__).parent / "fixtures" / "grading"
MASTER = FIX / "solutions" / "fx_grading.ipynb"
EXERCISE = FIX / "exercises" / "fx_grading.ipynb"
STUB = 'raise NotImplementedError("replace this line with your solution")'


@pytest.fixture
def check(monkeypatch):
    monkeypatch.syspath_prepend(str(FIX))
    monkeypatch.delenv(remote.MODE_ENV, raising=False)
    return Checker("fx_grading", bank="grading_fixture_bank")


def q_num(**kw):
    kw.setdefault("expected", lambda: 100.0)
    return Question("n", points=2, prompt="?", **kw)


# --------------------------------------------------------------------------- value questions
def test_numbers_with_tolerance():
    torch = pytest.importorskip("torch")
    q = q_num(rtol=0.02)
    assert q.grade(101.9).correct and q.grade(98.1).correct
    assert not q.grade(102.1).correct and not q.grade(97.9).correct
    assert q.grade(np.float32(100.0)).correct and q.grade(torch.tensor(100.0)).correct
    assert q.grade(np.int64(100)).correct
    assert not q.grade(float("nan")).correct
    assert not q_num(expected=lambda: float("nan")).grade(float("nan")).correct  # NaN never matches
    exact = q_num()  # default rtol 1e-6
    assert exact.grade(100.00001).correct and not exact.grade(100.001).correct
    zero = q_num(expected=lambda: 0.0, atol=1e-3)
    assert zero.grade(5e-4).correct and not zero.grade(2e-3).correct
    assert not q_num().grade(True).correct  # a bool is not a number


def test_sequences_strings_bools():
    torch = pytest.importorskip("torch")
    seq = Question("s", 1, "?", expected=lambda: [1.0, 2.0, 3.0], rtol=0.01)
    assert seq.grade([1.0, 2.0, 3.0]).correct and seq.grade((1.005, 2, 3)).correct
    assert seq.grade(np.array([1.0, 2.0, 3.0])).correct and seq.grade(torch.tensor([1.0, 2.0, 3.0])).correct
    r = seq.grade([1.0, 2.0])
    assert not r.correct and r.message == "Expected 3 values, got 2."
    assert "At [2]: your answer is 2.00×" in seq.grade([1.0, 2.0, 6.0]).message
    mixed = Question("t", 1, "?", expected=lambda: ("fp16", 2.0))
    assert mixed.grade(("FP16 ", 2.0)).correct and not mixed.grade(("bf16", 2.0)).correct
    s = Question("w", 1, "?", expected=lambda: "BFloat16")
    assert s.grade("  bfloat16 ").correct and not s.grade("fp16").correct
    b = Question("b", 1, "?", expected=lambda: True)
    assert b.grade(True).correct and b.grade(np.bool_(True)).correct
    assert not b.grade(False).correct and not b.grade(1).correct


def test_mistakes_explain_first_match():
    q = q_num(mistakes=[Mistake.predicate(lambda a: a.upper() == "X", "never reached for numbers"),
                        Mistake.ratio(0.5, "Half: you used the sparse peak."),
                        Mistake.ratio(0.5, "second match, not shown"),
                        Mistake.equals(7.0, "Seven is the number of days."),
                        Mistake.predicate(lambda a, e: a > 10 * e, "Way too big.")])
    assert q.grade(50.0).message == "Half: you used the sparse peak."
    assert q.grade(7.0).message == "Seven is the number of days."
    assert q.grade(5000.0).message == "Way too big."
    assert q.grade(50.0).score == 0 and q.grade(100.0).message == ""


def test_generic_message_gives_direction_and_ratio():
    q = q_num(rtol=0.02)
    assert q.grade(200.0).message == "Your answer is 2.00× the expected value (too large) — a factor of 2."
    assert "0.333× the expected value (too small)" in q.grade(100 / 3).message
    assert "power of ten" in q.grade(1e5).message and "1000×" in q.grade(1e5).message
    assert q.grade(105.0).message == "Your answer is 5% above the expected value (tolerance ±2%)."
    assert "wrong sign" in q.grade(-100.0).message
    assert q.grade(123.456789).message == "Your answer is 1.23× the expected value (too large)."
    for wrong in (200.0, 1.0, -5.0, 0.0, float("inf"), "abc", None, [1.0]):
        msg = q.grade(wrong).message
        assert msg and msg.lower() != "wrong" and len(msg) > 15, (wrong, msg)


def test_non_numeric_answer_message():
    q = q_num(unit="FLOP/s")
    assert q.grade("abc").message == "Expected a number (FLOP/s), got str 'abc'."
    assert "got None (did you forget" in q.grade(None).message
    assert "got function 'f' (did you forget to call it?)" in q.grade(lambda: 1).message.replace("'<lambda>'", "'f'")


def test_grader_question_survives_student_code():
    def grader(fn):
        got = [fn(x) for x in (1, 2, 3, 4)]
        ok = sum(g == 2 * x for g, x in zip(got, (1, 2, 3, 4), strict=True))
        return ok / 4, f"{ok} of 4 cases pass"

    q = Question("f", points=4, prompt="?", grader=grader)
    r = q.grade(lambda x: 1 / 0)
    assert r.score == 0 and r.message == "Your code raised ZeroDivisionError: division by zero"
    assert q.grade(lambda x: 2 * x).correct
    r = q.grade(lambda x: 2 * x if x < 3 else 0)
    assert r.score == 2 and r.message == "2 of 4 cases pass"

    def stub(x):
        raise NotImplementedError("replace this line with your solution")

    assert q.grade(stub).message.startswith("not implemented")
    assert "Grader error" in Question("g", 1, "?", grader=lambda a: "yes").grade(1).message


def test_question_validation():
    with pytest.raises(ValueError, match="exactly one"):
        Question("q", 1, "?")
    with pytest.raises(ValueError, match="exactly one"):
        Question("q", 1, "?", expected=lambda: 1, grader=lambda a: (1, ""))
    with pytest.raises(ValueError, match="points"):
        Question("q", 0, "?", expected=lambda: 1)
    bad_ref = Question("q", 1, "?", expected=lambda: 1 / 0)
    assert bad_ref.grade(1).score == 0 and "ZeroDivisionError" in bad_ref.grade(1).message


# --------------------------------------------------------------------------- Checker
def test_check_prints_one_deterministic_line(check, capsys):
    assert check("flops", 1.2e20)
    assert not check("flops", 4e19)
    assert not check("dtype", "fp16")
    assert not check("flops", "abc")
    assert not check("scale", lambda x: 1 / 0)
    out = capsys.readouterr().out.splitlines()
    assert out == [   # a value question's answer, with its unit, before the verdict
        "answer = 1.2e20 FLOP  ✔ flops: correct (2/2 points)",
        "answer = 4e19 FLOP  ✘ flops: 0/2 — A third: you counted only the forward pass (2ND); training is 6ND.",
        "answer = 'fp16'  ✘ dtype: 0/1 — fp16 has a 5-bit exponent.",
        "answer = 'abc'  ✘ flops: 0/2 — Give a number, not a string.",
        "✘ scale: 0/3 — Your code raised ZeroDivisionError: division by zero",
    ]


def test_hint_reveal_summary(check, capsys):
    check.hint("flops")
    check.reveal("flops")
    check.reveal("dtype")
    check.reveal("scale")
    check("scale", lambda x: 2 * x if x else 0.0)
    check.summary()
    out = capsys.readouterr().out
    assert "Hint for flops: C = 6ND." in out
    assert "Reference answer for flops: 1.2e+20 FLOP (accepted within ±2%)" in out
    assert "Reference answer for dtype: 'bfloat16'\nbfloat16 has fp32's 8 exponent bits." in out
    assert "Explanation for scale: def scale(x): return 2 * x" in out
    assert "fx_grading: 3/7 points (1 of 4 questions fully correct)" in out
    assert "· flops: not checked yet" in out


def test_unknown_names_raise(check, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="'nope'"):
        check("nope", 1)
    with pytest.raises(ValueError, match="'nope'"):
        check.hint("nope")
    with pytest.raises(ValueError, match="unknown chapter 'ch42_nothing'"):
        Checker("ch42_nothing")
    (tmp_path / "dup_bank_fixture.py").write_text(
        "from course_lib.grading import Question\n"
        "QUESTIONS = [Question('a', 1, '?', expected=lambda: 1), Question('a', 1, '?', expected=lambda: 2)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="duplicate question id 'a'"):
        Checker("dup", bank="dup_bank_fixture")


def test_check_returns_a_verdict_a_notebook_does_not_echo(check, capsys):
    from IPython.core.formatters import DisplayFormatter

    ok, bad = check("flops", 1.2e20), check("flops", 4e19)
    assert (bool(ok), ok.score, ok.points) == (True, 2, 2) and ok == True  # noqa: E712
    assert (bool(bad), bad.score) == (False, 0) and bad == False  # noqa: E712
    assert repr(bad) == "Verdict(correct=False, score=0/2)"
    assert DisplayFormatter().format(ok) == ({}, {})    # no "True" under the verdict line
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_graded_run_records_answers_and_grades_nothing(monkeypatch, tmp_path, capsys):
    answers = tmp_path / "answers.jsonl"
    monkeypatch.setenv(remote.MODE_ENV, "graded")
    monkeypatch.setenv(remote.ANSWERS_ENV, str(answers))
    monkeypatch.setattr(remote, "_recorder", None)
    check = Checker("ch42_no_such_bank")                   # no bank is loaded in a graded run
    assert not check("flops", np.float64(4e19))
    def scale(x):
        return 2 * x

    check("scale", scale)
    check.reveal("flops")
    check.hint("dtype")
    out = capsys.readouterr().out
    assert "flops: answer recorded" in out and "no reference answer in a graded run" in out
    rows = [wire.loads(line) for line in answers.read_text().splitlines()]
    assert rows[0] == {"event": "answer", "chapter": "ch42_no_such_bank", "qid": "flops", "answer": 4e19}
    assert rows[1]["answer"]["name"] == "scale" and "return 2 * x" in rows[1]["answer"]["source"]
    assert [r["event"] for r in rows[2:]] == ["revealed", "hint"]
    assert remote.recorder().functions[rows[1]["answer"]["$fn"]](4) == 8


def test_graded_feedback_names_the_kind_not_the_ratio():
    q = q_num(rtol=0.02)
    msg = {a: q.grade(a, feedback="graded").message for a in (200.0, 3.7, 1e5, -100.0, 105.0, 123.0)}
    assert msg[200.0] == "Your answer is off by a factor of 2."
    assert msg[1e5] == "Your answer is off by a power of ten: check units and prefixes (k, M, G, T)."
    assert msg[-100.0] == "Your answer has the wrong sign."
    assert msg[105.0] == "Your answer is close (within 10%) but outside the tolerance ±2%."
    assert msg[3.7] == msg[123.0] == "Your answer is not within the tolerance ±2% of the expected value."
    assert not any("×" in m or "123" in m or "100" in m for m in msg.values())
    half = q_num(mistakes=[Mistake.ratio(0.5, "Half: the sparse peak.")])
    assert half.grade(50.0, feedback="graded").message == "Half: the sparse peak."   # a kind, kept
    with pytest.raises(ValueError, match="feedback"):
        q.grade(1.0, feedback="loud")


def test_wire_is_strict_data():
    torch = pytest.importorskip("torch")
    value = {"a": (1, 2.5, float("nan"), float("-inf")), 3: [True, None, "s"], "t": torch.tensor([[1.0, 2.0]]),
             "n": np.arange(3), "set": {"A", "B"}, "f16": torch.tensor(0.5, dtype=torch.float16),
             "e4m3": torch.tensor([448.0, -0.001953125], dtype=torch.float8_e4m3fn),     # chapter 15's answers
             "e5m2": torch.tensor([57344.0, float("inf")], dtype=torch.float8_e5m2)}
    back = wire.decode(wire.loads(wire.dumps(wire.encode(value))))
    assert back["a"][:2] == (1, 2.5) and np.isnan(back["a"][2]) and back["a"][3] == float("-inf")
    assert back[3] == [True, None, "s"] and back["set"] == {"A", "B"}
    assert torch.equal(back["t"], value["t"]) and back["f16"].dtype == torch.float16
    for fmt in ("e4m3", "e5m2"):                         # FP8 crosses bit for bit, dtype kept
        assert back[fmt].dtype == value[fmt].dtype and back[fmt].view(torch.uint8).equal(value[fmt].view(torch.uint8))
    assert isinstance(back["n"], np.ndarray) and back["n"].tolist() == [0, 1, 2]
    assert wire.decode(wire.encode(object())).type_name == "object"
    for bad in ('{"x": NaN}', '[Infinity]', "1e999", '{"$tensor": {"kind": "torch", "dtype": "float32", '
                '"shape": [3], "data": [1]}}', '{"$eval": "1"}', "[" * 5000 + "]" * 5000):
        with pytest.raises(wire.WireError):
            wire.decode(wire.loads(bad))


def test_rows_and_reports_are_sanitised():
    rows = [Row("a", 2, float("nan"), ""), Row("b", 2, float("inf"), ""), Row("c", 2, 5, ""), Row("d", 2, -1, "")]
    assert [r.score for r in rows] == [0.0, 0.0, 2.0, 0.0]
    from course_lib.grading.grades import NotebookGrade

    text = grades_json([NotebookGrade("x.ipynb", "fx", rows)], 60, seed=3)
    data = json.loads(text, parse_constant=lambda name: pytest.fail(name))
    assert data["seed"] == 3 and data["notebooks"][0]["score"] == 2


def test_assignment_from_the_file_name():
    chapters = ["ch01_flops", "ch02_scaling", "ch10_pipeline_rl"]
    assert chapter_for("01_flops.ipynb", chapters) == "ch01_flops"
    assert chapter_for("alice-ch02_scaling-v2.ipynb", chapters) == "ch02_scaling"
    assert chapter_for("10_pipeline_rl.ipynb", chapters) == "ch10_pipeline_rl"
    assert chapter_for("notes.ipynb", chapters) is None
    assert chapter_for("01_flops-02_scaling.ipynb", chapters) is None   # ambiguous
    assert chapter_for("101_flops.ipynb", chapters) is None


def test_handout_has_no_masters_and_links_the_exercises(tmp_path):
    root = Path(__file__).parents[1]
    assert cli(["handout", str(tmp_path / "ho"), "--repo", str(root)]) == 0
    ho = tmp_path / "ho"
    assert not (ho / "solutions").exists() and not (ho / "tests").exists()
    assert (ho / "exercises" / "01_flops.ipynb").read_bytes() == (root / "exercises" / "01_flops.ipynb").read_bytes()
    toc = (ho / "book" / "_toc.yml").read_text()
    assert "solutions" not in toc and "file: exercises/01_flops" in toc
    assert "../solutions/" not in (ho / "book" / "01_flops.md").read_text()
    assert cli(["handout", str(ho), "--repo", str(root)]) == 2         # never over an existing folder


def test_copied_solution_blocks_are_found():
    master = json.loads((Path(__file__).parents[1] / "solutions" / "01_flops.ipynb").read_text())
    exercise = json.loads((Path(__file__).parents[1] / "exercises" / "01_flops.ipynb").read_text())
    found, total = copied_blocks(master, master)
    assert total >= 5 and found == total
    assert copied_blocks(exercise, master) == (0, total)
    reformatted = json.loads(json.dumps(master))
    for cell in reformatted["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = ["# my work\n"] + [line.replace(" = ", "=").replace(", ", ",") for line in cell["source"]]
    assert copied_blocks(reformatted, master) == (total, total)


# --------------------------------------------------------------------------- generator
def test_generator_is_deterministic_and_stubs_solutions(tmp_path):
    a, b = render(MASTER), render(MASTER)
    assert a == b and a.endswith("}\n")
    nb, master = json.loads(a), json.loads(MASTER.read_text())
    assert [c["id"] for c in nb["cells"]] == [c["id"] for c in master["cells"]]
    text = "".join("".join(c["source"]) for c in nb["cells"])
    assert "BEGIN SOLUTION" not in text and "6 * 1e9" not in text and "Forward 2ND" not in text
    assert "*Your answer here.*" in text
    assert "def scale(x):\n    # YOUR CODE HERE\n    " + STUB + "\n" in text
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None
               for c in nb["cells"] if c["cell_type"] == "code")
    # committed exercise == generated one; --check notices a stale copy
    assert cli(["generate", str(MASTER.parent), str(EXERCISE.parent), "--check"]) == 0
    out = tmp_path / "ex"
    assert cli(["generate", str(MASTER.parent), str(out)]) == 0
    assert (out / MASTER.name).read_bytes() == EXERCISE.read_bytes()
    (out / MASTER.name).write_text(a.replace("YOUR CODE HERE", "my code"))
    assert generate(MASTER.parent, out, check=True) == [out / MASTER.name]
    assert cli(["generate", str(MASTER.parent), str(out), "--check"]) == 1


def test_generator_rejects_unbalanced_markers(tmp_path):
    assert strip_code("x = 1\n    ### BEGIN SOLUTION\n    y\n    ### END SOLUTION\nz") == \
        f"x = 1\n    # YOUR CODE HERE\n    {STUB}\nz"
    with pytest.raises(MarkerError, match="never closed"):
        strip_code("### BEGIN SOLUTION\nx = 1\n")
    nb = {"cells": [{"cell_type": "code", "id": "abc", "metadata": {}, "outputs": [], "execution_count": 1,
                     "source": ["x = 1\n", "### END SOLUTION\n"]}], "metadata": {}}
    with pytest.raises(MarkerError, match=r"bad\.ipynb: cell 0 \(id abc\): line 2: '### END SOLUTION' without"):
        exercise_notebook(nb, "bad.ipynb")
    nb["cells"][0] = {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "a <!-- BEGIN SOLUTION --> b"}
    with pytest.raises(MarkerError, match="cell 0 .*never closed"):
        exercise_notebook(nb, "bad.ipynb")
    (tmp_path / "bad.ipynb").write_text(json.dumps(nb))
    assert cli(["generate", str(tmp_path), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_normalise_executed_notebook():
    nb = {"metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "id": "keep-me", "execution_count": 7, "metadata": {"execution": {"t": 1}},
         "outputs": [{"output_type": "execute_result", "execution_count": 7, "metadata": {},
                      "data": {"text/plain": "1"}}], "source": "1"},
        {"cell_type": "markdown", "metadata": {}, "source": "hi"},
        {"cell_type": "code", "id": "keep-me", "execution_count": 9, "metadata": {}, "source": "2",
         "outputs": [{"output_type": "display_data", "metadata": {},
                      "data": {"application/vnd.jupyter.widget-view+json": {}}}]}]}
    normalise_executed(nb)
    assert [c["id"] for c in nb["cells"]] == ["keep-me", "cell-1", "cell-2"]
    assert [c.get("execution_count") for c in nb["cells"]] == [1, None, 2]
    assert nb["cells"][0]["outputs"][0]["execution_count"] == 1 and nb["cells"][2]["outputs"] == []
    assert "execution" not in nb["cells"][0]["metadata"] and "widgets" not in nb["metadata"]


def test_nbtools_run_executes_in_place_and_normalises(tmp_path):
    nb = {"metadata": {"widgets": {"x": 1}}, "nbformat": 4, "nbformat_minor": 5, "cells": [
        {"cell_type": "code", "id": "first", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "from pathlib import Path\nprint(Path.cwd().name)"},
        {"cell_type": "markdown", "id": "md", "metadata": {}, "source": "text"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "6 * 7"}]}
    path = tmp_path / "here" / "nb.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(nb))
    env = dict(os.environ)
    env.pop("COURSE_GRADE_LOG", None)
    proc = subprocess.run([sys.executable, "-m", "course_lib.nbtools", "run", str(path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    out = json.loads(text)
    assert text.endswith("}\n") and text.startswith('{\n "cells": [\n  {')
    assert [c["id"] for c in out["cells"]] == ["first", "md", "cell-2"]
    assert [c.get("execution_count") for c in out["cells"]] == [1, None, 2]
    assert out["cells"][0]["outputs"][0]["text"] == ["here\n"]  # ran in the notebook's folder
    assert out["cells"][2]["outputs"][0]["data"]["text/plain"] == ["42"]
    assert out["cells"][2]["metadata"] == {} and "widgets" not in out["metadata"]
    proc = subprocess.run([sys.executable, "-m", "course_lib.nbtools", "normalise", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and path.read_text() == text  # already normal: same bytes


# --------------------------------------------------------------------------- runner (headless)
def _grade(dirpath: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(FIX))
    return subprocess.run([sys.executable, "-m", "course_lib.grading", "grade", str(dirpath), "--out", str(out),
                           "--chapter", "fx_grading", "--bank", "grading_fixture_bank", "--seed", "7", *extra],
                          env=env, capture_output=True, text=True, timeout=300)


def _rows(out: Path) -> dict[tuple[str, str], dict]:
    data = json.loads((out / "grades.json").read_text())
    return {(n["notebook"], q["qid"]): q for n in data["notebooks"] for q in n["questions"]}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One grading run over the exercise and the wrong, crashing and looping submissions."""
    if shutil.which("bwrap") is None:
        pytest.skip("the grader needs bubblewrap")
    sub = tmp_path_factory.mktemp("submissions")
    shutil.copy(EXERCISE, sub / "exercise.ipynb")
    for p in sorted((FIX / "submissions").glob("*.ipynb")):
        shutil.copy(p, sub / p.name)
    out = tmp_path_factory.mktemp("grades")
    return _grade(sub, out, "--timeout-cell", "5"), out


@needs_bwrap
def test_runner_gives_the_master_full_marks(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(MASTER, sub / MASTER.name)
    proc = _grade(sub, tmp_path / "out", "--pass-mark", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fx_grading.ipynb (fx_grading): 7/7 points (100.0%) pass" in proc.stdout
    assert all(r["score"] == r["points"] for r in _rows(tmp_path / "out").values())


def test_runner_exercise_scores_zero_not_implemented(graded):
    proc, out = graded
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {k[1]: v for k, v in _rows(out).items() if k[0] == "exercise.ipynb"}
    assert sorted(rows) == ["dtype", "flops", "scale", "shape"]
    assert all(r["score"] == 0 and r["message"].lower().startswith("not implemented") for r in rows.values())
    assert "exercise.ipynb (fx_grading): 0/7 points (0.0%) FAIL" in proc.stdout


def test_runner_explains_wrong_answers(graded):
    rows = _rows(graded[1])
    assert rows["wrong.ipynb", "flops"]["score"] == 0
    assert "you counted only the forward pass" in rows["wrong.ipynb", "flops"]["message"]
    assert rows["wrong.ipynb", "scale"]["score"] == 3


def test_runner_crash_costs_only_later_questions(graded):
    rows = _rows(graded[1])
    assert rows["crash.ipynb", "flops"]["score"] == 2 and rows["crash.ipynb", "dtype"]["score"] == 1
    assert rows["crash.ipynb", "shape"]["message"].startswith(
        "not attempted (its cell raised TypeError: unsupported operand")
    assert rows["crash.ipynb", "scale"]["score"] == 0
    assert rows["crash.ipynb", "scale"]["message"].startswith("not attempted (the kernel died")


def test_runner_survives_an_infinite_loop(graded):
    rows = _rows(graded[1])
    assert rows["loop.ipynb", "dtype"]["score"] == 0
    assert rows["loop.ipynb", "dtype"]["message"].startswith("not attempted (a cell at or before it ran past")
    assert rows["loop.ipynb", "flops"]["score"] == 2 and rows["loop.ipynb", "scale"]["score"] == 3


def test_runner_reports(graded):
    proc, out = graded
    suites = ET.parse(out / "junit.xml").getroot()
    assert suites.get("tests") == "16" and suites.get("failures") == "9"
    by_name = {s.get("name"): s for s in suites.iter("testsuite")}
    assert sorted(by_name) == ["crash.ipynb", "exercise.ipynb", "loop.ipynb", "wrong.ipynb"]
    assert [len(s.findall("testcase")) for s in by_name.values()] == [4, 4, 4, 4]
    assert {k: v.get("failures") for k, v in by_name.items()} == \
        {"crash.ipynb": "2", "exercise.ipynb": "4", "loop.ipynb": "1", "wrong.ipynb": "2"}
    summary = (out / "summary.md").read_text()
    assert "| loop.ipynb | fx_grading | 6 | 7 | 85.7 | pass |" in summary
    assert "4 notebook(s) graded, 3 below the pass mark of 60%." in proc.stdout


@needs_bwrap
def test_runner_unknown_assignment_and_unreadable_notebook(tmp_path, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "homework.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (sub / "01_flops.ipynb").write_text("not json")
    assert grade_dir(sub, tmp_path / "out", opts=Options(seed=1)) == 1
    rows = _rows(tmp_path / "out")
    assert rows["homework.ipynb", "(notebook)"]["message"].startswith("error: cannot tell the assignment")
    assert rows["01_flops.ipynb", "(notebook)"]["message"].startswith("error: not a readable notebook")
    assert grade_dir(tmp_path / "out" / "nothing-here", tmp_path / "out2") == 2
    assert grade_dir(sub, tmp_path / "out3", opts=Options(chapter="ch42_nothing")) == 2
    assert grade_dir(sub, sub / "grades", opts=Options(seed=1)) == 2  # --out inside the submissions
    err = capsys.readouterr().err
    assert "unknown chapter 'ch42_nothing'" in err and "--out must not be inside" in err


@needs_bwrap
def test_time_limit_kills_every_process_and_keeps_what_ran(tmp_path, monkeypatch):
    marker = f"course-grade-test-{os.getpid()}-{time.monotonic_ns()}"
    nb = json.loads(EXERCISE.read_text())
    nb["cells"] = nb["cells"][:2] + [
        {"cell_type": "code", "id": "a", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "check('flops', 6 * 1e9 * 2e10)\nprint('before the loop')"},
        {"cell_type": "code", "id": "s", "metadata": {}, "outputs": [], "execution_count": None,
         "source": f"import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 600; echo {marker}'], "
                   "start_new_session=True)\ntime.sleep(600)"}]
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "slow.ipynb").write_text(json.dumps(nb))
    opts = Options(timeout_cell=600, timeout_notebook=4, seed=1, chapter="fx_grading", bank="grading_fixture_bank")
    monkeypatch.syspath_prepend(str(FIX))
    assert grade_dir(sub, tmp_path / "out", opts=opts) == 1
    rows = _rows(tmp_path / "out")
    assert rows["slow.ipynb", "flops"]["score"] == 2            # the answer given before the limit
    assert rows["slow.ipynb", "dtype"]["message"] == "not attempted (the notebook ran past its 4 s limit before it)"
    executed = (tmp_path / "out" / "executed" / "slow.ipynb").read_text()
    assert "before the loop" in executed
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if _has(p, marker)]


def _has(cmdline: Path, marker: str) -> bool:
    try:
        return marker.encode() in cmdline.read_bytes()
    except OSError:
        return False
