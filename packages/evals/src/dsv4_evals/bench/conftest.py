"""The bench session's plumbing for every kernel folder below: options, the GPU, its facts.

pytest loads this file for any path under ``dsv4_evals/bench/``, so each kernel's
``<name>-bench`` target (``pytest src/dsv4_evals/bench/<name>``) gets the same options
and fixtures; the kernel's own ``conftest.py`` adds its results file and its gates.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import torch

from dsv4_evals.bench import timing

MIN_KEYS = 200
"""The never-slower gates time at least this many random keys inside the table's entries."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsv4 bench")
    group.addoption("--regression-threshold", type=float, default=0.25,
                    help="allowed slowdown against the stored per-GPU baseline (0.25 = 25%%)")
    group.addoption("--update-baseline", action="store_true",
                    help="write this run's medians as the stored baseline for this GPU")
    group.addoption("--results-json", default=None,
                    help="where to write every measured number (default: artifacts dir)")
    group.addoption("--keys", type=int, default=MIN_KEYS,
                    help=f"random keys for the never-slower gate (at least {MIN_KEYS})")
    group.addoption("--keys-seed", type=int, default=None,
                    help="seed of the random keys (default: from the clock; printed and stored)")


def pytest_configure(config: pytest.Config) -> None:
    seed = config.getoption("--keys-seed", default=None)
    config._dsv4_key_seed = int(time.time()) if seed is None else seed  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def key_seed(request: pytest.FixtureRequest) -> int:
    """The never-slower gate's seed: ``--keys-seed``, or the clock (printed and stored)."""
    return request.config._dsv4_key_seed  # type: ignore[attr-defined, no-any-return]


@pytest.fixture(scope="session")
def key_count(request: pytest.FixtureRequest) -> int:
    count = int(request.config.getoption("--keys"))
    if count < MIN_KEYS:
        raise pytest.UsageError(f"--keys: got {count}; the gate needs at least {MIN_KEYS}")
    return count


@pytest.fixture(scope="session")
def device() -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device visible: the bench session measures GPU kernels and cannot "
            "run on this machine"
        )
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def machine(device: torch.device) -> dict:
    """The GPU's facts and floors, recorded with every result."""
    return timing.machine(device)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    if torch.cuda.is_available():
        machine_info.update(timing.gpu_info(torch.device("cuda")))
        machine_info["driver"] = _driver()


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except OSError:
        return None
