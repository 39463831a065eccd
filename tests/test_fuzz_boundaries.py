"""Property-based sweep of the boundaries (issue #30, item 3): every public calculator beyond the
plain-number ones of tests/test_api_inputs.py (the layout planner, the plan, its audit and its
check against published runs, the network model, the failure simulation) and every CLI command,
fed with hypothesis-drawn values, ordinary and absurd.

The property, for each call: a result in which every number is finite, or a ValueError whose
message names an argument the caller typed (a flag on the command line, which then exits 2);
never another exception, never a hang (each call runs under a time bound that is ~10x the
slowest valid call measured here, a layout search of ~0.3 s). Deterministic: derandomize=True and
no example database, so CI sees the same examples every run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_api_inputs import INF_OK, time_limit

from course_lib import faults, layout, network
from course_lib._validate import _finite
from course_lib.__main__ import _available, _converter, _json_list, _object_valued, _switch, main
from course_lib.layout import layout_calculator, llama3_405b
from course_lib.plan import audit as audit_mod
from course_lib.plan import model_shape, plan, planner, runs

SECONDS = 5.0
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values a user might type or compute: ordinary magnitudes, the edges of a float and an int, and
# things that are not numbers at all.
EXTREMES = [0, 1, 2, 3, 7, -1, 10 ** 400, 1e308, -1e308, 1.7976931348623157e308, 5e-324, 1e-320, 1e-300,
            2.0 ** 53, 2 ** 53 + 1, 10 ** 16, 0.5, 1e15, 12e3, float("nan"), float("inf"), -float("inf"),
            True, None, "8", [1]]
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=1e-3, max_value=1e4),
                    st.integers(min_value=-2, max_value=10 ** 6), st.sampled_from(EXTREMES))


def _named(message: str, names) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", message) for n in names)


def _call(fn, kwargs: dict, names) -> object | None:
    """``fn(**kwargs)`` under the time bound: its result, or None after a ValueError that names
    one of ``names``; anything else fails the test."""
    try:
        with time_limit(SECONDS):
            result = fn(**kwargs)
    except ValueError as exc:
        assert _named(str(exc), names), f"{fn.__name__}({kwargs}): {exc}"
        return None
    assert _finite(result), f"{fn.__name__}({kwargs}) returned a non-finite figure: {result!r:.300}"
    return result


def _vary(data, base: dict, numeric: list[str]) -> dict:
    """``base`` with a non-empty subset of its ``numeric`` arguments redrawn."""
    keys = data.draw(st.lists(st.sampled_from(numeric), min_size=1, max_size=3, unique=True), label="varied")
    return {**base, **{k: data.draw(NUMBERS, label=k) for k in keys}}


# ----------------------------------------------------------------------------- the Python API
SHAPE = dict(n_params=7e9, n_layers=32, d_model=4096, n_heads=32, seq_len=4096, global_batch_tokens=4 * 2 ** 20)
CASES = {   # function -> (valid keyword arguments, the numeric ones to vary)
    "layout.estimate": (layout.estimate, dict(tp=8, cp=1, pp=2, dp=4, v=1, zero=1, kv_heads=8, compute_mfu=0.5,
                                                usable_fraction=0.9, **SHAPE)),
    "layout.plan_layouts": (layout.plan_layouts, dict(n_gpus=64, kv_heads=8, micro_batch=1, max_cp=4, max_zero=3,
                                                      compute_mfu=0.5, usable_fraction=0.9, **SHAPE)),
    "layout.layout": (layout.layout, dict(n_gpus=64, gpus_per_node=8, nics_per_node=8, nic_bits_per_s=400e9,
                                          kv_heads=8, max_cp=4, **SHAPE)),
    "layout.layout_calculator": (layout_calculator, dict(n_gpus=64, kv_heads=8, **SHAPE)),
    "layout.llama3_405b": (llama3_405b, dict(seq_len=8192)),
    "plan.model_shape": (model_shape, dict(n_params=70e9)),
    "plan.failure_budget": (planner.failure_budget, dict(n_params=70e9, n_gpus=2048, gpu_mtbf_seconds=1.8e8,
                                                         step_seconds=10.0)),
    "plan.plan": (plan, dict(n_params=7e9, n_tokens=2e11, n_gpus=64, gpus_per_node=8, seq_len=4096,
                             global_batch_tokens=4 * 2 ** 20, price_per_gpu_hour=2.0, mfu=0.4, n_layers=32,
                             d_model=4096, n_heads=32, kv_heads=8, nics_per_node=8, nic_bits_per_s=400e9,
                             gpu_mtbf_seconds=1.8e8, vocab_size=128256, usable_fraction=0.9)),
    "network.ring_steps": (network.ring_steps, dict(kind="all_reduce", n=64, nodes=8)),
    "Network.collective_time": (network.DGX_H100_NDR.collective_time,
                                dict(kind="all_gather", size_bytes=1e9, n=64, link_bandwidth=450e9)),
    "Network.ring_latency": (network.DGX_H100_NDR.ring_latency, dict(kind="all_reduce", n=64, gpus_per_node=8)),
    "Network": (network.Network, dict(name="x", gpus_per_node=8, nics_per_node=8, nic_bits_per_s=400e9,
                                      base_latency=8e-6, intra_latency=3e-6, inter_latency=1e-5)),
    "faults.simulate_goodput": (faults.simulate_goodput, dict(interval_seconds=1800.0, save_seconds=60.0,
                                                              restart_seconds=600.0, mtbf_seconds=1.1e4,
                                                              n_failures=200, seed=0)),
}


SEARCHES = ("layout.plan_layouts", "layout.layout", "layout.layout_calculator", "plan.plan")  # ~0.2 s a call


@pytest.mark.parametrize("name", [n for n in CASES if n not in SEARCHES])
@settings(max_examples=30, **SETTINGS)
@given(data=st.data())
def test_api_gives_a_finite_answer_or_names_the_argument(name, data):
    _sweep(name, data)


@pytest.mark.parametrize("name", SEARCHES)
@settings(max_examples=15, **SETTINGS)
@given(data=st.data())
def test_layout_searches_give_a_finite_answer_or_name_the_argument(name, data):
    _sweep(name, data)


def _sweep(name: str, data) -> None:
    fn, base = CASES[name]
    assert _call(fn, base, base) is not None, "the base call is valid"
    numeric = [k for k, x in base.items() if isinstance(x, (int, float)) and not isinstance(x, bool)]
    args = _vary(data, base, numeric)
    _call(fn, args, base)


PROPOSAL = None


def _proposal() -> dict:
    """A consistent plan of chapter 13's problem (the planner's own, so every finding passes)."""
    global PROPOSAL
    if PROPOSAL is None:
        from course_lib.checks.ch13_plan import PROBLEM
        shape = {k: PROBLEM[k] for k in ("n_layers", "d_model", "n_heads", "kv_heads")}
        p = plan(n_params=70e9, n_tokens=1.4e12, gpu="H100", n_gpus=2048, **shape)
        PROPOSAL = {k: getattr(p, k) for k in ("n_tokens", "tp", "cp", "pp", "dp", "global_batch_tokens", "mfu",
                                               "memory_bytes", "days", "wall_days", "recompute")}
        PROPOSAL |= {"zero": p.zero_stage, "v": p.interleave}
    return PROPOSAL


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_audit_names_a_bad_problem_argument_and_turns_a_bad_proposal_into_findings(data):
    from course_lib.checks.ch13_plan import PROBLEM
    problem = dict(PROBLEM, gpu_mtbf_seconds=1.8e8, rtol=0.01, memory_rtol=0.05)
    assert all(f.ok for f in audit_mod.audit(_proposal(), **problem))
    numeric_problem = [k for k, x in problem.items() if isinstance(x, (int, float))]
    numeric_plan = [k for k, x in _proposal().items() if isinstance(x, (int, float))]
    kwargs = _vary(data, problem, numeric_problem) if data.draw(st.booleans(), label="problem") else problem
    proposal = _vary(data, _proposal(), numeric_plan)
    findings = _call(lambda **kw: audit_mod.audit(proposal, **kw), kwargs, problem)
    if findings is not None:
        assert [f.check for f in findings] == ["layout", "memory", "mfu", "days", "deadline"]
        assert all(isinstance(f.detail, str) and isinstance(f.ok, bool) for f in findings)


@settings(max_examples=30, **SETTINGS)
@given(data=st.data())
def test_check_published_names_the_run_it_cannot_compare(data):
    base = runs.RUNS[-1] if data.draw(st.booleans(), label="flops run") else runs.RUNS[0]
    fields = ["n_params", "n_tokens", "published"] + (["n_gpus", "mfu"] if base.unit != "flops" else [])
    changed = {k: data.draw(NUMBERS, label=k) for k in data.draw(st.lists(st.sampled_from(fields), min_size=1,
                                                                          unique=True), label="varied")}
    changed["unit"] = data.draw(st.sampled_from([base.unit, "weeks", None, 3]), label="unit")
    run = dataclasses.replace(base, **changed)
    rows = _call(runs.check_published, dict(runs=(run,)), ["runs"])
    if rows is not None:
        assert len(rows) == 1 and rows[0]["name"] == base.name


def test_the_issue_cases_of_the_api():
    """The measured failures of issue #30, one line each."""
    with time_limit(SECONDS):      # never returned: a loop per period at M = 1e308 s
        sim = faults.simulate_goodput(1800, 60, 600, 1e308)
    assert sim["failures"] == 2000 and sim["goodput"] == pytest.approx(1800 / 1860)
    for call, name in [(lambda: model_shape(1e308), "n_params"),
                       (lambda: layout.estimate(8, 1, 16, 64, n_params=1e308, n_layers=126, d_model=16384,
                                                n_heads=128, seq_len=8192, global_batch_tokens=2 ** 24), "n_params"),
                       (lambda: network.DGX_H100_NDR.collective_time("all_reduce", 1e308, 16, 450e9), "size_bytes"),
                       (lambda: layout.layout(1e9, 16, 1000, 7, 2048, 4e6, 64), "n_heads"),
                       (lambda: plan(n_params=1e9, n_tokens=2e10, n_layers=4, d_model=32, n_heads=64, n_gpus=8),
                        "d_model"),
                       (lambda: plan(n_params=8e9, n_tokens=1e6), "n_tokens"),
                       (lambda: plan(n_params=70e9, n_tokens=15e12, nic_bits_per_s=12e3), "nic_bits_per_s"),
                       (lambda: plan(n_params=8e9, n_tokens=15e12, gpu_mtbf_seconds=5e-324), "gpu_mtbf_seconds")]:
        with time_limit(SECONDS * 4), pytest.raises(ValueError) as info:
            call()
        assert re.search(rf"\b{name}\b", str(info.value)), str(info.value)
    assert "mtbf_seconds must" not in _message(lambda: plan(n_params=8e9, n_tokens=15e12, gpu_mtbf_seconds=5e-324))
    zero = dataclasses.replace(runs.RUNS[-1], published=0)
    weeks = dataclasses.replace(runs.RUNS[0], unit="weeks")
    for bad, what in [(zero, "published must be positive"), (weeks, "unit must be one of")]:
        assert what in _message(lambda bad=bad: runs.check_published((bad,)))


