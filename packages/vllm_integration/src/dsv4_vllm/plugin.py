"""vLLM general plugin: apply the dsv4 launch policies (C128A, SWA) to DeepSeek-V4 metadata.

vLLM calls :func:`register` in every process it starts (API server, engine core,
workers), through the ``vllm.general_plugins`` entry point ``dsv4``. In order it:

1. honours the kill switch ``DSV4_POLICY`` (``0``/``off``/``false``: nothing is
   patched, one info line);
2. checks the installed vLLM is 0.33.x (else one warning, vLLM unchanged);
3. imports ``vllm.models.deepseek_v4.sparse_mla`` lazily and checks the signature of
   ``build_c128a_topk_metadata`` (else one warning, vLLM unchanged);
4. replaces that module global with a :class:`~dsv4_vllm.dispatch.C128ADispatch`
   and hooks the metadata builder's ``__init__`` for the start-up warm-up;
5. the same for SWA: checks the call signature of
   ``vllm.v1.attention.backends.mla.sparse_swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL``,
   replaces it with a :class:`~dsv4_vllm.swa_dispatch.SWADispatch` (everything else
   on vLLM's object, such as ``register_warmup``, still reaches vLLM's object) and
   hooks ``DeepseekSparseSWAMetadataBuilder.__init__``; one info line of the same
   form. The kill switch and the version check cover both.

It is idempotent: a second call in the same process changes nothing. Importing
this module is cheap (no torch, no vLLM); the heavy imports happen in
:func:`register`, after the kill switch and the version check.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from dsv4_vllm import guard
from dsv4_vllm._log import logger

if TYPE_CHECKING:
    from dsv4_vllm.dispatch import C128ADispatch
    from dsv4_vllm.swa_dispatch import SWADispatch

_LOCK = threading.Lock()


def installed_vllm_version() -> str:
    """``vllm.__version__`` as the installed package reports it."""
    import vllm

    return str(vllm.__version__)


def _target_module() -> ModuleType:
    return importlib.import_module(guard.TARGET_MODULE)


def active_dispatch() -> C128ADispatch | None:
    """The installed dispatcher, or ``None`` when vLLM's function is unpatched."""
    from dsv4_vllm.dispatch import C128ADispatch

    module = _target_module()
    current = getattr(module, guard.TARGET_FUNCTION, None)
    return current if isinstance(current, C128ADispatch) else None


def register(environ: Mapping[str, str] | None = None) -> bool:
    """Install the patch if allowed; return whether it is installed afterwards."""
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
        installed = _register_c128a(version)
        _register_swa(version)
        return installed


def _register_c128a(version: str) -> bool:
    """Patch ``build_c128a_topk_metadata``; whether it is patched afterwards."""
    try:
        module = _target_module()
    except ImportError as exc:
        logger.warning(
            "dsv4: cannot import %s (%s); vLLM runs unchanged", guard.TARGET_MODULE, exc
        )
        return False
    from dsv4_vllm.dispatch import C128ADispatch

    current = getattr(module, guard.TARGET_FUNCTION, None)
    if isinstance(current, C128ADispatch):
        logger.debug("dsv4: already registered in this process")
        return True
    reason = (
        f"{guard.TARGET_MODULE} has no {guard.TARGET_FUNCTION}"
        if current is None
        else guard.signature_reason(current)
    )
    if reason is not None:
        logger.warning("dsv4: %s; vLLM runs unchanged", reason)
        return False
    dispatch = C128ADispatch(current)
    setattr(module, guard.TARGET_FUNCTION, dispatch)
    warmup_note = _hook_warmup(module, dispatch)
    logger.info(
        "dsv4: C128A launch policy active on vLLM %s (%s.%s patched; %s; "
        "DSV4_POLICY=0 turns it off)",
        version,
        guard.TARGET_MODULE,
        guard.TARGET_FUNCTION,
        warmup_note,
    )
    return True


def _swa_module() -> ModuleType:
    return importlib.import_module(guard.SWA_TARGET_MODULE)


