"""The SWA routing against the real vLLM 0.33.0: patch, forward, miss, hit, warm-up.

vLLM's SWA builder looks ``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL`` up as a module global
on every build, so calling the module global here is the path vLLM takes. Hits run
dsv4's kernel (Triton's interpreter on this CPU machine); misses must reach vLLM's own
object with the very same arguments.
"""

from __future__ import annotations

import functools
import inspect
import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4_kernels.swa import reference as swa_reference
from dsv4_kernels.swa.testing import POISON, SwaCall, assert_same_outputs, make_swa_step
from dsv4_policy.kernels import swa as policy
from dsv4_vllm import plugin
from dsv4_vllm.hook import is_hooked, mark
from dsv4_vllm.kernels.swa import SWADispatch


class Spy:
    """Stands in for vLLM's object in miss tests: same call signature, records calls."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.register_warmup = real.register_warmup

        @functools.wraps(type(real).__call__)
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((args, kwargs))
            swa_reference.compute_swa_indices_and_lens(*args, **kwargs)

        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return self._call(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.real)


def _table(tile: tuple[int, int, int] = (8, 32, 2), **match: object) -> policy.Table:
    return policy.make_table([policy.Entry("sm90-test", {"arch": "sm90", **match},
                                           policy.Tile(*tile), {"probes": 8})])


def _calls(seed: int) -> list[SwaCall]:
    step = make_swa_step(seed, decode_contexts=[3, 40, 900], prefill_queries=[(10, 30)],
                         window_size=16, block_size=8, max_image_tokens=8, image_spans=True,
                         replay=True, pad_tokens=2, row_pad=3)
    return step.calls()


def test_register_replaces_the_global_and_forwards_vllms_api(swa_module, dsv4_log) -> None:
    original = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert plugin.register({}) is True
    patched = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert isinstance(patched, SWADispatch) and patched.original is original
    assert plugin.active("swa") is patched
    assert inspect.signature(patched) == inspect.signature(original)
    # What vLLM calls on the object reaches vLLM's own object.
    assert patched.register_warmup.__self__ is original
    assert patched.CompileKey is original.CompileKey
    assert patched.get_warmup_keys(window_size=128, block_size=64) == \
        original.get_warmup_keys(window_size=128, block_size=64)
    assert is_hooked(swa_module.DeepseekSparseSWAMetadataBuilder.__init__, mark("swa"))
    lines = [r.getMessage() for r in dsv4_log if r.levelno == logging.INFO]
    assert any(m.startswith("dsv4: SWA launch policy active on vLLM 0.33.0 (vllm.v1.attention."
                            "backends.mla.sparse_swa._COMPUTE_SWA_INDICES_AND_LENS_KERNEL "
                            "patched; warm-up at metadata-builder start-up; DSV4_POLICY=0 "
                            "turns it off)") for m in lines), lines
    assert plugin.register({}) is True and swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL is patched
    assert plugin.unregister() is True
    assert swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL is original
    assert not is_hooked(swa_module.DeepseekSparseSWAMetadataBuilder.__init__, mark("swa"))


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_kill_switch_leaves_the_swa_kernel_alone(swa_module, value) -> None:
    original = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert plugin.register({"DSV4_POLICY": value}) is False
    assert swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL is original


def test_a_drifted_swa_signature_is_left_alone(swa_module, dsv4_log, monkeypatch) -> None:
    class Drifted:
        def register_warmup(self) -> None:  # pragma: no cover - never called
            raise AssertionError

        def __call__(self, swa_indices, swa_lens, window_size, *, num_tokens):
            raise AssertionError("never called")  # pragma: no cover

    drifted = Drifted()
    monkeypatch.setattr(swa_module, "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL", drifted)
    assert plugin.register({}) is False  # not every kernel is patched
    assert plugin.active("c128a") is not None  # the other kernels are
    assert swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL is drifted
    warnings = [r.getMessage() for r in dsv4_log if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "(swa_indices, swa_lens, window_size, *, num_tokens)" in warnings[0]
    assert "the plugin expects (swa_indices," in warnings[0] and "has_image=False)" in warnings[0]


def test_a_miss_calls_vllms_object_with_the_same_arguments(swa_module) -> None:
    spy = Spy(swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL)
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = spy
    assert plugin.register({}) is True
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    assert isinstance(dispatch, SWADispatch) and dispatch.original is spy
    dispatch.configure(arch_of=lambda device: "sm90")  # the shipped table has no CPU entry
    for call in _calls(1):
        got = call.fresh()
        spy.calls.clear()
        result = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*got.args(), **got.kwargs())
        assert result is None
        assert len(spy.calls) == 1
        args, kwargs = spy.calls[0]
        assert all(a is b for a, b in zip(args, got.args(), strict=True))
        assert kwargs == got.kwargs()
        assert_same_outputs(got, call.run(swa_reference.compute_swa_indices_and_lens))
    assert dispatch.hits == 0 and dispatch.misses == 2


def test_a_hit_runs_dsv4s_kernel_with_identical_outputs(swa_module) -> None:
    spy = Spy(swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL)
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = spy
    plugin.register({})
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    warmed: list[tuple[Any, ...]] = []

    def warm(arch, window_size, block_size, image, device, *, table) -> int:
        warmed.append((arch, window_size, block_size, image))
        return 0

    dispatch.configure(arch_of=lambda device: "sm90", table=_table(), warm=warm)
    for seed in range(3):
        for call in _calls(seed):
            got = call.fresh()
            swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*got.args(), **got.kwargs())
            assert_same_outputs(got, call.run(swa_reference.compute_swa_indices_and_lens))
    assert spy.calls == [] and dispatch.hits == 6
    # Lazily, once per deployment the rows imply (none was recorded at start-up): the
    # decode rows' plain window, then the prefill rows' window + 8 image tokens.
    assert warmed == [("sm90", 16, 8, 0), ("sm90", 16, 8, 8)]


def test_a_call_the_kernel_refuses_goes_to_vllm(swa_module, dsv4_log) -> None:
    spy = Spy(swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL)
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = spy
    plugin.register({})
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    dispatch.configure(arch_of=lambda device: "sm90", table=_table(), warm=lambda *a, **k: 0)
    call = _calls(4)[0].fresh()
    bad = list(call.args())
    bad[10] = call.block_table.long()  # the kernel takes int32 block tables only
    with pytest.raises(ValueError):
        swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*bad, **call.kwargs())
    # The spy's reference refused it too, but only after the kernel declined it.
    assert len(spy.calls) == 1 and spy.calls[0][0][10] is bad[10]
    assert bool((call.swa_indices == POISON).all())
    assert any("refused a call" in r.getMessage() for r in dsv4_log)


def test_unusual_calls_and_other_devices_are_misses(swa_module) -> None:
    spy = Spy(swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL)
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = spy
    plugin.register({})
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    dispatch.configure(table=_table(), warm=lambda *a, **k: 0)  # real arch: CPU has none
    call = _calls(5)[0].fresh()
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*call.args(), **call.kwargs())
    dispatch.configure(arch_of=lambda device: "sm90")
    kwargs = dict(call.kwargs(), token_offset=0)
    args = call.args()
    swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(*args[:12], replay_start=args[12], **kwargs)
    assert dispatch.hits == 0 and len(spy.calls) == 2


def test_the_builder_start_up_warms_every_swa_compile_key(swa_module) -> None:
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    plugin.register({})
    dispatch = swa_module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    warmed: list[tuple[Any, ...]] = []
    dispatch.configure(arch_of=lambda device: "sm90",
                       warm=lambda *a, table: warmed.append(a) or 0)
    spec = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512,
                                dtype=torch.uint8, sliding_window=128)
    config = SimpleNamespace(
        speculative_config=None,
        model_config=SimpleNamespace(max_model_len=4096,
                                     hf_config=SimpleNamespace(sliding_window=128)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=16, max_num_seqs=4),
    )
    builder = swa_module.DeepseekSparseSWAMetadataBuilder(spec, ["layers.0.attn"], config,
                                                          torch.device("cpu"))
    assert builder.decode_swa_indices.shape == (16, 1, 128)  # vLLM's constructor ran
    assert warmed == [("sm90", 128, 64, 0, torch.device("cpu"))]
    assert dispatch.deployments == {(128, 64): 0}


def test_the_real_warm_up_compiles_the_deployments_keys(monkeypatch) -> None:
    from dsv4_kernels import swa as kernels_swa
    from dsv4_vllm.kernels.swa import warm_swa_compile_keys

    seen: list[list[tuple[int, ...]]] = []
    real = kernels_swa.warmup
    monkeypatch.setattr(kernels_swa, "warmup", lambda keys, device: seen.append(keys)
                        or real(keys, device))
    table = _table((4, 64, 2), window_size=128)
    assert warm_swa_compile_keys("sm90", 128, 64, 576, "cpu", table=table) == 0
    expected = policy.compile_keys(table, "sm90", window_size=128, block_size=64,
                                   max_image_tokens=576)
    assert sorted(expected) == seen[0]
    assert {(4, 64, 2, 0), (4, 64, 2, 1), (1, 1024, 4, 0), (1, 1024, 4, 1)} == set(seen[0])
