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

import operator
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


_dtype = operator.attrgetter("dtype")


class DirectLauncher:
    """Launches of one ``@triton.jit`` function, direct after each binary's first launch.

    ``constexpr_names`` are the kernel's constexpr parameters, in signature order,
    after every run-time parameter (the C launcher takes all parameters positionally).
    A kept binary is keyed by the device, the constexprs, ``num_warps`` and the tensor
    arguments' dtypes: Triton builds one binary per pointer element type, so an int32
    and an int64 buffer in the same place are two binaries, never one. A launch gets the
    kernel's tensor arguments twice: as tensors, for Triton's own
    path, and as their data pointers, which the direct path hands the C launcher as
    they are (the caller has already checked that every tensor is on the launch's CUDA
    device).
    """

    def __init__(self, kernel: Any, constexpr_names: Sequence[str]) -> None:
        self.kernel = kernel
        self.names = tuple(constexpr_names)
        self.enabled = _SUPPORTED and hasattr(kernel, "device_caches")
        self._ready: dict[tuple, tuple | None] = {}
        self.direct_launches = 0

    def __call__(self, index: int, grid0: int, grid1: int, tensors: tuple,
                 pointers: tuple[int, ...], scalars: tuple, constexprs: tuple,
                 num_warps: int) -> None:
        """Launch on CUDA device ``index`` (-1: not a CUDA launch, Triton decides)."""
        if index >= 0:
            if index != _current_device():
                with torch.cuda.device(index):
                    self._launch(index, grid0, grid1, tensors, scalars, constexprs, num_warps)
                return
            ready = self._ready.get((index, constexprs, num_warps, tuple(map(_dtype, tensors))))
            if ready is not None and _hooks_idle():
                launch, function, packed, cooperative, pdl = ready
                try:
                    launch(grid0, grid1, 1, _raw_stream(index), function, cooperative, pdl,
                           None, None, packed, None, None, None, *pointers, *scalars,
                           *constexprs)
                except (OverflowError, TypeError):
                    # An argument the binary's signature cannot hold (an int past int32,
                    # say): the launcher refused it before launching; Triton's own path
                    # below picks the right binary.
                    pass
                else:
                    self.direct_launches += 1
                    return
        self._launch(index, grid0, grid1, tensors, scalars, constexprs, num_warps)

    def _launch(self, index: int, grid0: int, grid1: int, tensors: tuple, scalars: tuple,
                constexprs: tuple, num_warps: int) -> None:
        """Triton's own launch; keeps the binary's handle after the first one."""
        key = (index, constexprs, num_warps, tuple(map(_dtype, tensors)))
        compiled = self.kernel[(grid0, grid1)](
            *tensors, *scalars, **dict(zip(self.names, constexprs, strict=True)),
            num_warps=num_warps)
        if key not in self._ready:
            self._ready[key] = _handle(compiled) if self.enabled and index >= 0 else None

    def forget(self) -> None:
        """Drop every kept binary handle (the next launch of each goes through Triton)."""
        self._ready.clear()
