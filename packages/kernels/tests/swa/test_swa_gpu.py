"""The compiled SWA kernel on a CUDA device: realistic steps, CUDA graphs, compile counts.

Every comparison is against :mod:`dsv4_kernels.swa.reference` run on the same device,
over whole buffers (written cells equal, every other cell still poisoned).
"""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels import swa
from dsv4_kernels.swa import reference as swa_reference
from dsv4_kernels.swa.testing import POISON, SwaStep, assert_same_outputs, make_swa_step

pytestmark = pytest.mark.gpu

BASELINE = (1, 1024, 4)
TILES = [BASELINE, (8, 128, 4), (16, 128, 4), (32, 128, 8), (4, 128, 2), (64, 128, 8),
         (2, 256, 4), (16, 64, 2)]


def _check(step: SwaStep, tiles: list[tuple[int, int, int]]) -> None:
    for call in step.calls():
        want = call.run(swa_reference.compute_swa_indices_and_lens)
        for tpp, cpp, warps in tiles:
            got = call.run(swa.compute_swa_indices_and_lens, tokens_per_program=tpp,
                           cols_per_program=cpp, num_warps=warps)
            assert_same_outputs(got, want)


@pytest.mark.parametrize("seed", range(4))
def test_decode_batches_match_the_reference(cuda: torch.device, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    contexts = torch.randint(1, 1 << 17, (int(torch.randint(1, 1024, (1,), generator=g)),),
                             generator=g).tolist()
    _check(make_swa_step(seed, decode_contexts=contexts, replay=seed % 2 == 1,
                         invalid_fraction=0.05, row_pad=seed * 3, device=cuda), TILES)


@pytest.mark.parametrize("seed", range(3))
def test_prefill_and_mixed_batches_match_the_reference(cuda: torch.device, seed: int) -> None:
    prefills = [(seed * 1000, 8192), (0, 3000), (70_000, 517)]
    _check(make_swa_step(seed, decode_contexts=[5, 130_000, 64] * (seed + 1),
                         prefill_queries=prefills[: seed + 1], replay=True, pad_tokens=13,
                         block_size=[64, 256, 32][seed], device=cuda), TILES)


def test_image_widened_prefill_matches_the_reference(cuda: torch.device) -> None:
    step = make_swa_step(11, decode_contexts=[900, 20], prefill_queries=[(100, 2000), (0, 700)],
                         max_image_tokens=576, image_spans=True, replay=True, pad_tokens=3,
                         row_pad=5, device=cuda)
    assert step.prefill is not None and step.prefill.has_image
    _check(step, TILES)


def test_a_captured_graph_replays_new_inputs(cuda: torch.device) -> None:
    step = make_swa_step(21, decode_contexts=list(range(100, 4100, 7)), device=cuda)
    call = step.decode
    assert call is not None
    graph_call = call.fresh()
    kwargs = dict(tokens_per_program=16, cols_per_program=128, num_warps=4)
    swa.compute_swa_indices_and_lens(*graph_call.args(), **graph_call.kwargs(), **kwargs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        swa.compute_swa_indices_and_lens(*graph_call.args(), **graph_call.kwargs(), **kwargs)
    # New inputs, same addresses: replay starts half-way, every third token padding.
    graph_call.replay_start.copy_(graph_call.seq_lens // 2)
    graph_call.is_valid_token[::3] = False
    graph_call.swa_indices.fill_(POISON)
    graph_call.swa_lens.fill_(POISON)
    graph.replay()
    want = call.run(swa_reference.compute_swa_indices_and_lens)
    assert_same_outputs(graph_call, want)


def test_only_the_tile_and_has_image_select_a_binary(cuda: torch.device) -> None:
    swa.warmup([(8, 128, 4, 0), (8, 128, 4, 1)], cuda)
    before = swa.compile_count()
    for seed, (window, block, image) in enumerate([(128, 64, 0), (64, 256, 32), (7, 3, 5)]):
        step = make_swa_step(seed, decode_contexts=[10, 5000], prefill_queries=[(3, 300)],
                             window_size=window, block_size=block, max_image_tokens=image,
                             image_spans=bool(image), row_pad=seed, pad_tokens=seed,
                             device=cuda)
        _check(step, [(8, 128, 4)])
    assert swa.compile_count() == before
    assert swa.warmup([(8, 128, 4, 0)], cuda) == 0
    # After its first launch a binary is launched directly, skipping Triton's binder.
    direct = swa.direct_launches()
    _check(make_swa_step(9, decode_contexts=[40], prefill_queries=[(2, 90)], device=cuda),
           [(8, 128, 4)])
    assert swa.direct_launches() > direct
    assert swa.warmup([(2, 32, 1, 1)], cuda) == 1


def test_an_all_padding_batch_gets_cleared_rows(cuda: torch.device) -> None:
    # Every token is padding, as a CUDA-graph-padded decode batch can be: each program
    # takes the early exit, and still writes length 0 and a row of -1 everywhere.
    for seed, tile in enumerate([(1, 128, 2), (2, 128, 2), (16, 128, 4), (1, 1024, 4)]):
        step = make_swa_step(20 + seed, decode_contexts=[300, 9], prefill_queries=[],
                             pad_tokens=2, row_pad=3, device=cuda)
        for call in step.calls():
            call.is_valid_token.fill_(False)
        _check(step, [tile])