def active_swa_dispatch() -> SWADispatch | None:
    """The installed SWA dispatcher, or ``None`` when vLLM's object is unpatched."""
    from dsv4_vllm.swa_dispatch import SWADispatch

    current = getattr(_swa_module(), guard.SWA_TARGET_OBJECT, None)
    return current if isinstance(current, SWADispatch) else None


def _register_swa(version: str) -> bool:
    """Route ``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL`` through the SWA policy; whether it is."""
    where = f"{guard.SWA_TARGET_MODULE}.{guard.SWA_TARGET_OBJECT}"
    try:
        module = _swa_module()
    except ImportError as exc:
        logger.warning("dsv4: cannot import %s (%s); vLLM's SWA kernel runs unchanged",
                       guard.SWA_TARGET_MODULE, exc)
        return False
    from dsv4_vllm.swa_dispatch import SWADispatch

    current = getattr(module, guard.SWA_TARGET_OBJECT, None)
    if isinstance(current, SWADispatch):
        return True
    reason = f"{where} is missing" if current is None else guard.swa_signature_reason(current)
    if reason is not None:
        logger.warning("dsv4: %s; vLLM's SWA kernel runs unchanged", reason)
        return False
    dispatch = SWADispatch(current)
    setattr(module, guard.SWA_TARGET_OBJECT, dispatch)
    from dsv4_vllm.swa_hook import hook_swa_builder_init

    builder_cls = getattr(module, guard.SWA_BUILDER_CLASS, None)
    if isinstance(builder_cls, type):
        hook_swa_builder_init(builder_cls, dispatch)
        warmup_note = "warm-up at metadata-builder start-up"
    else:
        logger.warning("dsv4: %s has no class %s; SWA tiles will be warmed on the first "
                       "table hit", guard.SWA_TARGET_MODULE, guard.SWA_BUILDER_CLASS)
        warmup_note = "warm-up on first hit"
    logger.info(
        "dsv4: SWA launch policy active on vLLM %s (%s patched; %s; DSV4_POLICY=0 turns it "
        "off)", version, where, warmup_note,
    )
    return True


def _hook_warmup(module: ModuleType, dispatch: C128ADispatch) -> str:
    from dsv4_vllm.builder_hook import hook_builder_init

    builder_cls = getattr(module, guard.BUILDER_CLASS, None)
    if not isinstance(builder_cls, type):
        reason: str | None = f"{guard.TARGET_MODULE} has no class {guard.BUILDER_CLASS}"
    else:
        reason = guard.builder_init_reason(builder_cls.__init__)
    if reason is not None:
        logger.warning("dsv4: %s; tiles will be warmed on the first table hit", reason)
        return "warm-up on first hit"
    hook_builder_init(builder_cls, dispatch)  # type: ignore[arg-type]
    return "warm-up at metadata-builder start-up"


def unregister() -> bool:
    """Restore vLLM's function and builder; return whether anything was restored."""
    from dsv4_vllm.builder_hook import unhook_builder_init
    from dsv4_vllm.dispatch import C128ADispatch

    with _LOCK:
        module = _target_module()
        current = getattr(module, guard.TARGET_FUNCTION, None)
        builder_cls = getattr(module, guard.BUILDER_CLASS, None)
        if isinstance(builder_cls, type):
            unhook_builder_init(builder_cls)
        swa_restored = _unregister_swa()
        if not isinstance(current, C128ADispatch):
            return swa_restored
        setattr(module, guard.TARGET_FUNCTION, current.original)
        return True


def _unregister_swa() -> bool:
    from dsv4_vllm.swa_dispatch import SWADispatch
    from dsv4_vllm.swa_hook import unhook_swa_builder_init

    module = _swa_module()
    builder_cls = getattr(module, guard.SWA_BUILDER_CLASS, None)
    if isinstance(builder_cls, type):
        unhook_swa_builder_init(builder_cls)
    current = getattr(module, guard.SWA_TARGET_OBJECT, None)
    if not isinstance(current, SWADispatch):
        return False
    setattr(module, guard.SWA_TARGET_OBJECT, current.original)
    return True
