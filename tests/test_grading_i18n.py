"""The grader's two editions of its feedback (course_lib/grading/i18n.py) cannot drift apart.

Every English message the grader can print is collected from where it is written: the framework's
``msg(...)`` templates (course_lib/grading/*.py) and unit slips, and per chapter the bank's hints,
explanations and Mistake messages (walked at run time) plus its function graders' messages (read
from the source: ``msg``/``lit`` templates, the fixed strings they return or collect as notes). Each
must have a Chinese entry; each Chinese entry must still have its English key; both must have the
same placeholders. A grader message written as an f-string cannot be translated (its values are
already in the sentence), so one in a bank's functions fails too. Then: the same answers score the
same and hit the same recognised mistake in both languages, and each way of choosing the language
(``Question.grade(lang=)``, ``Checker``, ``COURSE_LANG``, ``Options``, ``--lang``) works and is
validated. Everything here is in-process and cheap: no notebook runs, no sandbox."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from course_lib.grading import Checker, Mistake, Question, i18n, remote
from course_lib.grading.__main__ import main as cli
from course_lib.grading.checker import available_chapters, load_bank
from course_lib.grading.i18n import Message, msg, render, series
from course_lib.grading.question import UNIT_MISTAKES
from course_lib.grading.scoring import Options, score_answer

ROOT = Path(__file__).resolve().parents[1]
GRADING = ROOT / "course_lib" / "grading"
CHECKS = ROOT / "course_lib" / "checks"
CHAPTERS = available_chapters()
_MARKERS = ("msg", "Message", "lit", "_say")      # calls whose first argument is a message template
# messages a bank shows that another module writes: (file, the call, which argument): chapter 13
# shows the plan audit's findings; their fixed details are translated, those with numbers are not
OTHER_SOURCES = {"ch13_plan": (ROOT / "course_lib" / "plan" / "audit.py", "Finding", 2)}
_WORDS = re.compile(r"[A-Za-z]{2,}[\s,;:]+[A-Za-z]{2,}")


def _calls(tree: ast.AST) -> list[str]:
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or not n.args:
            continue
        f = n.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        texts = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        first = isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)
        if name in _MARKERS and first:
            out.append(n.args[0].value)
        elif name in ("join", "sentence") and isinstance(f, ast.Name):   # i18n.join(a, "fixed text")
            out += texts
        elif name == "append" and first and _WORDS.search(n.args[0].value):
            out.append(n.args[0].value)      # notes.append("a fixed note")
    return out


def _returned(tree: ast.AST) -> list[str]:
    """Fixed strings a grader returns as its message: ``return 0.5, "..."`` (nested pairs too)."""
    out = []

    def slot(v: ast.AST) -> None:
        if isinstance(v, ast.Tuple):
            if len(v.elts) == 2 and isinstance(v.elts[1], ast.Constant) and isinstance(v.elts[1].value, str):
                out.append(v.elts[1].value)
            for e in v.elts:
                slot(e)
        elif isinstance(v, ast.IfExp):
            slot(v.body)
            slot(v.orelse)
        elif isinstance(v, ast.Constant) and isinstance(v.value, str):
            out.append(v.value)

    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for n in ast.walk(fn):
                if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple):
                    for e in n.value.elts[1:]:
                        slot(e)
    return [s for s in out if _WORDS.search(s)]


def _bank_tree(chapter: str) -> ast.AST:
    return ast.parse((CHECKS / f"{chapter}.py").read_text(encoding="utf-8"))


def _text(m: str) -> str:
    return m.template if isinstance(m, Message) else m


@cache
def english(table: str) -> dict[str, str]:
    """Every English message of ``table`` ("framework" or a chapter id) -> where it comes from."""
    found: dict[str, str] = {}

    def add(text: str, where: str) -> None:
        if text and text.strip():
            found.setdefault(i18n.key(text), where)

    if table == "framework":
        for path in sorted(GRADING.glob("*.py")):
            for t in _calls(ast.parse(path.read_text(encoding="utf-8"))):
                add(t, path.name)
        for unit, slips in UNIT_MISTAKES.items():
            for _, text in slips:
                add(text, f"UNIT_MISTAKES[{unit!r}]")
        return found
    for q in load_bank(table):
        add(_text(q.hint), f"{q.qid} hint")
        add(_text(q.explanation), f"{q.qid} explanation")
        for m in q.mistakes:
            add(_text(m.message), f"{q.qid} Mistake")
    tree = _bank_tree(table)
    for t in [*_calls(tree), *_returned(tree)]:
        add(t, f"{table}.py grader")
    if table in OTHER_SOURCES:
        path, call, arg = OTHER_SOURCES[table]
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == call and len(n.args) > arg \
                    and isinstance(n.args[arg], ast.Constant) and isinstance(n.args[arg].value, str):
                add(n.args[arg].value, path.name)
    return found


def _tables() -> dict[str, dict[str, str]]:
    return {name: dict(t) for name, t in i18n.tables("zh").items()}


def test_every_message_has_a_chinese_entry():
    tables = _tables()
    assert "framework" in tables and set(CHAPTERS) <= set(tables), sorted(set(CHAPTERS) - set(tables))
    for name in ["framework", *CHAPTERS]:
        known = {**tables["framework"], **tables[name]}
        missing = [(k, where) for k, where in english(name).items() if k not in known]
        where = i18n.FRAMEWORK_TABLE if name == "framework" else i18n.BANK_TABLES / f"{name}.json"
        assert not missing, (f"{len(missing)} English message(s) of {name} without a Chinese entry "
                             f"(add them to {where.relative_to(ROOT)}); first, from {missing[0][1]}: "
                             f"{missing[0][0]!r}")


def test_no_chinese_entry_outlives_its_english_message():
    for name, table in _tables().items():
        stale = [k for k in table if k not in english(name)]
        assert not stale, f"{name}: Chinese entries whose English text no longer exists: {stale[:3]}"


def _fields(template: str) -> object:
    try:
        return i18n.placeholders(template)
    except ValueError:          # literal braces of a fixed text: compared as they are
        return "unparsed"


def test_both_editions_have_the_same_placeholders():
    for name, table in _tables().items():
        for en, zh in table.items():
            assert zh.strip(), f"{name}: empty Chinese entry for {en!r}"
            assert _fields(en) == _fields(zh), f"{name}: placeholders differ:\n  {en!r}\n  {zh!r}"
            # English left outside a term in parentheses, a quote or code is a forgotten sentence
            prose = re.sub(r"\([^()]*\)|'[^']*'|`[^`]*`|\{[^{}]*\}", "", zh)
            assert not re.search(r"\b(the|your|is|not|and)\b", prose), f"{name}: untranslated English in {zh!r}"


def test_grader_messages_are_templates_not_f_strings():
    """An f-string's values are already in the sentence, where no table can reach them."""
    bad = []
    for chapter in CHAPTERS:
        for fn in ast.walk(_bank_tree(chapter)):
            if isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                for n in ast.walk(fn):
                    if isinstance(n, ast.JoinedStr):
                        words = "".join(v.value for v in n.values if isinstance(v, ast.Constant))
                        if _WORDS.search(words):
                            bad.append(f"{chapter}.py:{n.lineno}")
    assert not bad, f"grader messages written as f-strings (use i18n.msg with placeholders): {bad}"


