"""The chapter pages' live calculators (book/_static/calculators.js, and calculators_plan.js for
chapter 13's planner) agree with course_lib.

Chromium (the `browser` fixture of tests/test_site.py) opens each chapter page with a calculator
from the local server, types a grid of inputs into the calculator's fields, and reads what the page
shows: every number (the full-precision `data-value` of its <output>) must equal course_lib's own
function to 1e-9 relative, and every bad input (0, -1, empty, "abc", NaN, overflow, ...) must show
exactly the ValueError message Python raises for the same text. Also checked: the constants the
script uses are course_lib's (generated at build time, never typed twice), the fields work from
the keyboard, the block fits a 390 px phone, and without JavaScript the page still reads.

Set COURSE_HTML_DIR (tests/conftest.py) to test a book built elsewhere.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from machine_load import patience
from test_site import browser  # noqa: F401  (the Chromium fixture, shared with the site test)

from course_lib import comm, distill, faults, flops, hardware, memory, pipeline, scaling
from course_lib.layout import bubble
from course_lib.plan import planner
from course_lib.__main__ import _expand_suffix
from course_lib.site_data import calculator_data

REL = 1e-9
SCRIPT = Path(__file__).resolve().parents[1] / "book" / "_static" / "calculators.js"
PLAN_SCRIPT = SCRIPT.with_name("calculators_plan.js")    # chapter 13's planner, registered into SCRIPT
# How a text field is read, by the page and here alike: an integer literal is an int, another
# float literal a float, anything else (the empty string included) the string itself.
INT_RE = re.compile(r"^[+-]?\d+$")
FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$|^[+-]?(nan|inf|infinity)$", re.IGNORECASE)


# The reader's units (issue #34): a magnitude at the end of a number, read as calculators.js reads it
# (expandSuffix): k M B/G T P are powers of 1000, Ki Mi Gi Ti Pi of 1024; an integer stays an int.
expand_suffix = _expand_suffix   # the CLI reads a typed number as calculators.js does: one Python port


def py_value(text: str) -> object:
    t = expand_suffix(text.strip())
    if INT_RE.match(t):
        return int(t)
    if FLOAT_RE.match(t):
        return float(t)
    return t


# The planner's outputs on the page (strings compared exactly, numbers to REL); its mfu field
# reads empty or "auto" as mfu=None, the layout planner's own estimate.
PLAN_OUTPUTS = ("layout_shape", "zero_stage", "recompute", "microbatches", "memory_bytes", "usable_bytes", "mfu",
                "mfu_estimate", "step_s", "days", "gpu_hours", "cost", "checkpoint_interval_s", "goodput",
                "wall_days", "loader_tokens_per_s")
AUTO = ("", "auto")
NONE = ("", "none")    # chapter 14's optional fields read empty or "none" as None (dropless, any node)
# fields where an empty entry is valid (it means "auto" or None)
EMPTY_OK = {"plan": {"mfu"}, "checkpoint": {"interval_seconds"}, "all_to_all": {"capacity_factor", "max_nodes"}}


def _plan(v: dict[str, Any]) -> dict[str, Any]:
    r = planner.plan(**{k: x for k, x in v.items() if k != "mfu"}, mfu=None if v["mfu"] in AUTO else v["mfu"])
    fp8 = ("mfu_vs_fp8",) if v.get("precision") == "fp8" else ()    # an FP8 plan's MFU against the FP8 peak too
    return {k: getattr(r, k) for k in PLAN_OUTPUTS + fp8}


def _checkpoint(v: dict[str, Any]) -> dict[str, float]:
    """Chapter 12's form: the job's MTBF, Young's and Daly's intervals, the goodput at the interval
    typed (auto: Young's), each course_lib call in the order the page makes them."""
    mtbf = faults.cluster_mtbf(v["gpu_mtbf_seconds"], v["n_gpus"])
    young = faults.optimal_checkpoint_interval(v["save_seconds"], mtbf)
    daly = faults.daly_checkpoint_interval(v["save_seconds"], mtbf)
    tau = young if v["interval_seconds"] in AUTO else v["interval_seconds"]
    return {"mtbf_seconds": mtbf, "young_seconds": young, "daly_seconds": daly,
            "goodput": faults.goodput(tau, v["save_seconds"], v["restart_seconds"], mtbf)}


def _all_to_all(v: dict[str, Any]) -> dict[str, float]:
    cf, m = (None if v[k] in NONE else v[k] for k in ("capacity_factor", "max_nodes"))
    total = comm.ep_bytes_per_layer(v["tokens"], v["d_model"], v["top_k"], v["ep"], cf, v["bytes_per_value"])
    wires = comm.ep_node_bytes(v["tokens"], v["d_model"], v["top_k"], v["ep"], v["gpus_per_node"], m,
                               v["bytes_per_value"])
    return {"bytes": total, "nvlink_bytes": wires[0], "ib_bytes": wires[1]}


# calculator -> (page, the course_lib call behind it: field values -> {output key: number or string})
CALCULATORS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, float]]]] = {
    "training_days": ("book/01_flops", lambda v: {
        "flops": flops.training_flops(v["n_params"], v["n_tokens"]),
        "days": flops.training_days(v["n_params"], v["n_tokens"], v["n_gpus"], v["mfu"], v["gpu"], v["dtype"])}),
    "compute_optimal": ("book/02_scaling", lambda v: dict(zip(
        ("n_params", "n_tokens"), scaling.compute_optimal(v["compute"], v["fit"])))),
    "zero_memory": ("book/04_dp_fsdp", lambda v: {
        "bytes": memory.zero_memory_per_gpu(v["n_params"], v["dp_degree"], v["stage"], v["bytes_per_param"])}),
    # the page's schedules replay chapter 5's simulator (layout.bubble.page_calculator); 1F1B's
    # fraction and overhead are pipeline.bubble_fraction / bubble_overhead (checked below too)
    "bubble": ("book/05_pipeline", lambda v: bubble.page_calculator(v["p"], v["m"], v["v"], v["schedule"])),
    "distill": ("book/09_distill", lambda v: {
        k: r[k] for r in [distill.distill_calculator(**{k: x for k, x in v.items()})]
        for k in ("total_dollars", "dollars_per_visible_mtok", "pretraining_dollars", "distill_over_pretrain",
                  "break_even_tokens")}),
    "api_cost": ("book/09_distill", lambda v: {
        "dollars": distill.api_cost(v["output_tokens"], v["price_out_per_mtok"], v["input_tokens"],
                                    v["price_in_per_mtok"], v["batch_discount"])}),
    "plan": ("book/13_plan", _plan),
    "activation": ("book/11_tensor_context", lambda v: {
        "activation_bytes": memory.activation_bytes_per_layer(
            v["seq_len"], v["micro_batch"], v["d_model"], v["n_heads"], v["tp"],
            {"True": True, "False": False}[v["sequence_parallel"]], v["recompute"]),
        "tp_bytes": comm.tp_bytes_per_layer(v["seq_len"], v["micro_batch"], v["d_model"], v["tp"],
                                            v["bytes_per_value"])}),
    "checkpoint": ("book/12_failures", _checkpoint),
    "all_to_all": ("book/14_expert_parallel", _all_to_all),
}

