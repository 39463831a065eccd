"""Stage 4: a byte-level BPE tokenizer trained here with Hugging Face ``tokenizers``.

Byte-level BPE (GPT-2's scheme; BPE for text from Sennrich et al., arXiv 1508.07909) starts from
the 256 byte values, so *any* string can be encoded and nothing is ever "unknown", then merges
the most frequent adjacent pair again and again until the vocabulary has ``vocab_size`` entries.
One special token, ``EOS`` (``<|endoftext|>``), separates documents when they are packed.

Encoding is a pure function of (tokenizer, text), so it runs in any number of processes; the
tokenizer travels between them as its JSON string (``tok.to_str()``). ``encode_texts`` encodes
one document at a time on purpose: ``encode_batch`` would start Rust threads of its own and
muddle the process-level speed-up that the lab measures.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .._validate import positive_int

__all__ = ["EOS", "train_bpe", "eos_id", "encode_texts", "encode_chunk", "bytes_per_token",
           "token_dtype"]

EOS = "<|endoftext|>"


def train_bpe(texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2):
    """Train a byte-level BPE on ``texts``; returns a ``tokenizers.Tokenizer`` whose id of ``EOS``
    is 0 and whose vocabulary has at most ``vocab_size`` entries (fewer if the text runs out of
    pairs seen ``min_frequency`` times). Deterministic for the same texts in the same order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    vocab_size = positive_int("vocab_size", vocab_size, minimum=258)
    min_frequency = positive_int("min_frequency", min_frequency)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def eos_id(tok) -> int:
    """The id of the end-of-document token."""
    i = tok.token_to_id(EOS)
    if i is None:
        raise ValueError(f"tokenizer has no {EOS!r} token")
    return int(i)


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id: uint16 up to 65,536 entries
    (GPT-2's 50,257 fits), uint32 beyond (Llama 3's 128,256 does not fit in 16 bits)."""
    vocab_size = positive_int("vocab_size", vocab_size)
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def encode_texts(tok, texts: Sequence[str]) -> list[np.ndarray]:
    """Token ids of each text (no EOS added), as arrays of ``token_dtype(vocab size)``."""
    dtype = token_dtype(tok.get_vocab_size())
    return [np.asarray(tok.encode(t).ids, dtype=dtype) for t in texts]


def encode_chunk(args: tuple[str, Sequence[str]]) -> list[np.ndarray]:
    """Process-pool worker: ``(tokenizer JSON, texts) -> encode_texts``. Module-level and pure, so
    it can be shipped to worker processes (or to Spark/Ray executors) unchanged."""
    from tokenizers import Tokenizer
    tok_json, texts = args
    return encode_texts(Tokenizer.from_str(tok_json), texts)


def bytes_per_token(tok, texts: Sequence[str]) -> float:
    """UTF-8 bytes per token of ``tok`` on ``texts``: how much the tokenizer compresses."""
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_tok = sum(len(a) for a in encode_texts(tok, texts))
    if n_tok == 0:
        raise ValueError("texts must contain at least one token")
    return n_bytes / n_tok
