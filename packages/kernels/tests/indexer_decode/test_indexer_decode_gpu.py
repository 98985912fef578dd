"""The compiled indexer decode kernel on a CUDA device, against the torch reference.

The reference (:mod:`dsv4_kernels.indexer_decode.reference`, vLLM 0.33.0's own ops) is
the specification: every comparison is over the three whole buffers, poisoned before
each launch. Also: CUDA-graph capture and replay with new data in the captured buffers,
and no compile after warm-up, whatever the step. The comparisons with vLLM's own builder
run in the vLLM layer's GPU tests, where vLLM is installed.
"""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels.indexer_decode import launch, reference
from dsv4_kernels.indexer_decode.testing import (
    POISON,
    DecodeCall,
    assert_same_buffers,
    make_step,
    random_step,
)

pytestmark = pytest.mark.gpu

TILES = [launch.BASELINE_TILE, (16, 1), (64, 1), (128, 2), (256, 4), (512, 8), (2048, 8),
         (8192, 16)]


def compare(call: DecodeCall, tiles: list[tuple[int, int]] = TILES) -> None:
    want = call.run(reference.indexer_decode_metadata)
    for tpp, warps in tiles:
        got = call.run(launch.indexer_decode_metadata, tokens_per_program=tpp,
                       num_warps=warps)
        assert_same_buffers(got, want)


@pytest.mark.parametrize("seed", range(16))
def test_random_steps_match_the_reference(cuda: torch.device, seed: int) -> None:
    compare(random_step(seed, cuda, max_reqs=[64, 512, 4096][seed % 3]))


def test_dsv4_decode_ladder_matches_the_reference(cuda: torch.device) -> None:
    g = torch.Generator().manual_seed(3)
    for reqs in (1, 8, 64, 256, 512, 1024):
        for ctx in (4096, 131072, 1 << 20):
            contexts = torch.randint(max(ctx - ctx // 8, 1), ctx + 1, (reqs,),
                                     generator=g).tolist()
            compare(make_step(reqs, contexts, buffer_rows=8192, device=cuda))
    for real, padded in ((5, 8), (60, 64), (500, 512), (0, 32)):
        compare(make_step(real, [131072] * real, pad_requests=padded - real,
                          buffer_rows=8192, device=cuda))


def test_a_captured_graph_replays_new_inputs_like_the_reference(cuda: torch.device) -> None:
    a = make_step(1, list(range(5000, 5060)), pad_requests=4, buffer_rows=8192, device=cuda)
    b = make_step(2, list(range(100, 150)), pad_requests=14, buffer_rows=8192, device=cuda)
    static = a.fresh()
    static.query_start_loc, static.seq_lens = a.query_start_loc.clone(), a.seq_lens.clone()
    launch.warmup([(256, 4)], cuda)
    compiled = launch.compile_count()

    def run() -> None:
        launch.indexer_decode_metadata(*static.args(), tokens_per_program=256, num_warps=4)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for source in (b, a, b):
        for name in ("decode_lens", "per_req_decode_lens", "expanded_seq_lens"):
            getattr(static, name).fill_(POISON)
        static.query_start_loc.copy_(source.query_start_loc)
        static.seq_lens.copy_(source.seq_lens)
        graph.replay()
        torch.cuda.synchronize(cuda)
        want = source.run(reference.indexer_decode_metadata)
        assert_same_buffers(static, want)
    assert launch.compile_count() == compiled
    del graph


def test_no_compile_after_warm_up_whatever_the_step(cuda: torch.device) -> None:
    tiles = [launch.BASELINE_TILE, (64, 1), (512, 8)]
    launch.warmup(tiles, cuda)
    assert launch.warmup(tiles, cuda) == 0
    compiled = launch.compile_count()
    direct = launch.direct_launches()
    steps = 0
    for seed in range(12):
        call = random_step(seed, cuda, max_reqs=2000)
        for tpp, warps in tiles:
            call.run(launch.indexer_decode_metadata, tokens_per_program=tpp, num_warps=warps)
            steps += 1
    torch.cuda.synchronize(cuda)
    assert launch.compile_count() == compiled
    assert compiled >= len(tiles)  # one binary per tile: every tensor is int32
    # After warm-up every launch took the direct path (where Triton allows it here).
    if launch._LAUNCHER.enabled:
        assert launch.direct_launches() - direct == steps
