"""A miss calls vLLM's original function with the very same arguments.

On a CPU vLLM's Triton is off, so its kernel cannot run here; the original is
replaced by a recording spy *before* register(), and the test checks that every
argument object reaches it unchanged, in the same positional/keyword form, and
that its return value comes back untouched. That is the fallback property: for
keys no table holds, behaviour is upstream's by construction.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
import torch
from c128a_batches import Batch, make_batch, table_toml
from dsv4_policy.kernels import c128a as policy
from dsv4_vllm import plugin
from dsv4_vllm.kernels.c128a import C128ADispatch
from hypothesis import given
from hypothesis import strategies as st


class Spy:
    """Stands in for vLLM's function with its exact signature; records every call."""

    def __init__(self, real: Any) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.result = (object(), object(), object())

        @functools.wraps(real)
        def spy(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((args, kwargs))
            return self.result

        self.fn = spy


@pytest.fixture
def spied(pristine):
    """vLLM's module with a spy as the original, then register()ed."""
    spy = Spy(pristine.build_c128a_topk_metadata)
    pristine.build_c128a_topk_metadata = spy.fn
    assert plugin.register({}) is True
    dispatch = pristine.build_c128a_topk_metadata
    assert isinstance(dispatch, C128ADispatch) and dispatch.original is spy.fn
    dispatch.lazy_warmup = False
    return pristine, spy, dispatch


def _forms(batch: Batch, width: int) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    args = batch.args()
    names = [f.name for f in dataclasses.fields(Batch)][:10]
    return [
        (args, {"max_compressed_tokens": width}),  # how vLLM 0.33.0 calls it
        ((*args, width), {}),
        ((), {**dict(zip(names, args, strict=True)), "max_compressed_tokens": width}),
        (args[:4], {**dict(zip(names[4:], args[4:], strict=True))}),  # default width
    ]


def _assert_forwarded(spy: Spy, sent: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    (args, kwargs), = spy.calls[-1:]
    assert len(args) == len(sent[0]) and all(a is b for a, b in zip(args, sent[0], strict=True))
    assert kwargs.keys() == sent[1].keys()
    assert all(kwargs[k] is sent[1][k] for k in kwargs)


batch_shapes = st.fixed_dictionaries({
    "max_model_len": st.sampled_from([4096, 65536, 100_000, 262_144, 1 << 20]),
    "fraction": st.floats(0.001, 1.0),
    "num_decode": st.integers(0, 6),
    "num_prefill": st.integers(0, 6),
    "seed": st.integers(0, 2**31 - 1),
})


def _batch(shape: dict[str, Any]) -> Batch:
    msl = max(1, int(shape["max_model_len"] * shape["fraction"]))
    return make_batch(torch.Generator().manual_seed(shape["seed"]),
                      max_model_len=shape["max_model_len"], max_seq_len=msl,
                      num_decode=shape["num_decode"], num_prefill=shape["num_prefill"])


@given(batch_shapes, st.integers(0, 3))
def test_cpu_tensors_have_no_arch_so_every_call_is_a_miss(spied, shape, form) -> None:
    module, spy, dispatch = spied
    batch = _batch(shape)
    sent = _forms(batch, batch.width)[form]
    before = dispatch.misses
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    assert dispatch.misses == before + 1 and dispatch.hits == 0


@given(batch_shapes, st.integers(0, 3))
def test_keys_outside_the_table_are_misses(spied, shape, form) -> None:
    """A real table (sm90 only, huge prefill counts only) on an arch that does match."""
    module, spy, dispatch = spied
    table = policy.loads_table(table_toml([{
        "id": "only-huge-prefills",
        "match": {"arch": "sm90", "num_prefill_tokens": {"min": 1_000_000}},
        "launch": {"tokens_per_program": 4, "cols_per_program": 256, "num_warps": 2,
                   "split_width": True},
    }]))
    dispatch.configure(table=table, arch_of=lambda device: "sm90")
    batch = _batch(shape)
    sent = _forms(batch, batch.width)[form]
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    assert dispatch.hits == 0


@pytest.fixture
def hit_everything(spied):
    """A resolver that claims a table hit for every key it is asked about."""
    module, spy, dispatch = spied
    asked: list[policy.Key] = []

    def resolve(key: policy.Key) -> policy.Launch:
        asked.append(key)
        return dataclasses.replace(policy.baseline(key), tokens_per_program=2,
                                   cols_per_program=256, source="table:everything")

    dispatch.configure(resolve=resolve, arch_of=lambda device: "sm90")
    return module, spy, dispatch, asked


def test_a_width_outside_vllms_formula_is_a_miss(hit_everything) -> None:
    module, spy, dispatch, asked = hit_everything
    batch = make_batch(torch.Generator().manual_seed(7), max_model_len=1 << 20,
                       max_seq_len=40_000, num_decode=2, num_prefill=1)
    for width in (384, 640, 8192 - 128):  # multiples of 128 no max_seq_len can produce
        sent = (batch.args(), {"max_compressed_tokens": width})
        assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
        _assert_forwarded(spy, sent)
    assert dispatch.hits == 0 and asked == []


def test_mismatched_buffer_capacities_are_a_miss(hit_everything) -> None:
    module, spy, _dispatch, asked = hit_everything
    batch = make_batch(torch.Generator().manual_seed(8), max_model_len=65536,
                       max_seq_len=30_000, num_decode=2, num_prefill=2)
    narrow = torch.zeros((4, batch.capacity - 128), dtype=torch.int32)
    batch = dataclasses.replace(batch, global_decode_buffer=narrow)
    sent = (batch.args(), {"max_compressed_tokens": batch.width})
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    assert asked == []


@pytest.mark.parametrize("kwargs", [
    {"max_compressed_tokens": 256, "bogus": 1},
    {"positions": 0},  # repeats a positional argument
])
def test_unusual_calls_reach_the_original_unchanged(hit_everything, kwargs) -> None:
    module, spy, _dispatch, asked = hit_everything
    batch = make_batch(torch.Generator().manual_seed(9), max_model_len=65536,
                       max_seq_len=30_000, num_decode=1, num_prefill=1)
    sent = (batch.args(), kwargs)
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    assert asked == []


def test_a_resolver_error_is_a_logged_miss(spied, dsv4_log) -> None:
    module, spy, dispatch = spied

    def broken(key: policy.Key) -> policy.Launch:
        raise RuntimeError("table exploded")

    dispatch.configure(resolve=broken, arch_of=lambda device: "sm90")
    batch = make_batch(torch.Generator().manual_seed(10), max_model_len=65536,
                       max_seq_len=30_000, num_decode=1, num_prefill=1)
    sent = (batch.args(), {"max_compressed_tokens": batch.width})
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    assert any("could not resolve" in r.getMessage() for r in dsv4_log)


def test_a_baseline_answer_is_a_miss_even_with_an_arch(spied) -> None:
    module, spy, dispatch = spied
    asked: list[policy.Key] = []

    def resolve(key: policy.Key) -> policy.Launch:
        asked.append(key)
        return policy.baseline(key)

    dispatch.configure(resolve=resolve, arch_of=lambda device: "sm100")
    batch = make_batch(torch.Generator().manual_seed(11), max_model_len=262_144,
                       max_seq_len=50_000, num_decode=3, num_prefill=2)
    sent = (batch.args(), {"max_compressed_tokens": batch.width})
    assert module.build_c128a_topk_metadata(*sent[0], **sent[1]) is spy.result
    _assert_forwarded(spy, sent)
    (key,) = asked
    assert key == policy.Key(arch="sm100", compress_ratio=128, max_model_len=2048 * 128,
                             max_seq_len=batch.width * 128, num_decode_tokens=3,
                             num_prefill_tokens=2, block_size=2)
