"""The compiled compressed slot mapping kernel on a CUDA device, against the torch reference.

The reference (:mod:`dsv4_kernels.compressed_slot_mapping.reference`) is the
specification: every comparison is over whole output buffers, poisoned before each
launch, with the value vLLM's fill leaves in rows past the step. Also: CUDA graph
capture and replay with new data in the captured buffers, and no compile after warm-up,
whatever the batch. The comparisons with vLLM's own function run in the vLLM layer's
GPU tests and the bench gates, where vLLM is installed.
"""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels.compressed_slot_mapping import launch, reference
from dsv4_kernels.compressed_slot_mapping.testing import (
    POISON,
    SlotMappingCall,
    assert_same_buffers,
    assert_same_result,
    make_step,
    random_step,
)

pytestmark = pytest.mark.gpu

TILES = [launch.BASELINE_TILE, (256, 4), (128, 2), (512, 8), (2048, 8), (64, 1), (4096, 16),
         (8192, 16)]


def compare(call: SlotMappingCall, tiles: list[tuple[int, int]] = TILES) -> None:
    want, want_result = call.run(reference.get_compressed_slot_mapping)
    for tpp, warps in tiles:
        got, result = call.run(launch.get_compressed_slot_mapping, tokens_per_program=tpp,
                               num_warps=warps)
        assert_same_buffers(got, want)
        assert_same_result(result, want_result)


@pytest.mark.parametrize("seed", range(12))
def test_random_steps_match_the_reference(cuda: torch.device, seed: int) -> None:
    compare(random_step(seed, cuda, max_tokens=[300, 4000, 20000][seed % 3]))


@pytest.mark.parametrize(("ratio", "block_size"), [(4, 64), (128, 2)])
def test_dsv4_step_ladder_matches_the_reference(cuda: torch.device, ratio: int,
                                       block_size: int) -> None:
    g = torch.Generator().manual_seed(ratio)
    decodes = torch.randint(1, 200_000, (512,), generator=g).tolist()
    steps = [
        make_step(1, decode_contexts=decodes, compress_ratio=ratio, block_size=block_size,
                  extra_rows=8192 - 512, device=cuda),
        make_step(2, prefill_queries=[(0, 8192)], compress_ratio=ratio,
                  block_size=block_size, extra_rows=0, device=cuda),
        make_step(3, prefill_queries=[(50_000, 32768)], compress_ratio=ratio,
                  block_size=block_size, extra_rows=100, device=cuda),
        make_step(4, prefill_queries=[(100, 9000), (0, 3), (5000, 20_000), (7, 2500)],
                  compress_ratio=ratio, block_size=block_size, replay=True, device=cuda),
        make_step(5, decode_contexts=decodes[:300], prefill_queries=[(0, 3000), (900, 1000)],
                  compress_ratio=ratio, block_size=block_size, pad_requests=20,
                  pad_fraction=0.05, extra_rows=4000, device=cuda),
    ]
    for step in steps:
        compare(step)


@pytest.mark.parametrize(("dcp", "interleave"), [(2, 4), (4, 128), (8, 4)])
def test_decode_context_parallel_matches_the_reference(cuda: torch.device, dcp: int,
                                              interleave: int) -> None:
    compare(make_step(6, decode_contexts=list(range(1000, 1200)),
                                prefill_queries=[(4000, 5000), (0, 700)], dcp_world_size=dcp,
                                cp_interleave=interleave, device=cuda))


@pytest.mark.parametrize("seed", range(4))
def test_kernel_object_call_matches_the_reference(cuda: torch.device, seed: int) -> None:
    call = random_step(80 + seed, cuda, max_tokens=5000)
    assert call.out is not None
    want = torch.full_like(call.out, POISON)
    reference.compressed_slot_mapping_kernel(*call.kernel_args(want))
    for tpp, warps in TILES[:4]:
        got = torch.full_like(call.out, POISON)
        launch.compressed_slot_mapping_kernel(*call.kernel_args(got), tokens_per_program=tpp,
                                              num_warps=warps)
        assert torch.equal(got, want)


def _same_layout_steps(device: torch.device) -> tuple[SlotMappingCall, SlotMappingCall]:
    """Two steps with the same request layout and buffer, but different contexts, slots
    and block tables (the second's contexts are shorter, so its table fits the first's)."""
    queries = [1] * 200 + [700, 1500, 33]
    a = make_step(7, decode_contexts=list(range(5000, 5200)),
                  prefill_queries=[(3000, 700), (800, 1500), (40, 33)], pad_requests=3,
                  extra_rows=900, device=device)
    b = make_step(8, decode_contexts=list(range(100, 300)),
                  prefill_queries=[(20, 700), (0, 1500), (9, 33)], pad_requests=3,
                  pad_fraction=0.1, extra_rows=900, device=device)
    assert a.num_tokens == b.num_tokens == sum(queries)
    assert torch.equal(a.query_start_loc, b.query_start_loc)
    assert b.block_table.shape[1] <= a.block_table.shape[1]
    return a, b


def test_a_captured_graph_replays_new_inputs(cuda: torch.device) -> None:
    a, b = _same_layout_steps(cuda)
    static = a.fresh()
    assert static.out is not None
    static.slot_mapping = a.slot_mapping.clone()
    static.seq_lens = a.seq_lens.clone()
    static.block_table = a.block_table.clone()
    tile = dict(tokens_per_program=256, num_warps=4)
    launch.warmup([(256, 4)], cuda)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch.get_compressed_slot_mapping(*static.args(), **static.kwargs(), **tile)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = launch.get_compressed_slot_mapping(*static.args(), **static.kwargs(), **tile)
    for source in (b, a, b):
        static.out.fill_(POISON)
        static.slot_mapping.copy_(source.slot_mapping)
        static.seq_lens.copy_(source.seq_lens)
        static.block_table.fill_(-(2**30))
        static.block_table[:, : source.block_table.shape[1]].copy_(source.block_table)
        graph.replay()
        torch.cuda.synchronize(cuda)
        want, want_result = source.run(reference.get_compressed_slot_mapping)
        assert want.out is not None
        assert torch.equal(static.out, want.out)
        assert torch.equal(result, want_result)
    del graph


def test_no_compile_after_warmup_whatever_the_batch(cuda: torch.device) -> None:
    launch.warmup(TILES, cuda)
    compiled = launch.compile_count()
    assert launch.warmup(TILES, cuda) == 0
    # Counted after the second warm-up, whose launches already take the direct path.
    direct = launch.direct_launches()
    launches = 0
    for seed in range(10):
        call = random_step(200 + seed, cuda, max_tokens=[50, 3000][seed % 2])
        if seed % 3 == 0:
            call.slot_mapping = call.slot_mapping.to(torch.int32)
        for tpp, warps in TILES:
            call.run(launch.get_compressed_slot_mapping, tokens_per_program=tpp,
                     num_warps=warps)
            launches += 1
        assert call.out is not None
        launch.compressed_slot_mapping_kernel(*call.kernel_args(call.out.clone()))
        launches += 1
    torch.cuda.synchronize(cuda)
    assert launch.compile_count() == compiled
    # Two binaries per tile: int64 slots (the builders) and int32 (the indexer's draft
    # update passes an arange).
    assert compiled >= 2 * len(TILES)
    # After warm-up every launch took the direct path (where Triton allows it here).
    if launch._LAUNCHER.enabled:
        assert launch.direct_launches() - direct == launches
