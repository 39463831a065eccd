"""Command line for the calculators: ``python -m course_lib <calculator> --arg value ...``.

Every public calculator of the fixed API is a sub-command with the same argument names, e.g.
``python -m course_lib training_days --n-params 34e9 --n-tokens 8e12 --n-gpus 1024 --mfu 0.45``.
``python -m course_lib list`` shows what is available. Numbers may be written 34e9 or 1024;
switches take true or false; lists (``--expert-counts``) are JSON, e.g. ``[5, 3, 0]``. A bad value
is a usage error (exit status 2) that names the flag.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import sys

from ._validate import _show

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
]


def _available():
    for mod, name in CALCULATORS:
        try:
            fn = getattr(importlib.import_module(f"course_lib.{mod}"), name)
        except (ImportError, AttributeError):
            continue
        yield name, fn


def _number(text: str) -> int | float:
    """A number as typed: an integer literal stays an exact int (so 10**400 is seen as too large
    by the calculator, not rounded), anything else is a float (1e9, 0.45, inf, nan)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _optional_number(text: str) -> int | float | None:
    """A number, or ``none`` for an optional argument left to its default rule (``--mfu none``)."""
    return None if text.lower() == "none" else _number(text)


def _switch(text: str) -> bool:
    """true or false, nothing else: any other word would be a truthy string in Python."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _json_list(text: str) -> list:
    shown = _show(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    except RecursionError:   # [[[...]]] 3000 deep exhausts the parser's stack
        raise argparse.ArgumentTypeError(f"expected a JSON list such as [5, 3, 0], got one nested too "
                                         f"deeply to read: {shown}") from None
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"expected a JSON list such as [5, 3, 0], got {shown}")
    return value


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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the calculators")
    for name, fn in _available():
        doc = (inspect.getdoc(fn) or "").split("\n")[0]
        p = sub.add_parser(name, help=doc, description=doc)
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


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = vars(ap.parse_args(argv))
    if args.pop("command") == "list":
        for name, fn in _available():
            print(f"{name:22s} {(inspect.getdoc(fn) or '').splitlines()[0]}")
        return 0
    fn, parser = args.pop("_fn"), args.pop("_parser")
    try:
        result = fn(**args)
    except (ValueError, TypeError, ArithmeticError) as exc:   # bad input: a usage error, never a traceback
        parser.error(_blame(str(exc), list(args)))   # prints usage and "error: ...", exits 2
    except RecursionError:     # a list nested deeper than Python's stack: name the list flags
        lists = [n for n in args if isinstance(args[n], list)]
        parser.error(_blame(f"{', '.join(lists) or 'an argument'} is nested too deeply", lists))
    if callable(getattr(result, "render", None)):   # a result that prints itself (the plan)
        print(result.render())
        return 0
    if hasattr(result, "__dataclass_fields__"):
        result = {k: getattr(result, k) for k in result.__dataclass_fields__}
        result = {k: (dict(v) if hasattr(v, "items") else v) for k, v in result.items()}
    print(json.dumps(result, default=str) if not isinstance(result, float) else f"{result:.6g}")
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
