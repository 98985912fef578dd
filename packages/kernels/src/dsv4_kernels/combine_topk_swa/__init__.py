"""CombineTopkSwaIndices: top-k and SWA indices for DeepSeek-V4's sparse prefill.

- :mod:`.launch`: :func:`~.launch.combine_topk_swa_indices` with vLLM 0.33.0's
  arguments plus a tile, in one Triton launch (the ``-1`` fill included);
  ``warmup``, ``compile_count``, ``interpreting``.
- :mod:`.kernel`: the ``@triton.jit`` kernel; :mod:`.checks`: the argument checks.
- :mod:`.reference`: the plain-torch specification; :mod:`.testing`: seeded chunks
  with poisoned buffers, and comparisons.

Submodules are imported on demand, so importing this package loads neither torch nor
triton.
"""

__all__ = ["checks", "kernel", "launch", "reference", "testing"]