# Values per field for the grid (a sample of their product); selects take their option values.
GRIDS: dict[str, dict[str, list[str]]] = {
    "training_days": {"n_params": ["1e6", "7e9", "34e9", "405e9", "1e15"], "n_tokens": ["1e9", "8e12", "15.6e12"],
                      "n_gpus": ["1", "8", "1024", "24576", "0.5"], "mfu": ["0.05", "0.45", "1"],
                      "gpu": list(hardware.ACCELERATORS), "dtype": ["bf16", "fp8", "fp32", "int8"]},
    "compute_optimal": {"compute": [f"{10.0 ** e:g}" for e in range(-300, 310, 10)] + ["5.76e23", "3.14e23"],
                        "fit": list(scaling.FIT_NAMES)},
    "zero_memory": {"n_params": ["1", "1e6", "7.5e9", "70e9", "405e9", "1e15"],
                    "dp_degree": ["1", "2", "64", "1000", "16384", "8.0"], "stage": ["0", "1", "2", "3"],
                    "bytes_per_param": ["4", "12", "16", "18.5", "3"]},
    # p = 32, not 64: Python's replay of p = 64, m = 1000 takes seconds a point
    "bubble": {"p": ["1", "2", "4", "8", "32"], "m": ["1", "4", "8", "32", "1000"], "v": ["1", "2", "4"],
               "schedule": list(bubble.PAGE_SCHEDULES)},
    "distill": {"visible_tokens": ["1e9", "1e12"], "price_out_per_mtok": ["0.5", "25"], "price_in_per_mtok": ["0", "5"],
                "input_per_output": ["0", "0.2", "10"], "cached_fraction": ["0", "0.9", "1"],
                "hidden_per_visible": ["0", "3"], "batch_discount": ["0", "0.5"], "teacher_params": ["7e9", "405e9"],
                "teacher_tokens": ["15.6e12"], "gpu_hour_price": ["2", "0.5"], "mfu": ["0.4", "1"],
                "gpu": [g for g, acc in hardware.ACCELERATORS.items() if "bf16" in acc.peak_flops]},
    "api_cost": {"output_tokens": ["1", "1e9", "1e12"], "price_out_per_mtok": ["0.5", "25", "75"],
                 "input_tokens": ["0", "2e11", "1e13"], "price_in_per_mtok": ["0", "5", "15"],
                 "batch_discount": ["0", "0.5", "0.99", "1"]},
    # 8B to 405B on 64 to 16,384 GPUs of every type; some points do not fit or starve the batch floor
    "plan": {"n_params": ["8e9", "34e9", "70e9", "405e9"], "n_tokens": ["2e12", "15.6e12"],
             "gpu": list(hardware.ACCELERATORS), "n_gpus": ["64", "1024", "2048", "16384"],
             "gpus_per_node": ["8", "4", "72"], "seq_len": ["4096", "8192", "131072"],
             "global_batch_tokens": ["4194304", "16777216", "65536"], "mfu": ["auto", "", "0.45", "0.38"],
             "precision": ["bf16", "fp8"], "price_per_gpu_hour": ["2.0", "3.5"]},
    # GPT-3's and Llama 3 405B's widths, 1 to 128K tokens; a TP degree that does not divide the heads
    "activation": {"seq_len": ["1", "2048", "8192", "131072"], "micro_batch": ["1", "4", "16"],
                   "d_model": ["64", "4096", "12288", "16384"], "n_heads": ["1", "8", "96", "128"],
                   "tp": ["1", "2", "8", "3", "16"], "sequence_parallel": ["False", "True"],
                   "recompute": ["none", "selective", "full"], "bytes_per_value": ["2", "4", "1"]},
    # one GPU failing every 11 days to every 30,000 years, 1 to a million GPUs; τ auto or typed
    "checkpoint": {"gpu_mtbf_seconds": ["1e6", "1.824e+08", "3.15e7", "1e12"],
                   "n_gpus": ["1", "8", "16384", "100000", "1000000"], "save_seconds": ["0.1", "10", "120", "3600"],
                   "restart_seconds": ["0", "600.0", "3600"], "interval_seconds": ["auto", "", "60", "1800", "1e6"]},
    # DeepSeek-V3's shape and smaller; an ep the node does not divide, max_nodes beyond the nodes or top_k
    "all_to_all": {"tokens": ["1", "4096", "65536"], "d_model": ["1", "4096", "7168"], "top_k": ["1", "2", "8"],
                   "ep": ["1", "8", "64", "256", "12"], "capacity_factor": ["none", "", "1.0", "1.25", "2"],
                   "gpus_per_node": ["1", "4", "8", "72"], "max_nodes": ["none", "1", "4", "8"],
                   "bytes_per_value": ["2", "1"]},
}
# grid points driven per calculator (default 600): each plan is a layout search; chapters 11, 12 and
# 14's ports also run on 2,000 points of their grids in Node (tests/test_calculators_node.py), so the
# page drives fewer here, enough for the form's wiring
SAMPLE = {"plan": 100, "activation": 150, "checkpoint": 150, "all_to_all": 150}
# Typed into one field at a time (the others at their defaults). The first five are the issue's.
BAD = ["0", "-1", "", "abc", "NaN", "nan", "inf", "-inf", "1e400", "2.5", "-0.0", "45", "0.0", "1e20",
       " 8 ", "1_000", "1" + "0" * 400, "'quoted'", "9007199254740993", "1e-320",
       # negative, so the message shows Python's repr of each float format
       "-1e-05", "-0.0001", "-1e16", "-9999999999999998.0", "-1.5e+300", "-123.456", "-5e-324", "-007"]
