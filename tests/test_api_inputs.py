"""Every public calculator and CLI command refuses bad input with a ValueError (CLI: exit 2) that
names the argument as the user typed it, and never hangs (issue #16, part 3).

The functions come from the CLI's ``CALCULATORS`` list plus ``OTHERS``; a test checks that every
public plain-number function of the calculator modules is in one of them, so a new function is
swept too. A new argument name needs a valid value in ``VALID`` (the sweep says so).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import re
import signal
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_lib.__main__ import CALCULATORS, main

OTHERS = [
    ("flops", "attention_flops_per_token"), ("scaling", "optimal_loss"), ("scaling", "compute_equivalent"),
    ("scaling", "size_for_tokens"), ("scaling", "inference_optimal"), ("scaling", "min_size_fraction"),
    ("memory", "zero_memory_breakdown"), ("memory", "max_params_per_gpu"),
    ("memory", "llama_activation_bytes_per_layer"), ("memory", "logits_bytes"), ("comm", "collective_time"),
    ("comm", "zero_bytes_per_step"), ("comm", "hsdp_bytes_per_step"), ("comm", "step_estimate"),
    ("comm", "crossover_gpus"), ("pipeline", "step_time"), ("pipeline", "peak_in_flight"),
    ("numerics", "stall_point"), ("numerics", "ulp"), ("numerics", "ulp_theory"),
    ("moe", "expected_drop_fraction"), ("distill", "distillation_cost"), ("distill", "gpu_hours"),
    ("distill", "pretraining_cost"), ("distill", "inference_cost"), ("distill", "break_even_tokens"),
    ("distill", "distill_calculator"),
    ("faults", "implied_gpu_mtbf"), ("faults", "daly_checkpoint_interval"), ("faults", "goodput_exponential"),
    ("faults", "expected_lost_seconds"), ("faults", "checkpoint_bytes_per_rank"), ("faults", "save_seconds"),
    ("faults", "async_blocking_seconds"), ("faults", "simulate_goodput"), ("batch", "pareto_steps"),
]
MODULES = ("flops", "scaling", "memory", "comm", "pipeline", "numerics", "moe", "distill", "hardware", "faults",
           "batch", "triage.goodput")
# Public functions of those modules that are not plain-number calculators (arrays, models, plots).
NOT_CALCULATORS = {"gpt_params", "get_fit", "fit_power_law", "fit_loss", "isoflop_minimum", "simulate",
                   "resolve_dtype", "format_info", "ulp_table", "running_sum", "pairwise_sum", "kahan_sum",
                   "stochastic_round", "stochastic_sum", "compare_summation", "token_choice", "expert_choice",
                   "mask_router", "switch_aux_loss", "entropy", "cross_entropy", "kl_divergence",
                   "render_distill", "cost_figure", "distill_widget", "accelerator_names", "lookup",
                   "saved_activation_bytes", "noise_scale_stats", "steps_to_target", "law",
                   "llama3_interruptions_per_day"}

# One valid value per argument name (names mean the same thing in every module) ...
VALID = dict(
    n_params=1e9, n_tokens=2e10, n_gpus=8, mfu=0.4, days=30.0, tokens_per_second_per_gpu=1000.0,
    n_layers=32, d_model=4096, seq_len=2048, compute=1e21, size_fraction=0.8, token_multiplier=2.0,
    inference_tokens=1e12, grid=101, dp_degree=8, stage=3, bytes_per_param=16, gpu_bytes=80e9,
    reserved_bytes=0, param_bytes=2, grad_bytes=2, optimizer_bytes=12, kind="all_reduce", size_bytes=1e9,
    n=8, bandwidth=50e9, latency=1e-6, bytes_per_value=2, shard_size=4, critical_batch_tokens=4e6,
    global_batch_tokens=4e6, compute_mfu=0.5, network_bandwidth=50e9, p=4, m=8, v=1, target_fraction=0.1,
    t_forward=1.0, t_backward=2.0, value=1.0, count=100, increment=0.5, x=3.0, n_experts=8,
    capacity_factor=1.25, top_k=2, expert_counts=[5, 3, 0, 9], capacity=4, output_tokens=1e6,
    price_out_per_mtok=25.0, input_tokens=1e5, price_in_per_mtok=5.0, batch_discount=0.5,
    visible_tokens=1e9, input_per_output=0.2, cached_fraction=0.3, cache_read_multiplier=0.1,
    hidden_per_visible=1.0, flops_per_param_token=6.0, gpu_hour_price=2.0, budget_dollars=1e6,
    teacher_params=405e9, teacher_tokens=15.6e12, gpu="H100", dtype="bf16", fit="hoffmann", name="H100",
    method="auto", recompute=False, causal=True, overlap=True, reshard_after_forward=True,
    gpu_mtbf_seconds=1.8e8, save_seconds=60.0, mtbf_seconds=1.1e4, interval_seconds=1800.0,
    restart_seconds=600.0, n_failures=419, duration_seconds=4.7e6, n_ranks=1024, checkpoint_bytes=6.5e12,
    n_writers=1024, writer_bandwidth=2e9, storage_bandwidth=2e12, copy_bandwidth=25e9,
    micro_batch=1, n_heads=32, tp=8, sequence_parallel=True, kv_dim=1024, cp=4, gpus_per_node=8,
    nics_per_node=8, nic_bits_per_s=400e9, kv_heads=8, usable_fraction=0.9, flash_attention=True,
    max_cp=16, max_zero=3, ffn_dim=14336, vocab_size=128256, vocab_parallel=True, chunks=1,
    tokens=4096, ep=64, max_nodes=2, n_nodes=4, stall_seconds=0.016, write_seconds=10.0,
    sq_norm_small=2.0, batch_small=4, sq_norm_big=0.5, batch_big=64, batch_sizes=[4, 8, 16, 32],
    steps=[1200, 650, 380, 240], loss=2.0, law_name="kaplan2020", pp=4,
    batch_size=32, s_min=200.0, b_crit=40.0, diagnose_seconds=600.0, flips_per_gpu_hour=1e-6, run_hours=1300.0, max_undetected=0.1,
)
# ... except where one function reads a name differently.
OVERRIDES = {"expert_capacity": dict(n_tokens=4096), "expected_drop_fraction": dict(n_tokens=4096),
             "peak_in_flight": dict(name="1f1b", stage=1),
             "activation_bytes_per_layer": dict(recompute="selective"),
             "plan": dict(compute=None, n_params=7e9)}   # compute or (n_params, n_tokens); 7e9 fits 32 x 4096
# Arguments for which 0 or a negative number is a valid input.
ZERO_OK = {"reserved_bytes", "optimizer_bytes", "size_bytes", "latency", "inference_tokens", "stage",
           "input_tokens", "price_in_per_mtok", "batch_discount", "input_per_output", "cached_fraction",
           "cache_read_multiplier", "hidden_per_visible", "capacity", "value", "x", "restart_seconds",
           "max_zero", "seed", "write_seconds", "diagnose_seconds", "max_undetected"}
NEGATIVE_OK = {"value", "increment", "x"}
# Where an infinite answer is the true one (a running sum that overflows the format).
INF_OK = {"sequential_sum", "stall_point"}

NAN, INF = float("nan"), float("inf")
ALWAYS_BAD = [NAN, INF, -INF, 10 ** 400, True, "x", None, [1]]
BAD_FLAGS = ["no", None, 1, "x"]
BAD_CHOICES = ["nope", None, 3, [1]]


def _functions():
    for mod, name in CALCULATORS + OTHERS:
        yield pytest.param(getattr(importlib.import_module(f"course_lib.{mod}"), name), id=f"{mod}.{name}")


FUNCTIONS = list(_functions())


def _kind(param: inspect.Parameter) -> str:
    ann = str(param.annotation)
    if ann == "bool":
        return "flag"
    if ann.startswith(("Iterable", "Sequence", "list")):
        return "list"
    if re.search(r"\b(int|float)\b", ann):
        return "int" if ann.startswith("int") else "float"
    return "choice"


def _base(fn) -> dict:
    """Valid keyword arguments for ``fn`` (its defaults where VALID has no entry)."""
    args = {}
    for pname, param in inspect.signature(fn).parameters.items():
        value = {**VALID, **OVERRIDES.get(fn.__name__, {})}.get(pname, param.default)
        assert value is not inspect.Parameter.empty, f"add a valid value for {pname!r} to VALID"
        args[pname] = value
    return args


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise TimeoutError in the main thread if the block runs longer than ``seconds``."""
    def handler(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _finite(result) -> bool:
    """No inf or NaN anywhere in ``result``: JSON with allow_nan=False refuses them."""
    if hasattr(result, "__dataclass_fields__"):
        result = {k: getattr(result, k) for k in result.__dataclass_fields__}
    try:
        json.dumps(result, allow_nan=False, default=lambda o: dict(o) if hasattr(o, "items") else float(o))
    except ValueError:
        return False
    return True


def _leaked(message: str, params) -> list[str]:
    """Argument-like names (``snake_case must``, ``snake_case=``) in ``message`` that ``fn`` lacks."""
    used = re.findall(r"\b([a-z][a-z0-9]*_[a-z0-9_]+)(?= must| is |=|:)", message)
    return [u for u in used if u not in params]


def _outcome(fn, args: dict, name: str, must_raise: bool) -> str | None:
    """None if ``fn(**args)`` behaved, else what went wrong (for the sweep's report)."""
    try:
        with time_limit(5.0):
            result = fn(**args)
    except ValueError as exc:
        msg = str(exc)
        if not re.search(rf"\b{re.escape(name)}\b", msg):
            return f"ValueError does not name {name}: {msg[:150]}"
        leaked = _leaked(msg, inspect.signature(fn).parameters)
        return f"message uses names the caller never typed {leaked}: {msg[:150]}" if leaked else None
    except Exception as exc:   # noqa: BLE001 - the point is to report any other exception
        return f"{type(exc).__name__}: {str(exc)[:150]}"
    if must_raise:
        return f"accepted, returned {result!r:.80}"
    if fn.__name__ not in INF_OK and not _finite(result):
        return f"returned a non-finite result {result!r:.80}"
    if fn.__name__ in INF_OK and result != result:
        return "returned NaN"
    return None


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_every_bad_argument_is_a_value_error_naming_it(fn):
    base = _base(fn)
    assert fn(**base) is not None   # the base call is valid
    problems = []
    for pname, param in inspect.signature(fn).parameters.items():
        kind = _kind(param)
        if kind == "list":
            cases = [(v, True) for v in (5, "x", None, [], [-1], [1.5], [NAN], [INF], [True], [[1]])
                     if not (v is None and "None" in str(param.annotation))]
        elif kind == "flag":
            cases = [(v, True) for v in BAD_FLAGS]
        elif kind == "choice":    # None is a valid choice where the annotation allows it (moe=None)
            cases = [(v, True) for v in BAD_CHOICES if not (v is None and "None" in str(param.annotation))]
        else:
            none_ok = "None" in str(param.annotation)
            cases = [(v, True) for v in ALWAYS_BAD if not (v is None and none_ok)]
            cases += [(0, pname not in ZERO_OK), (-1, pname not in NEGATIVE_OK)]
            # extremes: an int argument must refuse them; a float one may answer, but finitely
            cases += [(1e308, kind == "int"), (-1e308, pname not in NEGATIVE_OK), (1e-320, kind == "int")]
            if kind == "int":
                cases.append((2.5, True))
        for bad, must_raise in cases:
            problem = _outcome(fn, {**base, pname: bad}, pname, must_raise)
            if problem:
                problems.append(f"{pname}={bad!r:.30}: {problem}")
    assert not problems, f"{fn.__module__}.{fn.__name__}:\n  " + "\n  ".join(problems)


def test_every_public_calculator_is_swept():
    swept = {name for _, name in CALCULATORS + OTHERS}
    missing = []
    for mod in MODULES:
        m = importlib.import_module(f"course_lib.{mod}")
        for name in getattr(m, "__all__", []):
            obj = getattr(m, name)
            if inspect.isfunction(obj) and name not in swept and name not in NOT_CALCULATORS:
                missing.append(f"{mod}.{name}")
    assert not missing, f"public functions not in the sweep (add to OTHERS or NOT_CALCULATORS): {missing}"


# hypothesis: any float, int or extreme in the numeric arguments -> a finite answer or a ValueError
_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e3, max_value=1e3),
    st.integers(min_value=-10, max_value=10 ** 6),
    st.sampled_from([0, 1, 2, 10 ** 400, 1e308, -1e308, 5e-324, 1e-320, 2.0 ** 53, 2 ** 53 + 1, 10 ** 16]),
)


