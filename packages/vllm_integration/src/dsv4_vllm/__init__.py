"""dsv4-vllm: the vLLM plugin and serve launcher that apply dsv4 launch policy.

* :mod:`dsv4_vllm.plugin` -- ``register()``, the ``vllm.general_plugins`` entry point.
* :mod:`dsv4_vllm.registry` -- every kernel's vLLM target, from ``dsv4_vllm/kernels/``.
* :mod:`dsv4_vllm.kernels` -- one module per kernel: its vLLM object, signature,
  stand-in, builder hook and warm-up.
* :mod:`dsv4_vllm.dispatch`, :mod:`dsv4_vllm.hook`, :mod:`dsv4_vllm.guard` -- what
  every kernel's stand-in, warm-up hook and checks share.
* :mod:`dsv4_vllm.serve` -- the ``dsv4-serve`` launcher.

Importing this package imports neither vLLM nor torch; the modules above do.
"""
