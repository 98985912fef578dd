"""On a CUDA GPU, the SWA route through the plugin against vLLM 0.33.0's own kernel object.

* hits and misses of the patched module global equal vLLM's own object on whole
  buffers (every cell, the poisoned ones past each row's width and past the last token
  included), over generated steps with decodes, prefills, image spans, replays,
  invalid tokens and padding tokens, a step of padding alone among them;
* the patched route runs inside captured CUDA graphs, and a replay on new inputs
  writes what vLLM's object writes for them;
* after vLLM's SWA builder has started (the plugin warms the deployment then), no
  batch compiles anything more, padding tokens included.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from dsv4_kernels import swa as kernels_swa
from dsv4_kernels.swa.testing import POISON, SwaCall, SwaStep, make_swa_step
from dsv4_policy.conditions import Range
from dsv4_policy.kernels import swa as policy
from dsv4_vllm import plugin
from dsv4_vllm.arch import DeviceArch
from dsv4_vllm.kernels.swa import SWADispatch

pytestmark = pytest.mark.gpu

WINDOW = 128


def _arch() -> str:
    arch = DeviceArch()(torch.device("cuda", torch.cuda.current_device()))
    assert arch is not None
    return arch


def _table(arch: str, tiles: list[tuple[tuple[int, int, int], dict]]) -> policy.Table:
    return policy.make_table([
        policy.Entry(f"gpu-test-{i}", {"arch": arch, **match}, policy.Tile(*tile),
                     {"probes": 8})
        for i, (tile, match) in enumerate(tiles)
    ])


def _steps(seed: int, count: int, *, block_sizes=(32, 64, 256), images=(0, 8)
           ) -> list[SwaStep]:
    """Generated steps as vLLM's builder makes them; every fifth is padding alone."""
    gen = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> int:  # inclusive
        return int(torch.randint(low, high + 1, (1,), generator=gen))

    steps = []
    for i in range(count):
        alone = i % 5 == 4
        decodes = [] if alone else [draw(1, 1 << 17) for _ in range(draw(0, 48))]
        prefills = [] if alone else [(draw(0, 6000), draw(1, 300))
                                     for _ in range(draw(0, 3) if i % 3 else 0)]
        if not alone and not decodes and not prefills:
            decodes = [draw(1, 4096)]
        image = images[i % len(images)] if prefills else 0
        steps.append(make_swa_step(
            seed * 1000 + i, decode_contexts=decodes, prefill_queries=prefills,
            window_size=WINDOW, block_size=block_sizes[i % len(block_sizes)],
            max_image_tokens=image, image_spans=bool(image), replay=i % 2 == 0,
            pad_tokens=draw(1, 16) if alone else draw(0, 8), invalid_fraction=0.05,
            row_pad=i % 3, device="cuda"))
    return steps


def _same(got: SwaCall, want: SwaCall) -> None:
    """Whole buffers: every cell, written or left poisoned, is vLLM's."""
    assert got.swa_indices.shape == want.swa_indices.shape
    assert torch.equal(got.swa_indices, want.swa_indices), got.label
    assert torch.equal(got.swa_lens, want.swa_lens), got.label


def _theirs(original, call: SwaCall) -> SwaCall:
    want = call.fresh()
    original(*want.args(), **want.kwargs())
    return want


def test_hits_and_misses_equal_vllms_own_object_on_whole_buffers(swa_module) -> None:
    original = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    arch = _arch()
    tables = {
        "decode-only": _table(arch, [((8, 32, 2), {"has_image": 0,
                                                   "num_tokens": Range(1, 48)})]),
        "everything": _table(arch, [((16, 128, 4), {"has_image": 0}),
                                    ((4, 64, 2), {"has_image": 1})]),
        "shipped": None,
    }
    padded = 0
    for name, table in tables.items():
        dispatch = SWADispatch(original, table=table)
        for step in _steps(seed=len(name), count=40):
            for call in step.calls():
                got = call.fresh()
                assert dispatch(*got.args(), **got.kwargs()) is None
                want = _theirs(original, call)
                torch.cuda.synchronize()
                _same(got, want)
                padded += int(not bool(call.is_valid_token[-1]))
        assert dispatch.hits > 0, name
        if name == "decode-only":
            assert dispatch.misses > 0
    assert padded > 0  # calls whose last tokens were padding were among them


def test_the_patched_route_runs_inside_captured_cuda_graphs(swa_module) -> None:
    original = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    arch = _arch()
    dispatch = SWADispatch(original, table=_table(arch, [((8, 128, 4), {"has_image": 0}),
                                                         ((4, 64, 2), {"has_image": 1})]))
    graphs = []
    for step in _steps(seed=11, count=6, block_sizes=(64,)):
        for call in step.calls():
            dispatch(*call.args(), **call.kwargs())  # eager: warms the binary
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                dispatch(*call.args(), **call.kwargs())
            graphs.append((graph, call))
    hits = dispatch.hits
    assert hits >= len(graphs)  # the eager calls hit, so the captured ones are dsv4's
    gen = torch.Generator().manual_seed(12)
    for round_ in range(3):
        for graph, call in graphs:
            # New inputs in the captured buffers, as a later step writes them.
            call.replay_start.copy_((call.seq_lens // (round_ + 2)).to(torch.int32))
            mask = torch.rand(call.is_valid_token.shape, generator=gen) < 0.2
            call.is_valid_token[mask.to(call.is_valid_token.device)] = False
            call.block_table.copy_(torch.roll(call.block_table, round_ + 1, dims=1))
            call.swa_indices.fill_(POISON)
            call.swa_lens.fill_(POISON)
            graph.replay()
            torch.cuda.synchronize()
            _same(call, _theirs(original, call))
    assert dispatch.hits == hits  # replays do not go through Python


def test_nothing_compiles_after_the_builders_warm_up(swa_module, dsv4_log) -> None:
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    original = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert plugin.register({}) is True
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert isinstance(dispatch, SWADispatch)
    spec = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512,
                                dtype=torch.uint8, sliding_window=WINDOW)
    config = SimpleNamespace(
        speculative_config=None,
        model_config=SimpleNamespace(max_model_len=1 << 17,
                                     hf_config=SimpleNamespace(sliding_window=WINDOW)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=512, max_num_seqs=64),
    )
    device = torch.device("cuda", torch.cuda.current_device())
    swa_module.DeepseekSparseSWAMetadataBuilder(spec, ["layers.0.attn"], config, device)
    assert dispatch.deployments == {(WINDOW, 64): 0}
    assert any(r.getMessage().startswith("dsv4 warm-up: ") and "SWA compile key" in
               r.getMessage() for r in dsv4_log)
    after_warm_up = kernels_swa.compile_count()
    calls = covered = 0
    for step in _steps(seed=21, count=60, block_sizes=(64,), images=(0,)):
        for call in step.calls():
            got = call.fresh()
            # What the table covers is a hit, everything else vLLM's kernel: counted
            # through the policy before the call, so a table change cannot hide a miss.
            covered += dispatch.decide(got.args(), got.kwargs()) is not None
            swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*got.args(), **got.kwargs())
            _same(got, _theirs(original, call))
            calls += 1
    torch.cuda.synchronize()
    assert calls >= 60 and covered > 0
    assert (dispatch.hits, dispatch.misses) == (covered, calls - covered)
    assert kernels_swa.compile_count() == after_warm_up
