"""Command line for the calculators: ``python -m course_lib <calculator> --arg value ...``.

Every public calculator of the fixed API is a sub-command with the same argument names, e.g.
``python -m course_lib training_days --n-params 34B --n-tokens 8T --n-gpus 1k --mfu 0.45``.
``python -m course_lib list`` shows what is available. Numbers are read as the site's calculators
read them: 34e9 or 1024, or with a magnitude, k, M, B (or G), T, P for powers of 1000 and Ki, Mi,
Gi, Ti, Pi for powers of 1024 (70B, 15T, 2k, 1.5M, 128Ki); switches take true or false; lists
(``--expert-counts``) are JSON, e.g. ``[5, 3, 0]``. The answer is printed with its unit (s, days,
FLOP, bytes and GB, GPUs, ...); ``--json`` prints it as plain JSON for scripts. A bad value is a
usage error (exit status 2) that names the flag.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import re
import sys
import textwrap

from .cli_values import _expand_suffix, _json_list, _number, _optional_number, _switch  # noqa: F401

# (module, function) pairs exposed on the command line; modules that don't exist yet are skipped.
CALCULATORS = [
    ("flops", "training_flops"), ("flops", "training_days"), ("flops", "gpus_needed"),
    ("flops", "mfu"), ("flops", "attention_fraction"), ("flops", "attention_crossover"),
    ("scaling", "compute_optimal"), ("scaling", "loss"), ("scaling", "overtraining_cost"),
    ("memory", "zero_memory_per_gpu"), ("memory", "min_zero3_degree"),
    ("comm", "collective_bytes"), ("comm", "dp_bytes_per_step"), ("comm", "fsdp_bytes_per_step"),
    ("comm", "max_dp_degree"),
    ("pipeline", "bubble_fraction"), ("pipeline", "bubble_overhead"), ("pipeline", "min_microbatches"),
    ("numerics", "sequential_sum"), ("moe", "expert_capacity"), ("moe", "dropped_tokens"),
    ("distill", "api_cost"), ("hardware", "get_accelerator"),
    ("faults", "cluster_mtbf"), ("faults", "optimal_checkpoint_interval"), ("faults", "goodput"),
    ("memory", "activation_bytes_per_layer"), ("comm", "tp_bytes_per_layer"),
    ("comm", "cp_bytes_per_layer"), ("layout", "layout"), ("plan", "plan"),
    ("comm", "ep_bytes_per_layer"), ("comm", "ep_node_bytes"),
    ("comm_alltoall", "ulysses_bytes_per_layer"), ("comm_alltoall", "ring_kv_bytes_per_layer"),
    ("comm_alltoall", "ulysses_over_ring"), ("comm_alltoall", "ep_node_copies"),
    ("faults", "async_goodput"), ("faults", "storage_rate_needed"),
    ("batch", "noise_scale"), ("batch", "pareto_fit"), ("batch", "critical_batch_tokens"),
    ("batch", "largest_useful_batch"), ("batch", "dp_ceiling"), ("batch", "gpus_allowed"),
    ("triage.goodput", "triage_goodput"), ("triage.goodput", "detection_rate_needed"),
]


def _available(only: str | None = None):
    """(name, function) of each calculator that imports, or of ``only`` alone when named."""
    for mod, name in CALCULATORS:
        if only is not None and name != only:
            continue
        try:
            fn = getattr(importlib.import_module(f"course_lib.{mod}"), name)
        except (ImportError, AttributeError):
            continue
        yield name, fn


def _converter(param: inspect.Parameter):
    """The argparse ``type`` for a parameter, from its annotation (or its default's type)."""
    ann = str(param.annotation).replace("typing.", "")
    if ann == "bool" or isinstance(param.default, bool):
        return _switch
    if ann in ("int | None", "float | None"):
        return _optional_number
    if ann in ("int", "float") or (
            isinstance(param.default, (int, float)) and ann == str(inspect.Parameter.empty)):
        return _number
    if ann.startswith(("Iterable", "Sequence", "list")):
        return _json_list
    return str


def _object_valued(param: inspect.Parameter) -> bool:
    """An optional argument whose value is an object (``moe: MoE | None``): left to its default
    on the command line, set from Python."""
    ann = str(param.annotation).replace("typing.", "")
    return param.default is None and ann.endswith("| None") and ann.split(" |")[0] not in ("int", "float", "str")


def _flag(pname: str) -> str:
    return "--" + pname.replace("_", "-")


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")          # :func:`plan_layouts` -> plan_layouts
_NOT_AN_END = re.compile(r"\b(e\.g|i\.e|et al|eq|cf|vs|Fig|approx)\.$")


def _summary(fn) -> str:
    """The first full sentence of a calculator's docstring as plain text: its first paragraph
    joined into one line, cut at the first full stop outside brackets that ends a sentence (the
    next word starts with a capital or a literal; not "e.g." or "et al."), then RST roles,
    ``literals``, `code`, **bold** and *emphasis* marks removed."""
    text = " ".join((inspect.getdoc(fn) or "").split("\n\n")[0].split())
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        after = text[i + 1:i + 3]
        if ch in ".!?" and depth <= 0 and (after == "" or after[0] == " " and (after[1:].isupper() or after[1:] in "`*:")) \
                and not _NOT_AN_END.search(text[:i + 1]):
            text = text[:i + 1]
            break
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0)[m.group(0).index("`") + 1] == "~"
                     else m.group(1), text)
    text = re.sub(r"``([^`]+)``|`([^`]+)`", lambda m: m.group(1) or m.group(2), text)
    return re.sub(r"\*\*([^*]+)\*\*|(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])", lambda m: m.group(1) or m.group(2), text)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every calculator a subcommand with a flag per argument, or, with
    ``only``, that calculator's subcommand alone (what ``main`` parses a calculator's command with:
    the same flags, usage and errors, without importing and describing the other calculators)."""
    ap = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the calculators")
    for name, fn in _available(only):
        doc = _summary(fn)
        p = sub.add_parser(name, help=doc.replace("%", "%%"), description=doc)
        for pname, param in inspect.signature(fn).parameters.items():
            if _object_valued(param):     # e.g. moe=MoE(...): a Python object, not a flag's text
                continue
            kind = _converter(param)
            extra = {"metavar": "{true,false}"} if kind is _switch else {}
            if param.default is inspect.Parameter.empty:
                p.add_argument(_flag(pname), dest=pname, required=True, type=kind, **extra)
            else:
                shown = str(param.default).lower() if kind is _switch else repr(param.default)
                p.add_argument(_flag(pname), dest=pname, default=param.default, type=kind,
                               help=f"default: {shown}", **extra)
        p.add_argument("--json", dest="_json", action="store_true",
                       help="print the answer as JSON, numbers without units (for scripts)")
        p.set_defaults(_fn=fn, _parser=p)
    return ap


def _blame(message: str, names: list[str]) -> str:
    """A calculator's error message prefixed with the flags it is about: every argument it
    mentions, the one it starts with first (``critical_batch_tokens (4e6) is smaller than one
    sequence (seq_len=1e15)`` is about --seq-len too, and an overflow names all the inputs
    responsible)."""
    named = sorted((m.start(), n) for n in names if (m := re.search(rf"\b{re.escape(n)}\b", message)))
    if not named:
        return message
    flags = ", ".join(_flag(n) for _, n in named)
    first = named[0][1]
    return f"argument{'s' if len(named) > 1 else ''} {flags}: " + message.removeprefix(f"{first}: ")


# What each calculator's answer is counted in; a tuple answer names its parts. Fields of a
# dataclass answer (a Layout, an Accelerator) take their unit from their name (_field_unit).
UNITS = {
    "training_flops": "FLOP", "training_days": "days", "gpus_needed": "GPUs", "mfu": "fraction",
    "attention_fraction": "fraction", "attention_crossover": "tokens",
    "compute_optimal": (("n_params", "parameters"), ("n_tokens", "tokens")), "loss": "nats/token",
    "overtraining_cost": (("token_multiplier", "x"), ("extra_compute_fraction", "fraction")),
    "zero_memory_per_gpu": "bytes", "min_zero3_degree": "GPUs", "collective_bytes": "bytes",
    "dp_bytes_per_step": "bytes", "fsdp_bytes_per_step": "bytes", "max_dp_degree": "replicas",
    "bubble_fraction": "fraction", "bubble_overhead": "fraction", "min_microbatches": "microbatches",
    "sequential_sum": "", "expert_capacity": "slots", "dropped_tokens": "token-expert assignments",
    "api_cost": "$", "cluster_mtbf": "s", "optimal_checkpoint_interval": "s", "goodput": "fraction",
    "activation_bytes_per_layer": "bytes", "tp_bytes_per_layer": "bytes", "cp_bytes_per_layer": "bytes",
    "ep_bytes_per_layer": "bytes",
    "ep_node_bytes": (("inside a node (NVLink)", "bytes"), ("across nodes (network)", "bytes")),
    "ulysses_bytes_per_layer": "bytes", "ring_kv_bytes_per_layer": "bytes", "ulysses_over_ring": "x",
    "ep_node_copies": "copies", "async_goodput": "fraction", "storage_rate_needed": "bytes/s",
    "noise_scale": "examples",
    "pareto_fit": (("S_min", "steps"), ("E_min", "examples"), ("B_crit", "examples")),
    "critical_batch_tokens": "tokens", "largest_useful_batch": "sequences", "dp_ceiling": "replicas",
    "gpus_allowed": "GPUs", "detection_rate_needed": "fraction",
    "triage_goodput": (("goodput", "fraction"), ("interval_seconds", "s"), ("lost_per_failure_seconds", "s"),
                       ("lost_work_seconds", "s")),
}


def _field_unit(name: str) -> str:
    if name in ("peak_flops", "sparse_flops"):
        return "FLOP/s"
    if name.endswith("bits_per_s"):
        return "bit/s"
    if name.endswith(("_bandwidth", "bytes_per_s")):
        return "bytes/s"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith(("_s", "_seconds")) or name in ("breakdown", "hidden"):
        return "s"
    return {"mfu": "fraction", "goodput": "fraction", "domain_size": "GPUs", "microbatches": "microbatches"}.get(name, "")


def _scaled(x: float, unit: str) -> str:
    """``x`` in k/M/G/T/P of ``unit`` (decimal, as datasheets count bytes and FLOP/s)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}"