def test_a_step_longer_than_young_sets_the_checkpoint_interval():
    """A checkpoint comes between steps: the interval is never shorter than one step, and the
    goodput is the one of that interval (the 12 kb/s NIC plan showed 4.9 min beside 51 days)."""
    young = planner.failure_budget(70e9, 1024)
    slow = planner.failure_budget(70e9, 1024, step_seconds=10 * young[3])
    assert slow[3] == 10 * young[3] and slow[4] < young[4]
    assert planner.failure_budget(70e9, 1024, step_seconds=1.0)[3:] == young[3:]
    p = plan(n_params=34e9, n_tokens=8e12, mfu=1e-3)       # ~56 min per step, Young says ~5 min
    assert p.checkpoint_interval_s == pytest.approx(p.step_s) and p.step_s > 3000


def test_audit_refuses_the_issue_values_by_name():
    from course_lib.checks.ch13_plan import PROBLEM
    for change, name in [(dict(deadline_days=float("nan")), "deadline_days"), (dict(rtol=float("inf")), "rtol"),
                         (dict(min_tokens_per_param=-1), "min_tokens_per_param"), (dict(memory_rtol=5), "memory_rtol"),
                         (dict(n_gpus=10 ** 400), "n_gpus"), (dict(d_model=1000, n_heads=7), "n_heads")]:
        assert re.search(rf"\b{name}\b", _message(lambda c=change: audit_mod.audit(_proposal(), **(PROBLEM | c))))
    findings = audit_mod.audit(_proposal() | {"dp": 10 ** 400}, **PROBLEM)   # was an OverflowError
    assert not findings[0].ok and "dp must be <= 2**53" in findings[0].detail


