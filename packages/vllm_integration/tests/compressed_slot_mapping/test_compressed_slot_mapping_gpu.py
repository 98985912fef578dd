"""On the GPU: the plugin's stand-in against vLLM 0.33.0's real ``get_compressed_slot_mapping``.

Whole poisoned buffers (rows past the step too) and the returned tensors, through every
rebound vLLM module, at the H200 arch; then the same inside a captured CUDA graph with
new data replayed into the captured buffers; and no Triton compile after the start-up
warm-up, whatever the batch.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from dsv4_kernels import compressed_slot_mapping as kernels_csm
from dsv4_kernels.compressed_slot_mapping.testing import (
    POISON,
    assert_same_buffers,
    assert_same_result,
    make_step,
    random_step,
)
from dsv4_policy.kernels import compressed_slot_mapping as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels.compressed_slot_mapping import TARGET

pytestmark = pytest.mark.gpu

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "decode"
match = { num_tokens = { min = 0, max = 1024 } }
launch = { tokens_per_program = 256, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "prefill"
match = { num_tokens = { min = 1025, max = 2147483647 } }
launch = { tokens_per_program = 4096, num_warps = 16 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")


@pytest.fixture
def cuda() -> torch.device:
    """The current CUDA device (the conftest's gate fails a gpu test without one)."""
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def stand_in(pristine_vllm: Any, cuda: torch.device) -> Any:
    original = importlib.import_module(TARGET.aliases[0]).get_compressed_slot_mapping
    assert plugin.register({}) is True
    dispatch = plugin.active("compressed_slot_mapping")
    dispatch.configure(table=TABLE, arch_of=lambda device: "sm90")
    assert dispatch.warm_once("sm90", (1,), cuda)
    yield dispatch, original
    plugin.unregister()


def _steps(device: torch.device) -> list[Any]:
    g = torch.Generator().manual_seed(4)
    decodes = torch.randint(1, 200_000, (512,), generator=g).tolist()
    return [
        make_step(1, decode_contexts=decodes, extra_rows=8192 - 512, device=device),
        make_step(2, prefill_queries=[(0, 8192)], extra_rows=0, device=device),
        make_step(3, prefill_queries=[(50_000, 32768)], compress_ratio=128, block_size=2,
                  extra_rows=100, device=device),
        make_step(4, decode_contexts=decodes[:300], prefill_queries=[(0, 3000), (900, 1000)],
                  pad_requests=20, pad_fraction=0.05, extra_rows=4000, device=device),
        make_step(5, decode_contexts=decodes[:64], int32_slots=True, device=device),
        make_step(6, decode_contexts=decodes[:9], with_out=False, device=device),
        *(random_step(seed, device, max_tokens=5000) for seed in range(8)),
    ]


def test_every_module_equals_vllms_function(stand_in, cuda) -> None:
    dispatch, original = stand_in
    modules = [importlib.import_module(name) for name in TARGET.holders]
    for call in _steps(cuda):
        want, want_result = call.run(original)
        for module in modules:
            got, result = call.run(module.get_compressed_slot_mapping)
            if want.out is not None:
                assert_same_buffers(got, want)
            assert_same_result(result, want_result)
    assert dispatch.hits == len(_steps(cuda)) * len(modules) and dispatch.misses == 0


def test_a_captured_graph_replays_new_inputs_like_vllm(stand_in, cuda) -> None:
    dispatch, original = stand_in
    a = make_step(7, decode_contexts=list(range(5000, 5200)), prefill_queries=[(3000, 700)],
                  pad_requests=3, extra_rows=900, device=cuda)
    b = make_step(8, decode_contexts=list(range(100, 300)), prefill_queries=[(20, 700)],
                  pad_requests=3, pad_fraction=0.1, extra_rows=900, device=cuda)
    assert torch.equal(a.query_start_loc, b.query_start_loc)
    static = a.fresh()
    static.slot_mapping, static.seq_lens = a.slot_mapping.clone(), a.seq_lens.clone()
    static.block_table = a.block_table.clone()
    fn = importlib.import_module("vllm.models.deepseek_v4.sparse_mla").get_compressed_slot_mapping
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*static.args(), **static.kwargs())
    torch.cuda.current_stream().wait_stream(stream)
    compiled = kernels_csm.compile_count()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn(*static.args(), **static.kwargs())
    for source in (b, a, b):
        static.out.fill_(POISON)
        static.slot_mapping.copy_(source.slot_mapping)
        static.seq_lens.copy_(source.seq_lens)
        static.block_table.fill_(-(2**30))
        static.block_table[:, : source.block_table.shape[1]].copy_(source.block_table)
        graph.replay()
        torch.cuda.synchronize(cuda)
        want, want_result = source.run(original)
        assert torch.equal(static.out, want.out)
        assert torch.equal(result, want_result)
    assert dispatch.hits >= 2 and kernels_csm.compile_count() == compiled
    del graph


def test_no_compile_after_warm_up_whatever_the_batch(stand_in, cuda) -> None:
    dispatch, _ = stand_in
    compiled = kernels_csm.compile_count()
    for call in _steps(cuda):
        call.run(dispatch)
        if call.out is not None:
            call.slot_mapping = call.slot_mapping.to(torch.int32)
            call.run(dispatch)
    torch.cuda.synchronize(cuda)
    assert kernels_csm.compile_count() == compiled
    assert dispatch.misses == 0
