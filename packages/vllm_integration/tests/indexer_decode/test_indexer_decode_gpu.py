"""On the GPU: vLLM 0.33.0's real indexer builder with the plugin off and on.

Two of vLLM's ``DeepseekV32IndexerMetadataBuilder`` on the device, poisoned; the off
side is vLLM's own ``build`` with vLLM's own ``get_compressed_slot_mapping``, the on side
every installed stand-in (the indexer decode table covering every key). Over generated
decode batches (1 to 512 requests at 4K to 1M contexts, CUDA-graph padded ones, all
padding, decode tokens past the requests) and the steps that stay vLLM's (prefill,
mixed): every field of the metadata and every builder tensor, whole, bit for bit. Then
the same builds captured in CUDA graphs and replayed with new inputs in the captured
tensors (the builder buffers both sides leave must agree); and no Triton compile after
the builder's construction warmed its tiles, whatever the batch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import indexer_steps as steps
import pytest
import torch
from dsv4_kernels.indexer_decode import launch as kernels_idm
from dsv4_policy.kernels import indexer_decode as policy
from dsv4_vllm import plugin

pytestmark = pytest.mark.gpu

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "decode"
match = { num_tokens = { min = 1, max = 128 } }
launch = { tokens_per_program = 128, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "wide"
match = { num_tokens = { min = 129 } }
launch = { tokens_per_program = 1024, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")
CONFIG = dict(max_num_batched_tokens=8192, max_num_seqs=512)


class Sides:
    """vLLM's build (with vLLM's compressed slot mapping) and the plugin's, switchable."""

    def __init__(self, module: Any, device: torch.device) -> None:
        self.module = module
        self.device = device
        self.cls = module.DeepseekV32IndexerMetadataBuilder
        self.dispatch = plugin.active("indexer_decode")
        self.csm = plugin.active("compressed_slot_mapping")
        self.vllm = (self.dispatch.original, self.csm.original)
        self.plugin = (self.dispatch, self.csm)

    def set(self, side: str, csm_side: str | None = None) -> None:
        build, _ = self.plugin if side == "on" else self.vllm
        _, csm = self.plugin if (csm_side or side) == "on" else self.vllm
        self.cls.build = build
        self.module.get_compressed_slot_mapping = csm

    def builder(self) -> Any:
        return steps.make_builder(self.module, self.device,
                                  config=steps.vllm_config(**CONFIG))

    def build(self, side: str, builder: Any, cam: Any, csm_side: str | None = None) -> Any:
        self.set(side, csm_side)
        try:
            return builder.build(0, cam)
        finally:
            self.set("on")


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def sides(pristine_vllm: Any, cuda: torch.device) -> Iterator[Sides]:
    module = importlib.import_module(steps.MODULE)
    assert plugin.register({}) is True
    plugin.active("indexer_decode").configure(table=TABLE)
    yield Sides(module, cuda)
    plugin.unregister()


def _ladder(gen: torch.Generator, device: torch.device) -> list[tuple[str, bool, Any]]:
    found = []
    for reqs in (1, 8, 64, 256, 512):
        for context in (4096, 1 << 17, 1 << 20):
            found.append((f"decode-T{reqs}-ctx{context}", True,
                          steps.step(gen, reqs, context=context, device=device)))
    for real, padded in ((5, 8), (60, 64), (500, 512), (0, 32), (1, 2)):
        found.append((f"padded-{real}of{padded}", True,
                      steps.step(gen, real, padded=padded, device=device)))
    found += [
        ("tokens-past-requests", True, steps.step(gen, 40, num_tokens=48, device=device)),
        ("requests-without-tokens", True, steps.step(gen, 40, padded=48, num_tokens=44,
                                                     device=device)),
        ("prefill", False, steps.step(gen, 2, query_lens=[2048, 900], context=4096,
                                      device=device)),
        ("mixed", False, steps.step(gen, 65, query_lens=[1] * 64 + [2048], context=1 << 17,
                                    device=device)),
    ]
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        pick = lambda n, g=g: int(torch.randint(0, n, (1,), generator=g))  # noqa: E731
        real = 1 + pick(511)
        padded = min(512, real + pick(16)) if pick(2) else real
        # Every one has a token at least (a real request or a padding one): a hit.
        found.append((f"random-{seed}", True,
                      steps.step(gen, real, padded=max(padded, 1) if padded != real else None,
                                 context=[4096, 1 << 17, 1 << 20][pick(3)], device=device)))
    return found


def test_vllms_builder_gives_identical_metadata_and_buffers_on_and_off(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    off, on = sides.builder(), sides.builder()
    hits = 0
    for label, hit, cam in _ladder(gen, sides.device):
        steps.poison(off)
        steps.poison(on)
        before = sides.dispatch.hits
        want = sides.build("off", off, cam)
        got = sides.build("on", on, cam)
        torch.cuda.synchronize(sides.device)
        assert steps.differences(want, got, label) == []
        assert steps.differences(steps.buffers(off), steps.buffers(on), label) == []
        assert sides.dispatch.hits - before == int(hit), label
        hits += hit
    assert hits >= 30


def test_captured_builds_replay_new_inputs_alike(sides: Sides) -> None:
    """vLLM does not capture ``build`` (its model runner builds metadata before replaying a
    graph), but every device op of both builds is capturable: captured once, replayed on
    new inputs copied into the captured tensors, both leave the same builder buffers. Both
    sides use the plugin's compressed slot mapping here (its own GPU tests capture it);
    what differs is the decode path."""
    gen = torch.Generator().manual_seed(7)
    static = steps.step(gen, 60, padded=64, device=sides.device)
    sources = [steps.step(gen, 60, padded=64, device=sides.device) for _ in range(3)]
    graphs, builders = {}, {}
    for side in ("off", "on"):
        builder = builders[side] = sides.builder()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            sides.build(side, builder, static, csm_side="on")
        torch.cuda.current_stream().wait_stream(stream)
        graph = graphs[side] = torch.cuda.CUDAGraph()
        sides.set(side, csm_side="on")
        try:
            with torch.cuda.graph(graph):
                builder.build(0, static)
        finally:
            sides.set("on")
    compiled = kernels_idm.compile_count()
    for source in sources:
        for side in ("off", "on"):
            steps.poison(builders[side])
            for name in ("query_start_loc", "seq_lens", "block_table_tensor", "slot_mapping"):
                getattr(static, name).copy_(getattr(source, name))
            graphs[side].replay()
        torch.cuda.synchronize(sides.device)
        for name in ("decode_lens_buffer", "per_req_decode_lens_buffer",
                     "expanded_seq_lens_buffer", "compressed_slot_mapping_buffer"):
            assert torch.equal(getattr(builders["off"], name), getattr(builders["on"], name))
        assert not bool((builders["on"].expanded_seq_lens_buffer[:64] == steps.POISON).any())
    assert kernels_idm.compile_count() == compiled
    del graphs


def test_no_compile_after_the_builders_warm_up(sides: Sides) -> None:
    on = sides.builder()  # its construction warms every compile key of the arch
    arch = sides.dispatch.arch_of(sides.device)
    assert sides.dispatch.warmed(arch, (), sides.device)
    compiled = kernels_idm.compile_count()
    assert compiled >= len(policy.compile_keys(TABLE, arch))
    gen = torch.Generator().manual_seed(11)
    before = sides.dispatch.hits
    for _, _, cam in _ladder(gen, sides.device):
        sides.build("on", on, cam)
    torch.cuda.synchronize(sides.device)
    assert kernels_idm.compile_count() == compiled
    assert sides.dispatch.hits > before
