"""SWA indices and lens: vLLM 0.33.0's ``ComputeSWAIndicesAndLensKernel``, with a tile.

- :mod:`.launch`: ``compute_swa_indices_and_lens`` (vLLM's arguments plus the tile),
  ``warmup``, ``compile_count``, ``direct_launches``, ``interpreting``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation in plain torch, the specification;
- :mod:`.testing`: seeded SWA steps with poisoned buffers, and comparisons.

Every name of :mod:`.launch` is available here too (``swa.warmup(...)``), loaded on
first use: importing this package loads neither torch nor triton.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="compute_swa_indices_and_lens")
__getattr__ = lazy_package(__name__)
