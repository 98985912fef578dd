"""The direct launch path on a GPU: same outputs, graph capture, and no skipped checks.

After a tile's first launch on a device, ``dsv4_kernels.c128a`` calls the compiled
binary's launcher directly (``_direct_launch``). These tests make sure that path is
really taken, that it writes exactly what Triton's own launch path writes, that it is
capturable in a CUDA graph, and that a bad call after hundreds of good ones still
raises before anything is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a import reference
from dsv4_kernels.c128a.testing import assert_same_buffers, make_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c128a_checks import CASES

pytestmark = pytest.mark.gpu
TILE = dict(tokens_per_program=4, cols_per_program=256, num_warps=4, split_width=True)


def _batch(cuda: torch.device, seed: int, **kw):
    args = dict(num_decode=5, num_prefill=4, context=30_000, capacity=512, seed=seed)
    return make_batch(**{**args, **kw}, device=cuda)


def test_direct_launches_match_triton_launches_and_the_reference(cuda: torch.device) -> None:
    for seed in range(6):
        batch = _batch(cuda, seed, num_decode=seed * 7, num_prefill=40 - seed,
                       context=20_000 + 9_000 * seed)
        before = c128a.direct_launches()
        direct = batch.fresh()
        direct.call(c128a.build_c128a_topk_metadata, **TILE)  # first launch may compile
        direct = batch.fresh()
        direct.call(c128a.build_c128a_topk_metadata, **TILE)
        assert c128a.direct_launches() > before
        via_triton = batch.fresh()
        c128a._LAUNCHER.enabled = False
        c128a._LAUNCHER.forget()
        try:
            via_triton.call(c128a.build_c128a_topk_metadata, **TILE)
        finally:
            c128a._LAUNCHER.enabled = True
            c128a._LAUNCHER.forget()
        want = batch.fresh()
        want.call(reference.build_c128a_topk_metadata)
        torch.cuda.synchronize()
        assert_same_buffers(direct, via_triton)
        assert_same_buffers(direct, want)


def test_direct_launches_are_captured_by_cuda_graphs(cuda: torch.device) -> None:
    batch = _batch(cuda, 3)
    batch.call(c128a.build_c128a_topk_metadata, **TILE)
    batch.call(c128a.build_c128a_topk_metadata, **TILE)
    torch.cuda.synchronize()
    replayed = batch.fresh()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed.call(c128a.build_c128a_topk_metadata, **TILE)
    for buf in replayed.buffers:
        buf.fill_(replayed.poison)
    graph.replay()
    torch.cuda.synchronize()
    want = batch.fresh()
    want.call(reference.build_c128a_topk_metadata)
    assert_same_buffers(replayed, want)


@pytest.mark.parametrize(("case", "breaker", "name", "accepted"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_bad_call_after_many_good_ones_raises_before_writing(
    cuda: torch.device, case, breaker, name, accepted,
) -> None:
    good = _batch(cuda, 11)
    build = c128a.prepare(*TILE.values())
    for _ in range(200):
        build(*good.args(), good.width, good.decode_view_width)
    torch.cuda.synchronize()
    before = [b.clone() for b in good.buffers]
    bad = breaker(good)
    # Buffers a case builds on the CPU make it a device error: still a ValueError.
    kept = [b.clone() for b in bad.buffers]
    with pytest.raises(ValueError) as info:
        build(*bad.args(), bad.width, bad.decode_view_width)
    assert f"{FN_PREFIX}" in str(info.value)
    torch.cuda.synchronize()
    for buf, want in zip(good.buffers, before, strict=True):
        assert torch.equal(buf, want)
    for buf, want in zip(bad.buffers, kept, strict=True):
        assert torch.equal(buf, want)


FN_PREFIX = "build_c128a_topk_metadata: "