@pytest.mark.parametrize("fn", FUNCTIONS)
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_numbers_give_a_finite_answer_or_a_value_error(fn, data):
    args = _base(fn)
    params = inspect.signature(fn).parameters
    numeric = [k for k, p in params.items() if _kind(p) in ("int", "float")]
    for k in data.draw(st.lists(st.sampled_from(numeric), min_size=1, unique=True), label="varied") if numeric else []:
        args[k] = data.draw(_numbers, label=k)
    try:
        with time_limit(5.0):
            result = fn(**args)
    except ValueError as exc:
        assert any(re.search(rf"\b{re.escape(k)}\b", str(exc)) for k in params), str(exc)
        assert not _leaked(str(exc), params), str(exc)
        return
    if fn.__name__ in INF_OK:
        assert result == result, "NaN"
    else:
        assert _finite(result), f"{fn.__name__}({args}) returned {result!r}"


# the cases of the issue, one line each
@pytest.mark.parametrize("call, name, absent", [
    ("scaling.inference_optimal(1e21, 1e12, grid=0)", "grid", None),
    ("comm.dp_bytes_per_step(1e308, 8)", "n_params", "size_bytes"),
    ("moe.expert_capacity(1024, 8, 1e308)", "capacity_factor", None),
    ("flops.training_days(1, 1, n_gpus=1e-320, mfu=1e-320)", "n_gpus", None),
    ("flops.training_days(1, 1, n_gpus=1e-320, mfu=1e-320)", "mfu", None),
    ("pipeline.peak_in_flight('gpipe', 4, 1e308, 0)", "m", None),
    ("pipeline.peak_in_flight('gpipe', 4, 10 ** 6, 0)", "m", None),
    ("pipeline.min_microbatches(4, 1e-320)", "target_fraction", None),
    ("distill.distill_calculator(teacher_params=0)", "teacher_params", "n_params"),
    ("distill.distill_calculator(teacher_tokens=1e308, teacher_params=1e308)", "teacher_params", "n_params"),
    ("distill.gpu_hours(1e9, 1e9, gpu='RTX9090')", "gpu", None),
    ("flops.training_days(1e9, 1e9, 8, 0.4, gpu='RTX9090')", "gpu", None),
    ("hardware.get_accelerator('RTX9090')", "name", None),
    ("flops.mfu(1e9, 1e3, recompute='no')", "recompute", None),
    ("flops.training_flops(1e308, 1e9)", "n_params", None),
    ("numerics.stall_point(1e-8, 'fp16')", "increment", None),
    ("numerics.stall_point(1e308, 'fp16')", "increment", None),
    ("numerics.sequential_sum(1e5, 3, 'fp16')", "value", None),
    ("moe.dropped_tokens(5, 3)", "expert_counts", None),
])
def test_issue_cases(call, name, absent):
    from course_lib import comm, distill, flops, hardware, moe, numerics, pipeline, scaling  # noqa: F401
    with time_limit(5.0), pytest.raises(ValueError) as info:
        eval(call)
    assert re.search(rf"\b{name}\b", str(info.value)), str(info.value)
    assert absent is None or absent not in str(info.value), str(info.value)


