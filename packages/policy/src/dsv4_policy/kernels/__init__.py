"""One module per kernel whose launches the policy decides.

A module here (``dsv4_policy/kernels/<name>.py``, with its table in
``dsv4_policy/tables/<name>.toml``) states that kernel's key, launch, tile, table
schema, baseline, resolver and compile keys, and exports them as
``KERNEL = KernelSpec(...)`` (:class:`dsv4_policy.launch_table.KernelSpec`).
:mod:`dsv4_policy.registry` finds every module of this package by itself, so adding a
kernel is adding its module and its table: no shared file names it.

This package imports none of its modules; importing one kernel costs only that kernel.
"""
