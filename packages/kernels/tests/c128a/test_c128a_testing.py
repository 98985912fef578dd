"""The shipped batch generator and assertion helpers do what benchmarks rely on."""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels.c128a.testing import (
    POISON,
    active_width,
    assert_same_buffers,
    assert_untouched,
    capacity_for,
    make_batch,
    next_power_of_2,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("max_model_len", "capacity"),
    [(1_048_576, 8192), (32_768, 256), (262_144, 2048), (100_000, 896), (1000, 128)],
)
def test_capacity_matches_vllm_formula(max_model_len: int, capacity: int) -> None:
    assert capacity_for(max_model_len) == capacity


@pytest.mark.parametrize(
    ("max_seq_len", "capacity", "width"),
    [
        (32_768, 8192, 256),  # the anchors' shape
        (1_048_576, 8192, 8192),  # a 1M context fills the capacity
        (1, 8192, 128),  # at least 128
        (6_543 + 2_494, 640, 128),  # the seed's accuracy run: width 128, stride 640
        (300_000, 2048, 2048),  # capped by the capacity
        (128 * 129, 8192, 256),  # 129 compressed entries round up to 256
    ],
)
def test_active_width_matches_vllm_formula(max_seq_len: int, capacity: int, width: int) -> None:
    assert active_width(max_seq_len, capacity) == width


def test_next_power_of_2() -> None:
    assert [next_power_of_2(v) for v in (0, 1, 2, 3, 4, 5, 127, 128, 129)] == [
        1, 1, 2, 4, 4, 8, 128, 128, 256,
    ]


def test_anchor_shape_defaults() -> None:
    batch = make_batch(num_decode=300, num_prefill=200, context=32_768, capacity=8192,
                       num_reqs=64, seed=1)
    assert batch.width == 256 and batch.block_size == 2 and batch.capacity == 8192
    dec = batch.positions[:300]
    assert int(dec.min()) >= 16_384 and int(dec.max()) < 32_768
    assert torch.equal(batch.positions[300:], torch.arange(32_768 - 200, 32_768))
    assert int(batch.token_to_req_indices[:300].max()) < 64
    assert batch.global_decode_buffer.stride(0) == 8192
    for buf in batch.buffers:
        assert bool((buf == POISON).all())


@settings(max_examples=30)
@given(
    num_decode=st.integers(1, 40),
    num_reqs=st.integers(1, 9),
    block_size=st.sampled_from([1, 2, 3, 8, 64]),
    context=st.integers(200, 400_000),
    seed=st.integers(0, 2**31),
)
def test_readable_block_table_entries_are_distinct_physical_ids(
    num_decode: int, num_reqs: int, block_size: int, context: int, seed: int
) -> None:
    batch = make_batch(num_decode=num_decode, num_prefill=0, context=context,
                       block_size=block_size, num_reqs=num_reqs, seed=seed)
    table = batch.block_table
    assert table.stride(0) > table.shape[1]  # a row stride wider than the rows
    req = batch.token_to_req_indices[:num_decode].long()
    n = torch.div(batch.positions + 1, 128, rounding_mode="floor").clamp(max=batch.width)
    needed = torch.zeros(num_reqs, dtype=torch.long).scatter_reduce(
        0, req, -(-n // block_size), reduce="amax"
    )
    readable = torch.arange(table.shape[1])[None, :] < needed[:, None]
    ids = table[readable]
    # Readable entries are distinct physical ids drawn from a permutation.
    assert ids.unique().numel() == ids.numel()
    assert bool((ids >= 0).all()) and bool((ids < table.numel()).all())


def test_seed_reproduces_and_differs() -> None:
    a = make_batch(num_decode=20, num_prefill=5, context=50_000, seed=7)
    b = make_batch(num_decode=20, num_prefill=5, context=50_000, seed=7)
    c = make_batch(num_decode=20, num_prefill=5, context=50_000, seed=8)
    assert torch.equal(a.positions, b.positions) and torch.equal(a.block_table, b.block_table)
    assert not torch.equal(a.positions, c.positions)


def test_padding_flags_make_negative_slots() -> None:
    flags = [True, False, True, False, False]
    batch = make_batch(num_decode=5, num_prefill=0, context=9_000, padding=flags, seed=2)
    assert (batch.slot_mapping[:5] < 0).tolist() == flags


def test_helpers_catch_a_stray_write_and_a_wrong_value() -> None:
    batch = make_batch(num_decode=3, num_prefill=2, context=20_000, capacity=512, seed=1)
    assert_untouched(batch)
    other = batch.fresh()
    assert_same_buffers(batch, other)
    batch.global_decode_buffer[1, batch.width] = 0  # one column past the width
    with pytest.raises(AssertionError, match="global_decode_buffer: 1 elements outside"):
        assert_untouched(batch)
    other.prefill_buffer[0, 0] = 5
    with pytest.raises(AssertionError, match=r"prefill_buffer: 1 elements differ"):
        assert_same_buffers(other, batch.fresh())


def test_bad_generator_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="decode_requests"):
        make_batch(num_decode=2, num_prefill=0, context=500, num_reqs=2,
                   decode_requests=[0, 2])
    with pytest.raises(ValueError, match="expected 2 and 0"):
        make_batch(num_decode=2, num_prefill=0, context=500, decode_positions=[1])
