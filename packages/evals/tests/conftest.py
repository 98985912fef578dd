"""Shared test settings for dsv4-evals: Hypothesis profiles and the ``gpu`` marker.

The ``ci`` profile is deterministic (derandomized, no example database, no deadline)
so a CI run is reproducible; ``dev`` keeps Hypothesis' random exploration for local
runs. ``CI`` in the environment selects ``ci``.
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
def cuda_device() -> str:
    """Request this in a GPU test: it raises, so the test fails, when CUDA is absent."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("this test is marked gpu and needs CUDA, but none is available")
    return "cuda"
