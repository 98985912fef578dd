"""Every kernel the bench layer measures, found as folders of :mod:`dsv4_evals.bench`.

A subpackage ``dsv4_evals.bench.<name>`` with a ``gates.py`` is a bench kernel: the
build generates its ``<name>-bench`` target from that file (and ``<name>-tune`` from
its ``tune.py``). A subpackage with a ``report.py`` contributes one section to the
launch report. Nothing here, in the report or in any ``pyproject.toml`` names a
kernel, so adding one costs one folder.

Discovery reads the package's folders and imports only the report modules, which
import their kernel's heavy machinery lazily, inside their section functions.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import dsv4_evals.bench as _package

GATES = "gates.py"
REPORT = "report"


class RegistryError(RuntimeError):
    """A bench folder's ``report.py`` does not provide a section function."""


@dataclass(frozen=True)
class ReportContext:
    """What every report section is given: where to write, and the GPU (or none)."""

    out: Path
    """The report folder; a section writes its own ``<name>.png`` there."""
    artifacts: Path
    """Where bench runs left their results (``bench-<name>.json``)."""
    device: Any = None
    """The CUDA device, or ``None``: the CPU path, in Triton's interpreter."""
    arch: str | None = None
    gpu: str | None = None
    machine: dict[str, object] = field(default_factory=dict)
    """:func:`dsv4_evals.bench.timing.machine` of the GPU; empty without one."""


@dataclass(frozen=True)
class Section:
    """One folder's part of the report."""

    markdown: str
    """Appended to ``report/report.md``."""
    data: object
    """Stored as ``report/report.json[<name>]``."""
    bad: tuple[str, ...] = ()
    """Cases whose outputs differ from the reference or the baseline: the report fails."""


SectionFunction = Callable[[ReportContext], "Section | None"]


def folders(package: ModuleType = _package) -> list[str]:
    """The subpackages of the bench layer, by name."""
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__)
                  if info.ispkg and not info.name.startswith("_"))


def kernels(package: ModuleType = _package) -> list[str]:
    """The bench kernels: the folders with a ``gates.py``."""
    root = Path(next(iter(package.__path__)))
    return [name for name in folders(package) if (root / name / GATES).is_file()]


def report_modules(package: ModuleType = _package) -> list[tuple[str, ModuleType]]:
    """``(name, module)`` of every folder's ``report.py``, by its ``ORDER`` then name."""
    root = Path(next(iter(package.__path__)))
    found = []
    for name in folders(package):
        if not (root / name / f"{REPORT}.py").is_file():
            continue
        module = importlib.import_module(f"{package.__name__}.{name}.{REPORT}")
        for function in ("cpu_section", "gpu_section"):
            if not callable(getattr(module, function, None)):
                raise RegistryError(f"{module.__name__} has no {function}(ctx); every "
                                    f"bench folder's report.py defines cpu_section and "
                                    f"gpu_section (each may return None)")
        found.append((int(getattr(module, "ORDER", 50)), name, module))
    return [(name, module) for _, name, module in sorted(found, key=lambda t: (t[0], t[1]))]
