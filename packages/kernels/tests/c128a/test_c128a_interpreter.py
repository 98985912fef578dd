"""The Triton kernel, run by Triton's CPU interpreter, against the reference.

Every check compares whole buffers: the written region must equal the reference and
every other element must still hold the poison the buffers were filled with.
"""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a import kernel as _c128a_kernel
from dsv4_kernels.c128a import reference
from dsv4_kernels.c128a.testing import (
    Batch,
    assert_same_buffers,
    assert_untouched,
    assert_views,
    make_batch,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = (1, 1024, 4, False)
TILES = [
    BASELINE,
    (16, 256, 4, True),
    (4, 128, 2, True),
    (2, 512, 8, False),
    (8, 128, 1, False),
    (32, 128, 4, True),
    (1, 128, 4, True),
    (64, 256, 16, False),
    (128, 512, 16, True),
]
BLOCK_SIZES = [1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 64]
RATIOS = [128, 128, 128, 4, 100]


def run_tile(batch: Batch, tile: tuple[int, int, int, bool]) -> tuple:
    tpp, cpp, warps, split = tile
    return batch.call(
        c128a.build_c128a_topk_metadata,
        tokens_per_program=tpp,
        cols_per_program=cpp,
        num_warps=warps,
        split_width=split,
    )


def check_against_reference(batch: Batch, tiles: list[tuple[int, int, int, bool]]) -> None:
    expected = batch.fresh()
    assert_views(expected.call(reference.build_c128a_topk_metadata), expected)
    assert_untouched(expected)
    for tile in tiles:
        actual = batch.fresh()
        views = run_tile(actual, tile)
        assert_views(views, actual)
        assert_untouched(actual)
        assert_same_buffers(actual, expected)


def _near_multiples(draw: st.DrawFn, ratio: int, high: int) -> int:
    kind = draw(st.sampled_from(["edge128", "edge_ratio", "any", "huge", "negative"]))
    if kind == "edge128":
        return max(0, draw(st.integers(0, high // (128 * ratio) + 1)) * 128 * ratio
                   + draw(st.integers(-2, 2)))
    if kind == "edge_ratio":
        return max(0, draw(st.integers(0, high // ratio + 1)) * ratio + draw(st.integers(-2, 2)))
    if kind == "huge":
        return draw(st.integers(high, 2**40))
    if kind == "negative":  # vLLM never sends these; the semantics are still defined
        return draw(st.integers(-(2**20), -1))
    return draw(st.integers(0, high))


@st.composite
def batches(draw: st.DrawFn, max_decode: int = 24, max_prefill: int = 24) -> Batch:
    ratio = draw(st.sampled_from(RATIOS))
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    capacity = 128 * draw(st.sampled_from(range(1, 18)))
    width = 128 * draw(st.sampled_from(range(1, min(capacity // 128, 16) + 1)))
    view_full = draw(st.booleans())
    num_decode = draw(st.integers(0, max_decode))
    num_prefill = draw(st.integers(0, max_prefill))
    high = (width + 64) * ratio

    # Decode tokens come in runs: one request's speculative tokens sit at
    # consecutive positions; runs of different requests may share a request too.
    num_reqs = draw(st.integers(1, 40))
    dec_pos: list[int] = []
    dec_req: list[int] = []
    while len(dec_pos) < num_decode:
        run = min(draw(st.integers(1, 4)), num_decode - len(dec_pos))
        start = _near_multiples(draw, ratio, high)
        req = draw(st.integers(0, num_reqs - 1))
        dec_pos += [start + i for i in range(run)]
        dec_req += [req] * run
    padding = draw(st.lists(st.booleans(), min_size=num_decode, max_size=num_decode))
    if draw(st.booleans()):
        start = draw(st.integers(0, high))
        pre_pos = list(range(start, start + num_prefill))
    else:
        pre_pos = [_near_multiples(draw, ratio, high) for _ in range(num_prefill)]

    return make_batch(
        num_decode=num_decode,
        num_prefill=num_prefill,
        context=high,
        capacity=capacity,
        block_size=block_size,
        num_reqs=num_reqs,
        compress_ratio=ratio,
        seed=draw(st.integers(0, 2**31)),
        decode_positions=dec_pos,
        prefill_positions=pre_pos,
        decode_requests=dec_req,
        padding=padding,
        width=width,
        decode_view_width=capacity if view_full else None,
        spare_rows=draw(st.integers(0, 3)),
        table_spare_cols=draw(st.integers(0, 3)),
        table_stride_pad=draw(st.integers(0, 9)),
        poison=draw(st.integers(-(2**31), -(2**20))),
    )


def describe(batch: Batch) -> None:
    """Label the example for ``--hypothesis-show-statistics``."""
    d, p = batch.num_decode_tokens, batch.num_prefill_tokens
    event(f"tokens: {'mixed' if d and p else 'decode' if d else 'prefill' if p else 'none'}")
    event(f"tokens >= 8: {d + p >= 8}")
    event(f"width: {'128' if batch.width == 128 else '<= 1024' if batch.width <= 1024 else '> 1024'}")
    event(f"decode view: {'capacity' if batch.decode_view_width else 'width'}")
    event(f"padding tokens: {bool((batch.slot_mapping[:d] < 0).any())}")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(), tile=st.sampled_from(TILES))
def test_kernel_matches_reference(batch: Batch, tile: tuple[int, int, int, bool]) -> None:
    describe(batch)
    check_against_reference(batch, [tile])


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(max_decode=12, max_prefill=12))
def test_every_tile_bit_identical_to_baseline(batch: Batch) -> None:
    describe(batch)
    check_against_reference(batch, TILES)


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize(
    ("num_decode", "num_prefill", "context", "capacity", "block_size"),
    [
        (40, 0, 32768, 8192, 2),  # the anchors' decode shape, scaled down
        (0, 48, 32768, 8192, 2),  # the anchors' prefill shape, scaled down
        (5, 37, 200_000, 2048, 3),  # mixed, width capped by the capacity
        (3, 2, 2_000_000, 2048, 64),  # long context: width = capacity
    ],
)
def test_anchor_like_batches(
    tile: tuple[int, int, int, bool],
    num_decode: int,
    num_prefill: int,
    context: int,
    capacity: int,
    block_size: int,
) -> None:
    batch = make_batch(
        num_decode=num_decode,
        num_prefill=num_prefill,
        context=context,
        capacity=capacity,
        block_size=block_size,
        num_reqs=7,
        seed=num_decode * 1000 + num_prefill,
        padding=[i % 5 == 3 for i in range(num_decode)],
    )
    check_against_reference(batch, [tile])


def test_tile_straddling_the_decode_prefill_boundary() -> None:
    # 16-token tiles over 21 decode + 30 prefill tokens: tiles 1 and 2 hold both kinds.
    batch = make_batch(num_decode=21, num_prefill=30, context=40_000, capacity=384, seed=3)
    check_against_reference(batch, [(16, 128, 4, True), (16, 256, 4, False), (64, 128, 4, True)])


def test_zero_tokens_returns_empty_views_and_launches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = make_batch(num_decode=0, num_prefill=0, context=5000, capacity=256, spare_rows=3)

    class NoLaunch:
        def __getitem__(self, grid: object) -> None:
            raise AssertionError("a launch happened for an empty batch")

    monkeypatch.setattr(_c128a_kernel, "c128a_topk_metadata_kernel", NoLaunch())
    views = batch.call(c128a.build_c128a_topk_metadata)
    assert [tuple(v.shape) for v in views] == [(0, batch.width), (0,), (0, batch.width)]
    assert_views(views, batch)
    assert_untouched(batch)


def test_decode_view_width_is_a_view_not_a_write() -> None:
    # On sm120 the decode view is full width: columns past the active width are
    # exposed but must not be written.
    batch = make_batch(
        num_decode=6, num_prefill=2, context=30_000, capacity=640, decode_view_width=640, seed=9
    )
    assert batch.width == 256
    views = batch.call(c128a.build_c128a_topk_metadata, tokens_per_program=4,
                       cols_per_program=128, split_width=True)
    assert views[0].shape == (6, 640) and views[0].stride() == (640, 1)
    assert bool((views[0][:, 256:] == batch.poison).all())
    assert_untouched(batch)


def test_rows_are_read_at_the_capacity_stride() -> None:
    # The upstream revert: a consumer reads row t at base + t * capacity. Check the
    # views by walking the raw storage that way.
    batch = make_batch(num_decode=9, num_prefill=11, context=20_000, capacity=1024, seed=4)
    expected = batch.fresh()
    expected.call(reference.build_c128a_topk_metadata)
    decode, _, prefill = batch.call(c128a.build_c128a_topk_metadata,
                                       tokens_per_program=8, cols_per_program=128,
                                       split_width=True)
    flat = batch.global_decode_buffer.view(-1)
    for t in range(batch.num_decode_tokens):
        row = flat[t * batch.capacity : t * batch.capacity + batch.width]
        assert torch.equal(row, decode[t]), t
        assert torch.equal(row, expected.global_decode_buffer[t, : batch.width]), t
    flat = batch.prefill_buffer.view(-1)
    for t in range(batch.num_prefill_tokens):
        row = flat[t * batch.capacity : t * batch.capacity + batch.width]
        assert torch.equal(row, prefill[t]), t


def test_prefill_only_batch_may_pass_an_empty_block_table() -> None:
    # vLLM slices the table to the decode requests: none in a prefill-only step.
    batch = make_batch(num_decode=0, num_prefill=19, context=70_000, capacity=768, seed=6)
    batch.block_table = torch.empty((0, 5), dtype=torch.int32)
    check_against_reference(batch, [BASELINE, (16, 256, 4, True)])


@pytest.mark.parametrize(
    "ratio",
    [
        (2**31 - 1) // 128,  # width * ratio just below 2**31: the 32-bit division
        2**31 // 128,  # width * ratio == 2**31: the 64-bit division
        2**33 + 5,  # the ratio itself past int32
    ],
)
def test_visible_count_on_both_sides_of_the_32_bit_division(ratio: int) -> None:
    # The kernel divides in int32 only while width * compress_ratio < 2**31; both
    # branches must give the reference's count, at the multiples of the ratio, at the
    # clamp limit and far beyond it.
    width = 128
    limit = width * ratio
    near = [k * ratio + d for k in (0, 1, 2, 63, 127, 128, 129) for d in (-2, -1, 0, 1)]
    edges = [limit - 2, limit - 1, limit, limit + 1, 2**40, 2**62, -1, -2, -ratio - 1]
    positions = near + edges
    batch = make_batch(
        num_decode=6,
        num_prefill=len(positions),
        context=5000,
        capacity=256,
        compress_ratio=ratio,
        decode_positions=positions[-6:],
        prefill_positions=positions,
        width=width,
        seed=ratio % 1000,
    )
    check_against_reference(batch, [BASELINE, (8, 128, 4, False), (64, 128, 2, True)])
