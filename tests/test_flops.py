"""Calculators of chapter 1: 6ND, days, GPUs, MFU/HFU, attention term, parameter counts, hardware."""
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib import flops, hardware

pos = st.floats(min_value=1e3, max_value=1e15, allow_nan=False)


def test_6nd_gpt3():
    # GPT-3: 175B params x 300B tokens = 3.15e23 FLOP (paper Table D.1: 3.14e23)
    assert flops.training_flops(175e9, 300e9) == pytest.approx(3.15e23)


def test_41_day_problem_and_its_wrong_variants():
    days = flops.training_days(34e9, 8e12, 1024, 0.45)
    assert days == pytest.approx(41.45, abs=0.01)
    # using the 2:4 sparsity peak halves the answer; PCIe is slower
    sparse_peak = hardware.get_accelerator("H100").sparse_flops["bf16"]
    assert sparse_peak == pytest.approx(1979e12)
    assert flops.training_days(34e9, 8e12, 1024, 0.45) / (6 * 34e9 * 8e12 / (1024 * sparse_peak * 0.45) / 86400) == pytest.approx(2, rel=0.001)
    assert flops.training_days(34e9, 8e12, 1024, 0.45, gpu="H100-PCIe") == pytest.approx(54.2, abs=0.1)


def test_gpus_needed_inverts_training_days():
    n = flops.gpus_needed(34e9, 8e12, 41.4474, 0.45)
    assert n == pytest.approx(1024, rel=1e-4)
    assert isinstance(n, float)


@given(n=pos, d=pos, g=st.integers(1, 100_000), u=st.floats(0.01, 1.0))
def test_days_scale_as_theory(n, d, g, u):
    base = flops.training_days(n, d, g, u)
    assert flops.training_days(2 * n, d, g, u) == pytest.approx(2 * base)
    assert flops.training_days(n, d, 2 * g, u) == pytest.approx(base / 2)
    assert flops.gpus_needed(n, d, base, u) == pytest.approx(g, rel=1e-9)


def test_mfu_and_hfu():
    # 7B model at 3,000 tokens/s/GPU on H100 SXM: 6*7e9*3000/989e12 = 12.7 %
    assert flops.mfu(7e9, 3000) == pytest.approx(6 * 7e9 * 3000 / 989e12)
    assert flops.mfu(7e9, 3000, recompute=True) / flops.mfu(7e9, 3000) == pytest.approx(8 / 6)


def test_attention_fraction_matches_factcheck():
    # L=32, d=4096, N=7e9, s=4096: causal 7.7 %, full 15.3 % (the seed's "4%" formula lacks d)
    assert flops.attention_fraction(32, 4096, 4096, 7e9) == pytest.approx(0.0767, abs=5e-4)
    assert flops.attention_fraction(32, 4096, 4096, 7e9, causal=False) == pytest.approx(0.1534, abs=5e-4)
    assert flops.attention_crossover(32, 4096, 7e9) == pytest.approx(53_405, rel=1e-3)
    assert flops.attention_crossover(32, 4096, 7e9, causal=False) == pytest.approx(26_703, rel=1e-3)


@given(s=st.integers(1, 10**6))
def test_fraction_is_one_at_crossover_and_monotone(s):
    x = flops.attention_crossover(32, 4096, 7e9)
    assert flops.attention_fraction(32, 4096, round(x), 7e9) == pytest.approx(1, rel=1e-4)
    assert flops.attention_fraction(32, 4096, s + 1, 7e9) > flops.attention_fraction(32, 4096, s, 7e9)


@pytest.mark.parametrize("name", list(flops.PUBLISHED_SHAPES))
def test_parameter_counter_reproduces_published_sizes(name):
    shape, published, _src = flops.PUBLISHED_SHAPES[name]
    assert flops.gpt_params(shape) == pytest.approx(published, rel=0.015)  # published sizes are rounded


def test_non_embedding_count_is_12_L_d2_for_gpt3():
    shape = flops.PUBLISHED_SHAPES["GPT-3 175B"][0]
    body = flops.gpt_params(shape, include_embeddings=False)
    assert body == pytest.approx(12 * 96 * 12288**2, rel=0.001)


