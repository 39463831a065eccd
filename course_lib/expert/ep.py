"""Expert parallelism: the experts of an MoE layer spread over ranks, tokens moved by all-to-all.

GShard (arXiv 2006.16668) and Switch (arXiv 2101.03961) place E experts on ``ep`` ranks, E/ep
each. Every rank keeps the router (a dense parameter) and feeds its *own* tokens: it routes them
with chapter 8's router (``course_lib.moe``), sends each kept (token, expert) pair to the rank that
owns the expert (the **dispatch** all-to-all), runs its local experts on what it received, and
sends the results back (the **combine** all-to-all), where they are weighted by the gates and
summed. In the backward pass the two exchanges run again, reversed (:class:`AllToAll`): four
all-to-alls per layer and microbatch.

Two buffer layouts:

* **capacity** (``capacity_factor`` set, as GShard and Switch): each expert has C slots per routing
  group; the buffer always holds E·G·C rows, empty slots zero, so shapes are static and no counts
  need exchanging. Rows padded are bytes sent for nothing.
* **dropless** (no capacity, as MegaBlocks, arXiv 2211.15841): exactly the kept pairs travel; the
  ranks first exchange how many rows each expert gets (a tiny ``all_to_all_splits``).

**Routing groups.** Each rank routes its own tokens. When a token's experts depend on that token
alone (token choice without capacity, DeepSeek-V3's dropless top-k, or any rule per sequence:
``group="sequence"``, the default) this is exactly what one process on the global batch decides. A
capacity or expert choice over ``group="batch"`` is different: there every token of the batch
competes for the slots, and on one rank only this rank's tokens are there. Real systems route per
device: GShard splits a batch into groups, one a device, and applies the capacity within each
(arXiv 2006.16668 §2.2, "local group dispatching"), and Switch's capacity (arXiv 2101.03961 §2.2,
eq. 3) is likewise the slots for the tokens a device routes, so a token's fate depends on which
device its neighbours sit on; DeepSeek-V3 drops no token (arXiv 2412.19437 §2.1.2, "No
Token-Dropping"), so for it the question does not arise. The layer makes the choice explicit
(``routing_group``): by default it refuses such a rule, ``routing_group=<the data-parallel group>``
all-gathers the router logits and routes the global batch exactly as one process would (the kept
pairs then travel in the dropless layout: a padded buffer would need the global capacity on every
rank), and ``routing_group="local"`` routes each rank's tokens alone, as GShard and Switch do, which
trains differently from one process.

Nothing is global: the layer is given the :class:`~course_lib.parallel.counting.CountingComm` of its
expert-parallel group (or a plain ProcessGroup). :func:`expert_parallel` turns every ``MoE`` of a
model into this layer; :func:`ep_groups` carves EP groups out of the data-parallel ranks and
:func:`reduce_gradients` all-reduces dense gradients over DP and expert gradients over the
expert-data-parallel group.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..moe import MoE, Routing, switch_aux_loss
from ..parallel.counting import CountingComm, as_comm
from .._validate import positive_int

__all__ = ["AllToAll", "all_to_all", "ExpertParallelMoE", "expert_parallel", "ep_groups",
           "reduce_gradients", "batch_dependent"]


class AllToAll(torch.autograd.Function):
    """``all_to_all_single`` inside autograd: the backward sends the gradient rows back the way
    they came (the same exchange with input and output splits swapped)."""

    @staticmethod
    def forward(ctx, x, comm, output_splits, input_splits):
        ctx.comm, ctx.splits = comm, (list(output_splits), list(input_splits))
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        comm.all_to_all_single(out, x.contiguous(), list(output_splits), list(input_splits))
        return out

    @staticmethod
    def backward(ctx, grad):
        output_splits, input_splits = ctx.splits
        gx = grad.new_empty((sum(input_splits),) + tuple(grad.shape[1:]))
        ctx.comm.all_to_all_single(gx, grad.contiguous(), input_splits, output_splits)
        return gx, None, None, None


def all_to_all(x: torch.Tensor, comm: CountingComm, output_splits: list[int],
               input_splits: list[int]) -> torch.Tensor:
    """Differentiable all-to-all of the rows of ``x`` (``input_splits[j]`` rows go to rank j)."""
    return AllToAll.apply(x, comm, output_splits, input_splits)


def batch_dependent(moe: MoE) -> str | None:
    """How ``moe``'s routing makes a token's experts depend on the other tokens of the batch (a
    description naming its arguments), or None when each sequence routes alone. A callable router
    is the caller's to judge: None."""
    if moe.group != "batch" or callable(moe.router_kind):
        return None
    if moe.router_kind == "expert":
        return f"router='expert' with group='batch' (capacity_factor={moe.capacity_factor!r})"
    if moe.capacity_factor is not None:
        return f"group='batch' with capacity_factor={moe.capacity_factor!r}"
    return None


