"""warm_compile_keys(): every tile the table can pick for a deployment, compiled once."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from c128a_batches import table_toml
from dsv4_kernels import c128a as kernels
from dsv4_policy.kernels import c128a as policy
from dsv4_vllm.kernels import c128a as warmup


@pytest.mark.parametrize("arch", ["sm90", "sm86", "sm120"])
@pytest.mark.parametrize("max_model_len", [4096, 262_144, 1 << 20])
def test_warms_exactly_the_tables_compile_keys(arch, max_model_len, monkeypatch, dsv4_log):
    seen: list[tuple[list[Any], Any]] = []

    def fake_warmup(configs, device):
        seen.append((list(configs), device))
        return 3

    monkeypatch.setattr(kernels, "warmup", fake_warmup)
    assert warmup.warm_compile_keys(arch, max_model_len, "cpu") == 3
    (configs, device), = seen
    assert device == "cpu"
    assert set(configs) == set(policy.compile_keys(None, arch, max_model_len))
    assert len(configs) == len(set(configs))
    (record,) = [r for r in dsv4_log if r.levelno == logging.INFO]
    message = record.getMessage()
    assert message.startswith("dsv4 warm-up:") and f"{len(configs)} C128A compile key" in message
    assert f"max_model_len={max_model_len}" in message and "3 compiled" in message


def test_an_injected_table_is_used(monkeypatch) -> None:
    table = policy.loads_table(table_toml([
        {"id": "a", "match": {"arch": "sm90", "max_seq_len": {"max": 999}},
         "launch": {"tokens_per_program": 2, "cols_per_program": 128, "num_warps": 1,
                    "split_width": True}},
        {"id": "b", "match": {"arch": "sm90", "max_seq_len": {"min": 1000}},
         "launch": {"tokens_per_program": 4, "cols_per_program": 512, "num_warps": 8,
                    "split_width": False}},
    ]))
    seen: list[list[Any]] = []
    monkeypatch.setattr(kernels, "warmup", lambda configs, device: seen.append(list(configs))
                        or 0)
    warmup.warm_compile_keys("sm90", 65536, "cpu", table=table)
    assert set(seen[0]) == {(2, 128, 1), (4, 512, 8), (1, 1024, 4)}


def test_real_kernel_warm_up_under_the_interpreter(dsv4_log) -> None:
    """Under TRITON_INTERPRET=1 nothing is compiled, but every tile is launched."""
    assert warmup.warm_compile_keys("sm90", 262_144, "cpu") == 0
    assert any("dsv4 warm-up" in r.getMessage() for r in dsv4_log)


@pytest.mark.parametrize("bad", [0, -5, 3.5, "262144", None])
def test_bad_max_model_len_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        warmup.warm_compile_keys("sm90", bad, "cpu")
