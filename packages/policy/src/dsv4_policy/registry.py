"""Every kernel whose launches the policy decides, in one place.

Each kernel module (:mod:`dsv4_policy.c128a`, :mod:`dsv4_policy.swa`) states its key,
launch, baseline, table file and compile keys as one
:class:`~dsv4_policy.launch_table.KernelSpec`; the command line, table detection and
the generic tests iterate over :data:`KERNELS`, so adding a kernel costs one module and
one table, not another copy of the machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from dsv4_policy import c128a, swa
from dsv4_policy.launch_table import KernelSpec

KERNELS: Mapping[str, KernelSpec] = MappingProxyType({k.name: k for k in (c128a.KERNEL,
                                                                             swa.KERNEL)})
"""Registered kernels by name, in registration order (C128A first)."""


def get(name: str) -> KernelSpec:
    """The registered kernel ``name``; ValueError listing the registered names otherwise."""
    spec = KERNELS.get(name)
    if spec is None:
        raise ValueError(f"unknown kernel {name!r}; registered: {', '.join(KERNELS)}")
    return spec


def names() -> tuple[str, ...]:
    """The registered kernel names, C128A first."""
    return tuple(KERNELS)


__all__ = ["KERNELS", "KernelSpec", "get", "names"]
