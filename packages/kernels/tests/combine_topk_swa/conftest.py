"""Fixtures for the combine_topk_swa tests: a CUDA device, and vLLM's own kernel.

GPU tests fail (never skip) without a CUDA device, or when vLLM's kernel cannot be
extracted (``.upstream/combine_topk_swa/`` or ``.vllm-sources/`` at the repository
root; see ``benchmarks/combine_topk_swa_upstream.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device; raises (so every GPU test fails, never skips) when there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible: the tests marked gpu need an NVIDIA GPU "
                           "and a CUDA build of torch")
    from dsv4_kernels.combine_topk_swa.launch import interpreting

    if interpreting():
        raise RuntimeError("GPU tests need the compiled kernel, but TRITON_INTERPRET is set: "
                           "unset it")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def vllm_combine() -> Callable[..., Any]:
    """vLLM 0.33.0's ``combine_topk_swa_indices`` (fill + its kernel), extracted."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import combine_topk_swa_upstream as upstream

    return upstream.runner(upstream.load())
