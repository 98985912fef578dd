"""The compiled kernel on a CUDA device: realistic sizes, CUDA graphs, compile counts.

Every comparison is against :mod:`dsv4_kernels.c128a.reference` run on the same device,
over whole buffers: the written region must match and everything else must keep
what it held before the launch.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a import reference
from dsv4_kernels.c128a.testing import (
    POISON,
    Batch,
    active_width,
    assert_same_buffers,
    assert_untouched,
    assert_views,
    make_batch,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.gpu

BASELINE = (1, 1024, 4, False)
TUNED = [
    (16, 256, 4, True),
    (8, 128, 4, True),
    (4, 512, 8, False),
    (1, 128, 4, True),
    (1, 1024, 8, True),
    (32, 128, 4, False),
    (64, 256, 8, True),
    (128, 128, 16, True),
]
TILES = [BASELINE, *TUNED]


def tile_id(tile: tuple[int, int, int, bool]) -> str:
    return "x".join(map(str, tile))


def run_tile(batch: Batch, tile: tuple[int, int, int, bool]) -> tuple:
    tpp, cpp, warps, split = tile
    return batch.call(
        c128a.build_c128a_topk_metadata,
        tokens_per_program=tpp,
        cols_per_program=cpp,
        num_warps=warps,
        split_width=split,
    )


def expected_for(batch: Batch) -> Batch:
    expected = batch.fresh()
    expected.call(reference.build_c128a_topk_metadata)
    assert_untouched(expected)
    return expected


# ---------------------------------------------------------------- realistic sizes
# (id, decode tokens, prefill tokens, context, capacity, requests, block size)
SHAPES = [
    ("anchor-decode-32k", 32768, 0, 32_768, 8192, 64, 2),
    ("anchor-prefill-32k", 0, 32768, 32_768, 8192, 64, 2),
    ("prefill-32k-at-1M", 0, 32768, 1_048_576, 8192, 1, 2),
    ("decode-4k-at-1M", 4096, 0, 1_048_576, 8192, 256, 2),
    ("mixed-at-1M", 512, 8192, 1_048_576, 8192, 128, 2),
    ("one-decode-at-1M", 1, 0, 1_048_576, 8192, 1, 2),
    ("few-decodes-at-262k", 4, 0, 262_144, 2048, 4, 2),
    ("mixed-width-896", 37, 3000, 100_000, 896, 9, 2),
    ("many-requests-block-16", 8192, 2048, 500_000, 4096, 4096, 16),
]


@functools.lru_cache(maxsize=1)
def shape_case(shape_id: str) -> tuple[Batch, Batch]:
    _, nd, np_, ctx, cap, reqs, bs = next(s for s in SHAPES if s[0] == shape_id)
    batch = make_batch(
        num_decode=nd, num_prefill=np_, context=ctx, capacity=cap, num_reqs=reqs,
        block_size=bs, device="cuda", seed=nd * 7 + np_,
        padding=[i % 97 == 5 for i in range(nd)],
    )
    return batch, expected_for(batch)


@pytest.mark.parametrize("tile", TILES, ids=tile_id)
@pytest.mark.parametrize("shape_id", [s[0] for s in SHAPES])
def test_realistic_shapes_match_reference(
    cuda: torch.device, shape_id: str, tile: tuple[int, int, int, bool]
) -> None:
    batch, expected = shape_case(shape_id)
    actual = batch.fresh()
    views = run_tile(actual, tile)
    torch.cuda.synchronize()
    assert_views(views, actual)
    assert_same_buffers(actual, expected)


def test_shapes_have_the_widths_they_are_meant_to() -> None:
    assert active_width(32_768, 8192) == 256
    assert active_width(1_048_576, 8192) == 8192
    assert active_width(100_000, 896) == 896


# ---------------------------------------------------------------- generated batches
GPU_TILES = [
    (tpp, cpp, warps, split)
    for tpp in (1, 2, 8, 32, 256)
    for cpp in (128, 256, 1024, 8192)
    for warps in (1, 4, 16)
    for split in (False, True)
    if tpp * cpp <= 4096 * warps  # at most 128 elements per thread
]


@st.composite
def gpu_batches(draw: st.DrawFn) -> Batch:
    capacity = 128 * draw(st.integers(1, 64))
    width = 128 * draw(st.integers(1, capacity // 128))
    ratio = draw(st.sampled_from([128, 128, 4]))
    num_decode = draw(st.integers(0, 1500))
    num_prefill = draw(st.integers(0, 1500))
    context = draw(st.integers(1, (width + 64) * ratio))
    seed = draw(st.integers(0, 2**31))
    gen = torch.Generator().manual_seed(seed)
    # Speculative-decoding runs: consecutive positions of one request.
    run = draw(st.integers(1, 4))
    starts = torch.randint(0, context, (-(-num_decode // run),), generator=gen)
    dec_pos = (starts[:, None] + torch.arange(run)).flatten()[:num_decode]
    num_reqs = draw(st.integers(1, 600))
    reqs = torch.randint(0, num_reqs, (starts.numel(),), generator=gen)
    dec_req = reqs[:, None].expand(-1, run).flatten()[:num_decode]
    return make_batch(
        num_decode=num_decode,
        num_prefill=num_prefill,
        context=context,
        capacity=capacity,
        block_size=draw(st.sampled_from([1, 2, 3, 4, 7, 16, 33, 64])),
        num_reqs=num_reqs,
        compress_ratio=ratio,
        device="cuda",
        generator=gen,
        decode_positions=dec_pos.tolist(),
        decode_requests=dec_req.tolist(),
        padding=(torch.rand(num_decode, generator=gen) < 0.1).tolist(),
        width=width,
        decode_view_width=capacity if draw(st.booleans()) else None,
        spare_rows=draw(st.integers(0, 5)),
        poison=draw(st.integers(-(2**31), -(2**20))),
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow,
                                                   HealthCheck.data_too_large])
@given(batch=gpu_batches(), tile=st.sampled_from(GPU_TILES))
def test_generated_batches_match_reference(
    cuda: torch.device, batch: Batch, tile: tuple[int, int, int, bool]
) -> None:
    expected = expected_for(batch)
    actual = batch.fresh()
    views = run_tile(actual, tile)
    torch.cuda.synchronize()
    assert_views(views, actual)
    assert_same_buffers(actual, expected)


# ---------------------------------------------------------------- varying width, fixed buffers
CAPACITY = 8192
GRAPH_WIDTHS = [8192, 128, 1024, 896, 256, 4096]


class StaticInputs:
    """Fixed input and output tensors, refilled in place between launches or replays."""

    def __init__(self, device: torch.device, num_decode: int, num_prefill: int,
                 num_reqs: int, block_size: int) -> None:
        self.num_decode, self.num_prefill = num_decode, num_prefill
        self.num_reqs, self.block_size = num_reqs, block_size
        big = make_batch(num_decode=num_decode, num_prefill=num_prefill,
                         context=CAPACITY * 128, capacity=CAPACITY, num_reqs=num_reqs,
                         block_size=block_size, device=device, seed=1,
                         decode_positions=[CAPACITY * 128 - 1] * num_decode,
                         decode_requests=[i % num_reqs for i in range(num_decode)],
                         table_spare_cols=0, spare_rows=4)
        self.batch = big  # its buffers and tensors are the static ones

    def refill(self, width: int, seed: int) -> Batch:
        """New positions, requests and slots whose active width is ``width``.

        Written into the static tensors in place; returns the batch view of them.
        """
        gen = torch.Generator().manual_seed(seed)
        b = self.batch
        top = width * 128  # max_seq_len whose active width is this width
        low = max(top // 2, 1) if width > 128 else 1
        positions = torch.randint(low - 1, top, (self.num_decode + self.num_prefill,),
                                  generator=gen)
        positions[0] = top - 1
        req = torch.randint(0, self.num_reqs, (self.num_decode,), generator=gen)
        slots = torch.randint(0, 1 << 30, (self.num_decode,), generator=gen)
        slots[torch.rand(self.num_decode, generator=gen) < 0.2] = -1
        b.positions.copy_(positions)
        b.token_to_req_indices[: self.num_decode].copy_(req)
        b.slot_mapping[: self.num_decode].copy_(slots)
        return b

    def at_width(self, width: int) -> Batch:
        return dataclasses.replace(self.batch, width=width)


def _graph_tiles() -> list[tuple[int, int, int, bool]]:
    return [BASELINE, (16, 256, 4, True), (1, 1024, 8, True), (8, 128, 4, False)]


@pytest.mark.parametrize("tile", _graph_tiles(), ids=tile_id)
def test_cuda_graphs_of_several_widths_share_fixed_buffers(
    cuda: torch.device, tile: tuple[int, int, int, bool]
) -> None:
    """One graph per width, all on the same buffers, replayed in interleaved order.

    Each graph also holds a consumer that copies the returned views into dense
    tensors, reading row t at ``base + t * capacity``: the access pattern whose
    breakage (rows packed at the narrow width) got the first adaptive-width change
    reverted.
    """
    static = StaticInputs(cuda, num_decode=48, num_prefill=80, num_reqs=13, block_size=2)
    c128a.warmup([tile[:3]], cuda)
    graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple, tuple]] = {}
    for width in GRAPH_WIDTHS:
        batch = static.at_width(width)
        static.refill(width, seed=width)
        run_tile(batch, tile)  # eager first: nothing may be compiled inside a capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        dense_decode = torch.empty((48, width), dtype=torch.int32, device=cuda)
        dense_lens = torch.empty((48,), dtype=torch.int32, device=cuda)
        dense_prefill = torch.empty((80, width), dtype=torch.int32, device=cuda)
        with torch.cuda.graph(graph):
            views = run_tile(batch, tile)
            dense_decode.copy_(views[0])
            dense_lens.copy_(views[1])
            dense_prefill.copy_(views[2])
        graphs[width] = (graph, views, (dense_decode, dense_lens, dense_prefill))

    count = c128a.compile_count()
    order = [128, 8192, 896, 128, 4096, 256, 1024, 8192, 256, 896, 4096, 1024, 128]
    for step, width in enumerate(order):
        batch = static.at_width(width)
        static.refill(width, seed=1000 + step)
        for buf in batch.buffers:
            buf.fill_(POISON)  # in place: the graph's addresses stay valid
        graph, views, dense = graphs[width]
        graph.replay()
        torch.cuda.synchronize()
        expected = expected_for(batch)
        assert_same_buffers(batch, expected)  # columns >= width still hold the poison
        assert_views(views, batch)
        want = (expected.global_decode_buffer[:48, :width], expected.decode_lens_buffer[:48],
                expected.prefill_buffer[:80, :width])
        for got, ref, name in zip(dense, want, ("decode", "lens", "prefill"), strict=True):
            assert torch.equal(got, ref), f"step {step} width {width}: consumer {name} differs"
    assert c128a.compile_count() == count


def test_eager_width_changes_leave_wider_columns_alone(cuda: torch.device) -> None:
    """Narrow after wide on the same buffers: columns past the new width keep old values."""
    static = StaticInputs(cuda, num_decode=300, num_prefill=700, num_reqs=40, block_size=2)
    tiles = [BASELINE, (16, 256, 4, True), (64, 128, 8, True)]
    for step, width in enumerate([8192, 256, 4096, 128, 896, 8192, 1024]):
        batch = static.at_width(width)
        static.refill(width, seed=step)
        tile = tiles[step % len(tiles)]
        before = [buf.clone() for buf in batch.buffers]
        run_tile(batch, tile)
        torch.cuda.synchronize()
        expected = batch.fresh()
        for buf, old in zip(expected.buffers, before, strict=True):
            buf.copy_(old)  # the reference writes over the same previous contents
        expected.call(reference.build_c128a_topk_metadata)
        assert_same_buffers(batch, expected)


# ---------------------------------------------------------------- compile counts
def test_compile_count_depends_on_the_tile_and_decode_presence_only(cuda: torch.device) -> None:
    tiles = [BASELINE[:3], (16, 256, 4), (1, 128, 4)]
    c128a.warmup(tiles, cuda)
    assert c128a.warmup(tiles, cuda) == 0  # already built: nothing new
    count = c128a.compile_count()

    # Widths, block sizes, ratios, token counts (0 and 1 included: 1 is what Triton
    # specialises on by default), strides and an unaligned positions tensor.
    for i, (nd, np_, ctx, cap, bs, ratio) in enumerate([
        (1, 0, 2_000, 128, 1, 128),
        (0, 1, 40_000, 384, 2, 128),
        (7, 33, 1_048_576, 8192, 2, 128),
        (64, 1, 300_000, 2176, 3, 128),
        (1, 1, 900, 256, 64, 4),
        (500, 500, 70_000, 640, 16, 100),
    ]):
        batch = make_batch(num_decode=nd, num_prefill=np_, context=ctx, capacity=cap,
                           block_size=bs, compress_ratio=ratio, device=cuda, seed=i,
                           table_stride_pad=i)
        unaligned = torch.empty(batch.num_tokens + 1, dtype=torch.int64, device=cuda)[1:]
        unaligned.copy_(batch.positions)
        for tile in tiles:
            for split in (False, True):
                for positions in (batch.positions, unaligned):
                    actual = batch.fresh()
                    actual.positions = positions
                    run_tile(actual, (*tile, split))
    torch.cuda.synchronize()
    assert c128a.compile_count() == count

    # A tile used nowhere else in this suite: one new binary for batches with decode
    # tokens, one for prefill-only batches, then none.
    fresh_tile = (2, 2048, 2)
    batch = make_batch(num_decode=3, num_prefill=3, context=50_000, capacity=512,
                       device=cuda, seed=99)
    run_tile(batch.fresh(), (*fresh_tile, False))
    assert c128a.compile_count() == count + 1
    other = make_batch(num_decode=9, num_prefill=0, context=9_000, capacity=1024,
                       block_size=5, device=cuda, seed=98)
    run_tile(other.fresh(), (*fresh_tile, True))
    assert c128a.compile_count() == count + 1
    prefill_only = make_batch(num_decode=0, num_prefill=11, context=30_000, capacity=384,
                              device=cuda, seed=97)
    run_tile(prefill_only.fresh(), (*fresh_tile, True))
    assert c128a.compile_count() == count + 2
    assert c128a.warmup([fresh_tile], cuda) == 0
    assert c128a.warmup([(4, 2048, 4)], cuda) == 2  # a new tile: both binaries


def test_every_visible_device(cuda: torch.device) -> None:
    """Tensors on any visible GPU, whichever is current, are handled on that GPU."""
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        batch = make_batch(num_decode=20, num_prefill=30, context=80_000, capacity=1024,
                           device=device, seed=index)
        expected = expected_for(batch)
        actual = batch.fresh()
        views = run_tile(actual, (16, 256, 4, True))
        torch.cuda.synchronize(device)
        assert views[0].device == device
        assert_same_buffers(actual, expected)


def test_prefill_only_with_an_empty_block_table(cuda: torch.device) -> None:
    """vLLM slices the table to the decode requests; a fresh empty one has a null pointer."""
    batch = make_batch(num_decode=0, num_prefill=700, context=300_000, capacity=4096,
                       device=cuda, seed=12)
    batch.block_table = torch.empty((0, 9), dtype=torch.int32, device=cuda)
    expected = expected_for(batch)
    for tile in (BASELINE, (16, 256, 4, True)):
        actual = batch.fresh()
        run_tile(actual, tile)
        torch.cuda.synchronize()
        assert_same_buffers(actual, expected)


# ---------------------------------------------------------------- bad inputs on the GPU
def test_bad_inputs_on_cuda_raise_before_launching(cuda: torch.device) -> None:
    batch = make_batch(num_decode=4, num_prefill=4, context=30_000, capacity=512,
                       device=cuda, seed=5)
    raw = torch.full((4 * 512 + 4,), POISON, dtype=torch.int32, device=cuda)
    cases = [
        (dataclasses.replace(batch, positions=batch.positions.cpu()), "token_to_req_indices",
         "the device of positions"),
        (dataclasses.replace(batch, slot_mapping=batch.slot_mapping.cpu()), "slot_mapping",
         "the device of positions"),
        (dataclasses.replace(batch, positions=batch.positions.int()), "positions",
         "torch.int64"),
        (dataclasses.replace(batch, global_decode_buffer=raw[1:2049].view(4, 512)),
         "global_decode_buffer", "16-byte aligned"),
        (dataclasses.replace(batch, width=200), "width", "multiple of 128"),
        (dataclasses.replace(batch, decode_view_width=1024), "decode_view_width", "[256, 512]"),
    ]
    for bad, name, accepted in cases:
        with pytest.raises(ValueError) as info:
            bad.call(c128a.build_c128a_topk_metadata, tokens_per_program=16,
                     cols_per_program=256, split_width=True)
        assert f"{name}:" in str(info.value) and accepted in str(info.value), str(info.value)
    torch.cuda.synchronize()
    assert_untouched(batch)
    assert bool((raw == POISON).all())
