"""The compressed slot mapping of DeepSeek-V4's compressed KV caches (C4A, C128A, indexer).

For every token of a step, the cache slot its compressed state is written to, or -1:
vLLM 0.33.0's ``get_compressed_slot_mapping`` and its ``CompressedSlotMappingKernel``,
with a tile chosen by the caller and the buffer's -1 fill in the same launch.

- :mod:`.launch`: the host entry points (vLLM's arguments), ``warmup``, ``compile_count``;
- :mod:`.kernel`: the Triton kernel; :mod:`.checks`: the argument checks;
- :mod:`.reference`: the same computation in plain torch, the specification;
- :mod:`.testing`: seeded steps with poisoned buffers, and comparisons.

Submodules are imported on demand, so importing this package loads neither torch nor
triton.
"""

__all__ = ["checks", "kernel", "launch", "reference", "testing"]