# Combinations that overflow or divide by an underflowed product.
EXTREME: dict[str, list[dict[str, str]]] = {
    "training_days": [{"n_params": "1e300", "n_tokens": "1e300"}, {"n_gpus": "1e-320", "mfu": "1e-300"},
                      {"n_params": "1e200", "n_tokens": "1e100", "n_gpus": "1e-300"}],
    "compute_optimal": [{"compute": "5e-324"}],
    "zero_memory": [{"n_params": "1e308"}, {"n_params": "1e308", "bytes_per_param": "1e10"}],
    "bubble": [],
    "api_cost": [{"output_tokens": "1e300", "price_out_per_mtok": "1e300"}],
    "distill": [{"visible_tokens": "1e300", "price_out_per_mtok": "1e300"},
                {"teacher_params": "1e300", "teacher_tokens": "1e300"},
                {"teacher_params": "1e-300", "teacher_tokens": "1e-300"},
                {"price_out_per_mtok": "5e-324", "price_in_per_mtok": "0"}],
    # overflows (in plan, in training_days, in layout), a model too wide for the layout's bounds,
    # the three impossible plans: does not fit, batch below the floor, failures too frequent; a run
    # shorter than one step, and a step (at an MFU of 1e-300) that outlasts the job's MTBF
    "plan": [{"n_tokens": "1e300", "price_per_gpu_hour": "1e300"}, {"mfu": "1e-320"}, {"n_params": "1e307"},
             {"global_batch_tokens": "1.7e308", "n_tokens": "1.7e308", "seq_len": "2", "n_gpus": "2"},
             {"n_params": "1e21"}, {"n_tokens": "1e6"}, {"mfu": "1e-300"},
             {"n_params": "1e60"}, {"n_params": "405e9", "n_gpus": "64"},
             {"global_batch_tokens": "65536", "n_gpus": "1048576"}, {"global_batch_tokens": "8192", "n_gpus": "131072"},
             {"n_gpus": "1000000", "global_batch_tokens": "1e12"}],
    # TP bytes overflow (t = 1: 0 · inf), heads that tp does not divide, a count past 2**53
    "activation": [{"bytes_per_value": "1e308"}, {"bytes_per_value": "1e308", "tp": "1"}, {"tp": "7"},
                   {"n_heads": "9007199254740993"}],
    # the job's MTBF underflows to 0; Young's √(2δ) overflows
    "checkpoint": [{"gpu_mtbf_seconds": "5e-324", "n_gpus": "2"}, {"save_seconds": "1e308"}],
    "all_to_all": [{"bytes_per_value": "1e308"}, {"capacity_factor": "1e308"}, {"tokens": "9007199254740992",
                   "d_model": "9007199254740992", "bytes_per_value": "1e280"}, {"gpus_per_node": "3"},
                   {"max_nodes": "16"}, {"ep": "8", "gpus_per_node": "8", "max_nodes": "2"}],
}
# Extreme inputs that still compute: the page must agree here too.
EXTREME_OK: dict[str, list[dict[str, str]]] = {
    "training_days": [{"n_params": "1e-300", "n_tokens": "1e-300"}],
    "compute_optimal": [{"compute": "1e308"}, {"compute": "1e308", "fit": "tokens_per_param"}],
    "zero_memory": [{"n_params": "5e-324", "dp_degree": "9007199254740992"}],
    "bubble": [{"p": "9007199254740992", "m": "9007199254740992", "v": "9007199254740992"}],
    "api_cost": [{"price_out_per_mtok": "5e-324"}],
    "distill": [{"visible_tokens": "1e-300"}],
    "plan": [{"n_params": "1", "n_tokens": "1", "n_gpus": "1", "seq_len": "1", "global_batch_tokens": "1"},
             {"mfu": "1e-3"}, {"n_params": "1e13", "n_gpus": "65536", "global_batch_tokens": "1e9"},
             {"precision": "fp8"}, {"precision": "fp8", "gpu": "B200", "mfu": "0.45"}],   # the FP8 port (#45)
    "activation": [{"seq_len": "9007199254740992", "micro_batch": "9007199254740992", "d_model": "9007199254740992"},
                   {"bytes_per_value": "5e-324"}, {"tp": "96", "sequence_parallel": "True", "recompute": "full"}],
    # a period past a float's range trains nothing (goodput 0); a restart longer than the MTBF too
    "checkpoint": [{"gpu_mtbf_seconds": "1e308", "n_gpus": "1", "save_seconds": "1e-300"},
                   {"interval_seconds": "1.7e308", "save_seconds": "1e307"}, {"restart_seconds": "1e308"},
                   {"gpu_mtbf_seconds": "5e-324", "n_gpus": "1", "save_seconds": "5e-324"}],
    "all_to_all": [{"bytes_per_value": "5e-324"}, {"tokens": "9007199254740992", "d_model": "9007199254740992"},
                   {"ep": "1", "gpus_per_node": "1", "max_nodes": "1"}, {"capacity_factor": "5e-324"}],
}

