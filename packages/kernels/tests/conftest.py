"""Shared test settings for dsv4-kernels: Hypothesis profiles, the ``gpu`` marker and its
devices, for every kernel's tests under ``tests/<kernel>/``.

The ``ci`` profile is deterministic (derandomized, no example database, no deadline)
so a CI run is reproducible; ``dev`` keeps Hypothesis' random exploration for local
runs. ``CI`` in the environment selects ``ci``.

CPU tests run the Triton kernels in Triton's interpreter, which has to be switched on
before a kernel module is imported: the ``kernels`` target sets ``TRITON_INTERPRET=1``.
Tests that launch a kernel on the CPU request the ``interpreter`` fixture, which fails
them with a clear message when it is off.

Every test marked ``gpu``, in any folder here, fails (it never skips) when no CUDA
device is visible or the interpreter is on: a GPU run that silently tested nothing
would pass for the wrong reason. A kernel's GPU tests get this, and the ``cuda``
fixture, without a conftest of their own.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

_ON = ("1", "true", "on", "yes", "y")


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET`` set)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _ON


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA device; fails (never skips) when none is present"
    )


def gpu_problem() -> str | None:
    """Why the tests marked gpu cannot run here, or None when a CUDA device is ready."""
    import torch

    if not torch.cuda.is_available():
        return ("no CUDA device visible: the tests marked gpu need an NVIDIA GPU and a CUDA "
                "build of torch")
    if interpreting():
        return "GPU tests need the compiled kernels, but TRITON_INTERPRET is set: unset it"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail every gpu-marked test before it runs when there is no GPU to run it on."""
    if item.get_closest_marker("gpu") is not None:
        problem = gpu_problem()
        if problem is not None:
            raise RuntimeError(problem)


@pytest.fixture(scope="session")
def cuda() -> Any:
    """The CUDA device (a ``torch.device``); raises when there is none, so a test using it
    fails, never skips."""
    import torch

    problem = gpu_problem()
    if problem is not None:
        raise RuntimeError(problem)
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def interpreter() -> str:
    """The device CPU kernel tests run on; raises unless Triton's interpreter is on."""
    if not interpreting():
        raise RuntimeError(
            "CPU kernel tests need Triton's interpreter: run them with TRITON_INTERPRET=1 "
            "(the `kernels` nox target sets it)"
        )
    return "cpu"
