"""The indexer decode stand-in in vLLM's process, through vLLM's real indexer builder.

vLLM's own ``DeepseekV32IndexerMetadataBuilder`` is built twice from the same minimal
config, one builder with the plugin off and one with it on, with every buffer poisoned;
each step is built by both and everything is compared bit for bit: every field of the
returned metadata (every tensor's shape, stride, dtype and bytes) and every tensor the
builder holds, whole. vLLM's Triton is its CPU placeholder in this process, so the
step's compressed slot mapping (vLLM's Triton function, the first thing ``build`` does)
is dsv4's plain-torch reference on both sides; dsv4's kernel runs in Triton's
interpreter. ``test_indexer_decode_vllm.py`` runs the same comparison with vLLM's own
Triton function in a child process.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import builder_method_checks as checks
import indexer_steps as steps
import pytest
import torch
from builder_method_checks import Sides, expect_hit
from dsv4_kernels.compressed_slot_mapping import reference as csm_reference
from dsv4_policy.kernels import indexer_decode as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels import indexer_decode as target_module
from dsv4_vllm.kernels.indexer_decode import IndexerDecodeDispatch

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "small"
match = { arch = "sm90", compress_ratio = 4, num_tokens = { min = 1, max = 40 } }
launch = { tokens_per_program = 16, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "large"
match = { arch = "sm90", num_tokens = { min = 41 } }
launch = { tokens_per_program = 64, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")


@pytest.fixture
def sides(pristine_vllm: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Sides]:
    module = importlib.import_module(steps.MODULE)
    cls = module.DeepseekV32IndexerMetadataBuilder
    started = checks.registered("indexer_decode", IndexerDecodeDispatch, cls, TABLE)
    # vLLM's Triton function cannot run in this process: the reference serves both sides.
    monkeypatch.setattr(module, "get_compressed_slot_mapping",
                        csm_reference.get_compressed_slot_mapping)
    yield Sides(module, cls, *started)
    plugin.unregister()


def _views_of(builder: Any, meta: Any) -> list[str]:
    """Which builder buffer each returned decode tensor views (CUDA graphs read them)."""
    found = []
    for name in ("decode_lens", "per_req_decode_lens", "seq_lens", "schedule_metadata"):
        t = getattr(meta.decode, name)
        owner = [b for b in steps.BUFFERS if isinstance(getattr(builder, b, None), torch.Tensor)
                 and getattr(builder, b).untyped_storage().data_ptr()
                 == t.untyped_storage().data_ptr()]
        found.append(f"{name}:{','.join(owner)}")
    return found


def compare(sides: Sides, cam: Any, *, hit: bool, builders: tuple[Any, Any] | None = None,
            **make: Any) -> tuple[Any, Any]:
    """Both sides build ``cam`` from poisoned builders; everything is bit-identical, and
    the stand-in took the step over exactly when ``hit``."""
    off, on = builders or (steps.make_builder(sides.module, **make),
                           steps.make_builder(sides.module, **make))
    steps.poison(off)
    steps.poison(on)
    with expect_hit(sides, hit):
        want = sides.build("off", off, cam)
        got = sides.build("on", on, cam)
    assert steps.differences(want, got, "metadata") == []
    assert steps.differences(steps.buffers(off), steps.buffers(on), "builder") == []
    if want.decode is not None:
        assert _views_of(off, want) == _views_of(on, got)
    return want, got


# --------------------------------------------------------------------------- hits
def test_decode_steps_are_identical_and_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    for real, padded, context in ((1, None, 4096), (8, None, 1 << 17), (37, None, 1 << 20),
                                  (48, None, 300), (5, 8, 1 << 17), (1, 2, 4096),
                                  (30, 48, 2000), (0, 4, 100)):
        _, got = compare(sides, steps.step(gen, real, padded=padded, context=context),
                            hit=True)
        assert got.decode is not None and got.prefill is None
        # Padding requests have query length 0: mixed lengths need padding, all-padding not.
        assert got.decode.requires_padding is (0 < real < (padded or real))
        assert got.decode.seq_lens.shape == (padded or real, 1)


def test_the_written_buffers_are_the_decode_tensors_and_no_more(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(3)
    cam = steps.step(gen, 5, padded=8, context=1 << 17)
    _, got = compare(sides, cam, hit=True)
    on = steps.make_builder(sides.module)
    sides.build("on", on, cam)
    untouched = ("decode_seq_lens_buffer", "global_decode_seq_lens_buffer",
                 "decode_indices_buffer", "expanded_block_table_buffer",
                 "scheduler_metadata_buffer")
    for name in untouched:
        assert bool((getattr(on, name) == steps.POISON).all()), name
    assert on.decode_lens_buffer[:8].tolist() == [1] * 5 + [0] * 3
    assert bool((on.decode_lens_buffer[8:] == steps.POISON).all())
    seq = cam.seq_lens.tolist()
    assert on.expanded_seq_lens_buffer[:8].tolist() == [s // 4 for s in seq]
    assert got.decode.decode_is_uniform is False and got.decode.write_max_decode_len == 1


def test_padding_tokens_past_the_requests_and_requests_without_tokens(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(4)
    # More decode tokens than requests: the extra rows of expanded_seq_lens are zeros.
    compare(sides, steps.step(gen, 6, num_tokens=9), hit=True)
    # Fewer: padding requests without a token (the returned seq_lens has the tokens' rows).
    _, got = compare(sides, steps.step(gen, 6, padded=10, num_tokens=7), hit=True)
    assert got.decode.seq_lens.shape == (7, 1) and got.decode.decode_lens.shape == (10,)


@pytest.mark.parametrize("seed", range(8))
def test_generated_decode_batches(sides: Sides, seed: int) -> None:
    gen = torch.Generator().manual_seed(1000 + seed)
    pick, real, padded, tokens = checks.generated_sizes(gen)
    if tokens is not None and tokens > 96:
        tokens = 96
    compare(sides, steps.step(gen, real, padded=padded, num_tokens=tokens,
                              context=[300, 4096, 1 << 17, 1 << 20][pick(4)]), hit=True)


def test_the_capture_path_and_every_argument_form_are_taken_over(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(5)
    cam = steps.step(gen, 3, padded=4)
    off, on = steps.make_builder(sides.module), steps.make_builder(sides.module)
    want = sides.build("off", off, cam)
    before = sides.dispatch.hits
    sides.switch("on")
    for got in (on.build_for_cudagraph_capture(cam),
                on.build(common_prefix_len=0, common_attn_metadata=cam),
                on.build(0, cam, True), on.build(0, cam, fast_build=True),
                on.build(0, common_attn_metadata=cam)):
        assert steps.differences(want, got) == []
    assert sides.dispatch.hits - before == 5


# --------------------------------------------------------------------------- misses
def assert_vllms(sides: Sides, builder: Any, cam: Any) -> None:
    """The stand-in hands the build to vLLM's with the very same arguments, writing nothing
    (vLLM's own Triton kernels, which prefill and flattened steps launch, cannot run in
    this process)."""
    steps.poison(builder)
    checks.assert_handed_over(sides, steps, builder, cam,
                              [((0, cam), {}), ((0, cam), {"fast_build": True})])


def test_steps_with_prefills_or_longer_queries_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(6)
    builder = steps.make_builder(sides.module)
    assert_vllms(sides, builder, steps.step(gen, 4, query_lens=[1, 1, 9, 3]))
    assert_vllms(sides, builder, steps.step(gen, 2, query_lens=[5, 7]))
    # The host says every query is one token, query_start_loc_cpu says otherwise: vLLM
    # flattens such a step, so it stays vLLM's.
    assert_vllms(sides, builder, steps.step(gen, 3, query_lens=[1, 2, 1], max_query_len=1))
    # A query_start_loc_cpu too short for the requests, or of a float type.
    cam = steps.step(gen, 3)
    assert_vllms(sides, builder, dataclasses.replace(
        cam, query_start_loc_cpu=cam.query_start_loc_cpu[:3]))
    assert_vllms(sides, builder, dataclasses.replace(
        cam, query_start_loc_cpu=cam.query_start_loc_cpu.float()))


def test_an_empty_step_and_a_dcp_step_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(7)
    compare(sides, steps.step(gen, 0, padded=3, num_tokens=0), hit=False)
    cam = steps.step(gen, 3)
    assert_vllms(sides, steps.make_builder(sides.module),
                 dataclasses.replace(cam, dcp_local_seq_lens=cam.seq_lens.clone()))


def test_keys_the_table_does_not_cover_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(8)
    cam = steps.step(gen, 3)
    sides.dispatch.configure(table=policy.make_table([]))
    compare(sides, cam, hit=False)
    checks.assert_sm90_alone_is_covered(sides, compare, cam, TABLE)


@pytest.mark.parametrize(("attribute", "value"), [
    ("num_speculative_tokens", 1), ("decode_threshold", 2), ("dcp_world_size", 2),
    ("pcp_world_size", 2), ("use_pcp", True), ("use_flattening", True),
    ("supports_varlen", True),
])
def test_builders_on_another_decode_path_are_vllms(sides: Sides, attribute: str,
                                                   value: Any) -> None:
    """A builder vLLM set up for speculative decoding, DCP/PCP, flattened or varlen decode:
    the stand-in calls vLLM's build (whatever that does with the step)."""
    gen = torch.Generator().manual_seed(9)
    on = steps.make_builder(sides.module)
    setattr(on, attribute, value)
    assert_vllms(sides, on, steps.step(gen, 4))


