"""The bench layer: GPU timing, gates, tuners and the launch report, for every kernel.

It sits on top of every other package (it imports ``dsv4_policy``, ``dsv4_kernels``,
``dsv4_vllm`` and torch), so the rest of ``dsv4_evals`` never imports it, and a plain
``pip install ./packages/evals`` does not need it. Each kernel is one folder,
``dsv4_evals.bench.<name>`` (see :mod:`dsv4_evals.bench.registry`); the modules at this
level are shared by all of them. Importing this package imports nothing heavy.
"""