@pytest.mark.parametrize("call, name", [
    (lambda: flops.training_flops(0, 1e9), "n_params"),
    (lambda: flops.training_flops(1e9, -5), "n_tokens"),
    (lambda: flops.training_flops(float("nan"), 1e9), "n_params"),
    (lambda: flops.training_days(1e9, 1e9, 0, 0.4), "n_gpus"),
    (lambda: flops.training_days(1e9, 1e9, 8, 45), "mfu"),
    (lambda: flops.training_days(1e9, 1e9, 8, 0.4, gpu="H1000"), "name"),
    (lambda: flops.gpus_needed(1e9, 1e9, 0, 0.4), "days"),
    (lambda: flops.mfu(1e9, -1), "tokens_per_second_per_gpu"),
    (lambda: flops.mfu(1e9, 1, dtype="fp4"), "dtype"),
    (lambda: flops.attention_fraction(0, 4096, 4096, 7e9), "n_layers"),
    (lambda: flops.attention_fraction(32, 4096, 0, 7e9), "seq_len"),
    (lambda: flops.attention_crossover(32, 4096.5, 7e9), "d_model"),
    (lambda: flops.training_flops("7B", 1e9), "n_params"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_hardware_table_is_complete_and_sourced():
    for name in ["H100-SXM", "H100", "H100-PCIe", "H800", "H200", "A100", "A100-40GB", "V100", "B200", "B300",
                 "MI250X", "MI300X", "TPUv4", "TPUv5e", "TPUv5p", "TPUv6e"]:
        acc = hardware.get_accelerator(name)
        assert acc.peak(acc.training_dtype) > 1e14 and acc.hbm_bytes > 1e10 and acc.source
        assert acc.link_bandwidth > 0 and acc.domain_size >= 2
        assert acc.nic_bits_per_s >= 100e9 and acc.nic_source        # the generation's NIC, cited
    # HBM as the datasheets mean it: "80 GB" on an H100 or A100 is 80 GiB (torch reports 85.0e9 total
    # on an H100 SXM: what the driver reserves comes off that, not off 80e9)
    for name, gib in (("H100-SXM", 80), ("A100", 80), ("A100-40GB", 40), ("V100", 32), ("MI300X", 192)):
        assert hardware.get_accelerator(name).hbm_bytes == gib * 2 ** 30
    assert hardware.get_accelerator("H100").hbm_bytes == pytest.approx(85.9e9, rel=1e-3)
    # the NIC follows the generation: HDR 200 Gb/s with A100, NDR 400 with H100, EDR 100 with V100
    assert [hardware.get_accelerator(g).nic_bits_per_s for g in ("V100", "A100", "H100")] == [100e9, 200e9, 400e9]
    assert hardware.get_accelerator("V100").training_dtype == "fp16"     # Volta has no BF16
    assert hardware.get_accelerator("H800").link_bandwidth == 200e9      # NVLink cut to 400 GB/s total
    assert hardware.get_accelerator("MI300X").peak("bf16") == 1307.4e12
    assert hardware.get_accelerator("h100").name == "H100-SXM"
    assert hardware.get_accelerator("H100").peak_flops["bf16"] == 989e12
    assert hardware.get_accelerator("B300").hbm_bytes == 288e9
    with pytest.raises(ValueError, match="unknown accelerator 'RTX9090'"):
        hardware.get_accelerator("RTX9090")


def test_cli_matches_library_and_reports_bad_input():
    exe = [sys.executable, "-m", "course_lib"]
    out = subprocess.run(exe + ["training_days", "--n-params", "34e9", "--n-tokens", "8e12",
                                "--n-gpus", "1024", "--mfu", "0.45", "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and math.isclose(float(out.stdout), 41.4474, rel_tol=1e-5)
    bad = subprocess.run(exe + ["training_days", "--n-params", "34e9", "--n-tokens", "8e12",
                                "--n-gpus", "1024", "--mfu", "45"], capture_output=True, text=True)
    assert bad.returncode == 2 and "mfu" in bad.stderr
    listing = subprocess.run(exe + ["list"], capture_output=True, text=True)
    assert "attention_crossover" in listing.stdout


def test_flop_counter_confirms_2n_6n_and_attention_terms():
    import torch

    from course_lib.flops.count import count_flops, theory_flops
    from course_lib.model import GPT, GPTConfig
    cfg = GPTConfig(seq_len=32, d_model=48, n_heads=3, n_layers=3)
    m = GPT(cfg)
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    for backward in (False, True):
        got = count_flops(m, idx, backward=backward)
        want = theory_flops(m.matmul_params(), 3, 48, 32, idx.numel(), backward=backward)
        assert got.dense == want.dense          # exactly 2N (forward) and 6N (training) per token
        assert got.attention == want.attention  # the explicit matmuls compute the full s x s matrix
    # fused SDPA on CPU counts 0 without a registered formula; with it the forward matches
    sd = GPT(cfg.with_(attn="sdpa"))
    assert count_flops(sd, idx, cpu_sdpa=False).attention == 0
    assert count_flops(sd, idx).attention == want.attention // 3
