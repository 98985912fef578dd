"""The kernel registry: what every declared kernel package must provide, found without
importing torch, and the errors a wrong declaration gets."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from dsv4_kernels import registry
from dsv4_kernels.registry import PARTS, Declaration, Kernel, RegistryError

KERNELS = list(registry.kernels().values())
IDS = list(registry.names())


def test_listing_the_kernels_imports_neither_torch_nor_triton() -> None:
    code = ("import sys, dsv4_kernels, dsv4_kernels.registry as r\n"
            "names = r.names()\n"
            "[__import__(r.get(n).package) for n in names]\n"
            "print(len(names), sorted(m for m in ('torch', 'triton') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    count, loaded = out.stdout.split(None, 1)
    assert int(count) >= 2 and loaded.strip() == "[]"


def test_the_kernels_are_found_by_name_in_order() -> None:
    assert {"c128a", "swa"} <= set(registry.names())
    assert list(registry.names()) == sorted(registry.names())
    assert registry.get("c128a").package == "dsv4_kernels.c128a"
    with pytest.raises(ValueError, match="unknown kernel 'c4a'; registered: c128a"):
        registry.get("c4a")


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_every_kernel_package_has_its_parts(kernel: Kernel) -> None:
    folder = Path(importlib.import_module(kernel.package).__file__).parent  # type: ignore[arg-type]
    assert sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__") == sorted(PARTS)
    for part in PARTS:
        assert kernel.module(part).__name__ == f"{kernel.package}.{part}"
    with pytest.raises(ValueError, match="is not a kernel module"):
        kernel.module("harness")


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_every_kernel_answers_launch_reference_warmup_and_compile_count(kernel: Kernel) -> None:
    package = importlib.import_module(kernel.package)
    launch = kernel.module("launch")
    assert kernel.launch is getattr(launch, kernel.declaration.launch)
    assert getattr(package, kernel.declaration.launch) is kernel.launch
    assert kernel.reference.__module__ == f"{kernel.package}.reference"
    assert kernel.warmup is launch.warmup and package.warmup is launch.warmup
    assert isinstance(kernel.compile_count(), int) and kernel.compile_count() >= 0
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


def _package(tmp_path: Path, name: str, subpackages: dict[str, str]) -> ModuleType:
    """A throwaway package ``name`` whose subpackages' ``__init__`` are the sources given."""
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for sub, source in subpackages.items():
        (root / sub).mkdir()
        (root / sub / "__init__.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_discovery_takes_declared_subpackages_and_refuses_a_wrong_declaration(
        tmp_path: Path) -> None:
    declared = ("from dsv4_kernels.registry import Declaration, lazy_package\n"
                "KERNEL = Declaration(launch='run')\n__getattr__ = lazy_package(__name__)\n")
    _package(tmp_path, "fake_kernels_a", {"zeta": declared, "alpha": declared,
                                          "helpers": "X = 1\n", "_private": declared})
    found = registry.discover("fake_kernels_a")
    assert list(found) == ["alpha", "zeta"]
    assert found["alpha"] == Kernel("alpha", "fake_kernels_a.alpha", Declaration("run"))
    with pytest.raises(ModuleNotFoundError, match=r"fake_kernels_a\.alpha\.launch"):
        found["alpha"].launch  # noqa: B018
    _package(tmp_path, "fake_kernels_b", {"half_done": "KERNEL = 'run'\n"})
    with pytest.raises(RegistryError, match=r"fake_kernels_b\.half_done\.KERNEL must be a "
                                            r"dsv4_kernels\.registry\.Declaration; got str"):
        registry.discover("fake_kernels_b")


def test_a_declared_function_the_module_lacks_is_an_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "fake_kernels_c" / "k"
    root.mkdir(parents=True)
    (root.parent / "__init__.py").write_text("")
    (root / "__init__.py").write_text("from dsv4_kernels.registry import Declaration\n"
                                      "KERNEL = Declaration(launch='run', reference='spec')\n")
    (root / "launch.py").write_text("def run(): return 1\n")
    (root / "reference.py").write_text("def other(): return 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        kernel = registry.discover("fake_kernels_c")["k"]
        assert kernel.launch() == 1
        with pytest.raises(RegistryError, match=r"fake_kernels_c\.k: KERNEL names 'spec', but "
                                                r"fake_kernels_c\.k\.reference has no such"):
            kernel.reference  # noqa: B018
    finally:
        sys.path.remove(str(tmp_path))
