"""The compiled SWA decode kernel on a CUDA device, against the torch reference.

The reference (:mod:`dsv4_kernels.swa_decode.reference`, vLLM 0.33.0's own operations
in its order) is the specification: every comparison is over the three whole buffers,
poisoned with seeded random values before each launch. Also: CUDA-graph capture and
replay with new data in the captured buffers, and no compile after warm-up, whatever the
step. The comparisons with vLLM's own builder run in the vLLM layer's GPU tests, where
vLLM is installed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from dsv4_kernels.swa_decode import launch, reference
from dsv4_kernels.swa_decode.testing import (
    BUFFERS,
    SWADecodeCall,
    assert_same_buffers,
    make_step,
    random_step,
)

pytestmark = pytest.mark.gpu

Tile = tuple[int, int, int]
TILES: list[Tile] = [launch.BASELINE_TILE, (1, 128, 4), (1, 1024, 4), (2, 64, 1),
                     (4, 128, 2), (16, 128, 8), (32, 128, 16), (64, 16, 4), (1024, 16, 16),
                     (8, 1024, 16)]


def compare(call: SWADecodeCall, tiles: list[Tile] = TILES) -> None:
    want = call.run(reference.build_swa_decode)
    assert_same_buffers(want, want, call)
    for tpp, cpp, warps in tiles:
        got = call.run(launch.build_swa_decode, tokens_per_program=tpp, cols_per_program=cpp,
                       num_warps=warps)
        assert_same_buffers(got, want, call)


@pytest.mark.parametrize("seed", range(16))
def test_random_steps_match_the_reference(cuda: torch.device, seed: int) -> None:
    compare(random_step(seed, cuda, max_tokens=[64, 512, 4096][seed % 3]))


def test_dsv4_decode_ladder_matches_the_reference(cuda: torch.device) -> None:
    g = torch.Generator().manual_seed(3)
    for tokens in (1, 2, 8, 64, 256, 1024, 1025, 4096, 8192):
        for ctx in (4096, 131072, 1 << 20):
            if tokens * ctx > 1 << 30:  # the block table: a row of ctx / 64 per request
                continue
            contexts = torch.randint(max(ctx - ctx // 8, 1), ctx + 1, (tokens,),
                                     generator=g).tolist()
            compare(make_step(tokens, contexts, device=cuda, replay=tokens % 2 == 0))
    for real, padded in ((5, 8), (60, 64), (500, 512), (0, 32), (0, 1), (1000, 1024)):
        compare(make_step(real, [131072] * real, pad_tokens=padded - real, device=cuda))


def test_int32_slots_and_two_dimensional_buffers(cuda: torch.device) -> None:
    call = make_step(5, list(range(1, 3000, 7)), pad_tokens=3, block_size=16, device=cuda)
    compare(dataclasses.replace(call, slot_mapping=call.slot_mapping.int()))
    compare(dataclasses.replace(call, swa_indices=call.swa_indices[:, 0]))


def _pair(cuda: torch.device) -> tuple[SWADecodeCall, SWADecodeCall]:
    """Two steps of the same token count and block-table shape (the longest context is
    the same), for one captured graph."""
    a = make_step(1, [*range(5000, 5060), 9000], pad_tokens=3, device=cuda, replay=True)
    b = make_step(2, [*range(100, 150), *range(7000, 7010), 9000], pad_tokens=3,
                  device=cuda)
    assert a.num_tokens == b.num_tokens and a.block_table.shape == b.block_table.shape
    return a, b


def test_a_captured_graph_replays_new_inputs_like_the_reference(cuda: torch.device) -> None:
    a, b = _pair(cuda)
    static = a.fresh()
    inputs = ("slot_mapping", "query_start_loc", "seq_lens", "token_to_req_indices",
              "block_table", "replay_start")
    static = dataclasses.replace(static, **{n: getattr(a, n).clone() for n in inputs})
    tile = (4, 128, 2)
    launch.warmup([tile], cuda)
    compiled = launch.compile_count()

    def run() -> None:
        launch.build_swa_decode(*static.args(), **static.kwargs(),
                                tokens_per_program=tile[0], cols_per_program=tile[1],
                                num_warps=tile[2])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for source in (b, a, b):
        for name in BUFFERS:
            getattr(static, name).copy_(getattr(source, name))
        for name in inputs:
            getattr(static, name).copy_(getattr(source, name))
        graph.replay()
        torch.cuda.synchronize(cuda)
        want = source.run(reference.build_swa_decode)
        assert_same_buffers(static, want, source)
    assert launch.compile_count() == compiled
    del graph


def test_no_compile_after_warm_up_whatever_the_step(cuda: torch.device) -> None:
    tiles = [launch.BASELINE_TILE, (1, 128, 4), (32, 128, 16)]
    launch.warmup(tiles, cuda)
    assert launch.warmup(tiles, cuda) == 0
    compiled = launch.compile_count()
    direct = launch.direct_launches()
    steps = 0
    for seed in range(12):
        call = random_step(seed, cuda, max_tokens=2000)
        if seed % 4 == 3:
            call = dataclasses.replace(call, slot_mapping=call.slot_mapping.int())
        for tpp, cpp, warps in tiles:
            call.run(launch.build_swa_decode, tokens_per_program=tpp, cols_per_program=cpp,
                     num_warps=warps)
            steps += 1
    torch.cuda.synchronize(cuda)
    assert launch.compile_count() == compiled
    assert compiled >= 2 * len(tiles)  # one binary per tile and slot_mapping dtype
    # After warm-up every launch took the direct path (where Triton allows it here).
    if launch._LAUNCHER.enabled:
        assert launch.direct_launches() - direct == steps