def _with_unit(x, unit: str) -> str:
    """One number as the reader wants it: ``41.4474 days``, ``3.58e+08 bytes (358.6 MB)``,
    ``0.97 (97 %)``, ``$12,500,000.00``; a count stays an exact integer."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    n = str(x) if isinstance(x, int) else f"{x:.6g}"
    if not math.isfinite(x) or unit in ("", "x"):
        return n + ("x" if unit == "x" and math.isfinite(x) else "")
    if unit == "fraction":
        return f"{n} ({100 * x:.3g} %)"
    if unit == "$":
        return f"${x:,.2f}" if abs(x) < 1e15 else f"${x:.6g}"
    if unit in ("bytes", "bytes/s", "bit/s", "FLOP/s"):
        short = {"bytes": "B", "bytes/s": "B/s", "bit/s": "b/s", "FLOP/s": "FLOP/s"}[unit]
        return f"{n} {unit}" + (f" ({_scaled(x, short)})" if abs(x) >= 1e3 else "")
    if unit == "s" and abs(x) >= 60:
        for name, scale in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
            if abs(x) >= 2 * scale or name == "min":
                return f"{n} s ({x / scale:.3g} {name})"
    return f"{n} {unit}"


def _render(name: str, result) -> str:
    """The answer with its units: a number on one line, a tuple, a dict or a dataclass one part a line."""
    unit = UNITS.get(name, "")
    if hasattr(result, "__dataclass_fields__"):
        lines = [f"layout: {result.shape()}"] if callable(getattr(result, "shape", None)) else []
        text = ""
        for k in result.__dataclass_fields__:
            v, u = getattr(result, k), _field_unit(k)
            if k == "explanation":
                text = v
            elif hasattr(v, "items"):
                lines += [f"{k}.{key}: {_with_unit(x, u)}" for key, x in v.items()]
            elif v != "" or k != "notes":
                lines.append(f"{k}: {_with_unit(v, u)}")
        return "\n".join(lines + ([f"explanation:\n{textwrap.indent(text, '  ')}"] if text else []))
    if isinstance(result, dict):          # triage_goodput: one field a line, each with its unit
        units = dict(unit) if isinstance(unit, tuple) else {}
        return "\n".join(f"{k}: {_with_unit(v, units.get(k, _field_unit(k)))}" for k, v in result.items())
    if isinstance(result, tuple) and isinstance(unit, tuple) and len(unit) == len(result):
        return "\n".join(f"{label}: {_with_unit(x, u)}" for (label, u), x in zip(unit, result))
    return _with_unit(result, unit if isinstance(unit, str) else "")


def _as_json(result) -> str:
    """The answer as JSON for scripts: a dataclass as an object of its fields, numbers unrounded."""
    if hasattr(result, "__dataclass_fields__"):
        result = {k: getattr(result, k) for k in result.__dataclass_fields__}
        result = {k: (dict(v) if hasattr(v, "items") else v) for k, v in result.items()}
    return json.dumps(result, default=str)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    named = argv[0] if argv and argv[0] in {name for _, name in CALCULATORS} else None
    # A calculator's command is parsed by its own subcommand alone (a tenth of the time to build);
    # anything else (list, --help, a typo) by the whole parser. A bad flag or value: argparse's usage
    # error, exit status 2; a flag no subcommand takes is reported by the whole parser, whose usage
    # line lists every calculator.
    ap = build_parser(named)
    args, extra = ap.parse_known_args(argv)
    if extra:
        (build_parser() if named else ap).parse_args(argv)
    args = vars(args)
    name = args.pop("command")
    if name == "list":
        for cmd, fn in _available():
            print(textwrap.fill(_summary(fn), 100, initial_indent=f"{cmd:28s} ", subsequent_indent=" " * 29,
                                break_on_hyphens=False))
        return 0
    fn, parser, as_json = args.pop("_fn"), args.pop("_parser"), args.pop("_json")
    try:
        result = fn(**args)
    except (ValueError, TypeError, ArithmeticError) as exc:   # bad input: a usage error, never a traceback
        parser.error(_blame(str(exc), list(args)))   # prints usage and "error: ...", exits 2
    except RecursionError:     # a list nested deeper than Python's stack: name the list flags
        lists = [n for n in args if isinstance(args[n], list)]
        parser.error(_blame(f"{', '.join(lists) or 'an argument'} is nested too deeply", lists))
    if as_json:
        print(_as_json(result))
    elif callable(getattr(result, "render", None)):   # a result that prints itself (the plan)
        print(result.render())
    else:
        print(_render(name, result))
    return 0


def _run() -> int:
    """``main()`` for the command line: output piped into a reader that stops early (``| head``)
    ends the program quietly, as Unix tools do, instead of with a BrokenPipeError traceback."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(_run())
