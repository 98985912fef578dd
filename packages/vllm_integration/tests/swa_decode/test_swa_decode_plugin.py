"""The SWA decode stand-in in vLLM's process, through vLLM's real SWA builders.

vLLM's own ``DeepseekSparseSWAMetadataBuilder`` (and FlashMLA's subclass of it) is built
twice from the same minimal config, one builder with the plugin off and one with it on,
every buffer poisoned alike; each step is built by both and everything is compared bit for
bit: every field of the returned metadata (every tensor's shape, stride, storage offset,
dtype and bytes; the FlashMLA plan holders) and every tensor the builder holds, whole.
vLLM's Triton is its CPU placeholder in this process, so three of vLLM's objects are
served by stand-ins on both sides: its SWA rows kernel by dsv4's plain-torch reference
(``dsv4_kernels.swa.reference``), its token-to-request map by the same map in torch
(``swa_steps.token_map``), and, without vLLM's compiled FlashMLA, ``get_mla_metadata`` by
FlashMLA's empty plan holder. dsv4's kernel runs in Triton's interpreter.
``test_swa_decode_vllm.py`` runs the comparison with vLLM's own Triton kernels in a child
process.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import builder_method_checks as checks
import pytest
import swa_steps as steps
import torch
from builder_method_checks import expect_hit
from dsv4_kernels.swa import reference as swa_reference
from dsv4_policy.kernels import swa_decode as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels import swa_decode as target_module
from dsv4_vllm.kernels.swa_decode import SWADecodeDispatch

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "small"
match = { arch = "sm90", index_width = 128, num_tokens = { min = 1, max = 40 } }
launch = { tokens_per_program = 4, cols_per_program = 128, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "narrow"
match = { arch = "sm90", index_width = { max = 127 }, num_tokens = { min = 1, max = 40 } }
launch = { tokens_per_program = 2, cols_per_program = 32, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "large"
match = { arch = "sm90", num_tokens = { min = 41 } }
launch = { tokens_per_program = 16, cols_per_program = 64, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")
"""Covers every key of the window-128 builders (and narrower windows up to 40 tokens)."""


class RowsReference:
    """vLLM's SWA rows kernel object for both sides: its call signature, dsv4's reference
    for the writes, every call recorded."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))
        with torch.profiler.record_function(STAND_IN_RANGE):
            swa_reference.compute_swa_indices_and_lens(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@dataclasses.dataclass
class Sides(checks.Sides):
    """Also every token map and FlashMLA plan made, and the SWA rows kernel's calls."""

    maps: list[tuple[int, int]]
    rows: RowsReference
    plans: list[Any]


STAND_IN_RANGE = "test.vllm_stand_in"


def prefill_metadata(out: torch.Tensor, seq_lens: torch.Tensor, qsl: torch.Tensor,
                     replay: torch.Tensor, num_prefills: int, num_decodes: int,
                     window: int) -> None:
    """vLLM's prefill metadata kernel for both sides (it cannot run here): a function of
    every argument it takes, so both sides agree only when they call it alike."""
    lo, hi = num_decodes, num_decodes + num_prefills
    with torch.profiler.record_function(STAND_IN_RANGE):
        out.copy_(seq_lens[lo:hi] - replay[lo:hi] + (qsl[lo + 1:hi + 1] - qsl[lo:hi]) * window)


@pytest.fixture
def sides(pristine_vllm: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Sides]:
    module = importlib.import_module(steps.MODULE)
    cls = module.DeepseekSparseSWAMetadataBuilder
    started = checks.registered("swa_decode", SWADecodeDispatch, cls, TABLE)
    # vLLM's Triton kernels cannot run in this process: stand-ins serve both sides.
    rows = RowsReference(module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL.original)
    monkeypatch.setattr(module, "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL", rows)
    maps: list[tuple[int, int]] = []

    def token_map(qsl: torch.Tensor, out: torch.Tensor, mapped: int, tokens: int) -> Any:
        maps.append((mapped, tokens))
        with torch.profiler.record_function(STAND_IN_RANGE):
            return steps.token_map(qsl, out, mapped, tokens)

    monkeypatch.setattr(importlib.import_module(steps.METADATA), "compute_token_to_req_indices",
                        token_map)
    monkeypatch.setattr(module, "_COMPUTE_PREFILL_METADATA_KERNEL", prefill_metadata)
    with steps.plan_holders(module) as plans:
        yield Sides(module, cls, *started, maps, rows, plans)
    plugin.unregister()


def compare(sides: Sides, cam: Any, *, hit: bool, builders: tuple[Any, Any] | None = None,
            args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
            seed: int = 0, **make: Any) -> tuple[Any, Any]:
    """Both sides build ``cam`` (each its own copy, so each makes its own token map) from
    builders poisoned alike; everything is bit-identical, and the stand-in took the step
    over exactly when ``hit``. ``args``/``kwargs`` are ``build``'s (default ``(0, cam)``)."""
    off, on = builders or (steps.make_builder(**make), steps.make_builder(**make))
    steps.poison(off, seed)
    steps.poison(on, seed)
    built = {}
    with expect_hit(sides, hit):
        for side, builder in (("off", off), ("on", on)):
            mine = copy.copy(cam)
            maps, plans = len(sides.maps), len(sides.plans)
            call = tuple(mine if a is cam else a for a in args) or (0, mine)
            built[side] = sides.build(side, builder, mine, *call, **(kwargs or {}))
            built[side + "_maps"] = sides.maps[maps:]
            built[side + "_plans"] = len(sides.plans) - plans
    want, got = built["off"], built["on"]
    assert steps.differences(want, got, "metadata") == []
    assert steps.differences(steps.buffers(off), steps.buffers(on), "builder") == []
    assert steps.views(off, want) == steps.views(on, got)
    assert built["off_maps"] == built["on_maps"]
    assert built["off_plans"] == built["on_plans"]
    return want, got


# --------------------------------------------------------------------------- hits
def test_decode_steps_are_identical_and_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    for real, padded, context in ((1, None, 4096), (8, None, 1 << 17), (37, None, 1 << 20),
                                  (48, None, 300), (5, 8, 1 << 17), (1, 2, 4096),
                                  (30, 48, 2000), (0, 4, 100), (3, None, 1), (6, None, 128),
                                  (6, None, 129), (4, 6, 64)):
        cam = steps.step(gen, real, padded=padded, context=context)
        rows_calls = len(sides.rows.calls)
        want, got = compare(sides, cam, hit=True, seed=real)
        assert len(sides.rows.calls) - rows_calls == 1  # vLLM's side only
        tokens = padded or real
        assert got.num_decodes == tokens and got.num_decode_tokens == tokens
        assert got.num_prefills == got.num_prefill_tokens == 0
        assert got.decode_swa_indices.shape == (tokens, 1, 128)
        assert got.prefill_swa_indices is None and got.decode_swa_width == 128
        assert got.tile_sched_swaonly is not None and got.tile_sched_c1a is None
        assert got.tile_sched_swaonly is not want.tile_sched_swaonly  # a fresh plan each
        assert bool((got.decode_swa_lens[real:] == 0).all())
        assert bool((got.decode_swa_indices[real:] == -1).all())


def test_the_written_buffers_are_vllms_and_no_more(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(3)
    cam = steps.step(gen, 5, padded=8, context=1 << 17)
    poisoned = steps.make_builder(seed=11)
    before = steps.buffers(poisoned)
    compare(sides, cam, hit=True, seed=11)
    on = steps.make_builder(seed=11)
    got = sides.build("on", on, copy.copy(cam))
    after = steps.buffers(on)
    for name in ("prefill_swa_indices", "prefill_swa_lens", "no_replay_start"):
        assert torch.equal(after[name], before[name]), name
    assert torch.equal(after["decode_swa_indices"][8:], before["decode_swa_indices"][8:])
    assert bool((after["decode_swa_lens"][8:] == 0).all())
    assert torch.equal(after["is_valid_token"][8:], before["is_valid_token"][8:])
    assert after["is_valid_token"][:8].tolist() == [True] * 5 + [False] * 3
    assert torch.equal(after["token_to_req_indices"][8:], before["token_to_req_indices"][8:])
    assert after["token_to_req_indices"][:8].tolist() == [0, 1, 2, 3, 4, 0, 0, 0]
    lens = after["decode_swa_lens"][:8].tolist()
    assert lens[:5] == [128] * 5 and lens[5:] == [0] * 3
    seq = cam.seq_lens.tolist()
    for r in range(5):
        pos = torch.arange(seq[r] - 128, seq[r])
        slots = cam.block_table_tensor[r, pos // 64] * 64 + pos % 64
        assert after["decode_swa_indices"][r, 0].tolist() == slots.tolist()
    # The views are the builder's own buffers, as vLLM hands them to the CUDA graphs.
    assert steps.views(on, got) == {
        "block_table": "", "slot_mapping": "", "seq_lens": "", "query_start_loc": "",
        "query_start_loc_cpu": "", "is_valid_token": "is_valid_token",
        "token_to_req_indices": "token_to_req_indices",
        "decode_swa_indices": "decode_swa_indices", "decode_swa_lens": "decode_swa_lens",
        "replay_start": "no_replay_start"}


def test_padding_tokens_past_the_requests_and_a_longer_slot_mapping(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(4)
    # More tokens than requests: the extra tokens are padding (slot -1, request 0).
    compare(sides, steps.step(gen, 6, num_tokens=9), hit=True)
    # Fewer: padding requests without a token.
    _, got = compare(sides, steps.step(gen, 6, padded=10, num_tokens=7), hit=True)
    assert got.decode_swa_lens.shape == (7,) and got.num_decodes == 10
    # A slot mapping longer than the step's tokens: is_valid_token covers all of it.
    cam = steps.step(gen, 5)
    longer = torch.cat([cam.slot_mapping, torch.full((4,), -1, dtype=torch.int64)])
    longer[6] = 12345  # a valid slot past the step's tokens still counts as valid
    _, got = compare(sides, dataclasses.replace(cam, slot_mapping=longer), hit=True)
    assert got.is_valid_token.shape == (9,) and got.is_valid_token.tolist()[5:] == [
        False, True, False, False]
    assert got.decode_swa_lens.shape == (5,)


def test_replay_start_given_and_not(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(5)
    cam = steps.step(gen, 12, padded=16, context=300)
    replay = steps.replay_start(gen, cam)
    assert int((replay > 0).sum()) >= 3
    for args, kwargs in (((0, cam, False, replay), {}), ((0, cam), {"replay_start": replay}),
                         ((0, cam), {"replay_start": None}), ((0, cam, True, None), {})):
        want, got = compare(sides, cam, hit=True, args=args, kwargs=kwargs)
        given = next((a for a in (*args[3:], kwargs.get("replay_start")) if a is not None), None)
        if given is not None:
            assert got.replay_start is replay and want.replay_start is replay
        else:  # the builder's no_replay_start (compare checks that it is on each side)
            assert got.replay_start.shape == (49,) and not bool(got.replay_start.any())
    # A replay start past a token's position: the length is negative, as vLLM stores it.
    late = cam.seq_lens.clone()
    compare(sides, cam, hit=True, args=(0, cam, False, late))


@pytest.mark.parametrize("seed", range(8))
def test_generated_decode_batches(sides: Sides, seed: int) -> None:
    gen = torch.Generator().manual_seed(1000 + seed)
    pick, real, padded, tokens = checks.generated_sizes(gen)
    cam = steps.step(gen, real, padded=padded, num_tokens=tokens,
                     context=[3, 300, 4096, 1 << 17, 1 << 20][pick(5)])
    replay = steps.replay_start(gen, cam) if pick(2) else None
    compare(sides, cam, hit=True, args=(0, cam, False, replay), seed=seed,
            cls=["base", "flashmla"][pick(2)])


def test_flashmlas_subclass_is_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(6)
    cls = steps.builder_class("flashmla")
    assert sides.dispatch.covered() == (steps.builder_class(), cls)
    assert "build" not in vars(cls) and cls.build is sides.dispatch
    compare(sides, steps.step(gen, 20, padded=24), hit=True, cls="flashmla")


def test_a_window_of_another_width(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(7)
    config = steps.vllm_config(window=64)
    _, got = compare(sides, steps.step(gen, 9, context=500), hit=True, window=64,
                     config=config)
    assert got.decode_swa_indices.shape == (9, 1, 64) and got.decode_swa_width == 64


def test_the_steps_second_builder_reuses_the_first_ones_map(sides: Sides) -> None:
    """vLLM's model runner V2 builds both SWA groups of a step with ``build_attn_metadata``;
    the second group's metadata carries the first group's token-to-request map, and both
    sides reach that through vLLM's own method."""
    gen = torch.Generator().manual_seed(8)
    cam = steps.step(gen, 13, padded=16, context=1 << 17)
    second = steps.second_group(gen, cam)
    built = {}
    for side in ("off", "on"):
        groups = steps.swa_groups(seed=21)
        maps, hits = len(sides.maps), sides.dispatch.hits
        sides.switch(side)
        try:
            built[side] = (steps.build_step(groups, copy.copy(cam), second), groups)
        finally:
            sides.switch("on")
        assert sides.maps[maps:] == [(13, 16)]  # one map per step, made by the first builder
        assert sides.dispatch.hits - hits == (2 if side == "on" else 0)
    (want, off), (got, on) = built["off"], built["on"]
    assert steps.differences(want, got, "step") == []
    for a, b in zip(off.builders(), on.builders(), strict=True):
        assert type(a).__name__ == "DeepseekSparseSWAFlashMLAMetadataBuilder"
        assert steps.differences(steps.buffers(a), steps.buffers(b), "builder") == []
    first, later = (got[layer] for layer in on.layers())
    assert later.token_to_req_indices.data_ptr() == on.builders()[0].token_to_req_indices.data_ptr()
    assert later.decode_swa_indices.data_ptr() == on.builders()[1].decode_swa_indices.data_ptr()
    assert not torch.equal(first.decode_swa_indices, later.decode_swa_indices)
    # The second builder's own map buffer is left as it was (poisoned).
    poisoned = steps.swa_groups(seed=21).builders()[1].token_to_req_indices
    assert torch.equal(on.builders()[1].token_to_req_indices, poisoned)


def test_the_capture_path_and_every_argument_form_are_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(9)
    cam = steps.step(gen, 3, padded=4)
    off = steps.make_builder()
    want = sides.build("off", off, copy.copy(cam))
    before = sides.dispatch.hits
    sides.switch("on")
    forms = (lambda b, c: b.build_for_cudagraph_capture(c),
             lambda b, c: b.build(common_prefix_len=0, common_attn_metadata=c),
             lambda b, c: b.build(0, c, True), lambda b, c: b.build(0, c, fast_build=True),
             lambda b, c: b.build(0, common_attn_metadata=c),
             lambda b, c: b.build(0, c, replay_start=None),
             lambda b, c: b.build(common_attn_metadata=c, common_prefix_len=0, fast_build=False))
    for form in forms:
        on = steps.make_builder()
        got = form(on, copy.copy(cam))
        assert steps.differences(want, got) == []
        assert steps.differences(steps.buffers(off), steps.buffers(on)) == []
    assert sides.dispatch.hits - before == len(forms)


# --------------------------------------------------------------------------- misses
def assert_vllms(sides: Sides, builder: Any, cam: Any) -> None:
    """The stand-in hands the build to vLLM's with the very same arguments, writing
    nothing and making no token map (vLLM's own Triton kernels, which prefill steps
    launch, cannot run in this process)."""
    steps.poison(builder, 5)
    maps = len(sides.maps)
    replay = torch.zeros(cam.num_reqs + 1, dtype=torch.int32)
    spy = checks.assert_handed_over(sides, steps, builder, cam, [
        ((0, cam), {}), ((0, cam), {"fast_build": True}), ((0, cam, False, replay), {})])
    assert spy.calls[2][1][3] is replay
    assert len(sides.maps) == maps


def test_mixed_steps_are_identical_and_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    for lens, tokens, context in (([1, 1, 1, 30], None, 5000), ([1] * 20 + [40, 7], None, 300),
                                  ([1, 1, 25], 30, 1 << 20), ([1, 9], None, 2),
                                  ([1] * 7 + [33], None, 1 << 17)):
        cam = steps.step(gen, len(lens), query_lens=lens, num_tokens=tokens, context=context)
        calls = len(sides.rows.calls)
        _, got = compare(sides, cam, hit=True, seed=len(lens))
        off_decode, off_prefill, on_prefill = sides.rows.calls[calls:]
        assert off_decode[1]["token_offset"] == 0
        # The prefill rows go to the module's rows kernel object with vLLM's arguments.
        assert steps.differences(off_prefill, on_prefill, "prefill rows call") == []
        decodes = lens.count(1)
        assert got.num_decodes == got.num_decode_tokens == decodes
        assert got.num_prefills == len(lens) - decodes
        assert got.num_prefill_tokens == (tokens or sum(lens)) - decodes
        assert got.prefill_swa_indices.shape == (got.num_prefill_tokens, 1, 128)
        assert got.prefill_gather_lens is not None and got.max_decode_query_len == 1
        assert on_prefill[1] == {"num_tokens": got.num_prefill_tokens,
                                 "token_offset": decodes, "has_image": False}


def test_mixed_steps_with_image_spans_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(12)
    builder = steps.make_builder()
    cam = steps.step(gen, 3, query_lens=[1, 1, 30], context=900)
    builder.max_image_tokens = 16
    assert_vllms(sides, builder, dataclasses.replace(cam, mm_req_doc_ranges={2: [(3, 9)]}))
    # Without spans in the step, the same builder's mixed step is dsv4's.
    off, on = steps.make_builder(), steps.make_builder()
    off.max_image_tokens = on.max_image_tokens = 16
    compare(sides, dataclasses.replace(cam, mm_req_doc_ranges={2: []}), hit=True,
            builders=(off, on))


def test_steps_with_prefills_first_or_longer_queries_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(10)
    builder = steps.make_builder()
    assert_vllms(sides, builder, steps.step(gen, 4, query_lens=[9, 1, 1, 3]))
    assert_vllms(sides, builder, steps.step(gen, 2, query_lens=[5, 7]))
    assert_vllms(sides, builder, steps.step(gen, 3, query_lens=[2, 2, 2]))
    # The host says a query is longer than one token: vLLM's split decides.
    assert_vllms(sides, builder, steps.step(gen, 3, max_query_len=2))
    # A host length that is not an int.
    cam = steps.step(gen, 3)
    assert_vllms(sides, builder, dataclasses.replace(cam, max_query_len=1.0))


def test_non_causal_steps_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(11)
    builder = steps.make_builder()
    cam = steps.step(gen, 4)
    assert_vllms(sides, builder, dataclasses.replace(cam, causal=False))
    assert_vllms(sides, builder, dataclasses.replace(cam, causal=torch.ones(4, dtype=torch.bool)))
    assert_vllms(sides, builder, dataclasses.replace(cam, causal=1))


def test_empty_steps_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(12)
    _, got = compare(sides, steps.step(gen, 0, padded=3, num_tokens=0), hit=False)
    assert got.num_decode_tokens == 0 and got.tile_sched_swaonly is None
    compare(sides, steps.step(gen, 0, num_tokens=0), hit=False)
    # More tokens than slot_mapping entries: vLLM's build decides what that means.
    cam = steps.step(gen, 4)
    assert_vllms(sides, steps.make_builder(), dataclasses.replace(
        cam, slot_mapping=cam.slot_mapping[:3]))


def test_keys_the_table_does_not_cover_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(13)
    cam = steps.step(gen, 3)
    sides.dispatch.configure(table=policy.make_table([]))
    compare(sides, cam, hit=False)
    # The shipped table decides as the policy resolves it (its entries are sm90's at width
    # 128): on the arch and width of the shipped entries, and off them.
    sides.dispatch.configure(table=None)
    for arch, window in (("sm90", 128), ("sm90", 64), ("sm100", 128)):
        sides.dispatch.configure(arch_of=lambda device, arch=arch: arch)
        shipped = policy.resolve(policy.Key(arch, window, 3)).source != "baseline"
        compare(sides, cam, hit=shipped, window=window, config=steps.vllm_config(window=window))
    checks.assert_sm90_alone_is_covered(sides, compare, cam, TABLE)
    # A window of 256 columns at 40 tokens or fewer: no entry.
    compare(sides, steps.step(gen, 5, context=600), hit=False, window=256,
            config=steps.vllm_config(window=256))
    compare(sides, steps.step(gen, 41, padded=48, context=600), hit=True, window=256,
            config=steps.vllm_config(window=256))


def test_speculative_and_dspark_builders_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(14)
    cam = steps.step(gen, 4)
    for config in (steps.vllm_config(speculative_tokens=1),
                   steps.vllm_config(speculative_tokens=2, dspark=True)):
        off = steps.make_builder(config=config)
        assert off.decode_threshold > 1
        compare(sides, cam, hit=False, config=config)
    for attribute, value in (("num_speculative_tokens", 1), ("is_dspark", True),
                             ("is_dspark", None), ("decode_threshold", 0),
                             ("decode_threshold", 1.0)):
        builder = steps.make_builder()
        setattr(builder, attribute, value)
        assert_vllms(sides, builder, cam)


def test_other_subclasses_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(15)
    cam = steps.step(gen, 4)
    subclass = type("Sub", (steps.builder_class(),), {})
    compare(sides, cam, hit=False, cls=subclass)
    sub_of_flashmla = type("SubOfFlashMLA", (steps.builder_class("flashmla"),), {})
    compare(sides, cam, hit=False, cls=sub_of_flashmla)


def test_flashmlas_subclass_overriding_the_build_is_not_covered(
        sides: Sides, monkeypatch: pytest.MonkeyPatch, dsv4_log) -> None:
    base, cls = steps.builder_class(), steps.builder_class("flashmla")
    assert target_module.overridden(cls, base) == []
    assert target_module.overridden(int, base) == list(target_module.OVERRIDES)
    for name in target_module.OVERRIDES:
        with monkeypatch.context() as patch:
            patch.setattr(cls, name, lambda self, *a, **k: None, raising=False)
            assert target_module.overridden(cls, base) == [name]
            assert target_module.covered_classes(sides.module) == (base,)
            fresh = SWADecodeDispatch(sides.vllm_build, table=TABLE,
                                      arch_of=lambda device: "sm90", warm=lambda *a, **k: 0)
            assert fresh.covered() == (base,)
        assert name not in vars(cls)
    warnings = [r.getMessage() for r in dsv4_log if r.levelno == logging.WARNING]
    assert len(warnings) == 2 * len(target_module.OVERRIDES)
    assert all("builds stay vLLM's" in w for w in warnings)
    assert target_module.covered_classes(sides.module) == (base, cls)


def test_a_step_the_kernel_refuses_is_vllms_and_stays_so(sides: Sides, dsv4_log) -> None:
    gen = torch.Generator().manual_seed(16)
    cam = steps.step(gen, 4)
    # A slot mapping with a row stride: vLLM's build takes it, dsv4's kernel does not.
    strided = torch.stack([cam.slot_mapping, cam.slot_mapping], 1)[:, 0]
    refused = dataclasses.replace(cam, slot_mapping=strided)
    for _ in range(2):
        compare(sides, refused, hit=False)
    assert sum("refused" in r.getMessage() for r in dsv4_log) == 1  # then remembered
    compare(sides, cam, hit=False)  # the same step shape: vLLM's from now on
    compare(sides, steps.step(gen, 5), hit=True)  # another shape is still taken over
    # Refused before anything was written: the int64 block table reaches vLLM's kernel
    # (here the reference, which refuses it too).
    bad = dataclasses.replace(steps.step(gen, 6), block_table_tensor=cam.block_table_tensor
                              .long().repeat(2, 1)[:6])
    builder = steps.make_builder(seed=3)
    before = steps.buffers(builder)
    rows = len(sides.rows.calls)
    with pytest.raises(ValueError, match="block_table"):
        sides.build("on", builder, bad)
    assert len(sides.rows.calls) == rows + 1
    after = steps.buffers(builder)
    assert torch.equal(after["decode_swa_indices"], before["decode_swa_indices"])


def test_unreadable_calls_reach_vllms_build_unchanged(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(17)
    cam = steps.step(gen, 2)
    checks.assert_unreadable_calls_reach_vllms_build(
        sides, steps.make_builder(), cam, ((0, cam, False, None, 5), {}),
        ((0, cam), {"unknown": 1}))


# --------------------------------------------------------------------------- binding
def test_the_plugin_patches_vllms_class_attribute_and_restores_it(pristine_vllm) -> None:
    module = importlib.import_module(steps.MODULE)
    flashmla = steps.builder_class("flashmla")

    def inherited(stand_in: Any) -> None:
        assert flashmla.build is stand_in and "build" not in vars(flashmla)

    checks.assert_patches_and_restores(target_module, module.DeepseekSparseSWAMetadataBuilder,
                                       ("swa_decode", "swa"), inherited)


def test_the_stand_in_binds_as_a_method_and_an_instance_attribute_wins(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(18)
    cam = steps.step(gen, 2)
    checks.assert_binds_as_a_method(sides, [steps.make_builder(cls)
                                            for cls in ("base", "flashmla")],
                                    lambda: copy.copy(cam))


def test_importing_the_target_module_imports_no_vllm() -> None:
    assert checks.imported_alone("dsv4_vllm.kernels.swa_decode") == [
        "DeepseekSparseSWAMetadataBuilder.build", "swa_decode", "False"]


# --------------------------------------------------------------------------- warm-up
def test_builder_start_up_warms_the_arch_once_per_device(sides: Sides) -> None:
    steps.make_builder()
    steps.make_builder("flashmla")
    steps.make_builder()
    assert sides.warmed == [("sm90", torch.device("cpu"))]
    sides.dispatch._warmed.clear()
    steps.make_builder(config=steps.vllm_config(speculative_tokens=1))
    steps.make_builder(type("Sub", (steps.builder_class(),), {}))
    assert sides.warmed == [("sm90", torch.device("cpu"))]
    steps.make_builder("flashmla")
    assert sides.warmed == [("sm90", torch.device("cpu"))] * 2


def test_a_hit_warms_lazily_without_a_start_up(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(19)
    builder = steps.make_builder()
    sides.dispatch._warmed.clear()
    sides.warmed.clear()
    sides.build("on", builder, steps.step(gen, 3))
    sides.build("on", builder, steps.step(gen, 4))
    assert sides.warmed == [("sm90", torch.device("cpu"))] and sides.dispatch.hits == 2


def test_a_failed_warm_up_turns_the_stand_in_off(sides: Sides, dsv4_log) -> None:
    gen = torch.Generator().manual_seed(20)

    def fail(*args: Any, table: Any = None) -> int:
        raise RuntimeError("no compiler")

    sides.dispatch.configure(warm=fail)
    sides.dispatch._warmed.clear()
    compare(sides, steps.step(gen, 3), hit=False)
    assert sides.dispatch.enabled is False
    assert any("warm-up failed" in r.getMessage() for r in dsv4_log)


def test_the_default_warm_up_compiles_every_compile_key(monkeypatch, dsv4_log) -> None:
    seen = checks.counted_warm_ups(monkeypatch, target_module.kernels_swd)
    assert target_module.warm_compile_keys("sm90", "cpu", table=TABLE) == 2
    assert seen == [([(2, 32, 1), (4, 128, 2), (8, 128, 4), (16, 64, 4)], "cpu")]
    line = [r.getMessage() for r in dsv4_log if r.levelno == logging.INFO][-1]
    assert "4 SWA decode metadata compile key(s) for sm90" in line
    seen.clear()
    assert target_module.warm_compile_keys("sm80", "cpu", table=TABLE) == 2
    assert seen == [([(8, 128, 4)], "cpu")]  # the baseline tile only


def test_the_real_warm_up_runs_in_the_interpreter() -> None:
    assert target_module.warm_compile_keys("sm90", "cpu", table=TABLE) == 0


def test_decisions_are_cached_per_step_shape(sides: Sides) -> None:
    keys = checks.recorded_keys(sides, policy, TABLE)
    gen = torch.Generator().manual_seed(21)
    on = steps.make_builder()
    for _ in range(3):
        sides.build("on", on, steps.step(gen, 6, padded=8))
    sides.build("on", on, steps.step(gen, 44, padded=48))
    assert keys == [policy.Key("sm90", 128, 8), policy.Key("sm90", 128, 48)]
    assert sides.dispatch.hits == 4


# --------------------------------------------------------------------------- host work
KERNEL_RANGE = "dsv4.swa_decode.launch"


def _aten_ops(fn: Any) -> list[str]:
    """The ATen ops ``fn`` dispatches, without those inside dsv4's launch and inside the
    stand-ins for vLLM's Triton kernels (the same calls on both sides, or a launch on a
    GPU)."""
    return checks.aten_ops(fn, KERNEL_RANGE, STAND_IN_RANGE)


def test_the_take_over_dispatches_fewer_aten_ops(sides: Sides,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.profiler import record_function

    checks.annotate_launch(monkeypatch, target_module.kernels_swd, KERNEL_RANGE)
    # vLLM's token map is the same call on both sides: leave it out.
    from vllm.v1.attention.backend import CommonAttentionMetadata

    token_map = CommonAttentionMetadata.token_to_req_indices

    def token_to_req_indices(self: Any, buffer: torch.Tensor) -> torch.Tensor:
        with record_function(STAND_IN_RANGE):
            return token_map(self, buffer)

    monkeypatch.setattr(CommonAttentionMetadata, "token_to_req_indices", token_to_req_indices)
    gen = torch.Generator().manual_seed(22)
    cam = steps.step(gen, 44, padded=48)
    off, on = steps.make_builder(), steps.make_builder()
    for _ in range(2):
        sides.build("off", off, copy.copy(cam))
        sides.build("on", on, copy.copy(cam))
    vllm_ops = _aten_ops(lambda: sides.build("off", off, copy.copy(cam)))
    ours = _aten_ops(lambda: sides.build("on", on, copy.copy(cam)))
    assert len(vllm_ops) >= 4 * len(ours), (ours, vllm_ops)
    for name in ("aten::ge", "aten::fill_", "aten::slice"):
        assert name in vllm_ops and name not in ours, name
    assert ours == ["aten::as_strided"] * 3, ours  # the three views, nothing else