def _message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


# ----------------------------------------------------------------------------- the CLI
COMMANDS = dict(_available())
TEXTS = st.one_of(NUMBERS.map(lambda x: repr(x) if isinstance(x, float) else str(x)),
                  st.sampled_from(["", "x", "1_000", " 8 ", "0x10", "-0", "1e999", "none", "[5, 3, 0]"]))
LISTS = st.one_of(st.lists(st.integers(-2, 10 ** 6), max_size=5).map(str),
                  st.sampled_from(["5", "[]", "[1.5]", "[NaN]", "[[1]]", "[" * 3000 + "]" * 3000,
                                   "[" * 900 + "1" + "]" * 900, "[1e999]", "{}", "[true]"]))
SWITCHES = st.sampled_from(["true", "false", "yes", "1", "", "True"])
WORDS = st.sampled_from(["H100", "A100", "nope", "", "all_reduce", "bf16", "1f1b", "besiroglu", "selective", "3"])


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _strategy(param: inspect.Parameter):
    kind = _converter(param)
    return {_switch: SWITCHES, _json_list: LISTS, str: WORDS}.get(kind, TEXTS)


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with time_limit(SECONDS), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _valid_argv(name: str) -> dict[str, str]:
    """A valid command line for ``name``: the base values of tests/test_api_inputs.py, as typed."""
    from test_api_inputs import _base
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in _base(COMMANDS[name]).items()
            if v is not None}


