"""Which kept binary the direct launcher reuses, checked on the CPU with a stand-in kernel.

Triton builds one binary per pointer element type. A launcher that kept binaries by the
constexprs alone would hand an int32 buffer to the binary built for int64 (or the
reverse), silently writing the wrong bytes. The stand-in below records which "binary"
each launch reached, so these tests can see the key the launcher uses.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_kernels import _direct_launch


class _Binary:
    """One compiled binary as the launcher sees it; records the launches it received."""

    def __init__(self, name: str, launches: list[str]) -> None:
        self.name = name
        self.function = object()
        self.packed_metadata = object()
        self.run = SimpleNamespace(launch=self._launch, global_scratch_size=0,
                                   profile_scratch_size=0, launch_cooperative_grid=False,
                                   launch_pdl=False)
        self._launches = launches

    def _launch(self, *args: Any) -> None:
        self._launches.append(self.name)


class _Kernel:
    """A ``@triton.jit`` stand-in: one binary per (constexprs, warps, pointer dtypes)."""

    def __init__(self) -> None:
        self.device_caches: dict = {}  # what marks a compiled (not interpreted) kernel
        self.launches: list[str] = []
        self.binaries: dict[tuple, _Binary] = {}

    def __getitem__(self, grid: tuple) -> Any:
        def launch(*args: Any, num_warps: int, **constexprs: Any) -> _Binary:
            dtypes = tuple(a.dtype for a in args if isinstance(a, torch.Tensor))
            key = (tuple(constexprs.items()), num_warps, dtypes)
            binary = self.binaries.setdefault(key, _Binary(f"binary{len(self.binaries)}",
                                                             self.launches))
            self.launches.append(f"triton:{binary.name}")
            return binary
        return launch


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> tuple[_direct_launch.DirectLauncher, _Kernel]:
    monkeypatch.setattr(_direct_launch, "_SUPPORTED", True)
    monkeypatch.setattr(_direct_launch, "_current_device", lambda: 0)
    monkeypatch.setattr(_direct_launch, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(_direct_launch, "_hooks_idle", lambda: True)
    kernel = _Kernel()
    return _direct_launch.DirectLauncher(kernel, ("TILE",)), kernel


def _launch(launcher: _direct_launch.DirectLauncher, *tensors: torch.Tensor,
            tile: int = 8) -> None:
    launcher(0, 1, 1, tensors, tuple(range(len(tensors))), (len(tensors[0]),), (tile,), 4)


def test_a_new_pointer_dtype_goes_through_triton_not_the_kept_binary(launcher) -> None:
    direct, kernel = launcher
    rng = random.Random(7)
    out = torch.tensor([rng.randrange(1 << 20) for _ in range(16)], dtype=torch.int64)
    slots64 = torch.tensor([rng.randrange(-1, 1 << 20) for _ in range(16)], dtype=torch.int64)
    slots32 = slots64.to(torch.int32)
    _launch(direct, out, slots64)
    _launch(direct, out, slots64)
    _launch(direct, out, slots32)
    _launch(direct, out, slots32)
    _launch(direct, out, slots64)
    assert kernel.launches == ["triton:binary0", "binary0", "triton:binary1", "binary1",
                               "binary0"]
    assert direct.direct_launches == 3


def test_constexprs_and_warps_still_select_the_binary(launcher) -> None:
    direct, kernel = launcher
    buf = torch.arange(1, 9, dtype=torch.int32)
    _launch(direct, buf, tile=8)
    _launch(direct, buf, tile=16)
    _launch(direct, buf, tile=8)
    direct(0, 1, 1, (buf,), (0,), (8,), (8,), 2)
    assert kernel.launches == ["triton:binary0", "triton:binary1", "binary0",
                               "triton:binary2"]
    direct.forget()
    _launch(direct, buf, tile=8)
    assert kernel.launches[-1] == "triton:binary0"
