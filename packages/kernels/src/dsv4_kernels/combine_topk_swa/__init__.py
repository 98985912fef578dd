"""CombineTopkSwaIndices: top-k and SWA indices for DeepSeek-V4's sparse prefill.

vLLM 0.33.0's ``combine_topk_swa_indices`` (``models/deepseek_v4/common/ops/
cache_utils.py``) fills its whole output with ``-1`` and then runs a fixed
``(num_reqs, 256)`` grid whatever the chunk's length; this kernel writes the same
buffers, bit for bit, in one launch (the fill included) on a grid that grows with the
chunk, with a caller's tile.

- :mod:`.launch`: :func:`~.launch.combine_topk_swa_indices` with vLLM 0.33.0's
  arguments plus a tile, ``prepare``, ``warmup``, ``compile_count``,
  ``direct_launches``, ``interpreting``.
- :mod:`.kernel`: the ``@triton.jit`` kernel; :mod:`.checks`: the argument checks.
- :mod:`.reference`: the plain-torch specification; :mod:`.testing`: seeded chunks
  with poisoned buffers, and comparisons.

Every name of :mod:`.launch` is available here too (``combine_topk_swa.warmup(...)``),
loaded on first use: importing this package loads neither torch nor triton.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="combine_topk_swa_indices")
__getattr__ = lazy_package(__name__)
