"""vLLM general plugin: apply every dsv4 launch policy to DeepSeek-V4's metadata kernels.

vLLM calls :func:`register` in every process it starts (API server, engine core,
workers), through the ``vllm.general_plugins`` entry point ``dsv4``. In order it:

1. honours the kill switch ``DSV4_POLICY`` (``0``/``off``/``false``: nothing is
   patched, one info line);
2. checks the installed vLLM is 0.33.x (else one warning, vLLM unchanged);
3. for every kernel of :mod:`dsv4_vllm.registry` (``dsv4_vllm/kernels/<name>.py``):
   imports the vLLM module that holds the kernel's object, lazily; checks the
   object's signature (else one warning, that kernel stays vLLM's); replaces the
   module global with the kernel's stand-in (everything else on vLLM's object still
   reaches vLLM's object), and so in every module of the target's ``aliases`` that
   still holds vLLM's object; hooks the kernel's metadata builder's ``__init__`` for the
   start-up warm-up; and logs one info line,
   ``dsv4: <kernel> launch policy active on vLLM <version> (<module>.<object> patched;
   <warm-up>; DSV4_POLICY=0 turns it off)``.

It is idempotent: a second call in the same process changes nothing. Importing this
module is cheap (no torch, no vLLM); the heavy imports happen in :func:`register`,
after the kill switch and the version check. No kernel is named here.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dsv4_vllm import guard
from dsv4_vllm._log import logger

if TYPE_CHECKING:
    from dsv4_vllm.dispatch import Dispatch
    from dsv4_vllm.registry import Target

_LOCK = threading.Lock()
FIRST_HIT = "warm-up on first hit"
AT_START_UP = "warm-up at metadata-builder start-up"


def installed_vllm_version() -> str:
    """``vllm.__version__`` as the installed package reports it."""
    import vllm

    return str(vllm.__version__)


def _import(module: str) -> ModuleType:
    return importlib.import_module(module)


def _targets() -> Mapping[str, Target]:
    from dsv4_vllm import registry

    return registry.targets()


def active(name: str) -> Dispatch | None:
    """Kernel ``name``'s installed stand-in, or ``None`` when vLLM's object is unpatched."""
    from dsv4_vllm import registry

    target = registry.get(name)
    current = getattr(_import(target.module), target.attribute, None)
    return current if isinstance(current, target.dispatch) else None


def register(environ: Mapping[str, str] | None = None) -> bool:
    """Install every registered patch that is allowed; whether all are installed."""
    environ = os.environ if environ is None else environ
    with _LOCK:
        reason = guard.switch_off_reason(environ)
        if reason is not None:
            logger.info("dsv4: %s; vLLM runs unchanged", reason)
            return False
        try:
            version = installed_vllm_version()
        except ImportError as exc:
            logger.warning("dsv4: vLLM cannot be imported (%s); nothing patched", exc)
            return False
        reason = guard.version_reason(version)
        if reason is not None:
            logger.warning("dsv4: %s; vLLM runs unchanged", reason)
            return False
        try:
            targets = _targets()
        except ImportError as exc:
            logger.warning("dsv4: the plugin's kernels cannot be imported (%s); vLLM runs "
                           "unchanged", exc)
            return False
        installed = [_register(target, version) for target in targets.values()]
        return all(installed)


def _register(target: Target, version: str) -> bool:
    """Patch one kernel's vLLM object; whether it is patched afterwards."""
    try:
        module = _import(target.module)
    except ImportError as exc:
        logger.warning("dsv4: cannot import %s (%s); vLLM's %s kernel runs unchanged",
                       target.module, exc, target.label)
        return False
    current = getattr(module, target.attribute, None)
    if isinstance(current, target.dispatch):
        logger.debug("dsv4: %s already registered in this process", target.label)
        _rebind_aliases(target, current.original, current)
        return True
    reason = (f"{target.module} has no {target.attribute}" if current is None
              else target.signature.reason(current, target.where))
    if reason is not None:
        logger.warning("dsv4: %s; vLLM's %s kernel runs unchanged", reason, target.label)
        return False
    dispatch = target.dispatch(current)
    setattr(module, target.attribute, dispatch)
    _rebind_aliases(target, current, dispatch)
    logger.info(
        "dsv4: %s launch policy active on vLLM %s (%s patched; %s; DSV4_POLICY=0 turns it "
        "off)", target.label, version, target.where, _hook_warmup(module, target, dispatch),
    )
    return True


def _rebind_aliases(target: Target, original: Any, dispatch: Any) -> None:
    """Rebind ``target.attribute`` in every alias module that still holds vLLM's object.

    A module that from-imported the object keeps its own reference, so its calls reach
    the stand-in only through its own global. One that cannot be imported has no call
    to reach (debug line); one holding anything else (another patch) is left alone.
    """
    for name in target.aliases:
        try:
            module = _import(name)
        except ImportError as exc:
            logger.debug("dsv4: %s cannot be imported (%s); nothing to rebind there", name,
                         exc)
            continue
        held = getattr(module, target.attribute, None)
        if held is original:
            setattr(module, target.attribute, dispatch)
        elif held is not dispatch:
            logger.warning("dsv4: %s.%s is not vLLM's object; left as it is, so its calls "
                           "skip the %s launch policy", name, target.attribute, target.label)


def _hook_warmup(module: ModuleType, target: Target, dispatch: Any) -> str:
    """Hook the kernel's builder for the start-up warm-up; how its tiles get warmed."""
    from dsv4_vllm import hook

    builder = target.builder
    if builder is None:
        return target.warm_up or FIRST_HIT
    builder_cls = getattr(module, builder.cls, None)
    if not isinstance(builder_cls, type):
        reason: str | None = f"{target.module} has no class {builder.cls}"
    elif builder.init_parameters is not None:
        reason = guard.builder_init_reason(builder_cls.__init__, f"{target.module}.{builder.cls}",
                                           builder.init_parameters)
    else:
        reason = None
    if reason is not None:
        logger.warning("dsv4: %s; %s tiles will be warmed on the first table hit", reason,
                       target.label)
        return FIRST_HIT
    on_ready = builder.on_ready
    hook.hook_init(builder_cls, hook.mark(target.name), lambda built: on_ready(dispatch, built),
                   target.label)
    return AT_START_UP


def unregister() -> bool:
    """Restore every vLLM object and builder; whether any object was restored."""
    with _LOCK:
        restored = [_unregister(target) for target in _targets().values()]
        return any(restored)


def _unregister(target: Target) -> bool:
    from dsv4_vllm import hook

    try:
        module = _import(target.module)
    except ImportError:
        return False
    if target.builder is not None:
        builder_cls = getattr(module, target.builder.cls, None)
        if isinstance(builder_cls, type):
            hook.unhook_init(builder_cls, hook.mark(target.name))
    for name in target.aliases:
        try:
            alias = _import(name)
        except ImportError:
            continue
        held = getattr(alias, target.attribute, None)
        if isinstance(held, target.dispatch):
            setattr(alias, target.attribute, held.original)
    current = getattr(module, target.attribute, None)
    if not isinstance(current, target.dispatch):
        return False
    setattr(module, target.attribute, current.original)
    return True
