"""Targets whose vLLM object is a metadata builder's method, not a module global.

The plugin rebinds ``Target.attribute`` of ``Target.module``. When vLLM's object is a
method (``SomeMetadataBuilder.build``) there is no module global to rebind, so the target
module answers ``"<Class>.<method>"`` as vLLM's class attribute itself through a module
holder (:func:`hold`): reading it returns the class's own method, writing it sets the
class's attribute, deleting it is refused; ``"<Class>"`` answers vLLM's class. Both are
looked up when asked, so importing the target module imports no vLLM. The plugin's
patching, restoring, builder hook and kill switch then work on such a target as on every
other one, with no change to them.

The stand-in is a class attribute, so it binds as vLLM's method does
(:meth:`BuilderMethodDispatch.__get__`); an instance attribute set by a tool still wins
over it. :func:`readable` is the shared first check of the builder method's arguments.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any, Unpack

import torch

from dsv4_vllm.dispatch import Dispatch, Options


@dataclass(frozen=True)
class BuilderMethod:
    """vLLM's ``<builder_class>.<method>`` in the module ``vllm_module``."""

    vllm_module: str
    builder_class: str
    method: str = "build"

    @property
    def attribute(self) -> str:
        """What the plugin reads and rebinds: ``"<builder_class>.<method>"``."""
        return f"{self.builder_class}.{self.method}"

    def module(self) -> types.ModuleType:
        """vLLM's module (ImportError when it cannot be imported)."""
        return importlib.import_module(self.vllm_module)

    def cls(self) -> type:
        """vLLM's builder class (AttributeError when it cannot be had)."""
        try:
            module = self.module()
        except ImportError as exc:
            raise AttributeError(f"{self.vllm_module} cannot be imported ({exc})") from None
        found = getattr(module, self.builder_class, None)
        if not isinstance(found, type):
            raise AttributeError(f"{self.vllm_module} has no class {self.builder_class}")
        return found


def holder(spec: BuilderMethod) -> type[types.ModuleType]:
    """The module class that answers ``spec.attribute`` as vLLM's class attribute itself
    and ``spec.builder_class`` as vLLM's class."""
    attribute = spec.attribute

    class _Holder(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name == spec.builder_class:
                return spec.cls()
            if name == attribute:
                found = vars(spec.cls()).get(spec.method)
                if found is None:
                    raise AttributeError(f"{spec.vllm_module}.{spec.builder_class} defines "
                                         f"no {spec.method}")
                return found
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

        def __setattr__(self, name: str, value: Any) -> None:
            if name == attribute:
                setattr(spec.cls(), spec.method, value)
                return
            super().__setattr__(name, value)

        def __delattr__(self, name: str) -> None:
            if name == attribute:
                raise AttributeError(f"{attribute} is vLLM's method; it cannot be deleted here")
            super().__delattr__(name)

    _Holder.__doc__ = (f"A target module as the plugin reads and writes it: {attribute!r} is "
                       f"vLLM's class attribute itself, {spec.builder_class!r} vLLM's class.")
    return _Holder


def hold(module_name: str, spec: BuilderMethod) -> None:
    """Make the module ``module_name`` answer ``spec`` (:func:`holder`)."""
    sys.modules[module_name].__class__ = holder(spec)


def readable(args: tuple[Any, ...], kwargs: dict[str, Any], names: tuple[str, ...]) -> bool:
    """Whether a builder method's arguments after ``self`` (parameters ``names``, the
    first required) can be read for sure: no more positional arguments than ``names``,
    every keyword one of ``names`` not given positionally, and the first one given. When
    not, vLLM's method raises its own error."""
    if len(args) > len(names):
        return False
    for name in kwargs:
        try:
            index = names.index(name)
        except ValueError:
            return False
        if index < len(args):
            return False
    return bool(args) or names[0] in kwargs


class BuilderMethodDispatch(Dispatch):
    """A stand-in for a builder method: binds as a method, and remembers the (arch,
    device index) pairs known warm so the per-call warm-up check is one set lookup."""

    def __init__(self, original: Any, **options: Unpack[Options]) -> None:
        super().__init__(original, **options)
        # inspect.signature(dispatch) is vLLM's method's signature.
        self.__wrapped__ = original
        self._warm_known: set[tuple[str, int]] = set()
        """(arch, device index) pairs known warm: the per-call check is one set lookup."""

    def __get__(self, builder: Any, owner: type | None = None) -> Any:
        """A class attribute binds as vLLM's method does: ``builder.build`` is this
        stand-in with the builder as its first argument."""
        if builder is None:
            return self
        return types.MethodType(self, builder)

    def _ready(self, buffer: torch.Tensor, arch: str, index: int) -> bool:
        """:meth:`warm_lazily`, remembered once the device is known warm."""
        if (arch, index) in self._warm_known:
            return True
        if not self.warm_lazily(buffer, arch, ()):
            return False
        if self.warmed(arch, (), buffer.device):
            self._warm_known.add((arch, index))
        return True

    def configure(self, **changes: Any) -> None:
        super().configure(**changes)
        self._warm_known.clear()