# Fill the named fields (the rest keep their defaults), fire one `input` event, read the result.
DRIVE = """([name, cases]) => {
    const box = document.querySelector(`div.course-calc[data-calc="${name}"]`);
    const fields = [...box.querySelectorAll('input, select')];
    const initial = e => e.tagName === 'SELECT' ? [...e.options].find(o => o.defaultSelected).value : e.defaultValue;
    const defaults = Object.fromEntries(fields.map(e => [e.name, initial(e)]));
    const form = box.querySelector('form');
    return cases.map(c => {
        for (const e of fields) e.value = (e.name in c) ? c[e.name] : defaults[e.name];
        form.dispatchEvent(new Event('input', {bubbles: true}));
        const out = {};
        for (const o of box.querySelectorAll('output[data-key]')) out[o.dataset.key] = o.dataset.value;
        const values = Object.fromEntries(fields.map(e => [e.name, e.value]));
        const shown = box.querySelector('.course-calc-error');
        return {values, out, error: shown.dataset.message || '', shown: shown.textContent};
    });
}"""
DEFAULTS = """(name) => Object.fromEntries([...document.querySelectorAll(
    `div.course-calc[data-calc="${name}"] input, div.course-calc[data-calc="${name}"] select`)]
    .map(e => [e.name, e.value]))"""


