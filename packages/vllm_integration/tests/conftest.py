"""Shared fixtures: Hypothesis profiles, the GPU gate, vLLM's module, log capture."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

TARGET = "vllm.models.deepseek_v4.sparse_mla"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; fails (never skips) without one")


@pytest.fixture(autouse=True)
def _gpu_gate(request: pytest.FixtureRequest) -> None:
    """A GPU test on a machine without CUDA fails loudly instead of skipping."""
    if request.node.get_closest_marker("gpu") is None:
        return
    import torch

    if not torch.cuda.is_available():
        pytest.fail("this test is marked gpu and needs CUDA, but torch.cuda.is_available() "
                    "is False", pytrace=False)


@pytest.fixture(scope="session")
def sparse_mla() -> ModuleType:
    """vLLM 0.33.0's real DeepSeek-V4 sparse-MLA module."""
    return importlib.import_module(TARGET)


@pytest.fixture
def pristine(sparse_mla: ModuleType) -> Iterator[ModuleType]:
    """Yield vLLM's module unpatched, and leave it exactly as found afterwards."""
    from dsv4_vllm import plugin

    plugin.unregister()
    function = sparse_mla.build_c128a_topk_metadata
    builder = sparse_mla.DeepseekV4SparseMLAMetadataBuilder
    init = builder.__dict__["__init__"]
    yield sparse_mla
    plugin.unregister()
    sparse_mla.build_c128a_topk_metadata = function
    builder.__init__ = init


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def dsv4_log() -> Iterator[list[logging.LogRecord]]:
    """Records of the plugin's logger (vLLM's ``vllm`` logger does not propagate)."""
    from dsv4_vllm._log import logger

    handler = _Collect()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(level)