# --------------------------------------------------------------------------- same verdicts
_SLIPS = (1.0, 0.5, 2.0, 1 / 3, 3.0, 4 / 3, 0.75, 1.5, 8.0, 1 / 8, 20.0, 24.0, 60.0, 64.0, 100.0, 1e-2,
          1e3, 1e-3, 1e6, 1e-9, 1e9, 1e-12, 86400.0, 3600.0, 1 / 86400, 2 ** 30 / 1e9, 1e9 / 2 ** 30,
          1 / 1.07374, 8 / 7, 64 / 63, 1.0001, 0.0, -1.0)


def _wrong_answers(ref: object) -> list[object]:
    """The reference scaled by the usual slips (numbers and lists of numbers), and junk."""
    junk = ["x", None, True, [1.0], {"a": 1}]
    if isinstance(ref, bool) or not isinstance(ref, (int, float, list, tuple)):
        return junk
    if isinstance(ref, (int, float)):
        return [ref * r for r in _SLIPS] + [ref + 1, ref - 1] + junk
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in ref):
        return [[v * r for v in ref] for r in _SLIPS] + [list(ref)[::-1]] + junk
    return junk


def test_the_same_answers_score_the_same_and_hit_the_same_mistake_in_both_languages():
    zh = i18n.catalog("zh")
    n_mistakes = 0
    for chapter in CHAPTERS:
        for q in load_bank(chapter):
            if not q.is_value:
                continue
            try:
                ref = q.reference()
            except Exception:  # noqa: BLE001 - tests/test_exercises.py covers the references
                continue
            messages = {i18n.key(_text(m.message)) for m in q.mistakes}
            for answer in _wrong_answers(ref):
                for feedback in ("practice", "graded"):
                    en = q.grade(answer, feedback=feedback)
                    cn = q.grade(answer, feedback=feedback, lang="zh")
                    assert (en.score, en.points) == (cn.score, cn.points), (chapter, q.qid, answer)
                    if en.message in messages:     # a recognised mistake: its own Chinese text
                        n_mistakes += 1
                        assert cn.message == " ".join(zh[en.message].split()), (chapter, q.qid, answer)
                    elif en.message:
                        assert cn.message != en.message, (chapter, q.qid, answer, en.message)
    assert n_mistakes > 100    # the slips above do reach most banks' recognised mistakes


