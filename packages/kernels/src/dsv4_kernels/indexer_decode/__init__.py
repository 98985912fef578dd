"""The decode tensors of DeepSeek-V4's indexer metadata (the C4A layers' lightning indexer).

For a decode-only step, what vLLM 0.33.0's ``DeepseekV32IndexerMetadataBuilder.build``
writes into its builder buffers before it plans the paged MQA logits: every request's
query length (``decode_lens`` and ``per_req_decode_lens``), its compressed context
length ``seq_lens // compress_ratio`` (``expanded_seq_lens``), and zeros for the decode
tokens past the requests. vLLM runs that as five ATen ops; here it is one launch, with
a tile chosen by the caller.

- :mod:`.launch`: the host entry point, ``warmup``, ``compile_count``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation with vLLM's own torch ops, the specification;
- :mod:`.testing`: seeded steps with poisoned buffers, and comparisons.

Every name of :mod:`.launch` is available here too (``indexer_decode.warmup``), loaded on
first use: importing this package loads neither torch nor triton, so
``dsv4_kernels.registry.names()`` stays cheap.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="indexer_decode_metadata")
__getattr__ = lazy_package(__name__)
