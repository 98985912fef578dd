"""Inside vLLM 0.33.0's real code: dsv4's SWA decode build against vLLM's own build.

vLLM keeps its real Triton on a machine without a GPU only with ``CUDA_VISIBLE_DEVICES``
empty at import, so the comparisons run in a child process (``swd_vllm_check.py``) where
vLLM's ``DeepseekSparseSWAMetadataBuilder.build`` runs every one of its kernels in
Triton's interpreter: decode steps and mixed steps (plain, CUDA-graph padded, all
padding, decode tokens past the requests and requests without tokens, padding tokens past
a prefill, a given replay start, FlashMLA's subclass, another window, and a whole step of
both SWA groups through vLLM's ``build_attn_metadata``, whose second builder reuses the
first one's token map) taken over by dsv4, and the steps that stay vLLM's (prefill only, a
prefill before the decodes, an empty step, speculative decoding, DSpark, a non-causal
step, another subclass), each built by two poisoned builders with the plugin
off and on and compared bit for bit: the metadata and every builder tensor, whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builder_method_checks import run_check

CHECK = Path(__file__).with_name("swd_vllm_check.py")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_check(CHECK, tmp_path_factory.mktemp("swd") / "check.json")


def test_vllms_own_build_ran_with_real_triton(check: dict[str, Any]) -> None:
    assert check["has_triton"] is True
    assert check["patched"] and check["restored"]


def test_every_step_is_bit_identical_with_the_plugin_on_and_off(check: dict[str, Any]) -> None:
    for row in check["cases"]:
        assert row["differences"] == [], (check["seed"], row)
        assert row["off_hits"] == 0, row
        assert row["errors"][0] == row["errors"][1], row


def test_exactly_the_covered_steps_were_taken_over(check: dict[str, Any]) -> None:
    for row in check["cases"]:
        assert row["hits"] == row["expected_hits"], row
        if row["expected_hits"]:
            assert row["decode"] and row["errors"] == [None, None], row
    covered = sum(r["expected_hits"] for r in check["cases"])
    assert covered >= 21 and check["hits"] == covered
    mixed = [r for r in check["cases"] if r["case"].startswith("mixed") and r["expected_hits"]]
    assert len(mixed) == 5, mixed
    errors = {r["case"]: r["errors"][0] for r in check["cases"] if r["errors"][0]}
    assert list(errors) == ["non-causal-step"], errors  # vLLM's own assertion, both sides
    assert any(not r["expected_hits"] and r["decode"] for r in check["cases"])  # a vLLM decode
