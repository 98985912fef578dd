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

:class:`BuilderMethodDispatch` also holds the per-call path a decode-step stand-in shares
(:meth:`BuilderMethodDispatch.__call__`): a covered builder class, readable arguments, a
plan from host facts, a hit warm on its device, then the kernel's build or vLLM's method
with the very same arguments. A kernel's class adds how it reads the call
(``_arguments``), plans the step (``_plan``, deciding through
:meth:`BuilderMethodDispatch._decide`) and builds it (``_build``, checking through
:meth:`BuilderMethodDispatch._checked`); :func:`arch_warm_up` makes the warm-up of compile
keys that depend on the arch alone.
"""

from __future__ import annotations

import importlib
import sys
import time
import types
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Unpack

import torch

from dsv4_vllm._log import logger
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


def arch_warm_up(policy: types.ModuleType, kernels: types.ModuleType,
                 label: str) -> Callable[..., int]:
    """A kernel's ``warm_compile_keys(arch, device, *, table=None)`` when its compile keys
    depend on the arch alone: ``policy.compile_keys(table, arch)`` built with
    ``kernels.warmup`` (looked up when called), logged naming ``label``."""

    def warm_compile_keys(arch: str, device: torch.device | str, *,
                          table: Any = None) -> int:
        """Build every tile of ``compile_keys(table, arch)`` on ``device``; return how many
        binaries were new. Logs as every warm-up."""
        keys = sorted(policy.compile_keys(table, arch))
        started = time.perf_counter()
        compiled: int = kernels.warmup(keys, device) if keys else 0
        logger.info(
            "dsv4 warm-up: %d %s compile key(s) for %s on %s; %d compiled in %.2f s",
            len(keys), label, arch, device, compiled, time.perf_counter() - started,
        )
        return compiled

    return warm_compile_keys


class Decision(NamedTuple):
    """A table hit for one step shape: the tile and its warm-up key."""

    launch: Any
    tile: tuple[int, ...]
    arch: str


class BuilderMethodDispatch(Dispatch):
    """A stand-in for a builder method: binds as a method, and remembers the (arch,
    device index) pairs known warm so the per-call warm-up check is one set lookup.

    A subclass sets :attr:`step_label` and :attr:`warm_tensor` and defines
    ``_look_up()`` (vLLM's side: the covered builder classes first), ``_arguments(args,
    kwargs)`` (what the plan needs from the call after ``self``, or None), ``_plan(builder,
    state, call)`` (a plan with ``decision`` and ``shape``, the device index first, or
    None) and ``_build(builder, plan, state)`` (vLLM's result, or None when dsv4's checks
    refuse the step).

    ``resolve``, ``arch_of`` and ``warm`` are injectable so the decision can be tested
    without a GPU; ``table`` None is the shipped table.
    """

    deployment_fields: ClassVar[tuple[str, ...]] = ()
    step_label: ClassVar[str]
    """The step as the log names one it cannot read, e.g. ``"SWA decode"``."""
    warm_tensor: ClassVar[str]
    """The builder tensor whose device a hit's warm-up check reads."""

    def __init__(self, original: Any, **options: Unpack[Options]) -> None:
        super().__init__(original, **options)
        # inspect.signature(dispatch) is vLLM's method's signature.
        self.__wrapped__ = original
        self._warm_known: set[tuple[str, int]] = set()
        """(arch, device index) pairs known warm: the per-call check is one set lookup."""
        self._vllm_state: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.original!r})"

    def __get__(self, builder: Any, owner: type | None = None) -> Any:
        """A class attribute binds as vLLM's method does: ``builder.build`` is this
        stand-in with the builder as its first argument."""
        if builder is None:
            return self
        return types.MethodType(self, builder)

    def on_builder_ready(self, device: torch.device) -> None:
        """After vLLM built a covered builder: warm the arch's compile keys on its device."""
        arch = self.arch_of(device)
        if arch is None:
            return
        self.warm_once(arch, (), device)

    def covered(self) -> tuple[type, ...]:
        """The builder classes whose builds this stand-in may take over."""
        classes: tuple[type, ...] = self._vllm()[0]
        return classes

    def _vllm(self) -> tuple[Any, ...]:
        """vLLM's side (``_look_up()``, looked up once): the covered builder classes first."""
        if self._vllm_state is None:
            self._vllm_state = self._look_up()
        return self._vllm_state

    def _look_up(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _plan(self, builder: Any, state: tuple[Any, ...], call: Any) -> Any:
        raise NotImplementedError

    def _build(self, builder: Any, plan: Any, state: tuple[Any, ...]) -> Any:
        raise NotImplementedError

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

    # -- the decision -------------------------------------------------------------------

    def _decide(self, device: torch.device, key: Callable[..., Any], fields: tuple[Any, ...],
                facts: tuple[Any, ...] | None = None) -> Decision | None:
        """The table's hit for ``key(arch, *fields)`` on ``device``'s arch, or None: no
        arch, the baseline, or a key that could not be resolved (logged with the arch and
        ``facts``, ``fields`` when None)."""
        arch = self.arch_of(device)
        if arch is None:
            return None
        try:
            launch = self._resolve(key(arch, *fields))
        except Exception:
            logger.warning("dsv4: could not resolve an %s launch for %s; using vLLM's build",
                           self.label, (arch, *(fields if facts is None else facts)),
                           exc_info=True)
            return None
        if launch.source == "baseline":
            return None
        return Decision(launch, launch.compile_key(), arch)

    # -- the call -----------------------------------------------------------------------

    def __call__(self, builder: Any, *args: Any, **kwargs: Any) -> Any:
        if self.enabled:
            state = self._vllm()
            if type(builder) in state[0]:
                call = self._arguments(args, kwargs)
                plan = None
                if call is not None:
                    try:
                        plan = self._plan(builder, state, call)
                    except Exception:
                        # A builder or step this path does not know: vLLM's build decides.
                        logger.debug("dsv4: %s step not readable; vLLM's build",
                                     self.step_label, exc_info=True)
                        plan = None
                if plan is not None and self._ready(getattr(builder, self.warm_tensor),
                                                    plan.decision.arch, plan.shape[0]):
                    result = self._build(builder, plan, state)
                    if result is not None:
                        self.hits += 1
                        return result
        self.misses += 1
        return self.original(builder, *args, **kwargs)

    def _checked(self, kernels: types.ModuleType, name: str, shape: Hashable,
                 *args: Any) -> Any:
        """``kernels.check(*args)``, or None when the checks refuse the step (tensors on
        the CPU too, unless Triton's interpreter is on): before anything is written, and
        that step shape is vLLM's from now on."""
        try:
            checked = kernels.check(*args)
            if checked.cuda_index < 0 and not kernels.interpreting():
                raise ValueError(f"{name}: the step's tensors are on the CPU and Triton's "
                                 "interpreter is off")
        except ValueError:
            logger.warning("dsv4: the %s kernel refused a step vLLM built; this step shape "
                           "uses vLLM's build from now on", self.label, exc_info=True)
            self.forget(shape)
            return None
        return checked
