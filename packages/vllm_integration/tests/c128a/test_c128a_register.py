"""register() and C128A's own guards: signature drift, a missing module, builder drift."""

from __future__ import annotations

import logging

from dsv4_vllm import plugin, registry


def _messages(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


OTHERS = len(registry.targets()) - 1
"""Every other kernel logs its own info line."""


def test_signature_guard_leaves_vllm_unchanged(pristine, dsv4_log, monkeypatch) -> None:
    def drifted(positions, compress_ratio, num_decode_tokens, token_to_req_indices,
                block_table, block_size, slot_mapping, global_decode_buffer,
                decode_lens_buffer, prefill_buffer, max_compressed_tokens=4096):
        raise AssertionError("never called")  # pragma: no cover

    monkeypatch.setattr(pristine, "build_c128a_topk_metadata", drifted)
    assert plugin.register({}) is False
    assert pristine.build_c128a_topk_metadata is drifted
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1  # the others are independent
    assert len(_messages(dsv4_log, logging.INFO)) == OTHERS
    assert "max_compressed_tokens=4096" in warnings[0]


def test_missing_module_is_a_warning_not_a_crash(pristine, dsv4_log, monkeypatch) -> None:
    real_import = plugin._import

    def no_module(module):
        if module == "vllm.models.deepseek_v4.sparse_mla":
            raise ImportError("No module named 'vllm.models.deepseek_v4'")
        return real_import(module)

    monkeypatch.setattr(plugin, "_import", no_module)
    assert plugin.register({}) is False
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and "cannot import" in warnings[0]
    assert len(_messages(dsv4_log, logging.INFO)) == OTHERS  # the other kernels' lines


def test_builder_drift_keeps_the_patch_but_warns(pristine, dsv4_log, monkeypatch) -> None:
    builder = pristine.DeepseekV4SparseMLAMetadataBuilder

    def other_init(self, vllm_config, device):  # pragma: no cover - never called
        raise AssertionError

    monkeypatch.setattr(builder, "__init__", other_init)
    assert plugin.register({}) is True
    assert builder.__init__ is other_init
    warnings = _messages(dsv4_log, logging.WARNING)
    assert len(warnings) == 1 and "first table hit" in warnings[0]
    info = [m for m in _messages(dsv4_log, logging.INFO) if m.startswith("dsv4: C128A")]
    assert len(info) == 1 and "warm-up on first hit" in info[0]
