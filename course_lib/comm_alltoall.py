"""Bytes of the two all-to-alls of chapter 14, beside the alternatives they replace.

* **Ulysses against the ring** (context parallelism over ``cp`` ranks). DeepSpeed-Ulysses (Jacobs et
  al. 2023, arXiv 2309.14509) trades the sequence split for a head split with all-to-alls: in the
  forward Q, K and V go out and the attention output O comes back, each all-to-all sending
  (p−1)/p of the rank's s/p tokens of that tensor. Q and O are d_model wide; K and V only
  d_model·n_kv/n_h under grouped-query attention. Ring attention (Liu et al. 2023, arXiv 2310.01889;
  ``comm.cp_bytes_per_layer``) passes only K and V round the ring, 2·(p−1)/p·s·d_kv. So Ulysses over
  the ring is (1 + n_h/n_kv)/p: 2/p for multi-head attention, 17/p for Llama 3 405B's 128 query and
  8 KV heads, which at p = 8 is about twice the ring's bytes. Ulysses gives each rank whole heads,
  so p is capped by the KV heads (unless K and V are replicated), and its all-to-alls sit on the
  critical path, while the ring's exchange can run under the attention of the block it already has.
* **Node-limited dispatch** (DeepSeek-V3, arXiv 2412.19437 §2.1.2 and §3.2.2): the copies of one
  token that cross between nodes in one dispatch, naive (one per chosen expert on another node),
  sent once per node and forwarded inside it (per-node deduplication), and node-limited (at most
  ``max_nodes`` nodes, deduplicated). The two savings are different things: deduplication saves
  bytes in expectation; the node limit adds a hard bound on the nodes, hence on the IB copies.

Imports only the core, like ``comm`` (whose ``ep_node_bytes`` counts the same dispatch in bytes).
"""
from __future__ import annotations

import math

from ._validate import calculator, flag, positive, positive_int

__all__ = ["ulysses_bytes_per_layer", "ring_kv_bytes_per_layer", "ulysses_over_ring", "ep_node_copies"]


def _check_heads(seq_len, micro_batch, d_model, n_heads, cp, kv_heads):
    s = positive_int("seq_len", seq_len)
    b = positive_int("micro_batch", micro_batch)
    d = positive_int("d_model", d_model)
    h = positive_int("n_heads", n_heads)
    p = positive_int("cp", cp)
    kv = h if kv_heads is None else positive_int("kv_heads", kv_heads)
    if d % h or h % kv:
        raise ValueError(f"n_heads ({n_heads!r}) must divide d_model ({d_model!r}), and kv_heads "
                         f"({kv_heads!r}) must divide n_heads")
    if s % p:
        raise ValueError(f"cp ({cp!r}) must divide seq_len ({seq_len!r}): each rank holds s/cp tokens")
    return s, b, d, h, p, kv


@calculator
def ulysses_bytes_per_layer(seq_len: int, micro_batch: int, d_model: int, n_heads: int, cp: int,
                            kv_heads: int | None = None, bytes_per_value: float = 2) -> float:
    """Bytes each rank sends per layer and microbatch in the *forward* of Ulysses over ``cp`` ranks:
    four all-to-alls (Q, K, V out, O back), (p−1)/p · s/p · b · (2·d + 2·d·n_kv/n_h) values.
    ``kv_heads`` None is multi-head attention. Each rank computes whole heads, so ``cp`` must divide
    the KV heads (more ranks than KV heads needs K and V replicated, which this does not model)."""
    s, b, d, h, p, kv = _check_heads(seq_len, micro_batch, d_model, n_heads, cp, kv_heads)
    v = positive("bytes_per_value", bytes_per_value)
    if kv % p:
        raise ValueError(f"cp ({cp!r}) must divide kv_heads ({kv}): Ulysses gives each rank whole "
                         "K/V heads, so its degree is capped by the KV heads unless they are replicated")
    width = 2 * d + 2 * d * kv / h
    return (p - 1) / p * (s / p) * b * width * v


@calculator
def ring_kv_bytes_per_layer(seq_len: int, micro_batch: int, d_model: int, n_heads: int, cp: int,
                            kv_heads: int | None = None, bytes_per_value: float = 2) -> float:
    """Bytes each rank sends per layer and microbatch in the *forward* of ring attention over ``cp``
    ranks with the same heads: K and V of width d·n_kv/n_h go round, 2·(p−1)/p·s·b·d_kv values
    (``comm.cp_bytes_per_layer`` with kv_dim = d·n_kv/n_h)."""
    s, b, d, h, p, kv = _check_heads(seq_len, micro_batch, d_model, n_heads, cp, kv_heads)
    v = positive("bytes_per_value", bytes_per_value)
    return 2 * (p - 1) / p * s * b * (d * kv / h) * v


@calculator
def ulysses_over_ring(n_heads: int, cp: int, kv_heads: int | None = None) -> float:
    """Ulysses' forward bytes over the ring's, (1 + n_h/n_kv)/p: 2/p for multi-head attention."""
    h = positive_int("n_heads", n_heads)
    p = positive_int("cp", cp)
    kv = h if kv_heads is None else positive_int("kv_heads", kv_heads)
    if h % kv:
        raise ValueError(f"kv_heads ({kv_heads!r}) must divide n_heads ({n_heads!r})")
    return (1 + h / kv) / p


@calculator
def ep_node_copies(top_k: int, n_experts: int, n_nodes: int, max_nodes: int | None = None,
                   per_node: bool = True) -> float:
    """Expected copies of one token that cross between nodes in one dispatch, its ``top_k`` experts
    drawn uniformly without repetition from ``n_experts`` spread evenly over ``n_nodes`` (the
    balanced expectation). ``per_node=False``: one copy per chosen expert on another node,
    k·(N−1)/N. ``per_node=True`` (sent once per node, forwarded inside it): each other node is hit
    with probability 1 − C(E−E/N, k)/C(E, k), so (N−1)·(1 − C(E−E/N, k)/C(E, k)). With
    ``max_nodes`` M (node-limited routing, deduplicated): the token visits M nodes, its own among
    them with chance M/N, so M·(N−1)/N, and never more than M. DeepSeek-V3 (k = 8, E = 256, N = 8,
    M = 4): 7 naive, 4.63 deduplicated, 3.5 node-limited."""
    k = positive_int("top_k", top_k)
    e = positive_int("n_experts", n_experts)
    n = positive_int("n_nodes", n_nodes)
    dedup = flag("per_node", per_node)
    if e % n or k > e:
        raise ValueError(f"n_nodes ({n_nodes!r}) must divide n_experts ({n_experts!r}), and top_k "
                         f"({top_k!r}) may not exceed n_experts")
    if max_nodes is not None:
        m = positive_int("max_nodes", max_nodes)
        if m > min(n, k) or not dedup:
            raise ValueError(f"max_nodes ({max_nodes!r}) must be at most n_nodes = {n} and top_k = {k}, "
                             "and node-limited routing sends once per node (per_node=True)")
        return m * (n - 1) / n
    if not dedup:
        return k * (n - 1) / n
    return (n - 1) * (1 - math.comb(e - e // n, k) / math.comb(e, k))
