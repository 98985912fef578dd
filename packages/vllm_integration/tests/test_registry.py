"""The registry: every module of dsv4_vllm/kernels is one target, checked against vLLM."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import dsv4_vllm.kernels
import pytest
from dsv4_vllm import guard, registry


def test_every_kernel_module_is_registered_under_its_own_name() -> None:
    names = sorted(i.name for i in pkgutil.iter_modules(dsv4_vllm.kernels.__path__)
                   if not i.name.startswith("_"))
    assert list(registry.targets()) == names
    assert {"c128a", "swa"} <= set(names)
    assert registry.get("swa").name == "swa"
    with pytest.raises(ValueError, match="unknown kernel 'nope'; registered: c128a"):
        registry.get("nope")


@pytest.mark.parametrize("name", list(registry.targets()))
def test_each_target_matches_vllm_0_33(name: str) -> None:
    """vLLM's own object passes the target's signature, and its builder exists."""
    target = registry.get(name)
    module = importlib.import_module(target.module)
    assert target.signature.reason(getattr(module, target.attribute), target.where) is None
    # Every alias holds vLLM's very object, so rebinding it reaches the same calls.
    for alias in target.aliases:
        held = getattr(importlib.import_module(alias), target.attribute)
        assert held is getattr(module, target.attribute), alias
    assert len(set(target.holders)) == len(target.holders) == 1 + len(target.aliases)
    if target.builder is not None:
        builder = getattr(module, target.builder.cls)
        assert isinstance(builder, type)
        if target.builder.init_parameters is not None:
            assert guard.builder_init_reason(builder.__init__, target.builder.cls,
                                             target.builder.init_parameters) is None


def _package(tmp_path: Path, name: str, files: dict[str, str]):
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for file, text in files.items():
        (root / file).write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def test_a_module_without_a_target_is_an_error_naming_it(tmp_path: Path) -> None:
    package = _package(tmp_path, "dsv4_fake_kernels", {"lost.py": "TARGET = 3\n"})
    with pytest.raises(registry.RegistryError, match=r"dsv4_fake_kernels\.lost .* TARGET = Target"):
        registry.discover(package)


def test_a_target_named_unlike_its_module_is_an_error(tmp_path: Path) -> None:
    text = ("from dsv4_vllm.kernels.swa import TARGET as _T\nimport dataclasses\n"
            "TARGET = dataclasses.replace(_T, name='other')\n")
    package = _package(tmp_path, "dsv4_fake_kernels2", {"mine.py": text})
    with pytest.raises(registry.RegistryError, match=r"TARGET\.name is 'other'"):
        registry.discover(package)
