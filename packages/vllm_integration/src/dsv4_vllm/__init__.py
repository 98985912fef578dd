"""dsv4-vllm: the vLLM plugin and serve launcher that apply dsv4 launch policy.

* :mod:`dsv4_vllm.plugin` -- ``register()``, the ``vllm.general_plugins`` entry point.
* :mod:`dsv4_vllm.dispatch` -- the stand-in for vLLM's ``build_c128a_topk_metadata``.
* :mod:`dsv4_vllm.warmup` -- ``warm_compile_keys()``, compiling every table tile up front.
* :mod:`dsv4_vllm.serve` -- the ``dsv4-serve`` launcher.

Importing this package imports neither vLLM nor torch; the modules above do.
"""
