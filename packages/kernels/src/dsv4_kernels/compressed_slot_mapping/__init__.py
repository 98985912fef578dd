"""The compressed slot mapping of DeepSeek-V4's compressed KV caches (C4A, C128A, indexer).

For every token of a step, the cache slot its compressed state is written to, or -1:
vLLM 0.33.0's ``get_compressed_slot_mapping`` and its ``CompressedSlotMappingKernel``,
with a tile chosen by the caller and the buffer's -1 fill in the same launch.

- :mod:`.launch`: the host entry points (vLLM's arguments), ``warmup``, ``compile_count``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation in plain torch, the specification;
- :mod:`.testing`: seeded steps with poisoned buffers, and comparisons.

Every name of :mod:`.launch` is available here too (``compressed_slot_mapping.warmup``),
loaded on first use: importing this package loads neither torch nor triton, so
``dsv4_kernels.registry.names()`` stays cheap.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="get_compressed_slot_mapping")
__getattr__ = lazy_package(__name__)
