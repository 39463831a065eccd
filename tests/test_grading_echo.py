"""What ``check(qid, answer)`` shows of the answer (course_lib/grading/echo.py): every bank says
each value question's unit, practice mode prints the value with it before the verdict, graded mode
echoes nothing, and a hostile value is escaped and capped without being converted whole."""
from __future__ import annotations

import time
import unicodedata

import numpy as np
import pytest
import torch

from course_lib.grading import Checker, Question, remote
from course_lib.grading.checker import available_chapters, load_bank
from course_lib.grading.echo import LIMIT, fmt_value, show_answer
from course_lib.grading.selfcheck import wrong_lines


@pytest.fixture
def practice(monkeypatch):
    monkeypatch.delenv(remote.MODE_ENV, raising=False)


def test_every_value_question_declares_its_unit():
    missing = [f"{ch}:{q.qid}" for ch in available_chapters() for q in load_bank(ch)
               if q.is_value and q.unit is None]
    assert not missing, f"give these questions unit=... (or unit=NO_UNIT): {missing}"


def test_practice_line_shows_value_and_unit_before_the_verdict(practice, capsys):
    check = Checker("ch01_flops")
    assert check("days_34b_8t", 41.4474)
    assert not check("gpus_30_days", 2830)
    assert check("mfu_13b", np.float64(0.30807634))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "answer = 41.45 days  ✔ days_34b_8t: correct (2/2 points)"
    assert out[1].startswith("answer = 2,830 GPUs  ✘ gpus_30_days: 0/1 — ")
    assert out[2] == "answer = 0.3081 (fraction)  ✔ mfu_13b: correct (2/2 points)"
    # `make check` (selfcheck) still finds the wrong ones behind the echo, even an echo with a ✘
    assert wrong_lines("\n".join(out)) == [out[1]]
    assert wrong_lines("answer = '✘ x'  ✔ q: correct (1/1 points)\n✘ f: 0/3 — raised") == ["✘ f: 0/3 — raised"]


@pytest.mark.parametrize("value, unit, shown", [
    (1.632e24, "FLOP", "1.632e24 FLOP"), (0.0158203125, "s", "0.01582 s"), (51422.119, "tokens", "51,422 tokens"),
    (1.16e-5, "s", "1.16e-5 s"), (4.8828125, "×", "4.883×"), ([400, 758], "(step, data position)",
     "[400, 758] (step, data position)"), ([True, False], "", "[True, False]"), ("normal", "s", "'normal'"),
    (list(range(30)), "steps", "[0, 1, 2, 3, 4, 5, … (30 values)] steps"), (torch.tensor([1.5, 2.0]), "s", "[1.5, 2] s"),
    (np.arange(20).reshape(4, 5), "GPUs", "int64 array of shape (4, 5) [0, 1, 2, 3, 4, …] GPUs"),
])
def test_values_are_shown_readably(value, unit, shown):
    assert show_answer(value, unit) == shown


def _safe(text: str) -> bool:
    return len(text) <= LIMIT and not any(
        unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)


def test_hostile_values_are_escaped_capped_and_never_converted_whole(practice, capsys):
    class Loud:                                    # its repr/str are never called
        def __repr__(self):
            return "\x1b[2J" * 10**6

        __str__ = __repr__

    class Sneaky(list):                            # its overrides are never called either
        def __getitem__(self, i):
            return ["\x1b[2J" * 10**6]

        def __len__(self):
            raise RuntimeError

    huge = torch.zeros(1).expand(10**12)           # a view: converting it would need 4 TB
    hostile = ["\x1b[31m\u202e\n" * 10**6, [["\x00" * 10**5] * 10**5], Loud(), huge, 10**100_000,
               {f"k{i}\x07": i for i in range(10**4)}, Sneaky([1.5, 2.5])]
    t0 = time.perf_counter()
    shown = [show_answer(v, "bytes") for v in hostile]
    assert time.perf_counter() - t0 < 1.0
    assert all(_safe(s) for s in shown), shown
    assert shown[2] == "Loud bytes" and shown[3].startswith("float32 tensor of shape (1000000000000,)")
    assert shown[6] == "[1.5, 2.5] bytes"
    assert fmt_value(10**100_000) == "an integer of 332,193 bits"
    q = Question("mem", 1, "?", expected=lambda: 80.0, unit="GiB")
    assert show_answer(float("nan"), q.unit) == "nan GiB"
    check = Checker("ch01_flops")
    check("flops_34b_8t", "\x1b]0;pwned\x07" + "9" * 10**6)   # a terminal title escape, a MB long
    check("flops_34b_8t", torch.zeros(100, 100))
    for line in capsys.readouterr().out.splitlines():
        echo = line.split("  ✘ ")[0]
        assert echo.startswith("answer = ") and _safe(echo) and "\x1b" not in line, line


def test_graded_run_echoes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(remote.MODE_ENV, "graded")
    monkeypatch.setenv(remote.ANSWERS_ENV, str(tmp_path / "answers.jsonl"))
    monkeypatch.setattr(remote, "_recorder", None)
    Checker("ch01_flops")("days_34b_8t", 41.4474)
    assert capsys.readouterr().out == ("→ days_34b_8t: answer recorded (graded run: scored after the "
                                       "notebook has run)\n")