def test_function_answers_score_the_same_in_both_languages():
    q = next(q for q in load_bank("ch03_data") if q.qid == "lsh_choose")
    for answer in [(16, 8), (64, 2), (4, 30), (200, 1), "junk", (0, 3)]:
        en, cn = q.grade(answer), q.grade(answer, lang="zh")
        assert en.score == cn.score and cn.message and cn.message != en.message, answer
    assert "P(candidate | J=0.85) = " in q.grade((16, 8), lang="zh").message   # values stay as printed


# --------------------------------------------------------------------------- rendering
def test_values_are_inserted_after_translation():
    m = msg("your answer is {ratio}× the expected value (too large)", ratio="2.00")
    assert m == "your answer is 2.00× the expected value (too large)"       # the English text itself
    assert render(m, "zh") == "你的答案是期望值的 2.00×（偏大）"
    nested = msg("at {path}: {problem}", path="[1]", problem=m)
    assert render(nested, "zh") == "[1] 处：你的答案是期望值的 2.00×（偏大）"
    assert render("That is hours, not days.", "zh") == "这是小时，不是天。"
    notes = series([msg("its cell did not run"), "the kernel died"])
    assert notes == "its cell did not run; the kernel died"
    assert render(notes, "zh") == "它所在的单元格没有运行；内核 (kernel) 崩溃"
    assert render("a text nobody translated", "zh") == "a text nobody translated"
    with pytest.raises(ValueError, match="lang"):
        render(m, "fr")


def test_question_grade_in_chinese():
    q = Question("n", points=2, prompt="?", expected=lambda: 100.0, unit="days", rtol=0.01,
                 mistakes=[Mistake.ratio(0.5, "That is hours, not days.")])
    assert q.grade(200.0, lang="zh").message == "你的答案是期望值的 2.00×（偏大）——差了 2 倍。"
    assert q.grade(50.0, lang="zh").message == "这是小时，不是天。"     # a bank's own text, looked up
    assert q.grade(100.0 * 86400, lang="zh").message == "这是秒，不是天。"
    assert q.grade(100.0, lang="zh").line("zh") == "✔ n：正确（2/2 分）"
    with pytest.raises(ValueError, match="lang"):
        q.grade(1.0, lang="de")


def test_checker_language_from_argument_environment_or_attribute(monkeypatch, capsys):
    monkeypatch.delenv(remote.MODE_ENV, raising=False)
    monkeypatch.delenv(i18n.LANG_ENV, raising=False)
    check = Checker("ch01_flops", lang="zh")
    check("flops_34b_8t", 2 * 34e9 * 8e12)
    out = capsys.readouterr().out
    assert out.startswith("答案 = 5.44e23 FLOP  ✘ flops_34b_8t: 0/1 — ") and "2ND" in out
    check.hint("flops_34b_8t")
    assert capsys.readouterr().out.startswith("flops_34b_8t 的提示：")
    check.summary()
    assert capsys.readouterr().out.startswith("ch01_flops：0/")
    check.lang = "en"
    check("flops_34b_8t", 6 * 34e9 * 8e12)
    assert "✔ flops_34b_8t: correct (1/1 points)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="lang"):
        check.lang = "EN"
    monkeypatch.setenv(i18n.LANG_ENV, "zh")
    assert Checker("ch01_flops").lang == "zh"           # read when the checker is made
    monkeypatch.setenv(i18n.LANG_ENV, "klingon")
    with pytest.raises(ValueError, match="lang"):
        Checker("ch01_flops")


def test_runner_and_command_line_take_the_language(monkeypatch):
    with pytest.raises(ValueError, match="lang"):
        Options(lang="jp")
    q = next(q for q in load_bank("ch01_flops") if q.qid == "days_34b_8t")
    ref = q.reference()
    en = score_answer(q, ref * 24, None, Options())
    cn = score_answer(q, ref * 24, None, Options(lang="zh"))
    assert en.score == cn.score == 0 and "hours" in en.message and "小时" in cn.message
    assert score_answer(q, ref, None, Options(lang="zh")).message == "正确"
    for argv in (["grade", str(ROOT), "--lang", "fr"], ["check", "--lang", "fr"]):
        with pytest.raises(SystemExit) as e:
            cli(argv)
        assert e.value.code == 2, argv
    monkeypatch.setenv(i18n.LANG_ENV, "fr")       # the self-check's default comes from COURSE_LANG
    with pytest.raises(SystemExit) as e:
        cli(["check", str(ROOT / "nothing-here.ipynb")])
    assert e.value.code == 2



def test_the_banks_translations_are_hidden_from_a_graded_sandbox_with_the_banks():
    """They name the recognised wrong answers (and sometimes the right one): the sandbox's tmpfs
    over course_lib/checks must cover them, while the framework's table stays readable there."""
    from course_lib.grading import sandbox

    args = sandbox._python_binds()
    hidden = [Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--tmpfs"]
    assert any(h in i18n.BANK_TABLES.resolve().parents for h in hidden), hidden
    assert not any(h == i18n.FRAMEWORK_TABLE.resolve() or h in i18n.FRAMEWORK_TABLE.resolve().parents
                   for h in hidden if h != Path("/tmp"))
