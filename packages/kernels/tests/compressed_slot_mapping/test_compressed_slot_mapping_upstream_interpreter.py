"""dsv4's compressed slot mapping against vLLM 0.33.0's own kernel, both in Triton's CPU
interpreter.

vLLM's kernel is extracted at run time from the vLLM sources (the ``upstream``
fixture); nothing of it is in the repository. vLLM's ``get_compressed_slot_mapping``
(its fill of the whole ``out``, then its kernel) and dsv4's one launch must leave the
same value in every row of the buffer and return the same tensor; vLLM's kernel object
call alone and dsv4's must write the same rows and leave the others alone.
"""

from __future__ import annotations

from typing import Any

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

pytestmark = pytest.mark.usefixtures("interpreter")

TILES = [launch.BASELINE_TILE, (16, 1), (128, 4)]


def compare(upstream: Any, call: SlotMappingCall) -> None:
    want, want_result = call.run(upstream.get_compressed_slot_mapping)
    ref, ref_result = call.run(reference.get_compressed_slot_mapping)
    assert_same_buffers(ref, want)
    assert_same_result(ref_result, want_result)
    for tpp, warps in TILES:
        got, result = call.run(launch.get_compressed_slot_mapping, tokens_per_program=tpp,
                               num_warps=warps)
        assert_same_buffers(got, want)
        assert_same_result(result, want_result)


def test_the_extracted_kernel_is_vllms(upstream: Any) -> None:
    assert upstream.block == 1024
    assert upstream.record["vllm"] == "0.33.0"
    assert len(upstream.record["origin_sha256"]) == 64


@pytest.mark.parametrize("seed", range(12))
def test_random_steps_match_vllm(upstream: Any, seed: int) -> None:
    compare(upstream, random_step(seed, max_tokens=400))


def test_dsv4_shapes_match_vllm(upstream: Any) -> None:
    # C4A and indexer (ratio 4, 64 entries per block), C128A (ratio 128, 2 per block).
    compare(upstream, make_step(1, decode_contexts=[4, 100, 3000], prefill_queries=[(64, 700)],
                                compress_ratio=4, block_size=64, pad_requests=2))
    compare(upstream, make_step(2, decode_contexts=[128, 129, 9000],
                                prefill_queries=[(0, 600), (300, 257)], compress_ratio=128,
                                block_size=2, replay=True))


@pytest.mark.parametrize(("dcp", "interleave"), [(2, 4), (4, 8)])
def test_decode_context_parallel_matches_vllm(upstream: Any, dcp: int, interleave: int) -> None:
    compare(upstream, make_step(3, decode_contexts=[500, 77, 4000],
                                prefill_queries=[(40, 300)], dcp_world_size=dcp,
                                cp_interleave=interleave, block_size=8))


def test_negative_positions_and_int32_slots_match_vllm(upstream: Any) -> None:
    compare(upstream, make_step(4, decode_contexts=[9], prefill_queries=[(0, 30), (0, 11)],
                                short_positions=True, int32_slots=True, compress_ratio=2,
                                block_size=4))


@pytest.mark.parametrize("seed", range(4))
def test_kernel_object_call_matches_vllm(upstream: Any, seed: int) -> None:
    call = random_step(70 + seed, max_tokens=300)
    assert call.out is not None
    want = torch.full_like(call.out, POISON)
    upstream.kernel_call(*call.kernel_args(want))
    got = torch.full_like(call.out, POISON)
    launch.compressed_slot_mapping_kernel(*call.kernel_args(got), tokens_per_program=64,
                                          num_warps=2)
    assert torch.equal(got, want)
    assert bool((want == POISON).any()) and bool((want != POISON).any())
