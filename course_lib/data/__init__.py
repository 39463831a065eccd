"""The data pipeline of chapter 3: from a raw crawl to packed token shards that never starve a GPU.

Every stage is a pure function of its input (plus explicit parameters and seeds), so the same
code runs on one core, in a process pool (``parallel``), or inside a distributed data engine
(Ray Data, Apache Spark, Hugging Face datatrove) that maps it over partitions of a real crawl:

===============  ===================================================================
``crawl``        a synthetic crawl built from Python's own documentation, with ground truth
``page_makers``  how each kind of bad or duplicate page is made from a clean document
``dedup``        decoding, normalisation, exact dedup (content hashes), MinHash + LSH near-dedup,
                 precision/recall against the ground truth, the LSH S-curve
``quality``      Gopher-style heuristic quality rules and what each removes
``tokenize``     a byte-level BPE trained here with Hugging Face ``tokenizers``
``shards``       packing with EOS separators into fixed-length rows, atomic sharded binary files
                 with an index, a validator, and shard-size planning
``loader``       a deterministic, data-parallel, resumable streaming loader; the on-the-fly
                 alternative; step-time measurement and the tiny GPT trained from either
``parallel``     the process-pool map with an honest speed-up measurement, and the whole pipeline
===============  ===================================================================

Nothing in this package holds global state: sizes, seeds, directories and tokenizers are arguments.
"""
