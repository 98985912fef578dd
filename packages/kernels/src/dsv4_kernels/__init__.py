"""dsv4-kernels: Triton kernels for DeepSeek-V4 metadata and their torch references.

- :mod:`dsv4_kernels.c128a`: the C128A top-k metadata kernel, launched with a tile.
- :mod:`dsv4_kernels.reference`: the same computation in plain torch; the specification.
- :mod:`dsv4_kernels.testing`: seeded batches with poisoned buffers, and checks.
- :mod:`dsv4_kernels.swa`: the SWA indices-and-lens kernel (vLLM 0.33.0's arguments),
  launched with a tile; :mod:`dsv4_kernels.swa_reference` its plain-torch
  specification; :mod:`dsv4_kernels.swa_testing` seeded SWA steps and checks.

Submodules are imported on demand, so importing this package loads neither torch
nor triton.
"""

__all__ = ["c128a", "reference", "swa", "swa_reference", "swa_testing", "testing"]
