"""The course corpus: real English text that ships with Python, as a byte-level token stream.

Every chapter that trains the tiny GPT (scaling laws, data pipelines, distillation, stability)
needs text that is real, licensed, offline and identical on every machine. Python itself ships
one: ``pydoc_data.topics.topics``, the reference-manual sections behind ``help("topic")``
(about 0.47 MB of English prose and code examples, PSF licence). No download, no tokenizer
training: the tokens are the UTF-8 bytes (ids 0–255, so ``vocab_size=256``).

The split is fixed and deterministic: the byte stream is cut into blocks of ``block_bytes``
(4096) and every 10th block (index 9, 19, …) is validation, the rest training. Interleaving
blocks (rather than holding out the tail) keeps both splits representative of all topics
while still keeping each validation block unseen as a whole.

Usage::

    from course_lib import corpus
    split = corpus.load()                       # .train / .val: uint8 tensors, .sha256
    x, y = corpus.get_batch(split.train, batch_size=16, seq_len=64,
                            generator=torch.Generator().manual_seed(0))

The text depends on the Python release (``pydoc_data`` is regenerated for each one); ``load()``
reports a SHA-256 fingerprint so cached results can say exactly which corpus they used.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass

import torch

from ._validate import positive_int

__all__ = ["VOCAB_SIZE", "CorpusSplit", "text", "token_bytes", "load", "get_batch", "decode",
           "bpe_bytes_per_token"]

VOCAB_SIZE = 256
SEPARATOR = "\n\n"


def text() -> str:
    """The corpus as one string: every pydoc topic in sorted-key order, separated by a blank line."""
    from pydoc_data.topics import topics
    return SEPARATOR.join(topics[k].strip() for k in sorted(topics))


def token_bytes() -> bytes:
    """The corpus as UTF-8 bytes: the byte-level token ids."""
    return text().encode("utf-8")


@dataclass(frozen=True)
class CorpusSplit:
    """A fixed train/validation split of the corpus (uint8 token tensors) and its provenance."""

    train: torch.Tensor
    val: torch.Tensor
    sha256: str
    python: str
    block_bytes: int
    val_every: int

    @property
    def n_tokens(self) -> int:
        return int(self.train.numel() + self.val.numel())

    def describe(self) -> dict:
        """JSON-friendly provenance: what a cached result should record about its data."""
        return {"source": "pydoc_data.topics (Python documentation topics, PSF licence)",
                "python": self.python, "sha256": self.sha256, "n_tokens": self.n_tokens,
                "train_tokens": int(self.train.numel()), "val_tokens": int(self.val.numel()),
                "block_bytes": self.block_bytes, "val_every": self.val_every, "vocab_size": VOCAB_SIZE}


def load(block_bytes: int = 4096, val_every: int = 10) -> CorpusSplit:
    """Load the corpus and split it: block ``i`` (of ``block_bytes`` bytes) is validation when
    ``i % val_every == val_every - 1``, training otherwise. Deterministic; no randomness involved."""
    block_bytes = positive_int("block_bytes", block_bytes, minimum=2)
    val_every = positive_int("val_every", val_every, minimum=2)
    raw = token_bytes()
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    n_blocks = -(-data.numel() // block_bytes)
    is_val = (torch.arange(n_blocks) % val_every) == val_every - 1
    mask = is_val.repeat_interleave(block_bytes)[: data.numel()]
    return CorpusSplit(train=data[~mask].clone(), val=data[mask].clone(),
                       sha256=hashlib.sha256(raw).hexdigest(),
                       python=".".join(map(str, sys.version_info[:3])),
                       block_bytes=block_bytes, val_every=val_every)


def get_batch(data: torch.Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of ``batch_size`` windows of ``seq_len`` tokens and their next-token targets.

    Window starts are drawn uniformly from ``generator`` (pass a seeded ``torch.Generator``: the
    same seed gives the same batches on every machine). Returns int64 ``(x, y)`` of shape
    ``(batch_size, seq_len)`` with ``y`` shifted by one token.
    """
    batch_size = positive_int("batch_size", batch_size)
    seq_len = positive_int("seq_len", seq_len)
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D token tensor, got shape {tuple(data.shape)}")
    if data.numel() < seq_len + 2:
        raise ValueError(f"seq_len={seq_len} is too long for data of {data.numel()} tokens")
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(seq_len + 1)[None, :]
    window = data[idx].long()
    return window[:, :-1], window[:, 1:]


def decode(ids: torch.Tensor | list[int]) -> str:
    """Byte ids back to text (invalid UTF-8 sequences replaced), for printing samples."""
    values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return bytes(int(v) for v in values).decode("utf-8", errors="replace")


def bpe_bytes_per_token(vocab_size: int = 4096, split: CorpusSplit | None = None) -> float:
    """Bytes per token of a byte-level BPE tokenizer (HuggingFace ``tokenizers``) trained on the
    training split with ``vocab_size`` entries, measured on the validation split.

    Our models predict bytes; published scaling laws count subword tokens. This ratio converts
    one into the other (a nat per token is this many times a nat per byte's worth of text).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    vocab_size = positive_int("vocab_size", vocab_size, minimum=VOCAB_SIZE + 1)
    split = split if split is not None else load()
    train_text = decode(split.train)
    val_bytes = bytes(split.val.tolist())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([train_text[i: i + 10_000] for i in range(0, len(train_text), 10_000)], trainer)
    n_tokens = len(tok.encode(val_bytes.decode("utf-8", errors="replace")).ids)
    return len(val_bytes) / n_tokens
