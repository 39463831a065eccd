"""The published runs the chapters compare the layout planner with (Llama 3 405B, Megatron-LM's
1T model), as planner inputs, and how those papers count MFU."""
from __future__ import annotations

from .._validate import positive_int

__all__ = ["llama3_405b", "megatron_1t", "MEGATRON_2021", "LLAMA3_TABLE4_MFU", "mfu_counting_attention"]


# Published shapes the chapter compares with (architecture from the papers).
def llama3_405b(seq_len: int = 8192) -> dict:
    """Llama 3 405B's shape and cluster (arXiv 2407.21783, Tables 3 and 4): 126 layers, d 16384,
    128 heads (8 KV heads), 16M-token batches on 16,384 H100s; published TP 8 · CP 1 · PP 16 · DP 128
    at 8K and TP 8 · CP 16 · PP 16 · DP 8 at 128K."""
    return dict(n_params=405e9, n_layers=126, d_model=16384, n_heads=128, kv_heads=8,
                seq_len=positive_int("seq_len", seq_len),
                global_batch_tokens=16 * 2 ** 20, n_gpus=16384, gpu="H100-SXM")


def megatron_1t() -> dict:
    """Megatron-LM's 1T model (arXiv 2104.04473, Table 1): 128 layers, d 25600, 160 heads, seq 2048,
    batch 3072 sequences on 3072 A100s (8 per node, 8 HDR 200 Gb/s NICs); published TP 8 · PP 64 · DP 6."""
    return dict(n_params=1008e9, n_layers=128, d_model=25600, n_heads=160, seq_len=2048,
                global_batch_tokens=3072 * 2048, n_gpus=3072, gpu="A100", nics_per_node=8,
                nic_bits_per_s=200e9)


# Llama 3 405B's BF16 MFU on 16,384 H100s (arXiv 2407.21783 Table 4): 41 % at 8K (TP 8 · CP 1 ·
# PP 16 · DP 128), 38 % at 128K (TP 8 · CP 16 · PP 16 · DP 8).
LLAMA3_TABLE4_MFU = {8192: 0.41, 131072: 0.38}


def mfu_counting_attention(mfu: float, n_params: float, n_layers: int, d_model: int, seq_len: int) -> float:
    """An MFU over 6Ψ FLOP per token (the planner's) restated as Megatron-LM and Llama 3 count it,
    with the causal attention-score FLOPs added: 3 · 2·L·s·h per token (forward and backward) on
    top of 6Ψ. Llama 3's 38 % at 128K needs them: without, it would mean ~63 % of the peak counting
    them, far above any published run."""
    return mfu * (1.0 + 3 * 2.0 * n_layers * seq_len * d_model / (6.0 * n_params))


# What Megatron-LM had in 2021 (arXiv 2104.04473): no FlashAttention, no context parallelism, no
# sharded optimizer, and neither sequence parallelism nor selective recomputation (both 2022,
# arXiv 2205.05198): activations were recomputed in full or not at all.
MEGATRON_2021 = dict(flash_attention=False, max_cp=1, max_zero=0, sequence_parallel=False,
                     selective_recompute=False)
