"""A stage's backward split in two: B, the gradient of the stage's input, and W, its weights'.

Zero-bubble schedules (Qi et al. 2023, arXiv 2401.10241) send the input gradient upstream as
soon as it exists and compute the weight gradients later, in the idle slots. Autograd already
computes the two separately: a linear layer's backward node makes dX = dY·Wᵀ for the path to the
input and dW = dYᵀ·X for the weight, and each only when asked. So:

* ``backward_input`` (B) runs ``torch.autograd.grad(out, [inp], grad, retain_graph=True)``:
  only the nodes on the path to the stage's input run, and only their input-side outputs. On the
  way it keeps, for every node of that path that also feeds a weight (an *intermediate*), the
  gradient flowing into it (a pre-hook records it).
* ``backward_weight`` (W) then runs ``torch.autograd.grad`` from each intermediate with its kept
  gradient down to its own parameters only (``torch.autograd.graph.GradientEdge`` on both ends),
  so no input-side product is computed twice, and adds the result into ``param.grad``.

The graph between B and W stays alive (the saved activations too: a microbatch counts as "in
flight" until its W). The first stage has no differentiable input (token ids): its B is empty
and its W runs the whole backward. ``torch.distributed.pipelining._backward`` does the same with
its ``stage_backward_input``/``stage_backward_weight``; this is a from-scratch version of it, and
tests check it bit for bit against the whole backward.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, get_gradient_edge

__all__ = ["Pending", "backward_input", "backward_weight"]


@dataclass
class Pending:
    """What W needs from B: per intermediate node, the gradient it received and its parameters."""

    groups: list[tuple[object, list[torch.nn.Parameter]]] = field(default_factory=list)
    grads: dict = field(default_factory=dict)
    whole: tuple | None = None        # (out, grad) when B had no input path: W runs everything


def _children(node) -> list:
    return [n for n, _ in node.next_functions if n is not None]


def _groups(root, inp_node, params: Sequence[torch.nn.Parameter]) -> list[tuple[object, list]]:
    """Intermediates (nodes on the path root → input with a branch leading to parameters) and
    the parameters behind each of their side branches."""
    acc = {get_gradient_edge(q).node: q for q in params}
    order, seen, stack = [], {root}, [root]
    while stack:                                   # every node of the graph
        n = stack.pop()
        order.append(n)
        for c in _children(n):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    reach: dict = {}                               # node → can it reach the input?

    def reaches(n) -> bool:
        todo = [n]
        while todo:                                # iterative post-order: graphs are deep
            x = todo[-1]
            kids = [c for c in _children(x) if c not in reach]
            if kids and x is not inp_node:
                todo += kids
                continue
            todo.pop()
            reach[x] = x is inp_node or any(reach[c] for c in _children(x))
        return reach[n]

    reaches(root)
    groups = []
    for n in order:
        if not reach.get(n) or n is inp_node:
            continue
        mine, todo, visited = [], [c for c in _children(n) if not reach[c]], set()
        while todo:                                # side branches: they never reach the input
            x = todo.pop()
            if x in visited:
                continue
            visited.add(x)
            if x in acc:
                mine.append(acc[x])
            todo += _children(x)
        if mine:
            groups.append((n, mine))
    return groups


def backward_input(out: torch.Tensor, grad: torch.Tensor | None, inp: torch.Tensor,
                   params: Sequence[torch.nn.Parameter]) -> Pending:
    """B: set ``inp.grad`` (if ``inp`` requires grad) and return what ``backward_weight`` needs.
    ``grad`` is the gradient of ``out`` (None when ``out`` is the scalar loss)."""
    if not inp.requires_grad:
        return Pending(whole=(out, grad))
    pending = Pending(groups=_groups(out.grad_fn, get_gradient_edge(inp).node, params))
    hooks = []
    for n, _ in pending.groups:
        def keep(grad_outputs, n=n):
            pending.grads[n] = grad_outputs
        hooks.append(n.register_prehook(keep))
    try:
        (inp.grad,) = torch.autograd.grad(out, [inp], grad, retain_graph=True)
    finally:
        for h in hooks:
            h.remove()
    return pending


def _accumulate(params: Sequence[torch.nn.Parameter], grads: Sequence[torch.Tensor | None]) -> None:
    for q, g in zip(params, grads):
        if g is None:
            continue
        if q.grad is None:
            q.grad = g
        else:
            q.grad += g


def backward_weight(pending: Pending, params: Sequence[torch.nn.Parameter]) -> None:
    """W: add the weight gradients of one microbatch into ``param.grad`` (as a whole backward
    would have), then let the graph go."""
    if pending.whole is not None:
        out, grad = pending.whole
        _accumulate(params, torch.autograd.grad(out, list(params), grad, allow_unused=True))
        pending.whole = None
        return
    for i, (n, mine) in enumerate(pending.groups):
        saved = pending.grads.pop(n)
        edges = [(GradientEdge(n, k), g) for k, g in enumerate(saved) if g is not None]
        dw = torch.autograd.grad([e for e, _ in edges], [get_gradient_edge(q) for q in mine],
                                 [g for _, g in edges], retain_graph=i < len(pending.groups) - 1,
                                 allow_unused=True)
        _accumulate(mine, dw)
    pending.groups = []
