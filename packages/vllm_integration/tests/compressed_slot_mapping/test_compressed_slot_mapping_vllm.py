"""Inside vLLM 0.33.0's real code: dsv4's compressed slot mapping against vLLM's own function.

vLLM keeps its real Triton on a machine without a GPU only with ``CUDA_VISIBLE_DEVICES``
empty at import, so the comparisons run in a child process (``csm_vllm_check.py``) where
vLLM's ``get_compressed_slot_mapping`` (its fill, then its kernel) runs in Triton's
interpreter. Every comparison is over whole poisoned buffers (rows past ``num_tokens``
too) and the returned tensor: dsv4's kernel at several tiles, the plugin's stand-in as
each rebound vLLM module calls it (decode, prefill, mixed, padding requests, PAD slots,
DCP, ``out=None``, int64 and int32 slots), vLLM's kernel object call, and vLLM's own
sparse-MLA builders (V4 and V4.1) with the plugin off and on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHECK = Path(__file__).with_name("csm_vllm_check.py")
HOLDERS = ("vllm.v1.attention.backends.mla.indexer",
           "vllm.v1.attention.backends.mla.compressor_utils",
           "vllm.models.deepseek_v4.sparse_mla", "vllm.models.deepseek_v41.sparse_mla")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("csm") / "check.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run([sys.executable, str(CHECK), str(out)], env=env,
                          capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{CHECK.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    return json.loads(out.read_text())


def test_vllms_own_function_ran_with_real_triton(check: dict[str, Any]) -> None:
    assert check["has_triton"] is True


def test_dsv4s_kernel_equals_vllms_function_at_every_tile(check: dict[str, Any]) -> None:
    rows = check["upstream"]
    assert len(rows) >= 13
    for row in rows:
        assert not row["poison_left"], row
        assert all(v for k, v in row.items() if k.startswith("tile_")), row
    assert any(row["rows_past"] > 0 for row in rows)  # the fill past num_tokens is compared


def test_kernel_object_calls_equal_vllms(check: dict[str, Any]) -> None:
    assert check["kernel_object"] and all(check["kernel_object"])


def test_every_module_is_rebound_and_restored(check: dict[str, Any]) -> None:
    assert check["rebound"] == dict.fromkeys(HOLDERS, True)
    assert check["restored"] == dict.fromkeys(HOLDERS, True)


def test_a_hit_through_every_module_equals_vllms_function(check: dict[str, Any]) -> None:
    for row in check["stand_in"]:
        assert all(row[name] for name in HOLDERS), row
    # Every call hit (the test table covers every key): dsv4's kernel really ran.
    assert check["hits"] == len(check["stand_in"]) * len(HOLDERS)
    assert check["misses"] == 0


def test_vllms_builders_give_identical_metadata_with_the_plugin_on_and_off(
        check: dict[str, Any]) -> None:
    rows = check["builders"]
    assert {r["module"] for r in rows} == set(HOLDERS[2:])
    for row in rows:
        assert row["slot_mapping"] and row["buffer"], row
        assert row["hits_off"] == 0 and row["hits_on"] == 1, row
