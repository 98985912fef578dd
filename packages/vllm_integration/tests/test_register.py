"""register(): patches once, obeys the kill switch and both guards, logs one line."""

from __future__ import annotations

import inspect
import logging

import pytest
import vllm
from dsv4_vllm import plugin
from dsv4_vllm.builder_hook import is_hooked
from dsv4_vllm.dispatch import C128ADispatch


def _messages(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


def test_register_patches_the_module_global_and_hooks_the_builder(pristine, dsv4_log) -> None:
    original = pristine.build_c128a_topk_metadata
    original_init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    assert plugin.register({}) is True
    patched = pristine.build_c128a_topk_metadata
    assert isinstance(patched, C128ADispatch)
    assert patched.original is original
    assert plugin.active_dispatch() is patched
    assert inspect.signature(patched) == inspect.signature(original)
    init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    assert is_hooked(init) and init.__wrapped__ is original_init
    info = _messages(dsv4_log, logging.INFO)
    assert len(info) == 2 and info[0].startswith("dsv4: C128A launch policy active on vLLM")
    assert info[1].startswith("dsv4: SWA launch policy active on vLLM")
    assert not _messages(dsv4_log, logging.WARNING)


def test_register_is_idempotent(pristine, dsv4_log) -> None:
    original = pristine.build_c128a_topk_metadata
    original_init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    assert plugin.register({}) is True
    first = pristine.build_c128a_topk_metadata
    first_init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    for _ in range(3):
        assert plugin.register({}) is True
    assert pristine.build_c128a_topk_metadata is first
    assert first.original is original
    assert pristine.DeepseekV4SparseMLAMetadataBuilder.__init__ is first_init
    assert first_init.__wrapped__ is original_init
    assert len(_messages(dsv4_log, logging.INFO)) == 2  # C128A and SWA, once each


def test_unregister_restores_vllm(pristine) -> None:
    original = pristine.build_c128a_topk_metadata
    original_init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    plugin.register({})
    assert plugin.unregister() is True
    assert pristine.build_c128a_topk_metadata is original
    assert pristine.DeepseekV4SparseMLAMetadataBuilder.__init__ is original_init
    assert plugin.active_dispatch() is None
    assert plugin.unregister() is False


@pytest.mark.parametrize("value", ["0", "off", "OFF", "Off", "false", "FALSE", "False"])
def test_kill_switch_patches_nothing_and_logs_one_info_line(pristine, dsv4_log, value) -> None:
    original = pristine.build_c128a_topk_metadata
    original_init = pristine.DeepseekV4SparseMLAMetadataBuilder.__init__
    assert plugin.register({"DSV4_POLICY": value}) is False
    assert pristine.build_c128a_topk_metadata is original
    assert pristine.DeepseekV4SparseMLAMetadataBuilder.__init__ is original_init
    assert len(dsv4_log) == 1 and dsv4_log[0].levelno == logging.INFO
    assert f"DSV4_POLICY={value}" in dsv4_log[0].getMessage()


def test_kill_switch_is_read_from_the_process_environment(pristine, monkeypatch) -> None:
    original = pristine.build_c128a_topk_metadata
    monkeypatch.setenv("DSV4_POLICY", "off")
    assert plugin.register() is False
    assert pristine.build_c128a_topk_metadata is original
    monkeypatch.setenv("DSV4_POLICY", "1")
    assert plugin.register() is True


@pytest.mark.parametrize("version", ["0.34.0", "0.32.1", "1.0.0"])
def test_version_guard_leaves_vllm_unchanged(pristine, dsv4_log, monkeypatch, version) -> None:
    monkeypatch.setattr(vllm, "__version__", version)
    original = pristine.build_c128a_topk_metadata
    assert plugin.register({}) is False
    assert pristine.build_c128a_topk_metadata is original
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(dsv4_log) == 1 and len(warnings) == 1
    assert version in warnings[0] and "0.33.x" in warnings[0]


def test_version_is_checked_before_vllm_module_is_imported(pristine, monkeypatch) -> None:
    monkeypatch.setattr(vllm, "__version__", "0.40.0")

    def must_not_import():  # pragma: no cover - the assertion is that it is not called
        raise AssertionError("imported the target module before checking the version")

    monkeypatch.setattr(plugin, "_target_module", must_not_import)
    assert plugin.register({}) is False


def test_signature_guard_leaves_vllm_unchanged(pristine, dsv4_log, monkeypatch) -> None:
    def drifted(positions, compress_ratio, num_decode_tokens, token_to_req_indices,
                block_table, block_size, slot_mapping, global_decode_buffer,
                decode_lens_buffer, prefill_buffer, max_compressed_tokens=4096):
        raise AssertionError("never called")  # pragma: no cover

    monkeypatch.setattr(pristine, "build_c128a_topk_metadata", drifted)
    assert plugin.register({}) is False
    assert pristine.build_c128a_topk_metadata is drifted
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(dsv4_log) == 2 and len(warnings) == 1  # the SWA policy is independent
    assert _messages(dsv4_log, logging.INFO)[0].startswith("dsv4: SWA launch policy active")
    assert "max_compressed_tokens=4096" in warnings[0]


def test_missing_module_is_a_warning_not_a_crash(pristine, dsv4_log, monkeypatch) -> None:
    def no_module():
        raise ImportError("No module named 'vllm.models.deepseek_v4'")

    monkeypatch.setattr(plugin, "_target_module", no_module)
    assert plugin.register({}) is False
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and "cannot import" in warnings[0]
    assert len(dsv4_log) == 2  # and the SWA policy's own line


def test_builder_drift_keeps_the_patch_but_warns(pristine, dsv4_log, monkeypatch) -> None:
    builder = pristine.DeepseekV4SparseMLAMetadataBuilder

    def other_init(self, vllm_config, device):  # pragma: no cover - never called
        raise AssertionError

    monkeypatch.setattr(builder, "__init__", other_init)
    assert plugin.register({}) is True
    assert builder.__init__ is other_init
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and "first table hit" in warnings[0]
    assert "warm-up on first hit" in _messages(dsv4_log, logging.INFO)[0]