@pytest.mark.parametrize("name", list(COMMANDS))
@settings(max_examples=12, **SETTINGS)
@given(data=st.data())
def test_cli_prints_finite_figures_or_exits_2_naming_a_flag_it_was_given(name, data):
    # the flags the CLI has: an object-valued argument (moe=MoE(...)) is left to its default there
    params = {k: p for k, p in inspect.signature(COMMANDS[name]).parameters.items() if not _object_valued(p)}
    typed = _valid_argv(name)
    varied = data.draw(st.lists(st.sampled_from(list(params)), min_size=1, max_size=2, unique=True), label="flags")
    for k in varied:
        typed[k] = data.draw(_strategy(params[k]), label=k)
    argv = [name] + [f"{_flag(k)}={v}" for k, v in typed.items()]    # --flag=value: "-1e308" stays a value
    code, out, err = _run_cli(argv)
    if code == 0:
        assert out.strip() and (name in INF_OK or not re.search(r"\b(inf|nan|Infinity|NaN)\b", out)), (argv, out)
        return
    assert code == 2 and out == "" and "Traceback" not in err, (argv, code, err[-500:])
    line = err.strip().splitlines()[-1]
    flags = re.match(r".*?error: (?:arguments? ((?:--[\w-]+(?:, )?)+)[:,]|the following arguments)", line)
    assert flags, f"{argv}: the error names no flag: {line[:300]}"
    if flags.group(1):
        assert set(flags.group(1).split(", ")) & {_flag(k) for k in varied}, (varied, line[:300])


def test_cli_issue_cases():
    code, _, err = _run_cli(["dropped_tokens", "--expert-counts", "[" * 3000 + "]" * 3000, "--capacity", "3"])
    assert code == 2 and "argument --expert-counts" in err and "nested too deeply" in err and len(err) < 2000
    code, _, err = _run_cli(["plan", "--n-params", "8e9", "--n-tokens", "15e12", "--gpu-mtbf-seconds", "5e-324"])
    assert code == 2 and re.search(r"error: arguments? (--[\w-]+, )*--gpu-mtbf-seconds\b", err), err
    code, _, err = _run_cli(["plan", "--n-params", "70e9", "--n-tokens", "15e12", "--nic-bits-per-s", "12e3"])
    assert code == 2 and re.search(r"error: arguments? (--[\w-]+, )*--nic-bits-per-s\b", err), err
    code, _, err = _run_cli(["max_dp_degree", "--critical-batch-tokens", "4e6", "--seq-len", "1e15"])
    assert code == 2 and "--seq-len" in err.splitlines()[-1].split(":")[2], err
