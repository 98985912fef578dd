"""On a CUDA GPU, against vLLM 0.33.0's own function and kernel.

* hits and misses of the patched function equal vLLM's original, whole buffers and
  views alike (so nothing outside the width is touched and the stride is the same);
* the patched path runs inside captured CUDA graphs, at several widths, and a graph
  that reads the buffers at the capacity stride sees what the reference says;
* after the start-up warm-up, batches of any width compile nothing more.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from c128a_batches import Batch, make_batch, table_toml, vllm_width
from dsv4_kernels import c128a as kernels
from dsv4_kernels.c128a import reference
from dsv4_policy.kernels import c128a as policy
from dsv4_vllm import plugin
from dsv4_vllm.arch import DeviceArch
from dsv4_vllm.kernels.c128a import C128ADispatch

pytestmark = pytest.mark.gpu

MODEL_LENS = [4096, 100_000, 262_144, 1 << 20]


def _arch() -> str:
    arch = DeviceArch()(torch.device("cuda", torch.cuda.current_device()))
    assert arch is not None
    return arch


def _table(arch: str, tiles: list[tuple[int, int, int, bool]],
           match: dict[str, Any] | None = None) -> policy.Table:
    """One entry per tile, each for its own band of decode-token counts."""
    bands = [(0, 3), (4, 15), (16, 63), (64, 1 << 20)]
    entries = []
    for i, (tpp, cpp, warps, split) in enumerate(tiles):
        low, high = bands[i % len(bands)] if len(tiles) > 1 else (0, 1 << 20)
        entries.append({
            "id": f"gpu-test-{i}",
            "match": {"arch": arch, "compress_ratio": 128,
                      "num_decode_tokens": {"min": low, "max": high}, **(match or {})},
            "launch": {"tokens_per_program": tpp, "cols_per_program": cpp,
                       "num_warps": warps, "split_width": split},
        })
    return policy.loads_table(table_toml(entries))


def _batches(seed: int, count: int, device: str = "cuda") -> list[Batch]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        mml = MODEL_LENS[int(torch.randint(0, len(MODEL_LENS), (1,), generator=gen))]
        msl = max(1, int(mml * float(torch.rand(1, generator=gen)) ** 3))
        nd = int(torch.randint(0, 80, (1,), generator=gen))
        npf = int(torch.randint(0, 40, (1,), generator=gen)) if nd % 3 else 0
        out.append(make_batch(gen, max_model_len=mml, max_seq_len=msl, num_decode=nd,
                              num_prefill=npf, num_reqs=8, rows=128, device=device))
    return out


def _assert_equal(got: Batch, got_views, want: Batch, want_views) -> None:
    for name in ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    for view, ref in zip(got_views, want_views, strict=True):
        assert view.shape == ref.shape and view.stride() == ref.stride()
        assert torch.equal(view, ref)


def test_patched_equals_vllms_original_on_hits_and_misses(sparse_mla) -> None:
    original = sparse_mla.build_c128a_topk_metadata
    assert not isinstance(original, C128ADispatch)
    arch = _arch()
    tables = {
        "decode-only": _table(arch, [(4, 256, 2, True), (1, 1024, 8, False),
                                     (8, 128, 1, True), (2, 512, 4, False)],
                              {"num_prefill_tokens": 0}),
        "everything": _table(arch, [(2, 256, 4, True), (16, 128, 4, False)]),
        "shipped": None,
    }
    for name, table in tables.items():
        dispatch = C128ADispatch(original, table=table)
        for batch in _batches(seed=hash(name) % 1000, count=40):
            ours = batch.fresh_buffers()
            got = dispatch(*ours.args(), max_compressed_tokens=batch.width)
            theirs = batch.fresh_buffers()
            want = original(*theirs.args(), max_compressed_tokens=batch.width)
            torch.cuda.synchronize()
            _assert_equal(ours, got, theirs, want)
        if name != "shipped":
            assert dispatch.hits > 0, name
        if name == "decode-only":
            assert dispatch.misses > 0


def test_registered_plugin_through_vllms_module_global(pristine) -> None:
    original = pristine.build_c128a_topk_metadata
    assert plugin.register({}) is True
    dispatch = plugin.active("c128a")
    dispatch.configure(table=_table(_arch(), [(4, 256, 2, True)]))
    for batch in _batches(seed=77, count=10):
        ours, theirs = batch.fresh_buffers(), batch.fresh_buffers()
        got = pristine.build_c128a_topk_metadata(*ours.args(),
                                                 max_compressed_tokens=batch.width)
        want = original(*theirs.args(), max_compressed_tokens=batch.width)
        torch.cuda.synchronize()
        _assert_equal(ours, got, theirs, want)
    assert dispatch.hits == 10


def _reference(batch: Batch) -> tuple[Batch, tuple[torch.Tensor, ...]]:
    fresh = batch.fresh_buffers()
    return fresh, reference.build_c128a_topk_metadata(*fresh.args(), width=batch.width)


def test_patched_path_inside_cuda_graphs_at_several_widths(sparse_mla) -> None:
    arch = _arch()
    dispatch = C128ADispatch(sparse_mla.build_c128a_topk_metadata,
                             table=_table(arch, [(4, 256, 4, True)]))
    mml = 1 << 20
    gen = torch.Generator().manual_seed(5)
    graphs = []
    for msl in (1000, 40_000, 300_000, mml):
        batch = make_batch(gen, max_model_len=mml, max_seq_len=msl, num_decode=6,
                           num_prefill=3, rows=16, device="cuda")
        dispatch(*batch.args(), max_compressed_tokens=batch.width)  # eager warm-up
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            views = dispatch(*batch.args(), max_compressed_tokens=batch.width)
        graphs.append((graph, batch, views))
    hits = dispatch.hits
    for _ in range(3):
        for graph, batch, views in graphs:
            batch.positions.copy_(torch.randint(0, batch.max_seq_len, batch.positions.shape,
                                                generator=gen).to("cuda"))
            graph.replay()
            torch.cuda.synchronize()
            want, want_views = _reference(batch)
            _assert_equal(batch, views, want, want_views)
    assert dispatch.hits == hits  # replays do not go through Python


def test_a_graph_reading_at_the_capacity_stride_sees_every_width(sparse_mla) -> None:
    """The reverted bug: a captured consumer must read correct rows at any width."""
    arch = _arch()
    dispatch = C128ADispatch(sparse_mla.build_c128a_topk_metadata,
                             table=_table(arch, [(8, 128, 2, True)]))
    mml = 262_144
    gen = torch.Generator().manual_seed(6)
    batch = make_batch(gen, max_model_len=mml, max_seq_len=mml, num_decode=12,
                       num_prefill=0, rows=12, device="cuda")
    rows, cap = batch.global_decode_buffer.shape
    seen = torch.empty((rows, cap), dtype=torch.int32, device="cuda")
    seen_lens = torch.empty(rows, dtype=torch.int32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the consumer reads whole rows, stride = capacity
        seen.copy_(batch.global_decode_buffer)
        seen_lens.copy_(batch.decode_lens_buffer)
    for msl in (200, 20_000, 70_000, mml):
        step = dataclasses.replace(batch, max_seq_len=msl, width=vllm_width(msl, cap))
        step.positions.copy_(torch.randint(0, msl, step.positions.shape,
                                           generator=gen).to("cuda"))
        want, _ = _reference(step)
        views = dispatch(*step.args(), max_compressed_tokens=step.width)
        graph.replay()
        torch.cuda.synchronize()
        assert views[0].stride(0) == cap
        assert torch.equal(seen[:, : step.width], want.global_decode_buffer[:, : step.width])
        assert torch.equal(seen_lens, want.decode_lens_buffer)
    assert dispatch.hits == 4


def test_no_compiles_after_the_start_up_warm_up(sparse_mla) -> None:
    arch = _arch()
    tiles = [(2, 256, 2, True), (4, 1024, 8, False), (32, 128, 4, True), (1, 2048, 16, False)]
    table = _table(arch, tiles)
    dispatch = C128ADispatch(sparse_mla.build_c128a_topk_metadata, table=table)
    device = torch.device("cuda", torch.cuda.current_device())
    for mml in MODEL_LENS:
        dispatch.on_builder_ready(128, mml, device)  # what vLLM's builder start-up does
    after_warm_up = kernels.compile_count()
    expected_keys = set().union(*(policy.compile_keys(table, arch, m) for m in MODEL_LENS))
    assert {t[:3] for t in tiles} <= expected_keys
    widths = set()
    for batch in _batches(seed=99, count=120):
        dispatch(*batch.args(), max_compressed_tokens=batch.width)
        widths.add(batch.width)
    torch.cuda.synchronize()
    assert len(widths) >= 6 and dispatch.hits >= 100
    assert kernels.compile_count() == after_warm_up


def test_through_vllms_builder_on_the_gpu(pristine, dsv4_log) -> None:
    """register(), builder start-up warm-up, then real steps: equal to vLLM's own."""
    from vllm_steps import builder as make_builder
    from vllm_steps import step

    original = pristine.build_c128a_topk_metadata
    assert plugin.register({}) is True
    dispatch = plugin.active("c128a")
    arch = _arch()
    dispatch.configure(table=_table(arch, [(4, 256, 2, True), (2, 128, 4, True)]))
    mml = 100_000
    builder = make_builder(pristine, mml, "cuda")
    assert any(r.getMessage().startswith("dsv4 warm-up: ") and f"max_model_len={mml}"
               in r.getMessage() for r in dsv4_log)
    assert dispatch.max_model_lens == {(896, 128): mml}
    gen = torch.Generator().manual_seed(21)
    compiled = kernels.compile_count()
    for msl, decodes, prefills in ((500, 3, []), (20_000, 2, [4]), (mml, 6, [2, 3]),
                                   (70_000, 1, [])):
        cm, req_ids = step(gen, mml, msl, decodes, prefills, "cuda")
        bufs = (builder.c128a_global_decode_buffer, builder.c128a_decode_lens_buffer,
                builder.c128a_prefill_buffer)
        for buf in bufs:
            buf.random_(1 << 20, 1 << 30)
        theirs = [b.clone() for b in bufs]
        width = vllm_width(msl, 896)
        n = cm.num_actual_tokens
        original(cm.positions[:n], 128, decodes, req_ids, cm.block_table_tensor[:decodes], 2,
                 cm.slot_mapping, *theirs, max_compressed_tokens=width)
        out = builder._build_c128a_metadata(cm, req_ids)
        torch.cuda.synchronize()
        for mine, want in zip(bufs, theirs, strict=True):
            assert torch.equal(mine, want)
        assert out["c128a_global_decode_topk_indices"].shape == (decodes, 1, width)
        assert out["c128a_global_decode_topk_indices"].stride(0) == 896
    assert dispatch.hits == 4
    assert kernels.compile_count() == compiled
