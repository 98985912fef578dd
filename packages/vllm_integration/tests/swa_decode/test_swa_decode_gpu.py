"""On the GPU: vLLM 0.33.0's real SWA builders with the plugin off and on.

Two of vLLM's ``DeepseekSparseSWAMetadataBuilder`` (or FlashMLA's subclass) on the device,
poisoned alike; the off side is vLLM's own ``build`` with vLLM's own SWA rows kernel object
and token map, the on side every installed stand-in (the SWA decode table covering every
key). Over generated decode batches (1 to 512 requests at 4K to 1M contexts, CUDA-graph
padded ones, all padding, decode tokens past the requests, given replay starts), mixed
steps (decodes then prefills, generated too) and the steps that stay vLLM's (prefill only,
a prefill before the decodes): every field of the metadata and every builder
tensor, whole, bit for bit; and a whole step of both SWA groups through vLLM's
``build_attn_metadata``. Then the same builds captured in CUDA graphs and replayed with new
inputs in the captured tensors (the builder buffers both sides leave must agree with an
eager build of vLLM's); and no Triton compile after the builder's construction warmed its
tiles, whatever the batch.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
import swa_steps as steps
import torch
from dsv4_kernels.swa_decode import launch as kernels_swd
from dsv4_policy.kernels import swa_decode as policy
from dsv4_vllm import plugin

pytestmark = pytest.mark.gpu

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "decode"
match = { num_tokens = { min = 1, max = 128 } }
launch = { tokens_per_program = 4, cols_per_program = 128, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "wide"
match = { num_tokens = { min = 129 } }
launch = { tokens_per_program = 32, cols_per_program = 64, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")
CONFIG = dict(max_num_batched_tokens=8192, max_num_seqs=512)
BUFFERS = ("decode_swa_indices", "decode_swa_lens", "is_valid_token", "token_to_req_indices")


class Sides:
    """vLLM's build (with vLLM's SWA rows kernel object) and the plugin's, switchable."""

    def __init__(self, module: Any, device: torch.device) -> None:
        self.module = module
        self.device = device
        self.cls = module.DeepseekSparseSWAMetadataBuilder
        self.dispatch = plugin.active("swa_decode")
        self.rows = plugin.active("swa")
        self.vllm = (self.dispatch.original, self.rows.original)
        self.plugin = (self.dispatch, self.rows)

    def set(self, side: str) -> None:
        build, rows = self.plugin if side == "on" else self.vllm
        self.cls.build = build
        self.module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = rows

    def builder(self, cls: str = "base", seed: int = 0) -> Any:
        return steps.make_builder(cls, self.device, config=steps.vllm_config(**CONFIG),
                                  seed=seed)

    def build(self, side: str, builder: Any, cam: Any, *args: Any) -> Any:
        self.set(side)
        try:
            mine = copy.copy(cam)
            return builder.build(*((0, mine, *args) if args else (0, mine)))
        finally:
            self.set("on")


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def sides(pristine_vllm: Any, cuda: torch.device) -> Iterator[Sides]:
    module = importlib.import_module(steps.MODULE)
    assert plugin.register({}) is True
    plugin.active("swa_decode").configure(table=TABLE)
    with steps.plan_holders(module):
        yield Sides(module, cuda)
    plugin.unregister()


