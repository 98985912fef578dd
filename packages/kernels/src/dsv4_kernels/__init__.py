"""dsv4-kernels: Triton kernels for DeepSeek-V4 metadata and their torch references.

One subpackage per kernel, ``dsv4_kernels/<name>/`` (``kernel``, ``launch``, ``checks``,
``reference``, ``testing``), each declaring itself to :mod:`dsv4_kernels.registry`,
which maps every kernel's name to its launch, reference, warm-up and compile count.
:mod:`dsv4_kernels._direct_launch` is the launcher every kernel's ``launch`` shares.

Nothing is imported here, and a kernel package imports its torch modules on first use,
so importing this package (or listing the registry) loads neither torch nor triton.
"""
