"""dsv4-kernels: Triton kernels for DeepSeek-V4 metadata and their torch references.

- :mod:`dsv4_kernels.c128a`: the C128A top-k metadata kernel, launched with a tile.
- :mod:`dsv4_kernels.reference`: the same computation in plain torch; the specification.
- :mod:`dsv4_kernels.testing`: seeded batches with poisoned buffers, and checks.

Submodules are imported on demand, so importing this package loads neither torch
nor triton.
"""

__all__ = ["c128a", "reference", "testing"]
