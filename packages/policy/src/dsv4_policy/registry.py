"""Every kernel whose launches the policy decides, found in :mod:`dsv4_policy.kernels`.

Each module of that package states its key, launch, baseline, table file and compile
keys as one :class:`~dsv4_policy.launch_table.KernelSpec` named ``KERNEL``. The command
line, table detection and the generic tests iterate over :data:`KERNELS`, so adding a
kernel costs one module and one table, and no file here or elsewhere names it.

Discovery runs once, at import: a module of the package that does not define
``KERNEL`` (or defines something else under that name) is an error naming the module,
rather than a kernel that silently goes missing from the checks.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType

from dsv4_policy import kernels as _package
from dsv4_policy.launch_table import KernelSpec

FIRST = "c128a"
"""The kernel listed first (the CLI's default ``keys --kernel``); the others follow by name."""


class RegistryError(RuntimeError):
    """A module of :mod:`dsv4_policy.kernels` does not declare its kernel properly."""


def spec_of(module: ModuleType) -> KernelSpec:
    """The module's ``KERNEL``, checked: a :class:`KernelSpec` named after the module,
    since that name is also its table's, its command's and its folder's in every layer."""
    spec = getattr(module, "KERNEL", None)
    if not isinstance(spec, KernelSpec):
        raise RegistryError(
            f"{module.__name__} is in dsv4_policy.kernels but does not define "
            f"KERNEL = KernelSpec(...) (found {type(spec).__name__}); every module there "
            f"is a kernel, see dsv4_policy.kernels")
    short = module.__name__.rpartition(".")[2]
    if spec.name != short:
        raise RegistryError(f"{module.__name__}: KERNEL.name is {spec.name!r}; it must be "
                            f"the module's own name, {short!r}")
    return spec


def module_names(package: ModuleType = _package) -> list[str]:
    """The kernel modules' short names, :data:`FIRST` first and then by name."""
    found = sorted(info.name for info in pkgutil.iter_modules(package.__path__)
                   if not info.name.startswith("_"))
    return sorted(found, key=lambda name: (name != FIRST, name))


def discover(package: ModuleType = _package,
             names: Iterable[str] | None = None) -> Mapping[str, KernelSpec]:
    """Import every kernel module of ``package`` and map each name to its ``KERNEL``."""
    specs: dict[str, KernelSpec] = {}
    for name in module_names(package) if names is None else names:
        spec = spec_of(importlib.import_module(f"{package.__name__}.{name}"))
        specs[spec.name] = spec
    return MappingProxyType(specs)


KERNELS: Mapping[str, KernelSpec] = discover()
"""Registered kernels by name: C128A first, then by name."""


def get(name: str) -> KernelSpec:
    """The registered kernel ``name``; ValueError listing the registered names otherwise."""
    spec = KERNELS.get(name)
    if spec is None:
        raise ValueError(f"unknown kernel {name!r}; registered: {', '.join(KERNELS)}")
    return spec


def names() -> tuple[str, ...]:
    """The registered kernel names, C128A first."""
    return tuple(KERNELS)


__all__ = ["FIRST", "KERNELS", "KernelSpec", "RegistryError", "discover", "get",
           "module_names", "names", "spec_of"]
