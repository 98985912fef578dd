"""The compiled combine_topk_swa kernel on a CUDA device, against the plain-torch reference.

The reference (:mod:`dsv4_kernels.combine_topk_swa.reference`) is the specification of
vLLM 0.33.0's ``combine_topk_swa_indices``, the ``fill_(-1)`` included; it runs on the
same device and inputs. Every comparison is over whole allocations (every cell of the
index buffer, every length, poison where nothing may write). The kernels layer knows
nothing of vLLM: the comparisons with vLLM's own function are the vLLM layer's tests
(``packages/vllm_integration/tests/combine_topk_swa/``) and the bench gates.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from dsv4_kernels.combine_topk_swa import launch, reference
from dsv4_kernels.combine_topk_swa.testing import (
    POISON,
    Chunk,
    assert_same_outputs,
    first_difference,
    make_chunk,
    random_queries,
)

pytestmark = pytest.mark.gpu

TILES = [launch.BASELINE_TILE, (4, 256, 4), (1, 128, 1), (8, 128, 4), (2, 512, 4),
         (16, 128, 8), (4, 64, 1), (1, 2048, 8)]


def _check(chunk: Chunk, tiles: list[tuple[int, int, int]]) -> None:
    want = chunk.run(reference.combine_topk_swa_indices)
    for tpp, cpp, warps in tiles:
        got = chunk.run(launch.combine_topk_swa_indices, tokens_per_program=tpp,
                        cols_per_program=cpp, num_warps=warps)
        assert_same_outputs(got, want)


@pytest.mark.parametrize("kind", ["c128a", "c4a", "swa"])
@pytest.mark.parametrize("total", [512, 8192, 32768])
def test_one_fresh_request_matches_the_reference(cuda: torch.device, kind: str,
                                                 total: int) -> None:
    _check(make_chunk(total, kind=kind, queries=[(0, total)], device=cuda), TILES)


@pytest.mark.parametrize("seed", range(6))
def test_uneven_chunks_match_the_reference(cuda: torch.device, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    kind = ("c128a", "c4a", "swa")[seed % 3]
    reqs = 2 + seed % 3
    total = int(torch.randint(reqs, 20000, (1,), generator=g))
    chunk = make_chunk(seed, kind=kind, queries=random_queries(g, total, reqs),
                       replay=seed % 2 == 0, pad_rows=seed * 5, extra_rows=seed % 2 * 7,
                       row_pad=seed, stride_pad=4 * (seed % 3), qsl_tail=seed % 3,
                       max_model_len=1 << 17, device=cuda)
    _check(chunk, TILES)


@pytest.mark.parametrize("kind", ["c4a", "swa", "c128a"])
def test_image_widened_chunks_match_the_reference(cuda: torch.device, kind: str) -> None:
    chunk = make_chunk(31, kind=kind, queries=[(100, 3000), (0, 700), (5000, 1200)],
                       max_image_tokens=576, pad_rows=9, device=cuda)
    assert chunk.left_visible is not None
    _check(chunk, TILES)
    n = chunk.num_tokens
    widened = chunk.run(reference.combine_topk_swa_indices).lens_storage[:n]
    plain = dataclasses.replace(chunk, left_visible=None, right_visible=None)
    causal = plain.run(reference.combine_topk_swa_indices).lens_storage[:n]
    assert bool((widened >= causal).all()) and bool((widened > causal).any()), (
        "no window was widened by an image span")


def test_allocating_calls_match_the_reference(cuda: torch.device) -> None:
    chunk = make_chunk(41, kind="c4a", queries=[(3, 900), (0, 77)], device=cuda)
    args = list(chunk.args())
    args[9] = None
    want_indices, want_lens = reference.combine_topk_swa_indices(*args)
    for tpp, cpp, warps in TILES[:4]:
        got_indices, got_lens = launch.combine_topk_swa_indices(
            *args, tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps)
        assert torch.equal(got_indices, want_indices), first_difference(got_indices,
                                                                         want_indices)
        # Rows past the chunk's tokens have uninitialised lengths in both; here there are none.
        assert torch.equal(got_lens, want_lens)


def test_a_captured_graph_replays_new_chunks(cuda: torch.device) -> None:
    chunk = make_chunk(51, kind="c4a", queries=[(0, 2000), (4000, 1500), (10, 600)],
                       pad_rows=11, device=cuda).fresh()
    tile = dict(tokens_per_program=4, cols_per_program=256, num_warps=4)
    launch.combine_topk_swa_indices(*chunk.args(), **tile)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch.combine_topk_swa_indices(*chunk.args(), **tile)
    for seed in (52, 53):
        # New data in the same tensors: other top-k values, prefixes, query split.
        g = torch.Generator().manual_seed(seed)
        queries = random_queries(g, chunk.num_tokens, 3, 50000)
        new = make_chunk(seed, kind="c4a", queries=queries, pad_rows=11, replay=True,
                         device=cuda)
        for name in ("topk_indices", "query_start_loc", "seq_lens", "gather_lens"):
            getattr(chunk, name).copy_(getattr(new, name))
        chunk.indices_storage.fill_(POISON)
        chunk.lens_storage.fill_(POISON)
        graph.replay()
        # The kernel reads M and N as launch arguments: the replay keeps the captured ones.
        replayed = Chunk(**{**new.__dict__, "M": chunk.M, "N": chunk.N})
        want = replayed.run(reference.combine_topk_swa_indices)
        assert_same_outputs(chunk, want)


def test_only_the_tile_selects_a_binary(cuda: torch.device) -> None:
    tiles = [(4, 256, 4), (1, 128, 1)]
    launch.warmup(tiles, cuda)
    before = launch.compile_count()
    direct = launch.direct_launches()
    shapes = [
        dict(kind="c128a", queries=[(60000, 3)], max_model_len=1 << 20),
        dict(kind="c4a", queries=[(0, 5), (9, 1), (0, 2), (7, 3), (1, 1)], index_topk=1024),
        dict(kind="swa", queries=[(3, 40)], window_size=64, max_image_tokens=30),
        dict(kind="c4a", queries=[(100, 300)], window_size=256, pad_rows=2, stride_pad=12),
    ]
    for seed, shape in enumerate(shapes):
        _check(make_chunk(seed, device=cuda, **shape), tiles)  # type: ignore[arg-type]
    assert launch.compile_count() == before
    assert launch.direct_launches() > direct
    assert launch.warmup(tiles, cuda) == 0
    assert launch.warmup([(2, 32, 1)], cuda) == 1
