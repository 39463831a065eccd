"""The command line (``python -m course_lib``, issue #43 item 24): it reads numbers as the site's
calculators read them (70B, 15T, 2k, 1.5M, 128Ki), prints every answer with its unit, lists each
calculator by its first whole sentence in plain text, and every usage error exits with status 2."""
from __future__ import annotations

import functools
import inspect
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_api_inputs import _base, _cli

from course_lib import flops
from course_lib.__main__ import UNITS, _available, _number, _object_valued
from course_lib.site_data import calculator_data_js

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
# Typed the way a reader types them: magnitudes of every kind and case, signs, spaces, decimals, and
# text neither reads as a number.
TEXTS = ["70B", "15T", "2k", "1.5M", "128Ki", "16Ki", "15.6t", "70 b", "-70B", "+2K", "0.5k", ".5M", "7.m",
         "1.5Ki", "3Pi", "9007199254740993", "9.007199254740993P", "2Gi", "1g", "4mi", " 8 ", "\u00a08k\u2003",
         "1e9", "1E9", "34e9", "0.45", "-0", "007", "inf", "-Infinity", "nan", "NaN", "1e999",
         "70X", "1e3k", "k", "", "1_000", "0x10", "1,000", "\u0661\u0662", "70BB", "70 B B", "B70", "--5"]
WANT = {"70B": 70 * 10 ** 9, "15T": 15 * 10 ** 12, "2k": 2000, "1.5M": 1.5e6, "128Ki": 131072, "70 b": 70 * 10 ** 9,
        "-70B": -70 * 10 ** 9, "0.5k": 500.0, "15.6t": 15.6e12, "1.5Ki": 1536.0, "007": 7}
REFUSED = ["70X", "1e3k", "k", "", "1_000", "0x10", "1,000", "\u0661\u0662", "70BB", "B70"]


def _read(text: str):
    """The CLI's reading of ``text``: the number, or None when it is refused."""
    try:
        return _number(text)
    except Exception:     # argparse.ArgumentTypeError: a usage error naming the flag
        return None


def test_magnitudes_read_as_the_numbers_they_name():
    for text, want in WANT.items():
        got = _read(text)
        assert got == want and type(got) is type(want), (text, got, want)   # an integer stays exact
    assert _read("9007199254740993") == 2 ** 53 + 1      # past a float's integers: still exact
    assert all(_read(t) is None for t in REFUSED), [t for t in REFUSED if _read(t) is not None]


DRIVER = """
const fs = require('fs'), vm = require('vm');
const [data, calc, textsFile] = process.argv.slice(2);
const ctx = {document: {readyState: 'complete', querySelectorAll: () => []}};
ctx.window = ctx;
vm.createContext(ctx);
for (const f of [data, calc]) vm.runInContext(fs.readFileSync(f, 'utf8'), ctx, {filename: f});
const L = ctx.COURSE_CALC.lib;
process.stdout.write(JSON.stringify(JSON.parse(fs.readFileSync(textsFile, 'utf8')).map(t => L.parseField(t))));
"""


