"""Capture what an FP8 GEMM would quantize, layer by layer, from a model in training.

Each ``nn.Linear`` runs three GEMMs a step on three tensors FP8 training casts: its input (the
activation, E4M3), its weight (E4M3) and the gradient of its output (E5M2). :class:`LinearCapture`
puts a forward hook and a full backward hook on every Linear of a model and, on the steps it is
armed for, keeps a copy of each, flattened to the 2-D shape the GEMM sees (tokens × features).

``grow_outliers`` builds, from a captured activation, what long SwiGLU training grows (Fishman et
al., arXiv 2409.12517): a few channels whose values on a few tokens become orders of magnitude
larger than everything else; it returns the mask of the untouched entries, on which a recipe's
damage shows (the whole tensor's SNR is dominated by the outliers themselves and hides it).
"""
from __future__ import annotations

import torch
from torch import nn

from .._validate import positive, positive_int

__all__ = ["LinearCapture", "KINDS", "FORMAT_OF", "grow_outliers"]

KINDS = ("activation", "weight", "gradient")
FORMAT_OF = {"activation": "e4m3", "weight": "e4m3", "gradient": "e5m2"}


class LinearCapture:
    """Hooks on every ``nn.Linear`` of ``model`` (or those whose qualified name is in ``names``).

    ``arm(step)`` makes the next forward and backward record, under ``step``, each layer's input
    ``(tokens, in_features)``, weight ``(out, in)`` and output gradient ``(tokens, out_features)``;
    ``disarm()`` stops recording. ``records[step][layer][kind]`` holds float32 copies. Use as a
    context manager, or call ``close()`` to remove the hooks. No global state: the hooks live on
    this model's modules only.
    """

    def __init__(self, model: nn.Module, names: list[str] | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be an nn.Module, got {type(model).__name__}")
        linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        if names is not None:
            missing = [n for n in names if n not in linears]
            if missing:
                raise ValueError(f"names {missing} are not nn.Linear modules of the model; it has {list(linears)}")
            linears = {n: linears[n] for n in names}
        if not linears:
            raise ValueError("model has no nn.Linear to capture")
        self.layers = list(linears)
        self.records: dict[int, dict[str, dict[str, torch.Tensor]]] = {}
        self._step: int | None = None
        self._handles = []
        for name, mod in linears.items():
            self._handles.append(mod.register_forward_hook(self._forward(name)))
            self._handles.append(mod.register_full_backward_hook(self._backward(name)))

    def _slot(self, name: str) -> dict[str, torch.Tensor]:
        return self.records.setdefault(self._step, {}).setdefault(name, {})

    def _forward(self, name: str):
        def hook(mod, args, output):
            if self._step is not None:
                slot = self._slot(name)
                slot["activation"] = args[0].detach().reshape(-1, mod.in_features).float().clone()
                slot["weight"] = mod.weight.detach().float().clone()
        return hook

    def _backward(self, name: str):
        def hook(mod, grad_input, grad_output):
            if self._step is not None and grad_output[0] is not None:
                self._slot(name)["gradient"] = grad_output[0].detach().reshape(-1, mod.out_features).float().clone()
        return hook

    def arm(self, step: int) -> None:
        self._step = positive_int("step", step, minimum=0)

    def disarm(self) -> None:
        self._step = None

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> LinearCapture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def grow_outliers(x: torch.Tensor, *, channels: int = 3, tokens: int = 4, factor: float = 1e4
                  ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``x`` (tokens × channels, a captured activation) with outliers grown in place of its own
    largest values: the ``channels`` channels with the largest amax, and in each the ``tokens``
    tokens where it is largest, multiplied by ``factor``. Returns ``(grown, rest, where)``:
    ``rest`` is True on every entry left untouched, ``where`` names the grown channels and tokens.
    Nothing is drawn at random: the outliers sit where the captured tensor already peaks."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D floating tensor (tokens x channels), got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    channels = positive_int("channels", channels, maximum=x.shape[1])
    tokens = positive_int("tokens", tokens, maximum=x.shape[0])
    factor = positive("factor", factor)
    a = x.detach().abs()
    chans = torch.topk(a.amax(0), channels).indices.sort().values
    grown, rest = x.detach().clone(), torch.ones_like(x, dtype=torch.bool)
    where = {}
    for c in chans.tolist():
        toks = torch.topk(a[:, c], tokens).indices.sort().values
        grown[toks, c] *= factor
        rest[toks, c] = False
        where[c] = toks.tolist()
    return grown, rest, {"channels": chans.tolist(), "tokens": where, "factor": factor}
