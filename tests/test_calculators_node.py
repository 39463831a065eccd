"""Chapters 11, 12 and 14's live calculators (book/_static/calculators.js) without a browser or a
book build: where Node.js is installed, the script runs in a bare context (no DOM, the form is never
built) on each calculator's grid, every bad input in every field and the extremes of
tests/test_site_calculators.py, against the same course_lib calls. Chromium drives all of them on
the built pages there (a smaller sample of each grid); this is the quick check while editing.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from test_site_calculators import BAD, EMPTY_OK, EXTREME, EXTREME_OK, GRIDS, SCRIPT, _python

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