@pytest.fixture(scope="module")
def pages(browser: Any, site_url: str, html_dir: Path) -> Iterator[Callable[[str], Any]]:  # noqa: F811
    """One open page per chapter (loaded once); page errors fail the test that loaded it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    context.set_default_timeout(patience(30_000))   # stretched on a busy machine
    opened: dict[str, Any] = {}

    def get(docname: str) -> Any:
        if docname not in opened:
            if not (html_dir / f"{docname}.html").is_file():
                pytest.skip(f"no {docname}.html in this build")
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{site_url}/{docname}.html", wait_until="load", timeout=patience(30_000))
            assert not errors, f"{docname}: JavaScript errors: {errors}"
            opened[docname] = page
        return opened[docname]

    try:
        yield get
    finally:
        context.close()


def _python(name: str, texts: dict[str, str]) -> tuple[dict[str, float] | None, str]:
    try:
        return CALCULATORS[name][1]({k: py_value(t) for k, t in texts.items()}), ""
    except ValueError as exc:
        return None, str(exc)


def _check(page: Any, name: str, cases: list[dict[str, str]]) -> int:
    """Drive ``cases`` through the page; assert each agrees with Python. Returns how many raised."""
    errors = 0
    for got in page.evaluate(DRIVE, [name, cases]):
        want, message = _python(name, got["values"])
        where = f"{name} with {got['values']}"
        if want is None:
            errors += 1
            assert got["error"] == message, f"{where}: page says {got['error']!r}, Python {message!r}"
            _check_reader_units(name, message, got["shown"])
            assert not got["out"], f"{where}: an error, yet outputs are shown"
            continue
        assert not got["error"] and not got["shown"], f"{where}: page says {got['shown']!r}, Python returns {want}"
        assert set(got["out"]) == set(want), where
        for key, value in want.items():
            if isinstance(value, str):
                assert got["out"][key] == value, f"{where}: {key} {got['out'][key]!r} != {value!r}"
                continue
            js = float(got["out"][key])
            assert math.isclose(js, value, rel_tol=REL, abs_tol=0.0), f"{where}: {key} {js!r} != {value!r}"
    return errors


QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
ARGUMENT = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
QUOTES_A_VALUE = re.compile(r"\b([a-z][a-z0-9_]*)=([^\s,:;()]+)|\bgot ([^\s,:;()']+)")


def _check_reader_units(name: str, python: str, shown: str) -> None:
    """Issue #34: what the page shows for Python's message ``python``: (1) every argument it names
    is a field of this form (the planner's "a larger usable_fraction" is not: the form has no such
    field), (2) each value it quotes (``name=value``, ``got value``) is the value Python quotes,
    written in the reader's units that the form reads back (70000000000.0 shows as 70B), and (3) no
    Python float of five or more digits (70000000000.0, 1e+300) is left outside quoted input."""
    fields = set(GRIDS[name])
    bare = QUOTED.sub("", shown)
    assert set(ARGUMENT.findall(bare)) <= fields, \
        f"{name}: {shown!r} names {sorted(set(ARGUMENT.findall(bare)) - fields)}, not fields of the form"
    def quoted(text: str) -> list[tuple[str, float]]:
        out = []
        for m in QUOTES_A_VALUE.finditer(QUOTED.sub("''", text)):
            value = m.group(2) if m.group(1) else m.group(3)
            number = py_value(value)
            if isinstance(number, (int, float)):
                out.append((m.group(1) or "got", float(number)))
        return out
    want, got = quoted(python), quoted(shown)
    if name == "plan":    # the planner's rewording may leave a value out (its usable_fraction)
        pairs = [(w, next((g for g in got if g[0] == w[0]), None)) for w in want if any(g[0] == w[0] for g in got)]
    else:
        assert [k for k, _ in got] == [k for k, _ in want], f"{name}: {shown!r} quotes other values than {python!r}"
        pairs = list(zip(want, got))
    for (key, value), (_, other) in pairs:
        assert other == value or (math.isnan(other) and math.isnan(value)), \
            f"{name}: {shown!r} shows {key}={other!r}, Python {value!r} ({python!r})"
    assert not re.search(r"(?<![\w.])\d{5,}\.0\b|\de\+\d", bare), f"{name}: a raw Python float in {shown!r}"


@pytest.mark.parametrize("name", list(CALCULATORS))
def test_calculator_agrees_with_course_lib_on_a_grid(pages: Callable[[str], Any], name: str) -> None:
    page = pages(CALCULATORS[name][0])
    grid = GRIDS[name]
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    if len(combos) > SAMPLE.get(name, 600):
        combos = random.Random(0).sample(combos, SAMPLE.get(name, 600))
    errors = _check(page, name, combos)
    assert errors < len(combos), f"{name}: every grid point failed"
    assert _check(page, name, [{}]) == 0, f"{name}: the defaults do not compute"


@pytest.mark.parametrize("name", list(CALCULATORS))
def test_bad_input_shows_the_python_message(pages: Callable[[str], Any], name: str) -> None:
    page = pages(CALCULATORS[name][0])
    defaults = page.evaluate(DEFAULTS, name)
    text_fields = [k for k in defaults if k in GRIDS[name] and not _is_select(page, name, k)]
    assert text_fields, name
    for field in text_fields:
        cases = [{field: bad} for bad in BAD]
        _check(page, name, cases)
        for bad in ("", "abc", "NaN", "-1"):   # these are wrong for every field of every calculator
            if bad == "" and field in EMPTY_OK.get(name, ()):
                continue
            got = page.evaluate(DRIVE, [name, [{field: bad}]])[0]
            assert got["error"].startswith(field + " "), f"{name}.{field}={bad!r}: {got['error']!r}"
    assert _check(page, name, EXTREME[name]) == len(EXTREME[name]), f"{name}: an extreme input computed"
    assert _check(page, name, EXTREME_OK[name]) == 0, f"{name}: an extreme but valid input raised"


def _is_select(page: Any, name: str, field: str) -> bool:
    return page.evaluate("([n, f]) => document.querySelector(`div.course-calc[data-calc=\"${n}\"] "
                         "[name=\"${f}\"]`).tagName === 'SELECT'", [name, field])


def test_constants_come_from_course_lib(pages: Callable[[str], Any], html_dir: Path) -> None:
    """The page's constants are course_lib's, generated at build time, never typed in the script."""
    shipped = (html_dir / "_static" / "calculators_data.js").read_text(encoding="utf-8")
    prefix = "window.COURSE_CALC_DATA = "
    assert shipped.startswith(prefix)
    data = json.loads(shipped[len(prefix):].strip().rstrip(";"))
    assert data == calculator_data()
    assert data["accelerators"]["H100-SXM"]["bf16"] == hardware.get_accelerator("H100-SXM").peak("bf16")
    assert data["fits"]["besiroglu"]["beta"] == scaling.FITS["besiroglu"].beta
    in_page = pages("book/01_flops").evaluate("() => window.COURSE_CALC_DATA")
    assert in_page == json.loads(json.dumps(calculator_data()))
    assert (html_dir / "_static" / "calculators.js").read_bytes() == SCRIPT.read_bytes()
    assert (html_dir / "_static" / "calculators_plan.js").read_bytes() == PLAN_SCRIPT.read_bytes()


def test_script_types_no_constant() -> None:
    """No browser or build needed: calculators.js takes every course_lib constant from the data."""
    script = "".join(path.read_text(encoding="utf-8") for path in (SCRIPT, PLAN_SCRIPT, SCRIPT.with_name("calculators_i18n.js")))
    for typed in ("989", "406.4", "410.7", "0.34", "1.69", "86400", "86_400", "9007199254740992", "2 ** 53"):
        assert typed not in script, f"a calculator script types the constant {typed}; take it from COURSE_CALC_DATA"
    # the planner's: checkpoint writers and storage, restart, MTBF, NICs, HBM, NCCL latencies, head size
    for typed in ("2e9", "2e12", "600", "182437", "400e9", "128256", "80e9", "450e9", "8.4e-6", "3.4e-6", "14e-6",
                  "128"):
        assert not re.search(rf"(?<![\w.]){re.escape(typed)}(?![\w.])", script), f"a script types {typed}"
    assert "http:" not in script and "https:" not in script and "fetch(" not in script
    data = calculator_data()
    assert json.loads(json.dumps(data)) == data, "the data must be plain JSON"
    assert set(data["fits"]) | {"tokens_per_param"} == set(data["fit_names"]) == set(scaling.FIT_NAMES)


def _by_page() -> dict[str, list[str]]:
    """The calculators of each page, so a page with two is loaded once."""
    pages: dict[str, list[str]] = {}
    for name, (docname, _) in CALCULATORS.items():
        pages.setdefault(docname, []).append(name)
    return pages


def test_keyboard_and_phone_width(browser: Any, site_url: str, html_dir: Path,  # noqa: F811
                                  pages: Callable[[str], Any]) -> None:
    """Tab reaches every field in order, typing updates the result, and the block fits 390 px."""
    if not (html_dir / "book/05_pipeline.html").is_file():
        pytest.skip("no chapter 5 in this build")
    context = browser.new_context(viewport={"width": 390, "height": 844}, service_workers="block")
    context.set_default_timeout(patience(30_000))   # stretched on a busy machine
    try:
        page = context.new_page()
        page.goto(f"{site_url}/book/05_pipeline.html", wait_until="load", timeout=patience(30_000))
        box = 'div.course-calc[data-calc="bubble"]'
        page.focus(f"{box} [name=p]")
        page.keyboard.press("Control+A")
        page.keyboard.type("4")
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.name") == "m"
        page.keyboard.press("Control+A")
        page.keyboard.type("12")
        value = float(page.get_attribute(f"{box} output[data-key=fraction]", "data-value"))
        assert math.isclose(value, pipeline.bubble_fraction(4, 12), rel_tol=REL)
        page.keyboard.press("Control+A")
        page.keyboard.type("0")
        assert page.text_content(f"{box} .course-calc-error") == "m must be >= 1, got 0"
    finally:
        context.close()
    # each page already open at 1280 px narrowed to a phone's 390 (a reflow, not a reload), its
    # calculators back at their defaults
    for docname, names in _by_page().items():
        if not (html_dir / f"{docname}.html").is_file():
            continue
        page = pages(docname)
        page.set_viewport_size({"width": 390, "height": 844})
        try:
            for name in names:
                page.evaluate(DRIVE, [name, [{}]])
                fit = page.evaluate("""(sel) => { const b = document.querySelector(sel).getBoundingClientRect();
                    const e = document.querySelector(sel);
                    return {right: b.right, width: innerWidth, overflow: e.scrollWidth - e.clientWidth}; }""",
                                    f'div.course-calc[data-calc="{name}"]')
                assert fit["right"] <= fit["width"] and fit["overflow"] <= 1, f"{name} at 390 px: {fit}"
        finally:
            page.set_viewport_size({"width": 1280, "height": 900})


def test_pages_read_without_javascript(browser: Any, site_url: str, html_dir: Path) -> None:  # noqa: F811
    """With JavaScript off the block says what it is and the chapter's own numbers are still there."""
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(patience(30_000))   # stretched on a busy machine
    try:
        page = context.new_page()
        for docname, names in _by_page().items():
            if not (html_dir / f"{docname}.html").is_file():
                continue
            # the fallback is in the HTML itself: no need to wait for the page's images and fonts
            page.goto(f"{site_url}/{docname}.html", wait_until="domcontentloaded", timeout=patience(30_000))
            for name in names:
                text = page.text_content(f'div.course-calc[data-calc="{name}"]')
                assert "appears here when JavaScript runs" in text, name
    finally:
        context.close()