class ExpertParallelMoE(nn.Module):
    """The expert-parallel twin of a :class:`course_lib.moe.MoE`: the same routing rule and, when
    every rank routes what one process would (see ``routing_group``), the same output.

    Built from ``moe`` (its parameters are copied): this rank keeps the router, the shared expert
    if any, and experts ``[r·E/ep, (r+1)·E/ep)`` where r is its rank in ``comm``'s group. Expert
    parameters carry ``p.expert = True`` (their gradients are reduced over the expert-data-parallel
    group, not over DP). ``forward(x) -> y`` with x, y (B, S, D) this rank's tokens; ``aux_loss``,
    ``routing`` and ``stats`` describe the call as in ``MoE`` (over this rank's tokens).

    ``routing_group`` matters when the rule routes the whole batch together (a capacity or expert
    choice with ``group="batch"``, see the module docstring): ``None`` refuses it (ValueError);
    a ProcessGroup or CountingComm over the ranks whose batches make one process's batch (the
    data-parallel group; the batch is theirs concatenated in its rank order) routes that global
    batch, exactly; ``"local"`` routes this rank's tokens alone, per-device routing as GShard and
    Switch do, which differs from one process. A callable router is given the global batch's logits
    only with a routing group; otherwise it sees this rank's.
    """

    route = MoE.route      # the routing rule reads only the attributes copied below

    def __init__(self, moe: MoE, comm, *, routing_group=None) -> None:
        super().__init__()
        if not isinstance(moe, MoE):
            raise ValueError(f"moe must be a course_lib.moe.MoE, got {type(moe).__name__}")
        if isinstance(routing_group, str) and routing_group != "local":
            raise ValueError(f"routing_group must be None, 'local' or a process group, got {routing_group!r}")
        rule = batch_dependent(moe)
        if rule is not None and routing_group is None:
            raise ValueError(
                f"{rule} routes every token of the batch together, and an expert-parallel rank holds only "
                f"its own tokens: routed alone they train differently from one process. Pass "
                f"routing_group=<the data-parallel group> to route the global batch exactly (the router "
                f"logits are all-gathered), or routing_group='local' for per-rank routing groups, as "
                f"GShard and Switch route per device")
        gather = routing_group not in (None, "local") and (rule is not None or callable(moe.router_kind))
        self.routing_comm = as_comm(routing_group) if gather else None
        self.comm = as_comm(comm)
        self.ep, self.rank = self.comm.world_size, self.comm.rank
        self.n_experts, self.top_k, self.d_model = moe.n_experts, moe.top_k, moe.d_model
        if self.n_experts % self.ep:
            raise ValueError(f"n_experts ({self.n_experts}) must be divisible by the expert-parallel "
                             f"degree ({self.ep}): every rank holds the same number of experts")
        for name in ("router_kind", "capacity_factor", "group", "priority", "capacity_tokens"):
            setattr(self, name, getattr(moe, name))
        self.local = self.n_experts // self.ep
        lo = self.rank * self.local
        self.router = copy.deepcopy(moe.router)
        self.up = nn.Parameter(moe.up.weight.detach()[lo:lo + self.local].clone())
        self.down = nn.Parameter(moe.down.weight.detach()[lo:lo + self.local].clone())
        self.up.expert = self.down.expert = True
        self.shared = copy.deepcopy(moe.shared)
        self.aux_loss = torch.zeros(())
        self.routing: Routing | None = None

    @property
    def stats(self) -> dict:
        return self.routing.stats() if self.routing is not None else {}

    def _experts(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Local expert l runs on the next ``counts[l]`` rows of ``rows`` (grouped by expert)."""
        parts = [F.gelu(chunk @ self.up[i]) @ self.down[i] for i, chunk in enumerate(rows.split(counts))]
        return torch.cat(parts) if parts else rows

    def _route(self, logits: torch.Tensor) -> Routing:
        """The routing rule on this rank's logits, or on the routing group's batch (the others'
        logits gathered, detached; this rank's own carry the gradient) cut to this rank's rows."""
        c = self.routing_comm
        if c is None:
            return self.route(logits)
        shape = torch.tensor(logits.shape)
        shapes = torch.zeros(c.world_size * 3, dtype=shape.dtype)
        c.all_gather(shapes, shape)
        shapes = [tuple(t.tolist()) for t in shapes.view(-1, 3)]
        if len(set(shapes)) > 1:
            raise ValueError(f"routing the global batch needs one (batch, seq_len, n_experts) shape on every "
                             f"rank of routing_group, got router logits of shapes {shapes} (rank order)")
        every = logits.new_empty(c.world_size * logits.numel())
        c.all_gather(every, logits.detach().reshape(-1).contiguous())
        parts = list(every.view(c.world_size, *logits.shape))
        parts[c.rank] = logits
        r = self.route(torch.cat(parts))
        rows = slice(c.rank * logits.size(0), (c.rank + 1) * logits.size(0))
        return Routing(r.kept[rows], r.combine[rows], r.assigned[rows], r.capacity)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        E = self.n_experts
        logits = self.router(x)
        r = self._route(logits)
        self.aux_loss = switch_aux_loss(logits, r.assigned)
        self.routing = Routing(r.kept, r.combine.detach(), r.assigned, r.capacity)
        flat = x.reshape(-1, D)
        kept = r.kept.reshape(-1, E)
        gates = r.combine.reshape(-1, E).to(x.dtype)
        tok, exp = kept.nonzero(as_tuple=True)
        order = exp.argsort(stable=True)                  # by expert, then token: the reference's order
        tok, exp = tok[order], exp[order]
        if r.capacity is None or self.routing_comm is not None:
            back = self._dropless(flat, tok, exp)
        else:
            back = self._padded(flat, tok, exp, kept, r.capacity, S if self.group == "sequence" else B * S)
        y = torch.zeros_like(flat).index_add(0, tok, back * gates[tok, exp, None])
        y = y.reshape(B, S, D)
        return y + self.shared(x) if self.shared is not None else y

    def _dropless(self, flat, tok, exp) -> torch.Tensor:
        """Exactly the kept pairs travel; per-expert counts are exchanged first."""
        E, L, ep = self.n_experts, self.local, self.ep
        counts = torch.bincount(exp, minlength=E)
        recv_counts = torch.empty_like(counts)
        self.comm.all_to_all_single(recv_counts, counts, kind="all_to_all_splits")
        send_splits = counts.view(ep, L).sum(1).tolist()
        recv_splits = recv_counts.view(ep, L).sum(1).tolist()
        recv = all_to_all(flat[tok], self.comm, recv_splits, send_splits)
        # recv rows: by source rank, then local expert, then the source's token order; group by
        # expert (stable, so each expert sees sources in rank order = the full batch's order)
        row_expert = torch.arange(L).repeat(ep).repeat_interleave(recv_counts)
        perm = row_expert.argsort(stable=True)
        out = self._experts(recv[perm], recv_counts.view(ep, L).sum(0).tolist())
        out = out[perm.argsort()]
        return all_to_all(out, self.comm, send_splits, recv_splits)

    def _padded(self, flat, tok, exp, kept, capacity: int, T: int) -> torch.Tensor:
        """Fixed buffers of E·G·C rows (C slots per expert and routing group of T tokens, zeros
        when unused)."""
        E, L, ep, D = self.n_experts, self.local, self.ep, flat.size(1)
        n = kept.size(0)
        G = n // T
        pos = (kept.reshape(G, T, E).long().cumsum(1) - 1).reshape(n, E)   # slot within (group, expert)
        slots = G * capacity
        row = exp * slots + (tok // T) * capacity + pos[tok, exp]
        send = flat.new_zeros(E * slots, D).index_copy(0, row, flat[tok])
        split = [L * slots] * ep
        recv = all_to_all(send, self.comm, split, split)
        grouped = recv.view(ep, L, slots, D).transpose(0, 1).reshape(L * ep * slots, D)
        out = self._experts(grouped, [ep * slots] * L)
        out = out.view(L, ep, slots, D).transpose(0, 1).reshape(ep * L * slots, D)
        return all_to_all(out, self.comm, split, split)[row]


def expert_parallel(model: nn.Module, comm, *, routing_group=None) -> nn.Module:
    """Replace, in place, every :class:`course_lib.moe.MoE` of ``model`` by its
    :class:`ExpertParallelMoE` over ``comm`` (the expert-parallel group) and ``routing_group`` (see
    there: None refuses a rule that routes the whole batch together); returns ``model``."""
    targets = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if isinstance(child, MoE)]
    if not targets:
        raise ValueError("model has no course_lib.moe.MoE layer to make expert-parallel")
    comm = as_comm(comm)
    if routing_group is not None and not isinstance(routing_group, str):
        routing_group = as_comm(routing_group)          # one comm shared by every layer
    for parent, name, child in targets:
        setattr(parent, name, ExpertParallelMoE(child, comm, routing_group=routing_group))
    return model


def ep_groups(world_size: int, ep: int, rank: int):
    """Carve expert-parallel groups out of ``world_size`` data-parallel ranks.

    EP group i is ranks [i·ep, (i+1)·ep) (neighbours: on a GPU box, one server's NVLink domain);
    the expert-data-parallel group of rank r is every rank holding the same experts, {r mod ep +
    j·ep}. Every rank must call this (``new_group`` is collective). Returns this rank's
    ``(ep_group, expert_dp_group)``. Each rank still feeds its own sequences: EP does not shrink
    the number of sequences the global batch needs (the DP batch floor stays world_size).
    """
    w, e = positive_int("world_size", world_size), positive_int("ep", ep)
    if w % e:
        raise ValueError(f"ep ({ep}) must divide world_size ({world_size})")
    ep_g, edp_g = None, None
    for i in range(w // e):
        g = dist.new_group(list(range(i * e, (i + 1) * e)))
        if i == rank // e:
            ep_g = g
    for j in range(e):
        g = dist.new_group(list(range(j, w, e)))
        if j == rank % e:
            edp_g = g
    return ep_g, edp_g


def _all_reduce(params: list[nn.Parameter], comm, world: int) -> None:
    """Sum the gradients of ``params`` over ``comm`` in one flat buffer, then divide by ``world``."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    pad = (-flat.numel()) % comm.world_size
    flat = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
    comm.all_reduce(flat)
    flat = flat / world
    i = 0
    for g in grads:
        g.copy_(flat[i:i + g.numel()].view_as(g))
        i += g.numel()


def _same_grads(named: list[tuple[str, nn.Parameter]], comm, kind: str) -> None:
    """Raise, on every rank alike, unless every rank of ``comm`` has the same parameters with a
    gradient: the flat buffers all-reduced next must match, or the collective aborts or hangs.
    A check of a few integers a parameter, sent with torch.distributed itself (uncounted)."""
    w, group, what = comm.world_size, comm.group, {"dense": "data-parallel", "expert": "expert-data-parallel"}[kind]
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(w)]
    dist.all_gather(counts, torch.tensor([len(named)]), group=group)
    counts = [int(c) for c in counts]
    if len(set(counts)) > 1:
        raise ValueError(f"reduce_gradients: the ranks of the {what} group hold different numbers of "
                         f"{kind} parameters, {counts} (rank order): every rank must pass the same model")
    have = torch.tensor([p.grad is not None for _, p in named], dtype=torch.uint8)
    every = [torch.empty_like(have) for _ in range(w)]
    dist.all_gather(every, have, group=group)
    flags = torch.stack(every)                                    # (ranks, parameters)
    bad = [f"{named[i][0]!r} has a gradient on rank(s) {flags[:, i].nonzero().flatten().tolist()} and none "
           f"on rank(s) {(flags[:, i] == 0).nonzero().flatten().tolist()}"
           for i in (flags.sum(0) % w).nonzero().flatten().tolist()]
    if bad:
        raise ValueError(f"reduce_gradients: in the {what} group, " + "; ".join(bad) + ": the all-reduce would "
                         "mix buffers of different sizes. Every rank must use every parameter in its backward "
                         "(or zero the gradient, p.grad = torch.zeros_like(p))")


def reduce_gradients(model: nn.Module, dp_comm, expert_dp_comm) -> None:
    """Average gradients as one process on the global batch would have them: dense parameters
    over every data-parallel rank (``dp_comm``), expert parameters (``p.expert``) over the ranks
    holding the same experts (``expert_dp_comm``) — each expert's gradient already holds the
    contributions of its whole EP group's tokens — both divided by the DP world size.

    First every rank checks that its peers have gradients for the same parameters (a parameter
    used on one rank only would make the all-reduce mix buffers of different sizes): ValueError
    naming the parameter and the ranks, on every rank, before the all-reduce."""
    dp, edp = as_comm(dp_comm), as_comm(expert_dp_comm)
    named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    dense = [(k, p) for k, p in named if not getattr(p, "expert", False)]
    expert = [(k, p) for k, p in named if getattr(p, "expert", False)]
    _same_grads(dense, dp, "dense")
    _same_grads(expert, edp, "expert")
    _all_reduce([p for _, p in dense], dp, dp.world_size)
    _all_reduce([p for _, p in expert], edp, dp.world_size)
