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


@pytest.mark.parametrize("name", list(registry.targets()))
def test_each_stand_in_takes_the_shared_options_and_refuses_others(name: str) -> None:
    """Every stand-in is built by Dispatch.__init__: the injected options take effect, the
    defaults are the shipped table and the kernel's own warm-up, and a misspelt option is
    refused with the accepted names instead of being ignored."""
    target = registry.get(name)
    original = getattr(importlib.import_module(target.module), target.attribute)

    def arch_of(_device):
        return "sm1"

    def resolve(key):
        return key

    def warm(*_args, **_kwargs):
        return 0

    made = target.dispatch(original, table="a table", resolve=resolve, arch_of=arch_of,
                           warm=warm, lazy_warmup=False)
    assert made.original is original and made.table == "a table"
    assert made.arch_of is arch_of and made._resolve is resolve and made._warm is warm
    assert made.lazy_warmup is False and (made.hits, made.misses) == (0, 0)
    plain = target.dispatch(original)
    assert plain.table is None and plain.lazy_warmup is True
    assert plain._warm == type(plain).default_warm
    with pytest.raises(TypeError, match=r"unexpected option\(s\) \['tabel'\]; accepted: "):
        target.dispatch(original, tabel="a table")
