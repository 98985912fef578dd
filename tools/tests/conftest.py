"""Fixtures for the repository-level tests: a scratch monorepo to declare targets in."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def make_repo(tmp_path: Path):
    """Write ``{folder: pyproject text}`` under ``tmp_path/packages`` and return the root."""

    def write(packages: dict[str, str]) -> Path:
        for folder, text in packages.items():
            pkg = tmp_path / "packages" / folder
            pkg.mkdir(parents=True, exist_ok=True)
            (pkg / "pyproject.toml").write_text(textwrap.dedent(text))
        return tmp_path

    return write