def test_documented_answers_stay():
    """The two functions whose inf is true, and valid inputs near the new bounds."""
    from course_lib import numerics, pipeline
    assert numerics.sequential_sum(1000.0, 100, "fp16") == math.inf     # 65504 overflows: real fp16
    assert numerics.stall_point(1000.0, "fp16") == math.inf
    assert numerics.stall_point(1e308, "fp8_e4m3") == 448.0             # the saturating cast
    assert pipeline.peak_in_flight("gpipe", 4, 10 ** 4, 0) == 10 ** 4   # large but within MAX_OPS
    with time_limit(5.0), pytest.raises(ValueError, match=r"m·v must be at most"):
        pipeline.peak_in_flight("interleaved", 4, pipeline.MAX_OPS // 2, 0, v=4)
    with time_limit(5.0), pytest.raises(ValueError, match=r"p·m·v must be at most"):
        pipeline.simulate("1f1b", 10 ** 3, 10 ** 3)


# ----------------------------------------------------------------------------- the CLI
def _cli(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, flag", [
    (["training_flops", "--n-params", "1" + "0" * 400, "--n-tokens", "1e9"], "--n-params"),
    (["bubble_fraction", "--p", "Infinity", "--m", "8"], "--p"),
    (["bubble_fraction", "--p", "NaN", "--m", "8"], "--p"),
    (["bubble_fraction", "--p", "4", "--m", "2.5"], "--m"),
    (["dropped_tokens", "--expert-counts", "5", "--capacity", "3"], "--expert-counts"),
    (["dropped_tokens", "--expert-counts", "[5, -1]", "--capacity", "3"], "--expert-counts"),
    (["mfu", "--n-params", "1e9", "--tokens-per-second-per-gpu", "1e3", "--recompute", "no"], "--recompute"),
    (["training_days", "--n-params", "1", "--n-tokens", "1", "--n-gpus", "1e-320", "--mfu", "1e-320"],
     "--n-gpus"),
    (["training_days", "--n-params", "1e9", "--n-tokens", "1e9", "--n-gpus", "8", "--mfu", "0.4",
      "--gpu", "RTX9090"], "--gpu"),
    (["training_flops", "--n-params", "x", "--n-tokens", "1e9"], "--n-params"),
    (["dp_bytes_per_step", "--n-params", "1e308", "--n", "8"], "--n-params"),
    (["get_accelerator", "--name", "RTX9090"], "--name"),
])
def test_cli_bad_input_is_a_usage_error_naming_the_flag(argv, flag, capsys):
    code, out, err = _cli(argv, capsys)
    assert code == 2 and out == "", (code, out, err)
    assert re.search(rf"error: arguments? ([-\w]+, )*{re.escape(flag)}\b", err), err
    assert "Traceback" not in err


