"""Launch an already-compiled Triton binary without Triton's per-call binder.

Why: every ``kernel[grid](...)`` call runs Triton's generic launch path in Python (bind
and specialise every argument, hash a cache key, check used globals, build launch
metadata, look for scratch allocators) before it reaches the compiled C launcher. For
the C128A metadata kernel that is most of the host time of a model step (measured on
an H200 host: ~29 µs for a bare Triton launch against a GPU time of 2-20 µs), and it is
paid on every eager step.

After the first launch of a binary on a device, Triton has returned its compiled
kernel; this module keeps its C launcher, CUfunction and packed metadata and calls the
launcher directly with the same positional arguments Triton itself passes. The binary,
grid, stream and arguments are the same, so the launch is the same (and stays CUDA-graph
capturable: it is one ``cuLaunchKernelEx`` on the current stream).

Triton's own path is used instead whenever the shortcut could differ from it:
- the first launch of each (device, constexprs, num_warps), which also compiles;
- a binary that needs global or profile scratch memory (allocated per launch);
- launch hooks installed (profilers such as proton need Triton's launch metadata);
- a Triton other than 3.6, whose launcher layout was not checked here, and the CPU
  interpreter (``TRITON_INTERPRET=1``);
- ``DSV4_KERNELS_DIRECT_LAUNCH=0`` in the environment at import (an operator's switch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import triton

VERIFIED_TRITON = ((3, 6),)
"""Triton (major, minor) versions whose launcher argument layout this module follows."""


def _version() -> tuple[int, int]:
    parts = triton.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


_RUNTIME = getattr(getattr(triton, "knobs", None), "runtime", None)
_current_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else (
    torch.cuda.current_device)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_data_ptr = torch.Tensor.data_ptr
_SUPPORTED = (_version() in VERIFIED_TRITON and _RUNTIME is not None and _raw_stream is not None
              and os.environ.get("DSV4_KERNELS_DIRECT_LAUNCH", "1") != "0")


def _hooks_idle() -> bool:
    """No launch hook is installed (Triton's default hook chains, both empty)."""
    enter = _RUNTIME.launch_enter_hook  # type: ignore[union-attr]
    leave = _RUNTIME.launch_exit_hook  # type: ignore[union-attr]
    return (enter is None or not getattr(enter, "calls", True)) and (
        leave is None or not getattr(leave, "calls", True))


def _handle(compiled: Any) -> tuple | None:
    """``(launch, function, packed_metadata, cooperative, pdl)`` or None if ineligible."""
    try:
        runner = compiled.run  # loads the binary on first use
        launch = runner.launch
        if runner.global_scratch_size or runner.profile_scratch_size:
            return None
        return (launch, compiled.function, compiled.packed_metadata,
                runner.launch_cooperative_grid, runner.launch_pdl)
    except AttributeError:
        return None


class DirectLauncher:
    """Launches of one ``@triton.jit`` function, direct after each binary's first launch.

    ``constexpr_names`` are the kernel's constexpr parameters, in signature order,
    after every run-time parameter (the C launcher takes all parameters positionally).
    The first ``pointer_args`` arguments are tensors; a direct launch hands the launcher
    their addresses as ints, which it takes as they are, instead of asking each tensor
    for its ``data_ptr`` and the driver for its device address (the caller has already
    checked that every tensor is on the launch's CUDA device).
    """

    def __init__(self, kernel: Any, constexpr_names: Sequence[str],
                 pointer_args: int = 0) -> None:
        self.kernel = kernel
        self.names = tuple(constexpr_names)
        self.pointer_args = pointer_args
        self.enabled = _SUPPORTED and hasattr(kernel, "device_caches")
        self._ready: dict[tuple, tuple | None] = {}
        self.direct_launches = 0

    def __call__(self, device: torch.device, grid0: int, grid1: int, args: tuple,
                 constexprs: tuple, num_warps: int) -> None:
        index = device.index
        if index is not None and device.type == "cuda":
            if index != _current_device():
                with torch.cuda.device(device):
                    self._launch(index, grid0, grid1, args, constexprs, num_warps)
                return
            ready = self._ready.get((index, constexprs, num_warps))
            if ready is not None and _hooks_idle():
                launch, function, packed, cooperative, pdl = ready
                n = self.pointer_args
                try:
                    launch(grid0, grid1, 1, _raw_stream(index), function, cooperative, pdl,
                           None, None, packed, None, None, None, *map(_data_ptr, args[:n]),
                           *args[n:], *constexprs)
                except (OverflowError, TypeError):
                    # An argument the binary's signature cannot hold (an int past int32,
                    # say): the launcher refused it before launching; Triton's own path
                    # below picks the right binary.
                    pass
                else:
                    self.direct_launches += 1
                    return
        self._launch(index, grid0, grid1, args, constexprs, num_warps)

    def _launch(self, index: int | None, grid0: int, grid1: int, args: tuple,
                constexprs: tuple, num_warps: int) -> None:
        """Triton's own launch; keeps the binary's handle after the first one."""
        key = (index, constexprs, num_warps)
        compiled = self.kernel[(grid0, grid1)](
            *args, **dict(zip(self.names, constexprs, strict=True)), num_warps=num_warps)
        if key not in self._ready:
            self._ready[key] = _handle(compiled) if self.enabled and index is not None else None

    def forget(self) -> None:
        """Drop every kept binary handle (the next launch of each goes through Triton)."""
        self._ready.clear()
