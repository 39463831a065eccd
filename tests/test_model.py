"""The tiny GPT: shapes, determinism, causality, and the two attention implementations agreeing."""
import pytest
import torch

from course_lib.model import GPT, GPTConfig


def test_forward_shapes_and_loss():
    cfg = GPTConfig()
    m = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len), generator=torch.Generator().manual_seed(1))
    logits, loss = m(idx, targets)
    assert logits.shape == (3, cfg.seq_len, cfg.vocab_size)
    assert abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.1  # ~uniform at init


def test_init_is_deterministic_and_seed_dependent():
    a, b, c = GPT(GPTConfig(), seed=1), GPT(GPTConfig(), seed=1), GPT(GPTConfig(), seed=2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.attn.qkv.weight"], sc["blocks.0.attn.qkv.weight"])


@pytest.mark.parametrize("windows", [None, (4, None)])
def test_math_and_sdpa_attention_agree(windows):
    base = GPTConfig(windows=windows)
    m1, m2 = GPT(base.with_(attn="math")), GPT(base.with_(attn="sdpa"))
    idx = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(m1(idx), m2(idx), rtol=1e-5, atol=1e-5)


def test_outputs_are_causal():
    m = GPT(GPTConfig())
    idx = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(2))
    changed = idx.clone()
    changed[0, 40] = (changed[0, 40] + 1) % 256
    a, b = m(idx), m(changed)
    torch.testing.assert_close(a[:, :40], b[:, :40])
    assert not torch.allclose(a[:, 40:], b[:, 40:])


def test_param_counts_and_bad_config():
    m = GPT(GPTConfig(d_model=64, n_layers=2, vocab_size=256, seq_len=64))
    # tied: head shares the embedding; matmul params count it once more (it is multiplied anyway)
    # matmul params = all params - position table - vectors (+ the tied head, counted in both)
    vectors = sum(p.numel() for p in m.parameters() if p.dim() == 1)
    assert m.n_params() - m.matmul_params() == 64 * 64 + vectors
    with pytest.raises(ValueError, match="n_heads"):
        GPTConfig(d_model=64, n_heads=3)
    with pytest.raises(ValueError, match="attn"):
        GPTConfig(attn="flash")
    with pytest.raises(ValueError, match="seq_len"):
        m(torch.zeros(1, 65, dtype=torch.long))
