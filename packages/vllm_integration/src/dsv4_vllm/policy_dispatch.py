"""What every kernel's stand-in for a vLLM kernel shares.

A stand-in (:class:`~dsv4_vllm.dispatch.C128ADispatch`,
:class:`~dsv4_vllm.swa_dispatch.SWADispatch`) holds the policy table, the resolver, the
GPU-arch source, the warm-up, hit and miss counters, the set of warmed deployments and
a per-call-shape decision cache; :meth:`PolicyDispatch.configure` swaps any of them and
forgets the cached decisions. A kernel's own class adds only how it reads vLLM's call
and launches dsv4's kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

import torch

from dsv4_vllm.arch import DeviceArch

ArchOf = Callable[[torch.device], "str | None"]
_UNSET: Any = object()


def device_token(device: torch.device | str) -> str:
    """One spelling per device: ``cuda`` without an index means the current one."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


class PolicyDispatch:
    """The policy state of one stand-in. Subclasses set :attr:`policy` (the
    ``dsv4_policy`` kernel module whose ``resolve`` decides) and :attr:`default_warm`."""

    policy: ClassVar[ModuleType]
    default_warm: ClassVar[Callable[..., int]]

    def _init_policy(
        self,
        original: Any,
        *,
        table: Any,
        resolve: Callable[[Any], Any] | None,
        arch_of: ArchOf | None,
        warm: Callable[..., int],
        lazy_warmup: bool,
    ) -> None:
        self.original = original
        self.table = table
        self.arch_of: ArchOf = arch_of if arch_of is not None else DeviceArch()
        self._resolve = resolve if resolve is not None else self._shipped_resolve
        self._warm = warm
        self.lazy_warmup = lazy_warmup
        self.enabled = True
        self.hits = 0
        self.misses = 0
        self._warmed: set[tuple[Any, ...]] = set()
        self._decisions: dict[tuple[Any, ...], Any] = {}

    def _shipped_resolve(self, key: Any) -> Any:
        return self.policy.resolve(key, self.table)

    def configure(
        self,
        *,
        table: Any = _UNSET,
        resolve: Callable[[Any], Any] | None = _UNSET,
        arch_of: ArchOf | None = _UNSET,
        warm: Callable[..., int] | None = _UNSET,
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