def _ladder(gen: torch.Generator, device: torch.device
            ) -> list[tuple[str, bool, Any, str, torch.Tensor | None]]:
    """``(label, taken over?, step, builder class, replay start or None)``."""
    found: list[tuple[str, bool, Any, str, torch.Tensor | None]] = []
    for reqs in (1, 8, 64, 256, 512):
        for context in (4096, 1 << 17, 1 << 20):
            found.append((f"decode-T{reqs}-ctx{context}", True,
                          steps.step(gen, reqs, context=context, device=device), "base", None))
    for real, padded in ((5, 8), (60, 64), (500, 512), (0, 32), (1, 2)):
        found.append((f"padded-{real}of{padded}", True,
                      steps.step(gen, real, padded=padded, device=device), "flashmla", None))
    replayed = steps.step(gen, 100, padded=128, context=300, device=device)
    found += [
        ("tokens-past-requests", True, steps.step(gen, 40, num_tokens=48, device=device),
         "base", None),
        ("requests-without-tokens", True, steps.step(gen, 40, padded=48, num_tokens=44,
                                                     device=device), "base", None),
        ("replay-start", True, replayed, "flashmla", steps.replay_start(gen, replayed)),
        ("prefill", False, steps.step(gen, 2, query_lens=[2048, 900], context=4096,
                                      device=device), "base", None),
        ("mixed", True, steps.step(gen, 65, query_lens=[1] * 64 + [2048], context=1 << 17,
                                   device=device), "flashmla", None),
        ("mixed-8-at-1M-4x1024", True, steps.step(gen, 12, query_lens=[1] * 8 + [1024] * 4,
                                                  context=1 << 20, device=device), "base", None),
        ("mixed-256-4096", True, steps.step(gen, 257, query_lens=[1] * 256 + [4096],
                                            context=1 << 17, device=device), "base", None),
        ("prefill-before-decodes", False, steps.step(gen, 3, query_lens=[700, 1, 1],
                                                     context=4096, device=device), "base", None),
    ]
    mixed = steps.step(gen, 33, query_lens=[1] * 32 + [500], context=2000, device=device)
    found.append(("mixed-replay-start", True, mixed, "flashmla", steps.replay_start(gen, mixed)))
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        pick = lambda n, g=g: int(torch.randint(0, n, (1,), generator=g))  # noqa: E731
        real = 1 + pick(511)
        padded = min(512, real + pick(16)) if pick(2) else None
        cam = steps.step(gen, real, padded=padded, device=device,
                         context=[300, 4096, 1 << 17, 1 << 20][pick(4)])
        found.append((f"random-{seed}", True, cam, ["base", "flashmla"][pick(2)],
                      steps.replay_start(gen, cam) if pick(2) else None))
    for seed in range(12, 20):
        g = torch.Generator().manual_seed(seed)
        pick = lambda n, g=g: int(torch.randint(0, n, (1,), generator=g))  # noqa: E731
        decodes = 1 + pick(256)
        prefills = [2 + pick(2047) for _ in range(1 + pick(3))]
        cam = steps.step(gen, decodes + len(prefills), query_lens=[1] * decodes + prefills,
                         device=device, context=[4096, 1 << 17, 1 << 20][pick(3)])
        found.append((f"random-mixed-{seed}", True, cam, ["base", "flashmla"][pick(2)],
                      steps.replay_start(gen, cam) if pick(2) else None))
    return found