def test_a_speculative_decoding_builder_is_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(10)
    config = steps.vllm_config(speculative_tokens=1)
    compare(sides, steps.step(gen, 4), hit=False, config=config)


def test_a_ratio_one_indexer_and_subclasses_are_vllms(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(11)
    cam = steps.step(gen, 4)
    compare(sides, cam, hit=False, ratio=1)
    subclass = type("Sub", (sides.module.DeepseekV32IndexerMetadataBuilder,), {})
    compare(sides, cam, hit=False, cls=subclass)


def test_a_step_the_kernel_refuses_is_vllms_and_stays_so(sides: Sides, dsv4_log) -> None:
    gen = torch.Generator().manual_seed(12)
    cam = steps.step(gen, 4)
    off, on = steps.make_builder(sides.module), steps.make_builder(sides.module)
    on.per_req_decode_lens_buffer = on.per_req_decode_lens_buffer[:2]  # too short: refused
    off.per_req_decode_lens_buffer = off.per_req_decode_lens_buffer[:2]
    for _ in range(2):
        with pytest.raises(RuntimeError):  # vLLM's own error for that buffer
            sides.build("off", off, cam)
        with pytest.raises(RuntimeError):
            sides.build("on", on, cam)
    assert sum("refused" in r.getMessage() for r in dsv4_log) == 1  # then remembered
    assert sides.dispatch.hits == 0 and sides.dispatch.misses == 2
    assert bool((on.decode_lens_buffer == off.decode_lens_buffer).all())


def test_unreadable_calls_reach_vllms_build_unchanged(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(13)
    cam = steps.step(gen, 2)
    checks.assert_unreadable_calls_reach_vllms_build(sides, steps.make_builder(sides.module),
                                                     cam)


# --------------------------------------------------------------------------- DeepGEMM
def test_the_deep_gemm_schedule_is_vllms_own_function_on_the_same_view(
        sides: Sides, monkeypatch: pytest.MonkeyPatch) -> None:
    """With CUDA and DeepGEMM, vLLM plans the paged MQA logits on the decode seq_lens; the
    stand-in calls the same function on a bit-identical view (here a stand-in for
    DeepGEMM's, which needs a GPU)."""
    calls: list[tuple[Any, ...]] = []

    def schedule(context_lens: torch.Tensor, block_size: int, num_sms: int,
                 indices: Any = None) -> torch.Tensor:
        calls.append((tuple(context_lens.shape), context_lens.stride(), block_size, num_sms,
                      indices))
        rows = torch.zeros((num_sms // 4 + 1, 2), dtype=torch.int32)
        rows[: context_lens.shape[0], 0] = context_lens[:, 0][: rows.shape[0]]
        rows[:, 1] = int(context_lens.sum())
        return rows

    builders = (steps.make_builder(sides.module), steps.make_builder(sides.module))
    cuda = SimpleNamespace(is_cuda=lambda: True)
    monkeypatch.setattr(sides.module, "current_platform", cuda)
    monkeypatch.setattr(sides.module, "has_deep_gemm", lambda: True)
    monkeypatch.setattr(sides.module, "get_paged_mqa_logits_metadata", schedule)
    keys = checks.recorded_keys(sides, policy, TABLE)
    gen = torch.Generator().manual_seed(14)
    _, got = compare(sides, steps.step(gen, 5, padded=8), hit=True, builders=builders)
    assert calls[0] == calls[1] == ((8, 1), (1, 1), 64, 132, None)
    assert got.decode.schedule_metadata.shape == (34, 2)
    assert keys == [policy.Key("sm90", 4, 1, 8, 8)]


# --------------------------------------------------------------------------- binding
def test_the_plugin_patches_vllms_class_attribute_and_restores_it(pristine_vllm) -> None:
    module = importlib.import_module(steps.MODULE)
    checks.assert_patches_and_restores(target_module, module.DeepseekV32IndexerMetadataBuilder,
                                       ("indexer_decode", "compressed_slot_mapping"))


def test_the_stand_in_binds_as_a_method_and_an_instance_attribute_wins(sides: Sides) -> None:
    gen = torch.Generator().manual_seed(15)
    cam = steps.step(gen, 2)
    checks.assert_binds_as_a_method(sides, [steps.make_builder(sides.module)], lambda: cam)


def test_importing_the_target_module_imports_no_vllm() -> None:
    assert checks.imported_alone("dsv4_vllm.kernels.indexer_decode") == [
        "DeepseekV32IndexerMetadataBuilder.build", "indexer_decode", "False"]


# --------------------------------------------------------------------------- warm-up
def test_builder_start_up_warms_the_arch_once_per_device(sides: Sides) -> None:
    steps.make_builder(sides.module)
    steps.make_builder(sides.module)
    assert sides.warmed == [("sm90", torch.device("cpu"))]
    steps.make_builder(sides.module, ratio=1)
    subclass = type("Sub", (sides.module.DeepseekV32IndexerMetadataBuilder,), {})
    steps.make_builder(sides.module, cls=subclass)
    assert sides.warmed == [("sm90", torch.device("cpu"))]


def test_the_default_warm_up_compiles_every_compile_key(monkeypatch, dsv4_log) -> None:
    seen = checks.counted_warm_ups(monkeypatch, target_module.kernels_idm)
    assert target_module.warm_compile_keys("sm90", "cpu", table=TABLE) == 2
    assert seen == [([(16, 1), (64, 2), (1024, 4)], "cpu")]
    line = [r.getMessage() for r in dsv4_log if r.levelno == logging.INFO][-1]
    assert "3 indexer decode metadata compile key(s) for sm90" in line


def test_decisions_are_cached_per_step_shape(sides: Sides) -> None:
    keys = checks.recorded_keys(sides, policy, TABLE)
    gen = torch.Generator().manual_seed(16)
    on = steps.make_builder(sides.module)
    for _ in range(3):
        sides.build("on", on, steps.step(gen, 6, padded=8))
    sides.build("on", on, steps.step(gen, 50, padded=64))
    assert keys == [policy.Key("sm90", 4, 0, 8, 8), policy.Key("sm90", 4, 0, 64, 64)]
    assert sides.dispatch.hits == 4


# --------------------------------------------------------------------------- host work
KERNEL_RANGE = "dsv4.indexer_decode.launch"


def test_the_take_over_dispatches_fewer_aten_ops(sides: Sides,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    checks.annotate_launch(monkeypatch, target_module.kernels_idm, KERNEL_RANGE)
    gen = torch.Generator().manual_seed(17)
    cam = steps.step(gen, 60, padded=64)
    off, on = steps.make_builder(sides.module), steps.make_builder(sides.module)
    # The compressed slot mapping is the same call on both sides: leave it out.
    monkeypatch.setattr(sides.module, "get_compressed_slot_mapping",
                        lambda *args, out=None, **kwargs: out)
    for _ in range(2):
        sides.build("off", off, cam)
        sides.build("on", on, cam)
    vllm_ops = checks.aten_ops(lambda: sides.build("off", off, cam), KERNEL_RANGE)
    ours = checks.aten_ops(lambda: sides.build("on", on, cam), KERNEL_RANGE)
    assert len(ours) * 4 < len(vllm_ops), (ours, vllm_ops)
    for name in ("aten::diff", "aten::floor_divide", "aten::max", "aten::min", "aten::item",
                 "aten::fill_", "aten::unsqueeze"):
        assert name in vllm_ops and name not in ours, name