@pytest.mark.skipif(NODE is None, reason="Node.js not installed")
def test_the_cli_reads_every_text_exactly_as_the_site_does(tmp_path: Path):
    """calculators.js's own parseField, run by Node, against the CLI's reading: the same texts are
    numbers, the same ones integers, and each the same value (compared as Python's repr, which
    parseField writes too)."""
    (tmp_path / "data.js").write_text(calculator_data_js(), encoding="utf-8")
    (tmp_path / "driver.js").write_text(DRIVER, encoding="utf-8")
    (tmp_path / "texts.json").write_text(json.dumps(TEXTS), encoding="utf-8")
    run = subprocess.run([NODE, str(tmp_path / "driver.js"), str(tmp_path / "data.js"),
                          str(ROOT / "book/_static/calculators.js"), str(tmp_path / "texts.json")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    for text, js in zip(TEXTS, json.loads(run.stdout)):
        got = _read(text)
        assert (got is not None) == js["isNum"], (text, got, js)
        if got is not None:
            assert isinstance(got, int) == js["isInt"] and repr(got) == js["repr"], (text, got, js)


def test_the_readme_command_takes_the_sites_units_and_prints_days(capsys):
    code, out, err = _cli(["training_days", "--n-params", "70B", "--n-tokens", "15T", "--n-gpus", "2k",
                           "--mfu", "0.45"], capsys)
    days = flops.training_days(70e9, 15e12, 2000, 0.45)
    assert code == 0 and out == f"{days:.6g} days\n", (out, err)
    code, out, _ = _cli(["training_days", "--n-params", "70B", "--n-tokens", "15T", "--n-gpus", "2k",
                         "--mfu", "0.45", "--json"], capsys)
    assert code == 0 and json.loads(out) == days        # --json: the plain number, for scripts


def _line(name: str, capsys) -> str:
    params = inspect.signature(dict(_available())[name]).parameters
    typed = {k: str(v).lower() if isinstance(v, bool) else str(v)
             for k, v in _base(dict(_available())[name]).items() if v is not None and not _object_valued(params[k])}
    code, out, err = _cli([name] + [f"--{k.replace('_', '-')}={v}" for k, v in typed.items()], capsys)
    assert code == 0, (name, err)
    return out


NUMBER = r"-?\d[\d.]*(?:e[+-]\d+)?"
SHOWN = {"FLOP": rf"{NUMBER} FLOP", "days": rf"{NUMBER} days", "bytes": rf"{NUMBER} bytes( \([\d.]+ [kMGTP]?B\))?",
         "s": rf"{NUMBER} s( \([\d.e+]+ (min|h|days)\))?", "fraction": rf"{NUMBER} \([\d.e+-]+ %\)",
         "$": r"\$[\d,]+\.\d\d", "x": rf"{NUMBER}x", "": NUMBER,
         "bytes/s": rf"{NUMBER} bytes/s \([\d.]+ [kMGTP]?B/s\)"}


def test_every_calculator_prints_its_answer_with_its_unit(capsys):
    """Each calculator of the command line has its unit in UNITS (a new one without fails here),
    and its answer is printed with it: 41.4 days, 3.6e+09 bytes (3.6 GB), 0.97 (97 %), $25.00, ..."""
    dataclass_answers = {"get_accelerator", "layout", "plan"}     # a unit per field, or render()
    assert set(UNITS) | dataclass_answers == {name for name, _ in _available()}
    for name, unit in UNITS.items():
        out = _line(name, capsys)
        parts = unit if isinstance(unit, tuple) else ((None, unit),)
        lines = out.rstrip("\n").split("\n")
        assert len(lines) == len(parts), (name, out)
        for (label, u), line in zip(parts, lines):
            value = line if label is None else line.removeprefix(f"{label}: ")
            pattern = SHOWN.get(u, rf"{NUMBER} {re.escape(u)}")
            assert re.fullmatch(pattern, value), (name, u, line)
    acc = _line("get_accelerator", capsys)
    assert re.search(r"^hbm_bytes: \S+ bytes \([\d.]+ GB\)$", acc, re.M)
    assert re.search(r"^peak_flops\.bf16: \S+ FLOP/s \([\d.]+ TFLOP/s\)$", acc, re.M)
    assert re.search(r"^nic_bits_per_s: \S+ bit/s \([\d.]+ Gb/s\)$", acc, re.M)
    assert re.search(r"^restart_seconds: \S+ s \(10 min\)$", acc, re.M)


def test_list_shows_each_first_sentence_whole_and_without_rst(capsys):
    code, out, _ = _cli(["list"], capsys)
    assert code == 0
    entries = re.split(r"\n(?=\S)", out.strip())
    assert [e.split()[0] for e in entries] == [name for name, _ in _available()]
    for entry in entries:
        text = " ".join(entry.split()[1:])
        assert text.endswith("."), entry                       # a whole sentence, not a cut line
        assert not re.search(r"``|`|:func:|:class:|\*\*", text), entry   # no RST marks left
    layout = next(e for e in entries if e.startswith("layout "))
    assert "(python -m course_lib layout)" in " ".join(layout.split()) and "Accelerator.nic_bits_per_s)." in layout


@pytest.mark.parametrize("argv", [
    [], ["nosuch"], ["training_days", "--n-params", "70X", "--n-tokens", "15T", "--n-gpus", "2k", "--mfu", "0.45"],
    ["training_days", "--n-tokens", "15T", "--n-gpus", "2k", "--mfu", "0.45"],
    ["training_days", "--n-params", "70B", "--n-tokens", "15T", "--n-gpus", "2k", "--mfu", "0.45", "--bogus", "1"],
    ["training_days", "--n-params", "70B", "--n-tokens", "15T", "--n-gpus", "2k", "--mfu", "45"],
    ["layout", "--n-params", "7B", "--n-layers", "32", "--d-model", "4096", "--n-heads", "32", "--seq-len", "4k",
     "--global-batch-tokens", "4Mi", "--n-gpus", "64", "--kv-heads", "5"],
    ["list", "--json"],
])
def test_every_usage_error_exits_2_without_a_traceback(argv, capsys):
    code, out, err = _cli(argv, capsys)
    assert code == 2 and out == "" and "error:" in err and "Traceback" not in err, (code, out, err)


@functools.cache
def _whole_parser():
    """Every calculator's parser, built once (argparse reads a line without changing its parser)."""
    from course_lib.__main__ import build_parser
    return build_parser()


@pytest.mark.parametrize("name", [name for name, _ in _available()])
def test_a_calculators_own_parser_answers_as_the_whole_parser(name, monkeypatch, capsys):
    """main() parses a calculator's command with that calculator's subcommand alone
    (build_parser(name)); with the whole parser every time, each command prints the same: its
    help, its answer, its JSON, and each usage error (a flag missing, a bad value, a flag no
    calculator takes) with the same usage line and exit status 2."""
    from course_lib import __main__ as cli
    sub = next(a for a in _whole_parser()._subparsers._group_actions).choices[name]
    flags = [a for a in sub._actions if a.option_strings and a.dest not in ("help", "_json")]
    given = [tok for a in flags if a.required for tok in (a.option_strings[0], "1")]
    argvs = [[name, "--help"], [name, *given], [name, *given, "--json"], [name, "--bogus", "1"],
             [name, *given, "--bogus", "1"], *([[name, *given, flags[0].option_strings[0], "70X"]] if flags else [])]
    own = [_cli(argv, capsys) for argv in argvs]
    whole = _whole_parser()
    monkeypatch.setattr(cli, "build_parser", lambda only=None: whole)
    assert own == [_cli(argv, capsys) for argv in argvs]
    assert own[0][0] == 0 and all(code == 2 for code, *_ in own[3:]), own


def test_the_installed_command_exits_2_and_prints_units():
    run = [sys.executable, "-m", "course_lib"]
    bad = subprocess.run(run + ["training_flops", "--n-params", "70X", "--n-tokens", "15T"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "argument --n-params: expected a number such as 70B" in bad.stderr
    good = subprocess.run(run + ["training_flops", "--n-params", "70B", "--n-tokens", "15T"],
                          capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and good.stdout == f"{6 * 70e9 * 15e12:.6g} FLOP\n"
    assert math.isclose(float(good.stdout.split()[0]), 6.3e24)
