"""Issue 43, items 1 and 2: the two all-to-alls of chapter 14 beside what they replace.

Ulysses against the ring under grouped-query attention (the 2/p of chapter 14 holds for multi-head
attention only: Llama 3 405B's 128 query and 8 KV heads give 17/p), and node-limited dispatch split
into its two savings (per-node deduplication, then the node limit: 7 -> 4.63 -> 3.5 IB copies)."""
from __future__ import annotations

import math

import pytest

from course_lib import comm
from course_lib.comm_alltoall import (ep_node_copies, ring_kv_bytes_per_layer, ulysses_bytes_per_layer,
                                      ulysses_over_ring)

L405 = dict(seq_len=8192, micro_batch=1, d_model=16384, n_heads=128, kv_heads=8)   # arXiv 2407.21783 Table 3


def test_ulysses_moves_two_over_p_of_the_ring_only_for_multi_head_attention():
    mha = dict(L405, kv_heads=None)
    for p in (2, 4, 8, 16):
        r = ulysses_bytes_per_layer(cp=p, **mha) / ring_kv_bytes_per_layer(cp=p, **mha)
        assert r == pytest.approx(2 / p, rel=1e-12) == ulysses_over_ring(128, p)
    for p in (2, 4, 8):        # GQA: Q and O stay full width, K and V shrink by n_kv/n_h
        r = ulysses_bytes_per_layer(cp=p, **L405) / ring_kv_bytes_per_layer(cp=p, **L405)
        assert r == pytest.approx(17 / p, rel=1e-12) == ulysses_over_ring(128, p, kv_heads=8)
    # at p = 8 Ulysses moves about twice the ring's bytes
    assert 2 < ulysses_over_ring(128, 8, kv_heads=8) < 2.2


def test_the_ring_counts_what_chapter_11s_calculator_counts_and_ulysses_its_four_all_to_alls():
    s, b, d, h, kv, p = 8192, 2, 16384, 128, 8, 8
    d_kv = d * kv // h
    assert ring_kv_bytes_per_layer(s, b, d, h, p, kv) == pytest.approx(comm.cp_bytes_per_layer(s, b, d_kv, p))
    # Q, K, V out and O back, (p-1)/p of the rank's s/p tokens each, 2 bytes a value
    assert ulysses_bytes_per_layer(s, b, d, h, p, kv) == pytest.approx((p - 1) / p * s / p * b * (2 * d + 2 * d_kv) * 2)


def test_ulysses_degree_is_capped_by_the_kv_heads_and_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"cp \(16\) must divide kv_heads \(8\).*replicated"):
        ulysses_bytes_per_layer(cp=16, **L405)
    ulysses_bytes_per_layer(cp=16, **dict(L405, kv_heads=None))      # 128 heads: fine
    with pytest.raises(ValueError, match="seq_len"):
        ring_kv_bytes_per_layer(8191, 1, 16384, 128, 8, 8)
    with pytest.raises(ValueError, match="kv_heads"):
        ulysses_over_ring(128, 8, kv_heads=0)
    with pytest.raises(ValueError, match="n_heads"):
        ring_kv_bytes_per_layer(8192, 1, 16384, 100, 4, 8)


def test_node_limited_routing_splits_into_dedup_and_the_limit():
    """DeepSeek-V3 (k = 8, 256 experts on 8 nodes, at most 4 nodes a token): naive dispatch 7 IB
    copies a token; sent once per node without a limit 7·(1 − C(224,8)/C(256,8)) ≈ 4.63; node-limited
    3.5. The 2× of naive over limited is mostly dedup; the limit itself saves ~1.3× in expectation."""
    naive = ep_node_copies(8, 256, 8, per_node=False)
    dedup = ep_node_copies(8, 256, 8)
    limited = ep_node_copies(8, 256, 8, max_nodes=4)
    assert naive == 7.0 and limited == 3.5
    assert dedup == pytest.approx(7 * (1 - math.comb(224, 8) / math.comb(256, 8)), rel=1e-12)
    assert dedup == pytest.approx(4.63, abs=0.005) and 1.3 < dedup / limited < 1.35
    # comm.ep_node_bytes counts the same copies in bytes (4 passes of d values)
    assert comm.ep_node_bytes(1, 1, 8, 64, 8, bytes_per_value=1)[1] / 4 == naive
    assert comm.ep_node_bytes(1, 1, 8, 64, 8, max_nodes=4, bytes_per_value=1)[1] / 4 == limited
    # and its docstring no longer credits the limit with the whole 2x
    assert "4.63" in comm.ep_node_bytes.__doc__ and "1.3" in comm.ep_node_bytes.__doc__
    # one node: nothing crosses; every node holds an expert of the token when k >= E
    assert ep_node_copies(8, 256, 1) == 0.0 and ep_node_copies(4, 4, 4) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="max_nodes"):
        ep_node_copies(8, 256, 8, max_nodes=9)
    with pytest.raises(ValueError, match="per_node"):
        ep_node_copies(8, 256, 8, max_nodes=4, per_node=False)
    with pytest.raises(ValueError, match="n_nodes"):
        ep_node_copies(8, 256, 7)
