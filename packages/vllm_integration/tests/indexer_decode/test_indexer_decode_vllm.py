"""Inside vLLM 0.33.0's real code: dsv4's indexer decode build against vLLM's own build.

vLLM keeps its real Triton on a machine without a GPU only with ``CUDA_VISIBLE_DEVICES``
empty at import, so the comparisons run in a child process (``idm_vllm_check.py``) where
vLLM's ``DeepseekV32IndexerMetadataBuilder.build`` runs every one of its kernels in
Triton's interpreter: decode steps (plain, CUDA-graph padded, all padding, decode tokens
past the requests and requests without tokens) taken over by dsv4, and the steps that
stay vLLM's (prefill, mixed, a step vLLM flattens, an empty step, speculative decoding,
a DeepSeek-V3.2 indexer), each built by two poisoned builders with the plugin off and on
and compared bit for bit: the metadata and every builder tensor, whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builder_method_checks import run_check

CHECK = Path(__file__).with_name("idm_vllm_check.py")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_check(CHECK, tmp_path_factory.mktemp("idm") / "check.json")


def test_vllms_own_build_ran_with_real_triton(check: dict[str, Any]) -> None:
    assert check["has_triton"] is True
    assert check["patched"] and check["restored"]


def test_every_step_is_bit_identical_with_the_plugin_on_and_off(check: dict[str, Any]) -> None:
    for row in check["cases"]:
        assert row["differences"] == [], (check["seed"], row)
        assert row["errors"] == [None, None], row
        assert row["off_hits"] == 0, row


def test_exactly_the_covered_decode_steps_were_taken_over(check: dict[str, Any]) -> None:
    for row in check["cases"]:
        assert row["hit"] is row["expected_hit"], row
        if row["expected_hit"]:
            assert row["decode"] and row["errors"] == [None, None], row
    covered = sum(r["expected_hit"] for r in check["cases"])
    assert covered >= 9 and check["hits"] == covered
    assert any(not r["expected_hit"] and r["decode"] for r in check["cases"])  # a vLLM decode
