"""Command line for the calculators: ``python -m course_lib <calculator> --arg value ...``.

Every public calculator of the fixed API is a sub-command with the same argument names, e.g.
``python -m course_lib training_days --n-params 34e9 --n-tokens 8e12 --n-gpus 1024 --mfu 0.45``.
``python -m course_lib list`` shows what is available.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys

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
]


def _available():
    for mod, name in CALCULATORS:
        try:
            fn = getattr(importlib.import_module(f"course_lib.{mod}"), name)
        except (ImportError, AttributeError):
            continue
        yield name, fn


def _convert(text: str):
    """Parse a command-line value: JSON (numbers, lists, true/false) or a plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        return text


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m course_lib", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the calculators")
    for name, fn in _available():
        doc = (inspect.getdoc(fn) or "").split("\n")[0]
        p = sub.add_parser(name, help=doc, description=doc)
        for pname, param in inspect.signature(fn).parameters.items():
            flag = "--" + pname.replace("_", "-")
            if param.default is inspect.Parameter.empty:
                p.add_argument(flag, dest=pname, required=True, type=_convert)
            else:
                p.add_argument(flag, dest=pname, default=param.default, type=_convert,
                               help=f"default: {param.default!r}")
        p.set_defaults(_fn=fn)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = vars(ap.parse_args(argv))
    if args.pop("command") == "list":
        for name, fn in _available():
            print(f"{name:22s} {(inspect.getdoc(fn) or '').splitlines()[0]}")
        return 0
    fn = args.pop("_fn")
    try:
        result = fn(**args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if hasattr(result, "__dataclass_fields__"):
        result = {k: getattr(result, k) for k in result.__dataclass_fields__}
        result = {k: (dict(v) if hasattr(v, "items") else v) for k, v in result.items()}
    print(json.dumps(result, default=str) if not isinstance(result, float) else f"{result:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
