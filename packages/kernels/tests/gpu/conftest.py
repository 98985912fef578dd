"""Fixtures for the GPU tests: a CUDA device running the compiled kernel, or a failure."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device; raises (so every GPU test fails, never skips) when there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device visible: the tests marked gpu need an NVIDIA GPU and a CUDA "
            "build of torch"
        )
    from dsv4_kernels.c128a import interpreting

    if interpreting():
        raise RuntimeError(
            "GPU tests need the compiled kernel, but TRITON_INTERPRET is set: unset it"
        )
    return torch.device("cuda", torch.cuda.current_device())
