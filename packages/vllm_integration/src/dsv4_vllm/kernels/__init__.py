"""One module per kernel: the vLLM object it replaces and how (``TARGET``).

Every module here is a kernel; :mod:`dsv4_vllm.registry` finds them. A module exports
``TARGET = Target(...)`` named as itself, imports torch, ``dsv4_kernels`` and
``dsv4_policy`` freely, and vLLM never (the plugin imports vLLM's module by name).
"""
