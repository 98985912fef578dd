"""The compressed slot mapping stand-in in vLLM's process: routing, refusals, warm-up.

vLLM's Triton is its CPU placeholder in this process, so vLLM's function is a spy that
records its arguments (and computes dsv4's plain-torch reference); dsv4's kernel runs in
Triton's interpreter. The equality with vLLM's own function runs in
``test_compressed_slot_mapping_vllm.py``.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from dsv4_kernels.compressed_slot_mapping import reference
from dsv4_kernels.compressed_slot_mapping.testing import (
    POISON,
    assert_same_buffers,
    assert_same_result,
    make_step,
    random_step,
)
from dsv4_policy.kernels import compressed_slot_mapping as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels.compressed_slot_mapping import (
    TARGET,
    CompressedSlotMappingDispatch,
    _on_builder_ready,
)

TABLE = policy.loads_table("""schema = 1

[[entry]]
id = "all"
match = { arch = "sm90", num_tokens = { min = 0, max = 100000 } }
launch = { tokens_per_program = 32, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
""")


class Spy:
    """vLLM's function stand-in: records each call, returns the reference's result."""

    def __init__(self, compute: bool = True) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.compute = compute

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        if not self.compute:
            return "vllm's result"
        return reference.get_compressed_slot_mapping(*args, **kwargs)


def _dispatch(spy: Spy, table: Any = TABLE, arch: str | None = "sm90") -> Any:
    warmed: list[Any] = []
    dispatch = CompressedSlotMappingDispatch(
        spy, table=table, arch_of=lambda device: arch,
        warm=lambda *a, table=None: warmed.append(a) or 0)
    dispatch.warmed_calls = warmed
    return dispatch


@pytest.mark.parametrize("seed", range(6))
def test_a_hit_writes_the_whole_buffer_as_the_reference(seed: int) -> None:
    spy = Spy()
    dispatch = _dispatch(spy)
    call = random_step(300 + seed, max_tokens=200)
    want, want_result = call.run(reference.get_compressed_slot_mapping)
    got, result = call.run(dispatch)
    if want.out is not None:
        assert_same_buffers(got, want)
    assert_same_result(result, want_result)
    assert dispatch.hits == 1 and dispatch.misses == 0 and spy.calls == []


def test_out_none_and_keywords_given_positionally_hit_too() -> None:
    dispatch = _dispatch(Spy())
    call = make_step(1, decode_contexts=[7, 900], prefill_queries=[(3, 20)], with_out=False)
    result = dispatch(*call.args(), None, 1, 1)
    assert_same_result(result, reference.get_compressed_slot_mapping(*call.args()))
    assert dispatch.hits == 1


def test_a_miss_calls_vllms_function_with_the_same_arguments() -> None:
    spy = Spy()
    dispatch = _dispatch(spy, table=policy.loads_table("schema = 1\n"))
    call = make_step(2, decode_contexts=[5, 6, 7])
    args, kwargs = call.args(), call.kwargs()
    dispatch(*args, **kwargs)
    ((got_args, got_kwargs),) = spy.calls
    assert all(a is b for a, b in zip(got_args, args, strict=True))
    assert got_kwargs.keys() == kwargs.keys()
    assert all(got_kwargs[k] is kwargs[k] for k in kwargs)
    assert dispatch.misses == 1 and dispatch.hits == 0


def test_no_arch_and_unreadable_calls_miss() -> None:
    spy = Spy()
    call = make_step(3, decode_contexts=[5])
    no_arch = _dispatch(spy, arch=None)
    no_arch(*call.args(), **call.kwargs())
    assert no_arch.misses == 1 and no_arch.hits == 0 and len(spy.calls) == 1
    dispatch = _dispatch(spy)
    # A keyword that repeats a positional argument: vLLM's function raises its own error.
    with pytest.raises(TypeError):
        dispatch(*call.args(), call.out, slot_mapping=call.slot_mapping)
    assert len(spy.calls) == 2 and dispatch.hits == 0 and dispatch.misses == 1


def test_a_refused_call_falls_back_and_its_shape_stays_vllms(dsv4_log) -> None:
    spy = Spy(compute=False)
    dispatch = _dispatch(spy)
    call = make_step(4, decode_contexts=[5, 9])
    bad = torch.full_like(call.out, -12345, dtype=torch.int32)  # dsv4's checks refuse it
    for _ in range(2):
        assert dispatch(*call.args(), out=bad) == "vllm's result"
    assert bool((bad == -12345).all())  # refused before anything was written
    assert len(spy.calls) == 2 and all(kw["out"] is bad for _, kw in spy.calls)
    assert dispatch.hits == 0 and dispatch.misses == 2
    assert sum("refused" in r.getMessage() for r in dsv4_log) == 1  # then remembered


def test_decisions_are_cached_per_call_shape() -> None:
    keys: list[Any] = []

    def resolve(key: Any) -> Any:
        keys.append(key)
        return policy.resolve(key, TABLE)

    dispatch = _dispatch(Spy())
    dispatch.configure(resolve=resolve)
    call = make_step(5, decode_contexts=[5, 9, 11], extra_rows=20)
    for _ in range(3):
        call.run(dispatch)
    assert len(keys) == 1 and dispatch.hits == 3
    assert keys[0] == policy.Key("sm90", 4, 64, 1, 3, 3, 23)


def test_builder_ready_warms_dcp_one_and_the_deployments(monkeypatch) -> None:
    dispatch = _dispatch(Spy())
    indexer = type("Indexer", (), {"compress_ratio": 4, "dcp_world_size": 2,
                                   "device": torch.device("cpu")})()
    _on_builder_ready(dispatch, indexer)
    _on_builder_ready(dispatch, indexer)
    assert dispatch.warmed_calls == [("sm90", 1, torch.device("cpu")),
                                     ("sm90", 2, torch.device("cpu"))]
    v32 = type("Indexer", (), {"compress_ratio": 1, "dcp_world_size": 4,
                               "device": torch.device("cpu")})()
    _on_builder_ready(dispatch, v32)
    assert len(dispatch.warmed_calls) == 2


def test_register_rebinds_every_module_and_the_kill_switch_none(pristine_vllm) -> None:
    modules = [importlib.import_module(name) for name in TARGET.holders]
    originals = [m.get_compressed_slot_mapping for m in modules]
    assert len({id(o) for o in originals}) == 1
    assert plugin.register({"DSV4_POLICY": "0"}) is False
    assert [m.get_compressed_slot_mapping for m in modules] == originals
    assert plugin.register({}) is True
    stand_in = plugin.active("compressed_slot_mapping")
    assert isinstance(stand_in, CompressedSlotMappingDispatch)
    assert all(m.get_compressed_slot_mapping is stand_in for m in modules)
    indexer = importlib.import_module(TARGET.module)
    assert getattr(indexer.DeepseekV32IndexerMetadataBuilder.__init__,
                   "__dsv4_hooks__", {}).get("__dsv4_compressed_slot_mapping_builder_hook__")
    assert plugin.unregister() is True
    assert all(m.get_compressed_slot_mapping is originals[0] for m in modules)


def test_poison_is_never_left_by_a_hit() -> None:
    dispatch = _dispatch(Spy())
    call = make_step(6, prefill_queries=[(0, 50)], extra_rows=70)
    got, _ = call.run(dispatch)
    assert got.out is not None and not bool((got.out == POISON).any())
    assert dispatch.hits == 1
