"""On a CUDA GPU, the CombineTopkSwaIndices route against vLLM 0.33.0's own function.

* hits through flashmla.py's patched global write exactly what vLLM's function (its
  ``fill_(-1)`` and its kernel object, natively) writes, on whole poisoned allocations,
  over generated chunks (1-4 uneven requests, C128A/C4A/SWA-only widths, image
  widening, padding rows); misses are vLLM's function itself;
* the patched route runs inside a captured CUDA graph, and replays on new inputs write
  what vLLM's function writes for them;
* after the start-up warm-up no call compiles anything: dsv4's compile count stays put
  and Triton's ``jit_post_compile_hook`` (the hook vLLM's JIT monitor,
  ``vllm.utils.jit_monitor``, watches serving with) sees no compile of dsv4's kernel.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import triton
from dsv4_kernels import combine_topk_swa as kernels_cts
from dsv4_kernels.combine_topk_swa.testing import (
    POISON,
    Chunk,
    assert_same_outputs,
    make_chunk,
    random_queries,
)
from dsv4_policy.kernels import combine_topk_swa as policy
from dsv4_vllm import plugin
from dsv4_vllm.arch import DeviceArch
from dsv4_vllm.kernels import combine_topk_swa as target

pytestmark = pytest.mark.gpu

WINDOW = 128


def _arch() -> str:
    arch = DeviceArch()(torch.device("cuda", torch.cuda.current_device()))
    assert arch is not None
    return arch


def _table(arch: str) -> policy.Table:
    tiles = [((2, 512, 4), {"compress_ratio": 128}), ((4, 256, 4), {"compress_ratio": 4}),
             ((8, 128, 4), {"compress_ratio": 1})]
    return policy.make_table([
        policy.Entry(f"gpu-test-{i}", {"arch": arch, "window_size": WINDOW, **match},
                     policy.Tile(*tile), {"probes": 12})
        for i, (tile, match) in enumerate(tiles)])


def _chunks(seed: int, count: int, device: torch.device) -> list[Chunk]:
    g = torch.Generator().manual_seed(seed)
    found = []
    for i in range(count):
        kind = ("c128a", "c4a", "swa")[i % 3]
        reqs = 1 + i % 4
        total = int(torch.randint(reqs, 12000, (1,), generator=g))
        found.append(make_chunk(seed + i, kind=kind, queries=random_queries(g, total, reqs),
                                max_image_tokens=576 if i % 4 == 3 else 0, replay=i % 2 == 0,
                                pad_rows=i % 5, extra_rows=i % 3, max_model_len=1 << 17,
                                device=device))
    return found


@pytest.fixture
def routed(pristine_vllm):
    """vLLM's original function and the stand-in installed through the plugin, with a
    table covering every layer kind on this GPU, warmed as at start-up."""
    flashmla = importlib.import_module(target.MODULE)
    original = getattr(flashmla, target.FUNCTION)
    assert plugin.register({}) is True
    stand_in = plugin.active("combine_topk_swa")
    device = torch.device("cuda", torch.cuda.current_device())
    stand_in.configure(table=_table(_arch()))
    for image in (0, 576):
        stand_in.on_builder_ready(WINDOW, image, device)
    return original, getattr(flashmla, target.FUNCTION), device


def test_hits_equal_vllms_function_on_whole_buffers(routed) -> None:
    original, patched, device = routed
    for chunk in _chunks(1, 12, device):
        assert_same_outputs(chunk.run(patched), chunk.run(original))
    assert patched.hits == 12 and patched.misses == 0


def test_a_miss_is_vllms_function(routed) -> None:
    original, patched, device = routed
    chunk = make_chunk(3, kind="c4a", queries=[(0, 700)], window_size=64, device=device)
    assert_same_outputs(chunk.run(patched), chunk.run(original))
    assert patched.hits == 0 and patched.misses == 1


def test_a_captured_graph_replays_what_vllm_writes(routed) -> None:
    original, patched, device = routed
    chunk = make_chunk(5, kind="c4a", queries=[(0, 2000), (4000, 1500), (10, 600)],
                       pad_rows=11, device=device).fresh()
    args = chunk.args()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        patched(*args[:9], out=args[9])
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        patched(*args[:9], out=args[9])
    for seed in (6, 7):
        g = torch.Generator().manual_seed(seed)
        new = make_chunk(seed, kind="c4a", queries=random_queries(g, chunk.num_tokens, 3),
                         pad_rows=11, replay=True, device=device)
        for name in ("topk_indices", "query_start_loc", "seq_lens", "gather_lens"):
            getattr(chunk, name).copy_(getattr(new, name))
        chunk.indices_storage.fill_(POISON)
        chunk.lens_storage.fill_(POISON)
        graph.replay()
        # M and N are launch arguments: the replay keeps the captured ones.
        want = Chunk(**{**new.__dict__, "M": chunk.M, "N": chunk.N}).run(original)
        torch.cuda.synchronize(device)
        assert_same_outputs(chunk, want)
    assert patched.hits >= 2


def test_no_compile_after_the_start_up_warm_up(routed, monkeypatch) -> None:
    _, patched, device = routed
    compiled: list[str] = []
    previous = triton.knobs.runtime.jit_post_compile_hook

    def hook(**kwargs):
        compiled.append(getattr(kwargs.get("fn"), "name", "?"))
        return previous(**kwargs) if previous is not None else None

    monkeypatch.setattr(triton.knobs.runtime, "jit_post_compile_hook", hook)
    before = kernels_cts.compile_count()
    for chunk in _chunks(11, 9, device):
        chunk.run(patched)
    torch.cuda.synchronize(device)
    assert patched.hits == 9
    assert kernels_cts.compile_count() == before
    assert not [name for name in compiled if "combine_topk_swa" in name], compiled
