"""Where the bench layer reads and writes: the repository root, artifacts/, .upstream/.

Bench targets run in an execution root laid out as the repository (or, for tuning, in
the repository itself), so the root is found from this file's own place; ``DSV4_REPO``
names it for a copy installed elsewhere. ``DSV4_ARTIFACTS_DIR`` (set by the build for
every run) moves the artifacts folder.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_VARIABLE = "DSV4_REPO"
ARTIFACTS_VARIABLE = "DSV4_ARTIFACTS_DIR"


def repo_root() -> Path:
    """The repository (or execution) root: ``DSV4_REPO``, else four folders above ``src``."""
    named = os.environ.get(REPO_VARIABLE)
    if named:
        return Path(named).resolve()
    return Path(__file__).resolve().parents[5]


def artifacts() -> Path:
    """The artifacts folder: ``DSV4_ARTIFACTS_DIR``, else ``artifacts/`` at the root."""
    return Path(os.environ.get(ARTIFACTS_VARIABLE, repo_root() / "artifacts"))


def upstream(kernel: str) -> Path:
    """Where a kernel's extracted vLLM code lives: ``.upstream/<kernel>/`` (git ignores it)."""
    return repo_root() / ".upstream" / kernel


def baselines() -> Path:
    """The stored per-GPU bench baselines: ``benchmarks/baselines/`` at the root."""
    return repo_root() / "benchmarks" / "baselines"


def table(kernel: str) -> Path:
    """The shipped launch table a kernel's tuner rewrites: ``dsv4_policy``'s own file."""
    import dsv4_policy
    from dsv4_policy import registry

    return Path(dsv4_policy.__file__).resolve().parent / registry.get(kernel).table_file
