"""Fixtures for the compressed-slot-mapping tests: Triton's interpreter (CPU tests), the
CUDA device (GPU tests fail, never skip, without one) and vLLM 0.33.0's own kernel,
extracted at run time. Both device fixtures ask this kernel's module, not another
kernel's, whether the interpreter is on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def interpreter() -> str:
    """The device CPU kernel tests run on; raises unless Triton's interpreter is on."""
    from dsv4_kernels.compressed_slot_mapping.launch import interpreting

    if not interpreting():
        raise RuntimeError(
            "CPU kernel tests need Triton's interpreter: run them with TRITON_INTERPRET=1 "
            "(the `kernels` nox target sets it)"
        )
    return "cpu"


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device; raises (so every GPU test fails, never skips) when there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device visible: the tests marked gpu need an NVIDIA GPU and a CUDA "
            "build of torch"
        )
    from dsv4_kernels.compressed_slot_mapping.launch import interpreting

    if interpreting():
        raise RuntimeError(
            "GPU tests need the compiled kernel, but TRITON_INTERPRET is set: unset it"
        )
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def upstream() -> Any:
    """vLLM 0.33.0's kernel and its two call paths (see
    ``benchmarks/compressed_slot_mapping_upstream.py``); extracted from the vLLM sources
    bundle, a locked wheel or an installed vLLM when ``.upstream/`` lacks a current copy.
    Fails (never skips) when none of them is at hand."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import compressed_slot_mapping_upstream as extracted
    finally:
        sys.path.remove(str(BENCHMARKS))
    try:
        return extracted.load()
    except extracted.UpstreamError as exc:
        raise RuntimeError(
            f"vLLM {extracted.VERSION}'s kernel is needed for this comparison: {exc}"
        ) from None
