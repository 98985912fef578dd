"""FusedInvRopeFP8Quant: inverse RoPE + block FP8 quantisation of DeepSeek-V4's attention output.

- :mod:`.launch`: :func:`~.launch.fused_inv_rope_fp8_quant` with vLLM 0.33.0's
  arguments plus a tile, :func:`~.launch.kernel_call` with the arguments of vLLM's kernel
  object (what the vLLM plugin replaces); ``warmup``, ``compile_count``, ``interpreting``.
- :mod:`.kernel`: the two ``@triton.jit`` bodies (head rows, block rows), which write the
  same bytes; a tile names one. :mod:`.checks`: the argument checks.
- :mod:`.reference`: the plain-torch specification; :mod:`.testing`: seeded attention
  outputs, real DeepSeek-V4 ``cos_sin_cache`` tables, poisoned buffers, comparisons.

Every name of :mod:`.launch` is available here too, loaded on first use: importing
this package loads neither torch nor triton.
"""

from dsv4_kernels.registry import Declaration, lazy_package

KERNEL = Declaration(launch="fused_inv_rope_fp8_quant")
__getattr__ = lazy_package(__name__)
