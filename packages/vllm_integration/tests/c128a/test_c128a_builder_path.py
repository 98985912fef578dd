"""Through vLLM's real metadata builder: start-up hook, then ``_build_c128a_metadata``.

The builder is vLLM 0.33.0's own class, built on the CPU from minimal configs; its
``_build_c128a_metadata`` looks ``build_c128a_topk_metadata`` up as a module global,
so these tests show the patch is on the path vLLM actually takes. vLLM's Triton is
off on a CPU, so the original is a spy that records and computes the reference.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import triton
from c128a_batches import table_toml, vllm_width
from dsv4_kernels.c128a import reference
from dsv4_policy.kernels import c128a as policy
from dsv4_vllm import plugin
from vllm_steps import builder as _builder
from vllm_steps import step as _step


@pytest.fixture
def vllm_path(pristine, monkeypatch):
    """Spy original, register(), real Triton helpers for the builder's width formula."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = pristine.build_c128a_topk_metadata

    @functools.wraps(real)
    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return reference.build_c128a_topk_metadata(
            *args, width=kwargs["max_compressed_tokens"]
        )

    pristine.build_c128a_topk_metadata = spy
    monkeypatch.setattr(pristine, "triton", triton)  # vLLM's CPU placeholder lacks it
    assert plugin.register({}) is True
    dispatch = plugin.active("c128a")
    warmed: list[tuple[Any, ...]] = []

    def warm(arch: str, max_model_len: int, device: Any, *, table: Any) -> int:
        warmed.append((arch, max_model_len, str(device)))
        return 0

    dispatch.configure(warm=warm)
    return pristine, dispatch, calls, warmed


def test_builder_start_up_records_the_deployment_and_warms_up(vllm_path) -> None:
    module, dispatch, _calls, warmed = vllm_path
    _builder(module, 100_000)  # CPU, no arch: recorded, nothing to warm
    assert dispatch.max_model_lens == {(896, 128): 100_000} and warmed == []
    dispatch.configure(arch_of=lambda device: "sm90")
    builder = _builder(module, 262_144)
    assert builder.c128a_max_compressed == 2048  # vLLM's own constructor ran
    assert warmed == [("sm90", 262_144, "cpu")]
    _builder(module, 262_144)
    assert warmed == [("sm90", 262_144, "cpu")]  # once per deployment


def test_a_miss_reaches_vllms_function_with_vllms_own_arguments(vllm_path) -> None:
    module, dispatch, calls, _warmed = vllm_path
    builder = _builder(module, 65536)
    cm, req_ids = _step(torch.Generator().manual_seed(1), 65536, 20_000, 3, [4, 2])
    out = builder._build_c128a_metadata(cm, req_ids)
    (args, kwargs), = calls
    assert kwargs == {"max_compressed_tokens": vllm_width(20_000, 512)}
    assert len(args) == 10 and args[1] == 128 and args[2] == 3 and args[5] == 2
    assert args[3] is req_ids and args[6] is cm.slot_mapping
    assert args[7] is builder.c128a_global_decode_buffer
    assert args[9] is builder.c128a_prefill_buffer
    assert torch.equal(args[0], cm.positions[:9]) and torch.equal(args[4], cm.block_table_tensor[:3])
    assert out["c128a_global_decode_topk_indices"].shape == (3, 1, 256)
    assert dispatch.misses == 1 and dispatch.hits == 0


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_a_hit_through_the_builder_equals_the_reference(vllm_path, arch) -> None:
    module, dispatch, calls, warmed = vllm_path
    table = policy.loads_table(table_toml([{
        "id": "builder-test", "match": {"arch": arch},
        "launch": {"tokens_per_program": 2, "cols_per_program": 128, "num_warps": 1,
                   "split_width": True},
    }]))
    dispatch.configure(table=table, arch_of=lambda device: arch)
    builder = _builder(module, 65536)
    assert warmed == [(arch, 65536, "cpu")]
    gen = torch.Generator().manual_seed(2)
    for msl, decodes, prefills in ((300, 2, [3]), (20_000, 4, []), (65536, 1, [5, 2])):
        cm, req_ids = _step(gen, 65536, msl, decodes, prefills)
        num_tokens = cm.num_actual_tokens
        for buf in (builder.c128a_global_decode_buffer, builder.c128a_prefill_buffer,
                    builder.c128a_decode_lens_buffer):
            buf.random_(1 << 20, 1 << 30, generator=gen)
        expect = [b.clone() for b in (builder.c128a_global_decode_buffer,
                                      builder.c128a_decode_lens_buffer,
                                      builder.c128a_prefill_buffer)]
        width = vllm_width(msl, 512)
        reference.build_c128a_topk_metadata(
            cm.positions[:num_tokens], 128, decodes, req_ids, cm.block_table_tensor[:decodes],
            2, cm.slot_mapping, *expect, width=width,
            decode_view_width=512 if arch == "sm120" else width,
        )
        out = builder._build_c128a_metadata(cm, req_ids)
        assert torch.equal(builder.c128a_global_decode_buffer, expect[0])
        assert torch.equal(builder.c128a_decode_lens_buffer, expect[1])
        assert torch.equal(builder.c128a_prefill_buffer, expect[2])
        decode = out["c128a_global_decode_topk_indices"]
        assert decode.shape == (decodes, 1, 512 if arch == "sm120" else width)
        assert decode.stride(0) == 512
        if prefills:
            assert out["c128a_prefill_topk_indices"].shape == (sum(prefills), width)
            assert out["c128a_prefill_topk_indices"].stride(0) == 512
    assert calls == [] and dispatch.hits == 3
