"""Every kernel of dsv4-kernels by name: its launch, reference, warm-up and compile count.

A kernel is a subpackage ``dsv4_kernels/<name>/`` (``kernel.py``, ``launch.py``,
``checks.py``, ``reference.py``, ``testing.py``) whose ``__init__.py`` declares it::

    from dsv4_kernels.registry import Declaration, lazy_package

    KERNEL = Declaration(launch="build_c128a_topk_metadata")
    __getattr__ = lazy_package(__name__)

``launch`` names the host entry point in ``<name>/launch.py``; ``reference`` (default:
the same name) its plain-torch specification in ``<name>/reference.py``; ``launch.py``
also defines ``warmup(configs, device) -> int`` and ``compile_count() -> int``. The
``__init__.py`` imports no torch or triton, so :func:`names` (which imports every
subpackage to read its declaration) loads neither; :class:`Kernel` imports a kernel's
modules only when one of its functions is asked for. Upper layers (the vLLM plugin, the
bench layer) iterate over this registry instead of naming kernels, so adding a kernel is
adding its folder.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

PARTS = ("kernel", "launch", "checks", "reference", "testing")
"""The modules of every kernel package, by these names (see docs/LAYOUT.md)."""


class RegistryError(RuntimeError):
    """A kernel package declares itself wrongly (its ``KERNEL`` or a named function)."""


@dataclass(frozen=True)
class Declaration:
    """What a kernel package states about itself, as ``KERNEL`` in its ``__init__``."""

    launch: str
    """The host entry point's name in ``<name>/launch.py``."""
    reference: str | None = None
    """Its specification's name in ``<name>/reference.py``; None: the same as ``launch``."""


def lazy_package(package: str) -> Callable[[str], Any]:
    """A kernel package's module ``__getattr__``: its parts import on first use, and any
    other name comes from its ``launch`` module, so ``from dsv4_kernels import c128a;
    c128a.warmup(...)`` works while ``import dsv4_kernels.c128a`` loads no torch."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name in PARTS:
            return importlib.import_module(f"{package}.{name}")
        launch = importlib.import_module(f"{package}.launch")
        try:
            return getattr(launch, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r} (nor has "
                                 f"{package}.launch)") from None

    return __getattr__


@dataclass(frozen=True)
class Kernel:
    """One registered kernel; each function property imports the kernel's module first."""

    name: str
    package: str
    declaration: Declaration

    def module(self, part: str) -> ModuleType:
        """The kernel's ``part`` module (one of :data:`PARTS`), imported."""
        if part not in PARTS:
            raise ValueError(f"{part!r} is not a kernel module; expected one of "
                             f"{', '.join(PARTS)}")
        return importlib.import_module(f"{self.package}.{part}")

    def _function(self, part: str, name: str) -> Callable[..., Any]:
        found = getattr(self.module(part), name, None)
        if not callable(found):
            raise RegistryError(f"{self.package}: KERNEL names {name!r}, but "
                                f"{self.package}.{part} has no such function")
        return found  # type: ignore[no-any-return]

    @property
    def launch(self) -> Callable[..., Any]:
        """The host entry point: vLLM's arguments, plus the tile as keywords."""
        return self._function("launch", self.declaration.launch)

    @property
    def reference(self) -> Callable[..., Any]:
        """The plain-torch specification: the same arguments, without the tile."""
        return self._function("reference", self.declaration.reference or self.declaration.launch)

    @property
    def warmup(self) -> Callable[..., int]:
        """``warmup(configs, device) -> int``: compile every compile key given."""
        return self._function("launch", "warmup")

    @property
    def compile_count(self) -> Callable[[], int]:
        """``compile_count() -> int``: Triton compiles of this kernel so far."""
        return self._function("launch", "compile_count")


def declaration_of(module: ModuleType) -> Declaration | None:
    """The package's ``KERNEL`` (None when it has none: it is not a kernel), checked."""
    found = getattr(module, "__dict__", {}).get("KERNEL")
    if found is None:
        return None
    if not isinstance(found, Declaration):
        raise RegistryError(f"{module.__name__}.KERNEL must be a "
                            f"dsv4_kernels.registry.Declaration; got {type(found).__name__}")
    return found


def discover(package: str = "dsv4_kernels") -> Mapping[str, Kernel]:
    """Every subpackage of ``package`` that declares ``KERNEL``, by name, sorted."""
    root = importlib.import_module(package)
    found: dict[str, Kernel] = {}
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        name = f"{package}.{info.name}"
        declaration = declaration_of(importlib.import_module(name))
        if declaration is not None:
            found[info.name] = Kernel(info.name, name, declaration)
    return MappingProxyType(found)


@functools.cache
def kernels() -> Mapping[str, Kernel]:
    """The registered kernels of dsv4-kernels, found once per process."""
    return discover()


def names() -> tuple[str, ...]:
    """The registered kernel names, sorted; imports no torch."""
    return tuple(kernels())


def get(name: str) -> Kernel:
    """The kernel ``name``; ValueError listing the registered names otherwise."""
    found = kernels().get(name)
    if found is None:
        raise ValueError(f"unknown kernel {name!r}; registered: {', '.join(kernels())}")
    return found


__all__ = ["PARTS", "Declaration", "Kernel", "RegistryError", "declaration_of", "discover",
           "get", "kernels", "lazy_package", "names"]
