"""Every vLLM object the plugin replaces, found in :mod:`dsv4_vllm.kernels`.

Each module ``dsv4_vllm/kernels/<name>.py`` describes one kernel's vLLM target as a
:class:`Target` named ``TARGET``: which module global it replaces, what that object
must look like, the stand-in that replaces it, and the metadata builder whose
``__init__`` triggers the start-up warm-up. :mod:`dsv4_vllm.plugin` loops over
:func:`targets`, so adding a kernel costs one module here and nothing else in the
package names it.

Discovery imports the kernel modules (torch, ``dsv4_kernels``, ``dsv4_policy``; never
vLLM), so the plugin asks for it only after its kill switch and version check. A
module there without a proper ``TARGET`` is an error naming it, rather than a kernel
that silently stays unpatched.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from dsv4_vllm.guard import Signature

if TYPE_CHECKING:
    from dsv4_vllm.dispatch import Dispatch


class RegistryError(RuntimeError):
    """A module of :mod:`dsv4_vllm.kernels` does not declare its target properly."""


@dataclass(frozen=True)
class Builder:
    """The vLLM metadata builder whose construction is the kernel's warm-up moment.

    vLLM builds it while it sets up the KV cache, after the model is loaded and before
    CUDA graphs are captured, and it knows the deployment facts the kernel's compile
    keys depend on: ``on_ready(dispatch, builder)`` reads them off the built builder
    and warms the stand-in.
    """

    cls: str
    """A class of :attr:`Target.module`."""
    on_ready: Callable[[Any, Any], None]
    init_parameters: tuple[str, ...] | None = None
    """When given, ``__init__`` must take exactly these (else a warning, and the
    warm-up happens on the first table hit)."""


@dataclass(frozen=True)
class Target:
    """One kernel's vLLM object and how the plugin replaces it."""

    name: str
    """The kernel's registry name, the same in ``dsv4_policy`` and ``dsv4_kernels``."""
    label: str
    """How log lines name the kernel (``"C128A"``)."""
    module: str
    """The vLLM module that holds the object; imported by the plugin, lazily."""
    attribute: str
    """The module global replaced; vLLM looks it up on every call."""
    signature: Signature
    dispatch: type[Dispatch]
    """The stand-in, built as ``dispatch(original)``."""
    builder: Builder | None = None
    """``None``: the kernel's tiles are warmed on its first table hit, or as
    :attr:`warm_up` says."""
    aliases: tuple[str, ...] = ()
    """Other vLLM modules that hold the same object under the same name (they
    from-imported it, so rebinding :attr:`module` alone does not reach their calls).
    The plugin rebinds each one that still holds vLLM's object and restores it on
    unregister."""
    warm_up: str | None = None
    """How the stand-in warms its tiles at start-up when there is no :attr:`builder` to
    hook (the words of the log line); ``None``: on the first table hit."""

    @property
    def where(self) -> str:
        return f"{self.module}.{self.attribute}"

    @property
    def holders(self) -> tuple[str, ...]:
        """Every module the plugin rebinds: :attr:`module`, then :attr:`aliases`."""
        return (self.module, *self.aliases)


def discover(package: ModuleType | None = None) -> Mapping[str, Target]:
    """Import every module of ``package`` (:mod:`dsv4_vllm.kernels`) and map each
    name to its ``TARGET``, by name."""
    if package is None:
        package = importlib.import_module("dsv4_vllm.kernels")
    found: dict[str, Target] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        target = getattr(module, "TARGET", None)
        if not isinstance(target, Target):
            raise RegistryError(
                f"{module.__name__} is in {package.__name__} but does not define "
                f"TARGET = Target(...) (found {type(target).__name__}); every module there "
                "is one kernel's vLLM target")
        if target.name != info.name:
            raise RegistryError(f"{module.__name__}: TARGET.name is {target.name!r}; it must "
                                f"be the module's own name, {info.name!r}")
        found[target.name] = target
    return MappingProxyType(found)


@functools.cache
def targets() -> Mapping[str, Target]:
    """The registered targets by name (discovered once per process)."""
    return discover()


def get(name: str) -> Target:
    """The registered target ``name``; ValueError naming the registered ones otherwise."""
    found = targets().get(name)
    if found is None:
        raise ValueError(f"unknown kernel {name!r}; registered: {', '.join(targets())}")
    return found
