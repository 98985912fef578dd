"""Shared fixtures: Hypothesis profiles, the GPU gate, vLLM's module, log capture, and, when
vLLM runs from its Python sources (``DSV4_VLLM_SOURCES``), vLLM's CUDA platform for the
modules under test (``sources_platform.py``)."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterator
from types import ModuleType

import pytest
import sources_platform
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
SWA_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"


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


@pytest.fixture(scope="session", autouse=True)
def _sources_platform() -> Iterator[object | None]:
    """From vLLM's Python sources, the modules under test see vLLM's CUDA platform (the
    stand-in); anywhere else nothing changes and this yields None."""
    if not sources_platform.sources_mode():
        yield None
        return
    stand_in, before = sources_platform.patch_modules()
    yield stand_in
    sources_platform.restore(before)


@pytest.fixture(autouse=True)
def _platform_questions(_sources_platform: object | None) -> Iterator[None]:
    """Fail a test whose code asked the stand-in something it does not answer as vLLM's
    CUDA platform would (it would get ``Platform``'s generic default instead)."""
    yield
    if _sources_platform is None:
        return
    kind = type(_sources_platform)
    unanswered = sorted(kind.asked - sources_platform.answered(kind))
    if unanswered:
        pytest.fail(f"vLLM asked its platform {unanswered}, which the sources-mode stand-in "
                    "does not answer as vLLM's CUDA platform; answer it in "
                    "tests/sources_platform.py", pytrace=False)


@pytest.fixture(scope="session")
def sparse_mla() -> ModuleType:
    """vLLM 0.33.0's real DeepSeek-V4 sparse-MLA module."""
    return importlib.import_module(TARGET)


@pytest.fixture
def pristine_vllm() -> Iterator[dict[str, ModuleType]]:
    """Every registered target's vLLM module, unpatched, and left exactly as found
    afterwards (the object, its aliases' and its builder's own ``__init__``), by kernel
    name."""
    from dsv4_vllm import plugin, registry

    plugin.unregister()
    saved = []
    modules = {}
    for name, target in registry.targets().items():
        module = importlib.import_module(target.module)
        modules[name] = module
        builder = getattr(module, target.builder.cls) if target.builder else None
        init = builder.__dict__.get("__init__") if builder is not None else None
        saved.append((module, target.attribute, getattr(module, target.attribute), builder,
                      init))
        for alias in target.aliases:
            held = importlib.import_module(alias)
            saved.append((held, target.attribute, getattr(held, target.attribute), None, None))
    yield modules
    plugin.unregister()
    for module, attribute, obj, builder, init in saved:
        setattr(module, attribute, obj)
        if builder is not None and init is not None:
            builder.__init__ = init


@pytest.fixture
def pristine(pristine_vllm: dict[str, ModuleType], sparse_mla: ModuleType) -> ModuleType:
    """vLLM's sparse-MLA module unpatched (every target is restored afterwards)."""
    return sparse_mla


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


@pytest.fixture
def swa_module(pristine_vllm: dict[str, ModuleType]) -> ModuleType:
    """vLLM's sparse_swa module, unpatched (every target is restored afterwards)."""
    from dsv4_vllm.kernels.swa import SWADispatch

    module = importlib.import_module(SWA_MODULE)
    assert not isinstance(module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL, SWADispatch)
    return module
