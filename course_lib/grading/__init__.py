"""The course's grader: question banks, the in-notebook ``check`` API, the exercise generator and
the headless runner.

In a chapter's question bank ``course_lib/checks/chNN_topic.py``::

    from course_lib.grading import Question, Mistake
    QUESTIONS = [Question("qid", points=2, prompt="...", expected=lambda: 42.0, rtol=0.02,
                          mistakes=[Mistake.ratio(0.5, "About half: ...")], hint="...")]

In a notebook::

    from course_lib.grading import Checker
    check = Checker("ch01_flops")
    check("qid", answer)

From the shell::

    python -m course_lib.grading generate solutions exercises [--check]
    python -m course_lib.grading grade DIR --out build/grades --pass-mark 60   # sandboxed

Feedback in Chinese: ``Checker(..., lang="zh")``, ``check.lang = "zh"`` or ``COURSE_LANG=zh``
in a notebook, ``--lang zh`` on the command line (:mod:`course_lib.grading.i18n`).

See docs/GRADING.md.
"""
from course_lib.grading.checker import Checker, load_bank
from course_lib.grading.generate import MarkerError, exercise_notebook, generate, render
from course_lib.grading.question import NO_UNIT, Mistake, Question, Result
from course_lib.grading.values import compare

__all__ = ["Question", "Mistake", "Result", "NO_UNIT", "Checker", "load_bank", "compare",
           "generate", "render", "exercise_notebook", "MarkerError"]