def _argv(command: str, args: dict) -> list[str]:
    """``command --flag value ...`` for keyword arguments, values written as a user types them."""
    typed = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in args.items()}
    return [command] + [a for k, v in typed.items() for a in ("--" + k.replace("_", "-"), v)]


def test_cli_every_numeric_flag_refuses_nan_and_words(capsys):
    from course_lib.__main__ import _available, _object_valued
    for name, fn in _available():
        params = inspect.signature(fn).parameters
        base = {k: v for k, v in _base(fn).items() if not _object_valued(params[k])}   # moe: no flag
        code, out, err = _cli(_argv(name, base), capsys)
        assert code == 0 and out.strip(), (name, err)
        for pname, param in inspect.signature(fn).parameters.items():
            if _kind(param) not in ("int", "float"):
                continue
            for bad in ("nan", "x", "1e999"):
                code, _, err = _cli(_argv(name, {**base, pname: bad}), capsys)
                assert code == 2 and "--" + pname.replace("_", "-") in err, (name, pname, bad, err)


def test_cli_end_to_end_exit_code_and_no_traceback():
    bad = subprocess.run([sys.executable, "-m", "course_lib", "bubble_fraction", "--p", "Infinity", "--m", "8"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error: argument --p" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_output_piped_into_a_reader_that_stops_early_ends_quietly():
    """`python -m course_lib plan ... | head -1`: the reader closes the pipe after one line."""
    proc = subprocess.Popen([sys.executable, "-m", "course_lib", "plan", "--n-params", "70e9", "--n-tokens", "15e12",
                             "--n-gpus", "2048"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = proc.stdout.read(20)      # the first bytes of the first line, then hang up before the rest
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and first.startswith(b"[ch02") and "Traceback" not in err, err


def test_calculator_decorator_names_the_culprit_and_keeps_the_signature():
    from course_lib._validate import calculator

    @calculator
    def ratio(num: float, den: float = 1.0) -> float:
        """num / den."""
        return num / den

    assert ratio(6.0, 3.0) == 2.0 and list(inspect.signature(ratio).parameters) == ["num", "den"]
    for args, culprit, innocent in [((1.0, 0.0), "den=0.0", "num"), ((1.0, 1e-320), "den=1e-320", "num"),
                                    ((1e308, 1e-10), "num=1e+308", "den")]:
        with pytest.raises(ValueError, match=re.escape(culprit)) as info:
            ratio(*args)
        assert innocent not in str(info.value)
