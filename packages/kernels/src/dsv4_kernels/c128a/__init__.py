"""C128A top-k metadata: vLLM 0.33.0's ``build_c128a_topk_metadata``, launched with a tile.

- :mod:`.launch`: ``build_c128a_topk_metadata`` (vLLM's arguments plus the tile),
  ``prepare``, ``warmup``, ``compile_count``, ``direct_launches``, ``interpreting``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation in plain torch, the specification;
- :mod:`.testing`: seeded batches with poisoned buffers, and checks.

Every name of :mod:`.launch` is available here too (``c128a.warmup(...)``), loaded on
first use: importing this package loads neither torch nor triton.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="build_c128a_topk_metadata")
__getattr__ = lazy_package(__name__)
