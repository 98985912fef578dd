"""A table hit runs dsv4 kernels and equals the reference, with the capacity stride.

These run on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``, set by
the ``vllm`` target). The arch is injected, since a CPU tensor has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from c128a_batches import Batch, make_batch, table_toml
from dsv4_kernels.c128a import reference
from dsv4_policy.kernels import c128a as policy
from dsv4_vllm.kernels.c128a import C128ADispatch
from hypothesis import given, settings
from hypothesis import strategies as st

TILES = [(1, 1024, 4, False), (4, 256, 2, True), (2, 128, 1, True), (8, 512, 4, False)]


def _never_called(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a table hit must not call vLLM's original function")


def _table(arch: str, tile: tuple[int, int, int, bool]) -> policy.Table:
    tpp, cpp, warps, split = tile
    return policy.loads_table(table_toml([{
        "id": f"test-{arch}",
        "match": {"arch": arch, "compress_ratio": 128},
        "launch": {"tokens_per_program": tpp, "cols_per_program": cpp, "num_warps": warps,
                   "split_width": split},
    }]))


def _expected(batch: Batch, decode_view_width: int) -> tuple[Batch, tuple[torch.Tensor, ...]]:
    fresh = batch.fresh_buffers()
    views = reference.build_c128a_topk_metadata(
        *fresh.args(), width=batch.width, decode_view_width=decode_view_width
    )
    return fresh, views


def assert_same_result(got: Batch, got_views, want: Batch, want_views) -> None:
    """Whole buffers equal (so nothing outside the width was touched), views alike."""
    for name in ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    bases = (got.global_decode_buffer, got.decode_lens_buffer, got.prefill_buffer)
    want_bases = (want.global_decode_buffer, want.decode_lens_buffer, want.prefill_buffer)
    for view, base, ref, ref_base in zip(got_views, bases, want_views, want_bases, strict=True):
        assert view.shape == ref.shape
        assert view.stride() == ref.stride() == base.stride()[: view.dim()]
        if view.numel():  # an empty view has no storage address to compare
            assert view.data_ptr() == base.data_ptr()
            assert ref.data_ptr() == ref_base.data_ptr()
        assert torch.equal(view, ref)


shapes = st.fixed_dictionaries({
    "max_model_len": st.sampled_from([4096, 40_000, 65536, 262_144]),
    "fraction": st.floats(0.001, 1.0),
    "num_decode": st.integers(0, 5),
    "num_prefill": st.integers(0, 5),
    "tile": st.sampled_from(TILES),
    "arch": st.sampled_from(["sm90", "sm100", "sm120", "sm86"]),
    "seed": st.integers(0, 2**31 - 1),
})


@settings(max_examples=25)
@given(shapes)
def test_hits_equal_the_reference_and_keep_the_capacity_stride(shape: dict[str, Any]) -> None:
    msl = max(1, int(shape["max_model_len"] * shape["fraction"]))
    batch = make_batch(torch.Generator().manual_seed(shape["seed"]),
                       max_model_len=shape["max_model_len"], max_seq_len=msl,
                       num_decode=shape["num_decode"], num_prefill=shape["num_prefill"],
                       rows=12)
    arch = shape["arch"]
    dispatch = C128ADispatch(_never_called, table=_table(arch, shape["tile"]),
                             arch_of=lambda device: arch, lazy_warmup=False)
    want, want_views = _expected(
        batch, batch.capacity if arch == "sm120" else batch.width
    )
    views = dispatch(*batch.args(), max_compressed_tokens=batch.width)
    assert dispatch.hits == 1 and dispatch.misses == 0
    assert_same_result(batch, views, want, want_views)
    decode_view = views[0]
    assert decode_view.stride(0) == batch.capacity
    assert decode_view.shape[1] == (batch.capacity if arch == "sm120" else batch.width)
    assert views[2].shape[1] == batch.width and views[2].stride(0) == batch.capacity


def test_the_resolved_key_describes_the_call() -> None:
    batch = make_batch(torch.Generator().manual_seed(3), max_model_len=100_000,
                       max_seq_len=20_000, num_decode=3, num_prefill=4, rows=8)
    asked: list[policy.Key] = []

    def resolve(key: policy.Key) -> policy.Launch:
        asked.append(key)
        return dataclasses.replace(policy.baseline(key), source="table:probe")

    dispatch = C128ADispatch(_never_called, resolve=resolve, arch_of=lambda d: "sm90",
                             lazy_warmup=False)
    dispatch(*batch.args(), max_compressed_tokens=batch.width)
    dispatch(*batch.args(), max_compressed_tokens=batch.width)
    dispatch.record_deployment(100_000, 128)
    dispatch(*batch.args(), max_compressed_tokens=batch.width)
    # 100_000 tokens -> 782 compressed -> capacity 896; 20_000 // 128 = 156 -> width 256.
    assert batch.capacity == 896 and batch.width == 256
    first = policy.Key(arch="sm90", compress_ratio=128, max_model_len=896 * 128,
                       max_seq_len=256 * 128, num_decode_tokens=3, num_prefill_tokens=4,
                       block_size=2)
    assert asked == [first, dataclasses.replace(first, max_model_len=100_000)]
    assert policy.baseline(asked[0]).width == batch.width
    assert policy.capacity(asked[0].max_model_len, 128) == batch.capacity


def test_width_equal_to_a_capacity_that_is_not_a_power_of_two() -> None:
    """max_model_len 100_000: capacity 896; a long step gets width 896, still a hit."""
    batch = make_batch(torch.Generator().manual_seed(4), max_model_len=100_000,
                       max_seq_len=99_000, num_decode=2, num_prefill=2, rows=4)
    assert batch.width == batch.capacity == 896
    dispatch = C128ADispatch(_never_called, table=_table("sm90", TILES[1]),
                             arch_of=lambda d: "sm90", lazy_warmup=False)
    dispatch.record_deployment(100_000, 128)
    want, want_views = _expected(batch, batch.width)
    views = dispatch(*batch.args(), max_compressed_tokens=batch.width)
    assert dispatch.hits == 1
    assert_same_result(batch, views, want, want_views)


def test_first_hit_warms_up_once_per_deployment() -> None:
    warmed: list[tuple[Any, ...]] = []

    def warm(arch: str, max_model_len: int, device: Any, *, table: Any) -> int:
        warmed.append((arch, max_model_len, str(device), table))
        return 0

    table = _table("sm90", TILES[2])
    dispatch = C128ADispatch(_never_called, table=table, arch_of=lambda d: "sm90", warm=warm)
    gen = torch.Generator().manual_seed(5)
    for msl in (300, 5000, 30_000, 60_000):
        batch = make_batch(gen, max_model_len=65536, max_seq_len=msl, num_decode=1,
                           num_prefill=1, rows=2)
        dispatch(*batch.args(), max_compressed_tokens=batch.width)
    assert warmed == [("sm90", 65536, "cpu", table)]
    assert dispatch.hits == 4


def test_a_failed_warm_up_falls_back_to_vllm_for_good(dsv4_log) -> None:
    calls: list[tuple[Any, ...]] = []

    def original(*args: Any, **kwargs: Any) -> str:
        calls.append(args)
        return "vllm"

    def warm(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("compile failed")

    dispatch = C128ADispatch(original, table=_table("sm90", TILES[1]),
                             arch_of=lambda d: "sm90", warm=warm)
    batch = make_batch(torch.Generator().manual_seed(6), max_model_len=65536,
                       max_seq_len=9000, num_decode=1, num_prefill=1, rows=2)
    assert dispatch(*batch.args(), max_compressed_tokens=batch.width) == "vllm"
    assert dispatch(*batch.args(), max_compressed_tokens=batch.width) == "vllm"
    assert len(calls) == 2 and not dispatch.enabled and dispatch.hits == 0
    assert any("warm-up failed" in r.getMessage() for r in dsv4_log)


@pytest.mark.parametrize("arch", ["sm90", "sm120"])
def test_real_warm_up_runs_under_the_interpreter(arch: str) -> None:
    """The default warm-up (dsv4 kernels' own) on the first hit: nothing to compile here."""
    dispatch = C128ADispatch(_never_called, table=_table(arch, TILES[3]),
                             arch_of=lambda d: arch)
    batch = make_batch(torch.Generator().manual_seed(12), max_model_len=65536,
                       max_seq_len=9000, num_decode=2, num_prefill=1, rows=4)
    want, want_views = _expected(batch, batch.capacity if arch == "sm120" else batch.width)
    views = dispatch(*batch.args(), max_compressed_tokens=batch.width)
    assert dispatch.hits == 1 and dispatch.enabled
    assert_same_result(batch, views, want, want_views)