def test_vllms_builders_give_identical_metadata_and_buffers_on_and_off(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    made = {cls: (sides.builder(cls), sides.builder(cls)) for cls in ("base", "flashmla")}
    hits = 0
    for label, hit, cam, cls, replay in _ladder(gen, sides.device):
        off, on = made[cls]
        steps.poison(off, hits)
        steps.poison(on, hits)
        before = sides.dispatch.hits
        args = (False, replay) if replay is not None else ()
        want = sides.build("off", off, cam, *args)
        got = sides.build("on", on, cam, *args)
        torch.cuda.synchronize(sides.device)
        assert steps.differences(want, got, label) == []
        assert steps.differences(steps.buffers(off), steps.buffers(on), label) == []
        assert steps.views(off, want) == steps.views(on, got), label
        assert sides.dispatch.hits - before == int(hit), label
        hits += hit
    assert hits >= 47


def test_a_whole_step_of_both_swa_groups(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(3)
    for real, padded, context, lens in ((64, None, 1 << 17, None), (500, 512, 1 << 20, None),
                                        (1, None, 4096, None),
                                        (12, None, 1 << 20, [1] * 8 + [1024] * 4)):
        cam = steps.step(gen, real, padded=padded, context=context, device=sides.device,
                         query_lens=lens)
        second = steps.second_group(gen, cam)
        built = {}
        for side in ("off", "on"):
            groups = steps.swa_groups(sides.device, config=steps.vllm_config(**CONFIG), seed=5)
            before = sides.dispatch.hits
            sides.set(side)
            try:
                built[side] = (steps.build_step(groups, copy.copy(cam), second), groups)
            finally:
                sides.set("on")
            assert sides.dispatch.hits - before == (2 if side == "on" else 0)
        torch.cuda.synchronize(sides.device)
        (want, off), (got, on) = built["off"], built["on"]
        assert steps.differences(want, got, "step") == []
        for a, b in zip(off.builders(), on.builders(), strict=True):
            assert steps.differences(steps.buffers(a), steps.buffers(b), "builder") == []
        later = got[on.layers()[1]]
        assert (later.token_to_req_indices.data_ptr()
                == on.builders()[0].token_to_req_indices.data_ptr())


def test_captured_builds_replay_new_inputs_alike(sides: Sides) -> None:
    """vLLM does not capture ``build`` (its model runner builds metadata before replaying a
    graph), but every device op of both builds is capturable: captured once, replayed on
    new inputs copied into the captured tensors, both leave the buffers an eager build of
    vLLM's makes from those inputs."""
    gen = torch.Generator().manual_seed(7)
    static = steps.step(gen, 60, padded=64, device=sides.device)
    sources = [steps.step(gen, 60, padded=64, device=sides.device) for _ in range(3)]
    replay = torch.zeros(65, dtype=torch.int32, device=sides.device)
    graphs, builders = {}, {}
    for side in ("off", "on"):
        builder = builders[side] = sides.builder()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            sides.build(side, builder, steps.fresh(static), False, replay)
        torch.cuda.current_stream().wait_stream(stream)
        graph = graphs[side] = torch.cuda.CUDAGraph()
        capture = steps.fresh(static)
        sides.set(side)
        try:
            with torch.cuda.graph(graph):
                builder.build(0, capture, False, replay)
        finally:
            sides.set("on")
    compiled = kernels_swd.compile_count()
    eager = sides.builder()
    for number, source in enumerate(sources):
        replay.copy_(steps.replay_start(gen, source, length=65))
        for side in ("off", "on"):
            steps.poison(builders[side], number)
            for name in ("query_start_loc", "seq_lens", "block_table_tensor", "slot_mapping"):
                getattr(static, name).copy_(getattr(source, name))
            graphs[side].replay()
        steps.poison(eager, number)
        sides.build("off", eager, steps.fresh(source), False, replay)
        torch.cuda.synchronize(sides.device)
        for name in BUFFERS:
            for side in ("off", "on"):
                assert torch.equal(getattr(builders[side], name), getattr(eager, name)), (
                    side, name)
        assert bool((builders["on"].decode_swa_lens[:60] > 0).all())
    assert kernels_swd.compile_count() == compiled
    del graphs


def test_no_compile_after_the_builders_warm_up(sides: Sides) -> None:
    on = sides.builder("flashmla")  # its construction warms every compile key of the arch
    arch = sides.dispatch.arch_of(sides.device)
    assert sides.dispatch.warmed(arch, (), sides.device)
    compiled = kernels_swd.compile_count()
    assert compiled >= len(policy.compile_keys(TABLE, arch))
    gen = torch.Generator().manual_seed(11)
    before = sides.dispatch.hits
    for _, _, cam, _, replay in _ladder(gen, sides.device):
        sides.build("on", on, cam, *((False, replay) if replay is not None else ()))
    torch.cuda.synchronize(sides.device)
    assert kernels_swd.compile_count() == compiled
    assert sides.dispatch.hits - before >= 47
