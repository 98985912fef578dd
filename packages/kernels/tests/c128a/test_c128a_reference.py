"""The reference against a literal, element-by-element reading of the semantics.

The reference is the specification the kernel is held to, so it is itself checked
against the plainest possible transcription: Python loops over tokens and columns
with Python integers, no torch arithmetic.
"""

from __future__ import annotations

import torch
from dsv4_kernels.c128a import reference
from dsv4_kernels.c128a.testing import Batch, assert_untouched, assert_views, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st


def trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def wrap_int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def literal(batch: Batch) -> tuple[list[list[int]], list[int], list[list[int]]]:
    """Rows the call must write, computed one element at a time."""
    positions = batch.positions.tolist()
    req = batch.token_to_req_indices.tolist()
    slots = batch.slot_mapping.tolist()
    table = batch.block_table.tolist()
    bs, width, ratio = batch.block_size, batch.width, batch.compress_ratio
    decode_rows, lens, prefill_rows = [], [], []
    for t, pos in enumerate(positions):
        n = min(trunc_div(pos + 1, ratio), width)
        if t < batch.num_decode_tokens:
            row = []
            for j in range(width):
                if j < n:
                    row.append(wrap_int32(table[req[t]][j // bs] * bs + j % bs))
                else:
                    row.append(-1)
            decode_rows.append(row)
            lens.append(max(n, 0) if slots[t] >= 0 else 0)
        else:
            prefill_rows.append([j if j < n else -1 for j in range(width)])
    return decode_rows, lens, prefill_rows


@settings(max_examples=40)
@given(
    num_decode=st.integers(0, 6),
    num_prefill=st.integers(0, 6),
    context=st.integers(1, 300_000),
    capacity_blocks=st.integers(1, 6),
    block_size=st.sampled_from([1, 2, 3, 5, 16, 64]),
    ratio=st.sampled_from([128, 4, 100]),
    seed=st.integers(0, 2**31),
    negative=st.booleans(),
)
def test_reference_matches_literal_semantics(
    num_decode: int, num_prefill: int, context: int, capacity_blocks: int, block_size: int,
    ratio: int, seed: int, negative: bool,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    decode_positions = torch.randint(0, context, (num_decode,), generator=gen).tolist()
    if negative and num_decode:
        decode_positions[0] = -int(torch.randint(1, 10**6, (1,), generator=gen))
    batch = make_batch(
        num_decode=num_decode, num_prefill=num_prefill, context=context,
        capacity=128 * capacity_blocks, block_size=block_size, compress_ratio=ratio,
        num_reqs=3, generator=gen, decode_positions=decode_positions,
        padding=[bool(i % 2) for i in range(num_decode)],
    )
    views = batch.call(reference.build_c128a_topk_metadata)
    assert_views(views, batch)
    assert_untouched(batch)
    decode_rows, lens, prefill_rows = literal(batch)
    assert views[0][:, : batch.width].tolist() == decode_rows
    assert views[1].tolist() == lens
    assert views[2].tolist() == prefill_rows


def test_reference_on_a_hand_checked_batch() -> None:
    """Three tokens worked out by hand (ratio 128, block size 2, width 128)."""
    batch = make_batch(
        num_decode=2, num_prefill=1, context=1000, capacity=256, block_size=2, num_reqs=2,
        decode_positions=[383, 126], prefill_positions=[255], decode_requests=[1, 0],
        padding=[False, True], width=128, seed=5,
    )
    table = batch.block_table
    reference_views = batch.call(reference.build_c128a_topk_metadata)
    decode, lens, prefill = (v.tolist() for v in reference_views)
    # Token 0: position 383 -> 384 // 128 = 3 visible: blocks 0, 0, 1 of request 1.
    b0, b1 = int(table[1, 0]), int(table[1, 1])
    assert decode[0][:4] == [2 * b0, 2 * b0 + 1, 2 * b1, -1]
    assert decode[0][4:] == [-1] * 124
    # Token 1: position 126 -> 127 // 128 = 0 visible; a padding token has length 0.
    assert decode[1] == [-1] * 128
    assert lens == [3, 0]
    # Prefill token: position 255 -> 2 visible local indices.
    assert prefill[0][:3] == [0, 1, -1]
