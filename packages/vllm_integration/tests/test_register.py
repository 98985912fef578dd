"""register(): every registered target patched once, the kill switch, the version guard.

Generic over :mod:`dsv4_vllm.registry`: every kernel's target gets the same treatment, so
these hold for a kernel added later without an edit here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import sys
import types
from types import ModuleType

import pytest
import vllm
from dsv4_vllm import plugin, registry
from dsv4_vllm.hook import is_hooked, mark


def _messages(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


def _objects(modules: dict[str, ModuleType]) -> dict[str, object]:
    return {name: getattr(modules[name], t.attribute) for name, t in registry.targets().items()}


def _inits(modules: dict[str, ModuleType]) -> dict[str, object]:
    return {name: getattr(modules[name], t.builder.cls).__init__
            for name, t in registry.targets().items() if t.builder is not None}


def test_register_patches_every_target_and_hooks_its_builder(pristine_vllm, dsv4_log) -> None:
    originals, inits = _objects(pristine_vllm), _inits(pristine_vllm)
    assert plugin.register({}) is True
    for name, target in registry.targets().items():
        patched = getattr(pristine_vllm[name], target.attribute)
        assert isinstance(patched, target.dispatch) and patched.original is originals[name]
        assert plugin.active(name) is patched
        assert inspect.signature(patched) == inspect.signature(originals[name])
        if target.builder is not None:
            init = getattr(pristine_vllm[name], target.builder.cls).__init__
            assert is_hooked(init, mark(name)) and init.__wrapped__ is inits[name]
    info = _messages(dsv4_log, logging.INFO)
    assert [line.split(" launch policy active on vLLM")[0] for line in info] == [
        f"dsv4: {t.label}" for t in registry.targets().values()]
    # Each line names how its target warms up: at its metadata builder's start-up, or,
    # for a target with no builder to hook, what that target declares.
    for line, target in zip(info, registry.targets().values(), strict=True):
        expected = plugin.AT_START_UP if target.builder is not None else target.warm_up
        assert expected and expected in line, (line, target.label)
    assert not _messages(dsv4_log, logging.WARNING)


def test_register_is_idempotent(pristine_vllm, dsv4_log) -> None:
    assert plugin.register({}) is True
    first, first_inits = _objects(pristine_vllm), _inits(pristine_vllm)
    for _ in range(3):
        assert plugin.register({}) is True
    assert _objects(pristine_vllm) == first and _inits(pristine_vllm) == first_inits
    assert len(_messages(dsv4_log, logging.INFO)) == len(registry.targets())  # once each


def test_unregister_restores_vllm(pristine_vllm) -> None:
    originals, inits = _objects(pristine_vllm), _inits(pristine_vllm)
    plugin.register({})
    assert plugin.unregister() is True
    assert _objects(pristine_vllm) == originals and _inits(pristine_vllm) == inits
    assert all(plugin.active(name) is None for name in registry.targets())
    assert plugin.unregister() is False


@pytest.mark.parametrize("value", ["0", "off", "OFF", "Off", "false", "FALSE", "False"])
def test_kill_switch_patches_nothing_and_logs_one_info_line(pristine_vllm, dsv4_log,
                                                            value) -> None:
    originals, inits = _objects(pristine_vllm), _inits(pristine_vllm)
    assert plugin.register({"DSV4_POLICY": value}) is False
    assert _objects(pristine_vllm) == originals and _inits(pristine_vllm) == inits
    assert len(dsv4_log) == 1 and dsv4_log[0].levelno == logging.INFO
    assert f"DSV4_POLICY={value}" in dsv4_log[0].getMessage()


def test_kill_switch_is_read_from_the_process_environment(pristine_vllm, monkeypatch) -> None:
    originals = _objects(pristine_vllm)
    monkeypatch.setenv("DSV4_POLICY", "off")
    assert plugin.register() is False
    assert _objects(pristine_vllm) == originals
    monkeypatch.setenv("DSV4_POLICY", "1")
    assert plugin.register() is True


@pytest.mark.parametrize("version", ["0.34.0", "0.32.1", "1.0.0"])
def test_version_guard_leaves_vllm_unchanged(pristine_vllm, dsv4_log, monkeypatch,
                                             version) -> None:
    monkeypatch.setattr(vllm, "__version__", version)
    originals = _objects(pristine_vllm)
    assert plugin.register({}) is False
    assert _objects(pristine_vllm) == originals
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(dsv4_log) == 1 and len(warnings) == 1
    assert version in warnings[0] and "0.33.x" in warnings[0]


def test_version_is_checked_before_any_vllm_module_is_imported(pristine_vllm,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(vllm, "__version__", "0.40.0")

    def must_not_import(module):  # pragma: no cover - the assertion is that it is not called
        raise AssertionError(f"imported {module} before checking the version")

    monkeypatch.setattr(plugin, "_import", must_not_import)
    assert plugin.register({}) is False


def test_one_target_failing_leaves_the_others_patched(pristine_vllm, dsv4_log,
                                                      monkeypatch) -> None:
    """Each kernel is independent: one that cannot be patched costs only itself."""
    first, *others = registry.targets().values()
    monkeypatch.delattr(pristine_vllm[first.name], first.attribute)
    assert plugin.register({}) is False
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and f"has no {first.attribute}" in warnings[0]
    assert f"vLLM's {first.label} kernel runs unchanged" in warnings[0]
    assert all(plugin.active(t.name) is not None for t in others)


def test_register_rebinds_every_alias_and_unregister_restores_it(pristine_vllm) -> None:
    """A module that from-imported vLLM's object reaches the same stand-in, and gets
    vLLM's object back."""
    originals = {(t.name, alias): getattr(importlib.import_module(alias), t.attribute)
                 for t in registry.targets().values() for alias in t.aliases}
    assert plugin.register({}) is True
    for (name, alias), original in originals.items():
        target = registry.get(name)
        assert getattr(importlib.import_module(alias), target.attribute) is plugin.active(name)
        assert plugin.active(name).original is original
    assert plugin.unregister() is True
    for (name, alias), original in originals.items():
        assert getattr(importlib.import_module(alias), registry.get(name).attribute) is original


def test_aliases_holding_something_else_or_missing_are_left_alone(pristine_vllm, dsv4_log,
                                                                  monkeypatch) -> None:
    """Only an alias that still holds vLLM's object is rebound; the others are named."""
    target = next(iter(registry.targets().values()))
    original = getattr(pristine_vllm[target.name], target.attribute)
    same, other = types.ModuleType("dsv4_alias_same"), types.ModuleType("dsv4_alias_other")
    foreign = object()
    setattr(same, target.attribute, original)
    setattr(other, target.attribute, foreign)
    for module in (same, other):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    aliased = dataclasses.replace(target, aliases=(
        "dsv4_alias_same", "dsv4_alias_other", "dsv4_alias_not_importable"))
    monkeypatch.setattr(plugin, "_targets", lambda: {target.name: aliased})
    assert plugin.register({}) is True
    stand_in = getattr(pristine_vllm[target.name], target.attribute)
    assert isinstance(stand_in, target.dispatch) and getattr(same, target.attribute) is stand_in
    assert getattr(other, target.attribute) is foreign
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and f"dsv4_alias_other.{target.attribute} is not" in warnings[0]
    assert plugin.register({}) is True  # idempotent: the aliases stay as they are
    assert getattr(same, target.attribute) is stand_in
    assert plugin.unregister() is True
    assert getattr(same, target.attribute) is original
    assert getattr(other, target.attribute) is foreign
    assert getattr(pristine_vllm[target.name], target.attribute) is original
