"""What every kernel's stand-in for a vLLM object shares.

A stand-in (``dsv4_vllm/kernels/<name>.py``) replaces a vLLM module global: a table
hit runs dsv4's kernel with the policy's tile, and a miss calls vLLM's object with the
very same arguments, so that every key no table entry matches behaves exactly as
upstream. :class:`Dispatch` holds what all of them need for that: the policy table,
the resolver, the GPU-arch source, the warm-up, hit and miss counters, the warmed
deployments and a per-call-shape decision cache. A kernel's own class adds only how it
reads vLLM's call, which key it resolves and how it launches dsv4's kernel.

A warm-up is keyed by ``(arch, *deployment, device)``, where the deployment is the
facts the kernel's compile keys depend on (``deployment_fields``, e.g.
``("max_model_len",)``). A failed warm-up turns the stand-in off for the rest of the
process, so vLLM's own kernel serves every later call instead of a half-compiled table.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import ModuleType
from typing import Any, ClassVar, TypedDict

import torch

from dsv4_vllm._log import logger
from dsv4_vllm.arch import DeviceArch

ArchOf = Callable[[torch.device], "str | None"]
Warm = Callable[..., int]
_UNSET: Any = object()
CACHE_LIMIT = 4096
"""Decisions cached per stand-in before the cache starts over (a deployment has few)."""


class Options(TypedDict, total=False):
    """What a stand-in's constructor takes besides vLLM's object (tests inject these).

    ``table`` None is the shipped table; ``resolve``, ``arch_of`` and ``warm`` None are
    the policy's resolve, the device's arch and the kernel's :attr:`Dispatch.default_warm`;
    ``lazy_warmup`` False refuses a hit whose deployment was not warmed at start-up."""

    table: Any
    resolve: Callable[[Any], Any] | None
    arch_of: ArchOf | None
    warm: Warm | None
    lazy_warmup: bool


def device_token(device: torch.device | str) -> str:
    """One spelling per device: ``cuda`` without an index means the current one."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


class Dispatch:
    """The policy state of one stand-in.

    Subclasses set :attr:`policy` (the ``dsv4_policy.kernels`` module whose ``resolve``
    decides), :attr:`label`, :attr:`deployment_fields` and :attr:`default_warm`
    (``warm(arch, *deployment, device, table=...) -> compiled``); a subclass that keeps
    state of its own extends ``__init__(original, **options)`` (:class:`Options`).
    """

    policy: ClassVar[ModuleType]
    label: ClassVar[str]
    deployment_fields: ClassVar[tuple[str, ...]]
    default_warm: ClassVar[Warm]

    def __init__(self, original: Any, **options: Any) -> None:
        unknown = sorted(options.keys() - Options.__annotations__.keys())
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected option(s) {unknown}; "
                            f"accepted: {sorted(Options.__annotations__)}")
        self._init_policy(original, table=options.get("table"),
                          resolve=options.get("resolve"), arch_of=options.get("arch_of"),
                          warm=options.get("warm"),
                          lazy_warmup=options.get("lazy_warmup", True))

    def _init_policy(
        self,
        original: Any,
        *,
        table: Any,
        resolve: Callable[[Any], Any] | None,
        arch_of: ArchOf | None,
        warm: Warm | None,
        lazy_warmup: bool,
    ) -> None:
        self.original = original
        self.table = table
        self.arch_of: ArchOf = arch_of if arch_of is not None else DeviceArch()
        self._resolve = resolve if resolve is not None else self._shipped_resolve
        self._warm = warm if warm is not None else type(self).default_warm
        self.lazy_warmup = lazy_warmup
        self.enabled = True
        self.hits = 0
        self.misses = 0
        self._warmed: set[tuple[Any, ...]] = set()
        self._decisions: dict[Hashable, Any] = {}

    def _shipped_resolve(self, key: Any) -> Any:
        return self.policy.resolve(key, self.table)

    def configure(
        self,
        *,
        table: Any = _UNSET,
        resolve: Callable[[Any], Any] | None = _UNSET,
        arch_of: ArchOf | None = _UNSET,
        warm: Warm | None = _UNSET,
    ) -> None:
        """Swap the table, resolver, arch source or warm-up (``None``: the default)."""
        if table is not _UNSET:
            self.table = table
        if resolve is not _UNSET:
            self._resolve = resolve if resolve is not None else self._shipped_resolve
        if arch_of is not _UNSET:
            self.arch_of = arch_of if arch_of is not None else DeviceArch()
        if warm is not _UNSET:
            self._warm = warm if warm is not None else type(self).default_warm
        self._decisions.clear()

    # -- warm-up ------------------------------------------------------------------------

    def warmed(self, arch: str, deployment: tuple[Any, ...], device: torch.device) -> bool:
        """Whether ``(arch, *deployment)`` is already warm on ``device``."""
        return (arch, *deployment, device_token(device)) in self._warmed

    def warm_once(self, arch: str, deployment: tuple[Any, ...], device: torch.device) -> bool:
        """Warm ``(arch, *deployment)`` on ``device`` unless done; ``False`` if it failed."""
        token = (arch, *deployment, device_token(device))
        if token in self._warmed:
            return True
        try:
            self._warm(arch, *deployment, device, table=self.table)
        except Exception:
            facts = ", ".join(f"{n}={v}" for n, v in zip(self.deployment_fields, deployment,
                                                         strict=True))
            logger.warning(
                "dsv4 warm-up failed for %s, %s on %s; %s metadata falls back to vLLM's own "
                "kernel for the rest of this process", arch, facts, device, self.label,
                exc_info=True,
            )
            self.enabled = False
            return False
        self._warmed.add(token)
        return True

    def warm_lazily(self, tensor: torch.Tensor, arch: str, deployment: tuple[Any, ...]) -> bool:
        """A hit's warm-up when start-up did not do it; ``False`` if it failed.

        Skipped while a CUDA graph is being captured (nothing may be launched on the side
        then; the hit's own launch still compiles its tile if it must).
        """
        if not self.lazy_warmup or self.warmed(arch, deployment, tensor.device):
            return True
        if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
            return True
        return self.warm_once(arch, deployment, tensor.device)

    # -- decisions ----------------------------------------------------------------------

    def cached(self, shape: Hashable, decide: Callable[[], Any]) -> Any:
        """The decision for a call shape: from the cache, else ``decide()`` (and cached)."""
        decision = self._decisions.get(shape, _UNSET)
        if decision is _UNSET:
            decision = decide()
            if len(self._decisions) >= CACHE_LIMIT:
                self._decisions.clear()
            self._decisions[shape] = decision
        return decision

    def forget(self, shape: Hashable) -> None:
        """Send a call shape to vLLM's kernel from now on (dsv4's kernel refused it)."""
        self._decisions[shape] = None
