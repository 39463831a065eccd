"""Chapters 11, 12 and 14's live calculators (book/_static/calculators.js) without a browser or a
book build: where Node.js is installed, the script runs in a bare context (no DOM, the form is never
built) on each calculator's grid, every bad input in every field and the extremes of
tests/test_site_calculators.py, against the same course_lib calls. Chromium drives all of them on
the built pages there (a smaller sample of each grid); this is the quick check while editing.
The Chinese edition's words (calculators_i18n.js) are checked here for every calculator: each label
and unit has its Chinese form, and each error message, in Chinese, still names the field and the
value in the reader's units.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_site_calculators import BAD, EMPTY_OK, EXTREME, EXTREME_OK, GRIDS, PLAN_SCRIPT, SCRIPT, _python

from course_lib.site_data import calculator_data_js

NAMES = ("activation", "checkpoint", "all_to_all")
SELECTS = {"activation": {"sequence_parallel", "recompute"}}    # fields the page offers as a list
NODE = shutil.which("node")

# Each case is [calculator, {field: text}]; the others keep their defaults, as the page's form does.
DRIVER = """
const fs = require('fs'), vm = require('vm');
const [data, calc, casesFile] = process.argv.slice(2);
const ctx = {document: {readyState: 'complete', querySelectorAll: () => []}};
ctx.window = ctx;
vm.createContext(ctx);
for (const f of [data, calc]) vm.runInContext(fs.readFileSync(f, 'utf8'), ctx, {filename: f});
const C = ctx.COURSE_CALC;
const results = JSON.parse(fs.readFileSync(casesFile, 'utf8')).map(([name, c]) => {
  const spec = C.calculators[name], fields = spec.fields();
  const texts = Object.assign(Object.fromEntries(fields.map(f => [f.name, f.value])), c), v = {};
  for (const f of fields) v[f.name] = f.options ? texts[f.name] : C.lib.parseField(texts[f.name]);
  try {
    return {values: texts, out: Object.fromEntries(spec.run(v).map(r => [r[0], String(r[2])])), error: ''};
  } catch (e) {
    if (!(e instanceof C.lib.CalcError)) throw e;
    return {values: texts, out: {}, error: e.message};
  }
});
process.stdout.write(JSON.stringify(results));
"""


def _cases(name: str) -> list[dict[str, str]]:
    grid = GRIDS[name]
    combos = [dict(zip(grid, v)) for v in itertools.product(*grid.values())]
    cases = random.Random(2).sample(combos, min(2000, len(combos))) + [{}]
    cases += [{field: bad} for field in grid if field not in SELECTS.get(name, ()) for bad in BAD]
    return cases + EXTREME[name] + EXTREME_OK[name]


@pytest.mark.skipif(NODE is None, reason="Node.js not installed (the Chromium site test covers the port)")
def test_ports_agree_with_course_lib_outside_a_browser(tmp_path: Path) -> None:
    cases = [[name, c] for name in NAMES for c in _cases(name)]
    (tmp_path / "data.js").write_text(calculator_data_js(), encoding="utf-8")
    (tmp_path / "driver.js").write_text(DRIVER, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    run = subprocess.run([NODE, str(tmp_path / "driver.js"), str(tmp_path / "data.js"), str(SCRIPT),
                          str(tmp_path / "cases.json")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    raised = {name: 0 for name in NAMES}
    for (name, case), got in zip(cases, json.loads(run.stdout)):
        want, message = _python(name, got["values"])
        where = f"{name} with {got['values']}"
        if want is None:
            raised[name] += 1
            assert got["error"] == message, f"{where}: JS {got['error']!r}, Python {message!r}"
            field = next(iter(case)) if len(case) == 1 else None    # one bad field typed
            if field and case[field] in ("", "abc", "NaN", "-1") and not (
                    case[field] == "" and field in EMPTY_OK.get(name, ())):
                assert message.startswith(field + " "), f"{where}: the message does not name {field}"
            continue
        assert not got["error"], f"{where}: JS says {got['error']!r}, Python returns {want}"
        assert set(got["out"]) == set(want), where
        for key, value in want.items():
            js = float(got["out"][key])
            assert math.isclose(js, value, rel_tol=1e-9, abs_tol=0.0), f"{where}: {key} {js!r} != {value!r}"
    for name in NAMES:    # some of each grid computes, some is refused
        assert 0 < raised[name] < len(_cases(name)), (name, raised[name])


# --- the Chinese edition's words (issue #35) ----------------------------------------------------
# calculators_i18n.js gives every calculator's words in Chinese on a page with <html lang="zh-CN">;
# the numbers are computed as on the English page (build() localises only what it shows). Every
# calculator, the planner included: each bad input in each field and each extreme case, read as the
# reader sees it (readerMessage, then localMessage). Some 1,000 messages, about a second.
I18N_SCRIPT = SCRIPT.with_name("calculators_i18n.js")
# a driver's start: the cases file, then the scripts run in one page-like context (data, i18n, calculators)
IN_A_PAGE = """
const fs = require('fs'), vm = require('vm');
const [casesFile, ...scripts] = process.argv.slice(2);
const ctx = {document: {readyState: 'complete', querySelectorAll: () => []}};
ctx.window = ctx;
vm.createContext(ctx);
for (const f of scripts) vm.runInContext(fs.readFileSync(f, 'utf8'), ctx, {filename: f});
"""
ZH_DRIVER = IN_A_PAGE + """const C = ctx.COURSE_CALC, L = C.lib;
const words = {}, errors = [];
for (const [name, spec] of Object.entries(C.calculators)) {
  const fields = spec.fields(), v = {};
  for (const f of fields) v[f.name] = f.options ? f.value : L.parseField(f.value);
  const shown = [spec.title, 'Numbers may end in k, M, B (or G), T, P (70B, 15T, 2k, 1.5M), Ki, Mi, Gi for powers of 1024 (128Ki), or be written 1e9.'];
  for (const f of fields) { shown.push(f.label); for (const o of f.options || []) shown.push(o[1]); }
  const units = [];
  for (const r of spec.run(v)) { shown.push(r[1]); units.push([r[3](r[2]), L.localUnit('zh', r[3](r[2]))]); }
  words[name] = {words: shown.map(w => [w, L.localText('zh', w)]), units,
                 fields: fields.filter(f => !f.options).map(f => f.name),
                 labels: fields.map(f => [f.name, L.fieldLabel('en', f.label, f.name), L.fieldLabel('zh', f.label, f.name)])};
}
for (const [name, c] of JSON.parse(fs.readFileSync(casesFile, 'utf8'))) {
  const spec = C.calculators[name], fields = spec.fields(), v = {};
  for (const f of fields) v[f.name] = f.options ? f.value : L.parseField(f.name in c ? c[f.name] : f.value);
  try { spec.run(v); } catch (e) {
    if (!(e instanceof L.CalcError)) throw e;
    const en = L.readerMessage(e.message, spec);
    errors.push({name, c, en, zh: L.localMessage('zh', en)});
  }
}
process.stdout.write(JSON.stringify({words, errors}));
"""
CJK = re.compile(r"[\u4e00-\u9fff]")
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
KEPT = re.compile(r"\b[a-z]\w*_\w+\b|\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:Ki|Mi|Gi|Ti|Pi|[kMBTP])?")
PLAN_BAD = ["0", "-1", "", "abc", "NaN", "inf", "1e400", "'quoted'", "-1.5e+300"]
ENGLISH = re.compile(r"\b(?:must|got|inputs|range|than|need|needs|fails|use|fewer|smallest|sequence|divide|"
                     r"beyond|layers|heads|plan|every)\b")


def _in_a_page(tmp_path: Path, driver: str, cases: list, *scripts: Path) -> dict:
    """Run ``driver`` (IN_A_PAGE + its body) under node on ``cases``, after course_lib's calculator
    data and ``scripts``; what it prints, parsed."""
    (tmp_path / "data.js").write_text(calculator_data_js(), encoding="utf-8")
    (tmp_path / "driver.js").write_text(driver, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    run = subprocess.run([NODE, str(tmp_path / "driver.js"), str(tmp_path / "cases.json"), str(tmp_path / "data.js"),
                          *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


@pytest.mark.skipif(NODE is None, reason="Node.js not installed")
def test_the_chinese_edition_shows_every_word_and_message_in_chinese(tmp_path: Path) -> None:
    names = list(GRIDS)
    # the planner refuses most bad inputs before its layout search, but "45" or "2.5" plan a run
    # (~50 ms each): it gets the inputs that fail, the other calculators every bad input
    cases = [[name, {field: bad}] for name in names for field in GRIDS[name]
             for bad in (BAD if name != "plan" else PLAN_BAD)]
    cases += [[name, c] for name in names for c in EXTREME[name]]
    got = _in_a_page(tmp_path, ZH_DRIVER, cases, I18N_SCRIPT, SCRIPT, PLAN_SCRIPT)
    assert set(got["words"]) == set(names)
    for name, page in got["words"].items():
        untranslated = [en for en, zh in page["words"] if zh == en and CJK.search(zh) is None
                        and not re.fullmatch(r"[\w.+-]+", en)]          # a value (H100-SXM, bf16) stays
        assert not untranslated, f"{name}: no Chinese for {untranslated}"
        for en, zh in page["units"]:
            assert re.sub(r" (?:天|分钟|小时|秒)$", "", zh) == re.sub(r" (?:days|min|h|s)$", "", en), (en, zh)
            assert not re.search(r" (?:days|min|h|s)$", zh), f"{name}: the unit of {en!r} stays English"
        for field, en, zh in page["labels"]:      # each label shows its field's code name once, in one pair of brackets
            assert en.endswith(f" ({field})"), (name, en)
            assert zh.count("（") == 1 and re.search(rf"（{field}[，）]", zh), (name, zh)   # 'MFU（mfu，0-1）'
    assert len(got["errors"]) > 500
    for e in got["errors"]:
        where = f"{e['name']} with {e['c']}: {e['en']!r} -> {e['zh']!r}"
        assert CJK.search(e["zh"]) and not ENGLISH.search(QUOTED.sub("", e["zh"])), where
        for kept in QUOTED.findall(e["en"]) + KEPT.findall(QUOTED.sub("", e["en"])):
            assert kept in e["zh"], f"{where}: {kept!r} (a field or a value in the reader's units) is lost"
        field = next(iter(e["c"]))
        if len(e["c"]) == 1 and e["en"].startswith(field + " "):
            assert re.match(rf"{field}(?!\w)", e["zh"]), f"{where}: the message no longer names {field} first"


# --- chapter 5's pipeline calculator with the zero-bubble schedules (issue #46) ------------------
# The "bubble" form offers 1F1B (interleaved when v > 1), ZB-H1, ZB-V and DualPipeV; calculators.js
# replays the zero-bubble orders as pipeline.simulate does (its own port of pipeline.schedules and of
# the replay), course_lib.layout.bubble.page_calculator is the Python it mirrors. Every case of the
# grid, each bad input and each refusal of the schedules (v, DualPipeV's m ≥ 2p, the replay's p limit)
# must agree: numbers exactly for the replayed schedules (the same float operations in the same
# order), to 1e-9 for 1F1B's closed forms (Python divides ints exactly), messages word for word, and
# each refusal in Chinese naming the same field and value.
BUBBLE_GRID = {"p": ["1", "2", "3", "4", "8", "16"],
               "m": ["1", "2", "4", "7", "8", "16", "33", "100", "9007199254740992"],
               "v": ["1", "2", "4"], "schedule": ["1f1b", "zb-h1", "zb-v", "dualpipev"]}
BUBBLE_DRIVER = IN_A_PAGE + """const C = ctx.COURSE_CALC, L = C.lib, spec = C.calculators.bubble, fields = spec.fields();
const results = JSON.parse(fs.readFileSync(casesFile, 'utf8')).map(c => {
  const texts = Object.assign(Object.fromEntries(fields.map(f => [f.name, f.value])), c), v = {};
  for (const f of fields) v[f.name] = f.options ? texts[f.name] : L.parseField(texts[f.name]);
  try {
    return {values: texts, out: Object.fromEntries(spec.run(v).map(r => [r[0], String(r[2])])), error: ''};
  } catch (e) {
    if (!(e instanceof L.CalcError)) throw e;
    const en = L.readerMessage(e.message, spec);
    return {values: texts, out: {}, error: e.message, zh: L.localMessage('zh', en), en};
  }
});
const options = fields.find(f => f.name === 'schedule').options.map(o => o[0]);
process.stdout.write(JSON.stringify({results, options, pipe: L.PIPE}));
"""


def _bubble_cases() -> list[dict[str, str]]:
    grid = [dict(zip(BUBBLE_GRID, v)) for v in itertools.product(*BUBBLE_GRID.values())]
    bad = [{field: b, "schedule": s} for field in ("p", "m", "v") for b in BAD for s in BUBBLE_GRID["schedule"]]
    # past MAX_REPLAY ops the replay extrapolates from m = 4p and 8p: 2**53 in the grid, 500 here
    edges = [{"p": p, "m": m, "schedule": s} for p, m in (("32", "64"), ("16", "500"))
             for s in ("zb-h1", "zb-v", "dualpipev")]
    edges += [{"p": p, "m": "9007199254740992", "schedule": s} for p in ("112", "9007199254740992")
              for s in ("zb-h1", "zb-v", "dualpipev")]
    return grid + bad + edges


@pytest.mark.skipif(NODE is None, reason="Node.js not installed")
def test_the_pipeline_calculator_replays_the_zero_bubble_schedules_as_python(tmp_path: Path) -> None:
    from test_site_calculators import py_value

    from course_lib.layout import bubble
    cases = _bubble_cases()
    got = _in_a_page(tmp_path, BUBBLE_DRIVER, cases, I18N_SCRIPT, SCRIPT)
    assert got["options"] == list(bubble.PAGE_SCHEDULES)
    assert got["pipe"] == {"schedules": list(bubble.PAGE_SCHEDULES), "max_p": bubble.PAGE_MAX_P,
                           "max_replay": bubble.MAX_REPLAY}
    refused = {name: 0 for name in bubble.PAGE_SCHEDULES}
    for got_case in got["results"]:
        texts = got_case["values"]
        where = f"bubble with {texts}"
        try:
            want = bubble.page_calculator(*(py_value(texts[k]) for k in ("p", "m", "v")), texts["schedule"])
        except ValueError as exc:
            refused[texts["schedule"]] += 1
            assert got_case["error"] == str(exc), f"{where}: JS {got_case['error']!r}, Python {str(exc)!r}"
            zh, en = got_case["zh"], got_case["en"]
            assert CJK.search(zh) and not ENGLISH.search(QUOTED.sub("", zh)), f"{where}: {en!r} -> {zh!r}"
            for kept in QUOTED.findall(en) + KEPT.findall(QUOTED.sub("", en)):
                assert kept in zh, f"{where}: {kept!r} is lost in {zh!r}"
            field = en.split(" ", 1)[0]
            if field in ("p", "m", "v"):
                assert re.match(rf"{field}(?!\w)", zh), f"{where}: {zh!r} no longer names {field} first"
            continue
        assert not got_case["error"], f"{where}: JS says {got_case['error']!r}, Python returns {want}"
        assert set(got_case["out"]) == set(want), where
        for key, value in want.items():
            js = float(got_case["out"][key])
            if texts["schedule"] == "1f1b":
                assert math.isclose(js, value, rel_tol=1e-9, abs_tol=0.0), f"{where}: {key} {js!r} != {value!r}"
            else:
                assert js == value, f"{where}: {key} {js!r} != {value!r}"
    for name, n in refused.items():    # each schedule computes some of the grid and refuses some
        assert 0 < n < len(cases) // 2, (name, n)
    messages = {c["error"].split(" (")[0] for c in got["results"] if c["error"]}
    for start in ("v must be 1 or 2 for the 'zb-v' schedule", "v must be 1 for the 'zb-h1' schedule",
                  "m must be at least 2p = 4 for the 'dualpipev' schedule",
                  "p must be at most 111 for the 'zb-h1' schedule"):
        assert any(msg.startswith(start) for msg in messages), start
