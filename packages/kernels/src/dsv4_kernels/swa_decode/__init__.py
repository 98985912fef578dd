"""The decode buffers of DeepSeek-V4's SWA metadata, in one launch.

For a decode-only causal step, what vLLM 0.33.0's ``DeepseekSparseSWAMetadataBuilder.build``
writes into its builder buffers: the validity mask ``is_valid_token[:S] = slot_mapping >=
0``, zeros in ``decode_swa_lens`` past the step's ``T`` tokens, and each token's window
of paged slot ids and its length (the SWA rows kernel, :mod:`dsv4_kernels.swa`). vLLM
runs that as two ATen ops and a Triton launch; here it is one launch, with a tile chosen
by the caller.

- :mod:`.launch`: ``build_swa_decode``, ``check`` / ``launch_checked``, ``warmup``,
  ``compile_count``, ``direct_launches``, ``interpreting``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation with vLLM's own ops, the specification;
- :mod:`.testing`: seeded decode steps with poisoned buffers, and comparisons.

Every name of :mod:`.launch` is available here too (``swa_decode.warmup``), loaded on
first use: importing this package loads neither torch nor triton, so
``dsv4_kernels.registry.names()`` stays cheap.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="build_swa_decode")
__getattr__ = lazy_package(__name__)
