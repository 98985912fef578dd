"""GPU architecture names ("sm90", ...) as the launch tables spell them."""

from __future__ import annotations

import torch


def arch_name(major: int, minor: int) -> str:
    """``(9, 0) -> "sm90"``, ``(8, 6) -> "sm86"``, ``(12, 0) -> "sm120"``."""
    if major < 0 or minor < 0:
        raise ValueError(
            f"arch_name: got compute capability ({major}, {minor}); expected "
            "non-negative (major, minor)"
        )
    return f"sm{major}{minor}"


class DeviceArch:
    """Resolve a tensor's device to its arch, caching one answer per device index.

    The wrapper asks on every metadata build, so the CUDA query runs once per
    device. A non-CUDA device has no arch: the answer is ``None`` and the caller
    falls back to vLLM's own path.
    """

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def __call__(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return None
        index = device.index
        if index is None:
            index = torch.cuda.current_device()
        arch = self._cache.get(index)
        if arch is None:
            arch = arch_name(*torch.cuda.get_device_capability(index))
            self._cache[index] = arch
        return arch


def detect_arch(index: int = 0) -> str:
    """The arch of local CUDA device ``index``; ``RuntimeError`` when there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA GPU is visible (torch.cuda.is_available() is False); name the "
            "arch instead, e.g. --gpu sm86"
        )
    return arch_name(*torch.cuda.get_device_capability(index))
