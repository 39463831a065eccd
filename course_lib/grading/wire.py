"""The only form in which answers and function calls cross the sandbox wall: strict JSON.

A student's answer is data, never code or a pickle: ``None``, bools, ints, finite floats and
strings as themselves; tagged objects for the rest (``{"$float": "nan"}``, ``{"$tuple": [...]}``,
``{"$dict": [[key, value], ...]}``, ``{"$set": [...]}``, ``{"$tensor": {...}}`` for torch tensors and numpy arrays,
``{"$fn": id, "name": ..., "source": ...}`` for a function that stays in the sandbox and is called
by reference, ``{"$opaque": "TypeName"}`` for anything else). :func:`loads` rejects ``NaN``/
``Infinity`` literals, over-deep nesting and over-long text, so a forged answer file can be wrong
but never make the trusted side execute anything.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 40
MAX_TEXT = 16 * 2**20  # bytes of one message: bounds what parsing it can cost the grader
MAX_DIMS = 32          # numpy's own limit is 64; no answer needs more
# the dtypes an answer may declare: numbers and bools (a string dtype such as "U999999999" would
# make numpy allocate its width for every element, gigabytes from a 150-byte answer)
NUMPY_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                          "float16", "float32", "float64", "complex64", "complex128"})
TORCH_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16",
                          "float32", "float64", "float8_e4m3fn", "float8_e5m2"})   # FP8: chapter 15


class WireError(ValueError):
    """Text that is not a well-formed answer."""


def _reject(name: str) -> Any:
    raise WireError(f"{name} is not allowed in strict JSON")


def dumps(obj: Any) -> str:
    """One line of strict JSON (no NaN/Infinity; non-ASCII escaped)."""
    return json.dumps(obj, allow_nan=False, sort_keys=True, separators=(",", ":"))


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise WireError(f"{text} overflows to {x}")
    return x


def loads(text: str | bytes) -> Any:
    """Parse strict JSON: no NaN/Infinity literals, no number that overflows to infinity."""
    if len(text) > MAX_TEXT:
        raise WireError(f"message of {len(text)} bytes is over the {MAX_TEXT} limit")
    try:
        return json.loads(text, parse_constant=_reject, parse_float=_finite)
    except (ValueError, RecursionError) as e:
        raise WireError(f"not strict JSON: {e}") from None


def _flat(values: list) -> list:
    """A tensor's flat values: numbers as themselves, non-finite floats tagged."""
    return [v if not isinstance(v, float) or math.isfinite(v) else {"$float": repr(v)} for v in values]


def _tensor(x: Any) -> dict | None:
    mod = type(x).__module__.split(".")[0]
    if mod == "torch" and hasattr(x, "detach"):
        t = x.detach().cpu()
        return {"kind": "torch", "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                "data": _flat(t.reshape(-1).tolist())}
    if mod == "numpy" and hasattr(x, "dtype") and hasattr(x, "tolist"):
        if getattr(x, "shape", None) == ():
            return None  # a numpy scalar: a plain number
        return {"kind": "numpy", "dtype": str(x.dtype), "shape": list(x.shape),
                "data": _flat(x.reshape(-1).tolist())}
    return None


def encode(x: Any, fn: Callable[[Any], dict] | None = None, depth: int = 0) -> Any:
    """``x`` as JSON-able data; ``fn(callable)`` returns the reference of a function (default:
    functions become opaque)."""
    if depth > MAX_DEPTH:
        raise WireError("answer nested too deeply")
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"$float": repr(x)}
    if isinstance(x, tuple):
        return {"$tuple": [encode(v, fn, depth + 1) for v in x]}
    if isinstance(x, list):
        return [encode(v, fn, depth + 1) for v in x]
    if isinstance(x, dict):
        return {"$dict": [[encode(k, fn, depth + 1), encode(v, fn, depth + 1)] for k, v in x.items()]}
    if isinstance(x, (set, frozenset)):
        return {"$set": [encode(v, fn, depth + 1) for v in sorted(x, key=repr)]}
    t = _tensor(x)
    if t is not None:
        return {"$tensor": t}
    item = getattr(x, "item", None)
    if type(x).__module__.split(".")[0] == "numpy" and callable(item):
        return encode(item(), fn, depth + 1)
    if callable(x) and fn is not None:
        return fn(x)
    return {"$opaque": type(x).__name__}


class Opaque:
    """Stands for an answer object that cannot cross the wall (its type name only)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def _build_tensor(t: dict) -> Any:
    kind, dtype, shape = t.get("kind"), t.get("dtype"), t.get("shape")
    data = t.get("data")
    if not isinstance(data, list):
        raise WireError("malformed tensor")
    if not all(isinstance(v, (int, float)) for v in data):  # bools are ints; tagged floats decode
        data = [decode(v) for v in data]
        if not all(isinstance(v, (int, float)) for v in data):
            raise WireError("tensor data must be numbers")
    if not (isinstance(dtype, str) and isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise WireError("malformed tensor")
    if len(shape) > MAX_DIMS:
        raise WireError(f"a tensor of {len(shape)} dimensions (at most {MAX_DIMS})")
    if math.prod(shape) != len(data):
        raise WireError("tensor data does not match its shape")
    if kind not in ("torch", "numpy"):
        raise WireError(f"unknown tensor kind {str(kind)[:40]!r}")
    if dtype not in (TORCH_DTYPES if kind == "torch" else NUMPY_DTYPES):
        raise WireError(f"unsupported {kind} dtype {dtype[:40]!r}")
    try:  # values the dtype cannot hold (int8 300), or a build numpy/torch refuses
        if kind == "torch":
            import torch

            return torch.tensor(data, dtype=getattr(torch, dtype)).reshape(shape)
        import numpy as np

        return np.array(data, dtype=np.dtype(dtype)).reshape(shape)
    except (OverflowError, RuntimeError, ValueError, TypeError, FloatingPointError, MemoryError) as e:
        raise WireError(f"cannot build the {kind} {dtype} tensor: {type(e).__name__}") from None


def decode(x: Any, fn: Callable[[dict], Any] | None = None, depth: int = 0) -> Any:
    """Inverse of :func:`encode`; ``fn(ref_dict)`` builds the stand-in of a function."""
    if depth > MAX_DEPTH:
        raise WireError("answer nested too deeply")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [decode(v, fn, depth + 1) for v in x]
    if not isinstance(x, dict) or len(x) < 1:
        raise WireError(f"unexpected {type(x).__name__}")
    if "$float" in x:
        if x["$float"] not in ("nan", "inf", "-inf"):
            raise WireError("bad $float")
        return float(x["$float"])
    if "$tuple" in x and isinstance(x["$tuple"], list):
        return tuple(decode(v, fn, depth + 1) for v in x["$tuple"])
    if "$dict" in x and isinstance(x["$dict"], list):
        out = {}
        for pair in x["$dict"]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise WireError("bad $dict entry")
            k = decode(pair[0], fn, depth + 1)
            try:
                out[k] = decode(pair[1], fn, depth + 1)
            except TypeError:
                raise WireError("unhashable dict key") from None
        return out
    if "$set" in x and isinstance(x["$set"], list):
        try:
            return {decode(v, fn, depth + 1) for v in x["$set"]}
        except TypeError:
            raise WireError("unhashable set element") from None
    if "$tensor" in x and isinstance(x["$tensor"], dict):
        return _build_tensor(x["$tensor"])
    if "$fn" in x:
        return fn(x) if fn is not None else Opaque("function")
    if "$opaque" in x:
        return Opaque(str(x["$opaque"])[:80])
    raise WireError("unknown tag")
