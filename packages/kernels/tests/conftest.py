"""Shared test settings for dsv4-kernels: Hypothesis profiles and the ``gpu`` marker.

The ``ci`` profile is deterministic (derandomized, no example database, no deadline)
so a CI run is reproducible; ``dev`` keeps Hypothesis' random exploration for local
runs. ``CI`` in the environment selects ``ci``.

CPU tests run the Triton kernel in Triton's interpreter, which has to be switched on
before the kernel module is imported: the ``kernels`` target sets
``TRITON_INTERPRET=1``. Tests that launch the kernel on the CPU request the
``interpreter`` fixture, which fails them with a clear message when it is off.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpu: needs a CUDA device; fails (never skips) when none is present"
    )


@pytest.fixture(scope="session")
def interpreter() -> str:
    """The device CPU kernel tests run on; raises unless Triton's interpreter is on."""
    from dsv4_kernels.c128a import interpreting

    if not interpreting():
        raise RuntimeError(
            "CPU kernel tests need Triton's interpreter: run them with TRITON_INTERPRET=1 "
            "(the `kernels` nox target sets it)"
        )
    return "cpu"