def test_calculator_works_from_the_file_system(browser: Any, html_dir: Path) -> None:  # noqa: F811
    """Readers open _build/html/... directly: the data is a script, not a fetch(), so file:// works."""
    if not (html_dir / "book/01_flops.html").is_file():
        pytest.skip("no chapter 1 in this build")
    context = browser.new_context()
    context.set_default_timeout(patience(30_000))   # stretched on a busy machine
    try:
        page = context.new_page()
        page.goto((html_dir / "book/01_flops.html").as_uri(), wait_until="load", timeout=patience(30_000))
        value = page.get_attribute('div.course-calc[data-calc="training_days"] output[data-key=days]', "data-value")
        assert value is not None and math.isclose(float(value), flops.training_days(34e9, 8e12, 1024, 0.45), rel_tol=REL)
    finally:
        context.close()


def test_precision_offers_only_what_the_accelerator_has(pages: Callable[[str], Any]) -> None:
    """Issue #34: the training-time form enables exactly the precisions the chosen accelerator has a
    peak for (int8 is not offered on an H100, only bf16 on a TPU v4), and a choice that became
    invalid when the accelerator changed falls back to bf16 and computes, instead of an error."""
    page = pages("book/01_flops")
    box = 'div.course-calc[data-calc="training_days"]'
    for name, acc in hardware.ACCELERATORS.items():
        got = page.evaluate("""([box, gpu]) => {
            const form = document.querySelector(box + ' form');
            form.querySelector('[name=gpu]').value = gpu;
            form.dispatchEvent(new Event('change', {bubbles: true}));
            const dtype = form.querySelector('[name=dtype]');
            return {enabled: [...dtype.options].filter(o => !o.disabled).map(o => o.value),
                    value: dtype.value, error: document.querySelector(box + ' .course-calc-error').textContent};
        }""", [box, name])
        assert sorted(got["enabled"]) == sorted(acc.peak_flops), f"{name}: offers {got['enabled']}"
        assert got["value"] in acc.peak_flops and not got["error"], f"{name}: {got}"
    # a precision only some accelerators have, then an accelerator without it
    rare = next(t for acc in hardware.ACCELERATORS.values() for t in acc.peak_flops
                if t != "bf16" and any(t not in other.peak_flops for other in hardware.ACCELERATORS.values()
                                       if "bf16" in other.peak_flops))
    has = next(n for n, a in hardware.ACCELERATORS.items() if rare in a.peak_flops)
    lacks = next(n for n, a in hardware.ACCELERATORS.items() if rare not in a.peak_flops and "bf16" in a.peak_flops)
    got = page.evaluate("""([box, has, rare, lacks]) => {
        const form = document.querySelector(box + ' form');
        form.querySelector('[name=gpu]').value = has;
        form.dispatchEvent(new Event('change', {bubbles: true}));
        form.querySelector('[name=dtype]').value = rare;
        form.dispatchEvent(new Event('change', {bubbles: true}));
        const before = form.querySelector('[name=dtype]').value;
        form.querySelector('[name=gpu]').value = lacks;
        form.dispatchEvent(new Event('change', {bubbles: true}));
        return [before, form.querySelector('[name=dtype]').value,
                document.querySelector(box + ' .course-calc-error').textContent];
    }""", [box, has, rare, lacks])
    assert got == [rare, "bf16", ""], got


def test_numbers_and_errors_in_the_readers_units(pages: Callable[[str], Any]) -> None:
    """Issue #34: a field reads 70B, 15T, 2k, 1.5M, 128Ki as the numbers they name (as Python reads
    the expanded text: the results agree), and an error shows its numbers that way (n_params=405B,
    not 405000000000.0) while keeping Python's own message in data-message; the planner's errors
    name only the form's own fields (no usable_fraction). On the Chinese twin the same form computes
    the same numbers and says it in Chinese."""
    page = pages("book/01_flops")
    reader = page.evaluate("""(xs) => xs.map(x => window.COURSE_CALC.lib.readerNumber(x))""",
                           ["70000000000.0", "15600000000000.0", "131072", "1e+300", "2048", "4194304.0",
                            "9007199254740993", "-1e+16", "12345", "1.5e-07", "inf", "600.0"])
    assert reader == ["70B", "15.6T", "128Ki", "1e300", "2048", "4Mi", "9.007199254740993P", "-10P", "12.345k",
                      "1.5e-07", "inf", "600.0"], reader
    cases = [{"n_params": "70B", "n_tokens": "15T"}, {"n_gpus": "2k"}, {"n_params": "1.5M"}, {"n_gpus": "16Ki"},
             {"n_tokens": "15.6t"}, {"n_params": "70 b"}, {"n_params": "-70B"}, {"n_gpus": "0.5k"},
             {"n_gpus": "1.5Ki"}, {"n_params": "70X"}, {"n_params": "1e3k"}, {"n_params": "2P", "n_tokens": "1e300"}]
    assert _check(page, "training_days", cases) == 4    # -70B, 70X, 1e3k and an overflow
    got = page.evaluate(DRIVE, ["training_days", [{"n_params": "70B", "n_tokens": "15T"}, {"n_params": "-70B"}]])
    assert math.isclose(float(got[0]["out"]["days"]), flops.training_days(70e9, 15e12, 1024, 0.45), rel_tol=REL)
    assert got[1]["error"] == "n_params must be positive, got -70000000000" and got[1]["shown"] == \
        "n_params must be positive, got -70B", got[1]
    # the Chinese twin (issue #35): the same numbers and Python's message, shown in Chinese, still
    # naming the field and the value in the reader's units (every message: tests/test_calculators_node.py)
    zh = pages("book/zh/01_flops")
    same = zh.evaluate(DRIVE, ["training_days", [{"n_params": "70B", "n_tokens": "15T"}, {"n_params": "-70B"}]])
    assert same[0]["out"] == got[0]["out"] and same[1]["error"] == got[1]["error"], same
    assert same[1]["shown"] == "n_params 必须为正数，输入的是 -70B", same[1]
    box = 'div.course-calc[data-calc="training_days"]'
    zh.evaluate(DRIVE, ["training_days", [{"n_params": "70B", "n_tokens": "15T"}]])   # a result on screen again
    words = zh.evaluate("""(box) => [document.querySelector(box + ' .course-calc-title').textContent,
        document.querySelector(box + ' label[for=calc-training_days-n_params]').textContent,
        document.querySelector(box + ' output[data-key=days]').textContent]""", box)
    assert words[0].startswith("训练时间") and words[1] == "参数量 N（n_params）" and words[2].endswith(" 天"), words
    plan = pages("book/13_plan")
    cases = [{"n_params": "405B", "n_gpus": "64"}, {"n_params": "70B", "n_tokens": "15T", "n_gpus": "2Ki",
                                                  "seq_len": "8Ki", "global_batch_tokens": "16Mi"}]
    assert _check(plan, "plan", cases) == 1
    shown = plan.evaluate(DRIVE, ["plan", cases[:1]])[0]["shown"]
    assert "n_params=405B on n_gpus=64" in shown and "usable_fraction" not in shown, shown
    assert "or a shorter seq_len" in shown and "90 % of HBM usable" in shown, shown
