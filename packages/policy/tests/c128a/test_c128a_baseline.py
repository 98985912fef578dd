"""The baseline launch is vLLM 0.33.0's, checked against a plain restatement of it."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from dsv4_policy.kernels.c128a import Key, Launch, active_width, baseline, capacity
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_strategies import (
    FAR,
    HEAVY_EXAMPLES,
    KEYS_PER_EXAMPLE,
    PROPERTY_EXAMPLES,
    batches,
    far_keys,
    oracle_baseline,
    oracle_capacity,
    oracle_next_pow2,
)

INT_CAP = 1 << 50

# Keys where the formula's corners bite: max_seq_len below the ratio (n == 0), widths
# clamped by a small capacity, sm120's full-width decode view.
corner_keys = st.builds(
    Key,
    st.sampled_from(["sm120", "sm121", "sm121a", "sm90", "sm86", "sm100", "sm1200"]),
    st.sampled_from([1, 2, 4, 64, 127, 128, 129, 256]),
    st.integers(1, 70_000),
    st.integers(0, 300),
    st.integers(0, 8),
    st.integers(0, 8),
    st.integers(1, 8),
)


@settings(max_examples=PROPERTY_EXAMPLES // KEYS_PER_EXAMPLE)
@given(batches(st.one_of(far_keys(), corner_keys)))
def test_baseline_matches_the_plain_formula(keys: list[Key]) -> None:
    for key in keys:
        launch = baseline(key)
        assert dataclasses.asdict(launch) == oracle_baseline(key)
        assert active_width(key) == launch.width
        assert capacity(key.max_model_len, key.compress_ratio) == launch.row_stride


@settings(max_examples=HEAVY_EXAMPLES * 10)
@given(FAR["max_model_len"], FAR["compress_ratio"])
def test_capacity_is_ceil_then_aligned_to_128(max_model_len: int, ratio: int) -> None:
    cap = capacity(max_model_len, ratio)
    assert cap == oracle_capacity(max_model_len, ratio)
    assert cap % 128 == 0 and cap >= 128
    assert cap * ratio >= max_model_len  # holds every compressed entry
    assert (cap - 128) * ratio < max_model_len  # and no whole spare block of 128


def test_worked_examples_from_the_seed() -> None:
    """Numbers stated in the seed documents (context 32768 and 1M, ratio 128)."""
    rng = random.Random(7)
    key = Key("sm90", 128, 1 << 20, 32768, rng.randint(1, 64), 0, 2)
    assert capacity(1 << 20, 128) == 8192  # "8192 at a 1M context"
    assert baseline(key).width == 256  # "capacity 8192, so the active width is 256"
    # The accuracy run: 9,037 tokens at most, width 128, capacity row stride 640 there.
    key = Key("sm100", 128, 81920, rng.randint(6543, 9037), 1, 0, 2)
    assert (baseline(key).width, baseline(key).row_stride) == (128, 640)


@pytest.mark.parametrize("arch, full_view", [("sm120", True), ("sm121", True), ("sm121a", True),
                                             ("sm90", False), ("sm100", False), ("sm1200", False),
                                             ("sm86", False)])
def test_decode_view_is_full_width_only_on_sm12x(arch: str, full_view: bool) -> None:
    key = Key(arch, 128, 1 << 20, 4096, 3, 0, 2)
    launch = baseline(key)
    assert launch.width == 128 and launch.row_stride == 8192
    assert launch.decode_view_width == (8192 if full_view else 128)


def test_small_sequences_get_the_minimum_width_and_large_ones_the_capacity() -> None:
    assert baseline(Key("sm90", 128, 1 << 20, 0, 1, 0, 2)).width == 128  # n == 0
    assert baseline(Key("sm90", 128, 1 << 20, 127, 1, 0, 2)).width == 128  # n == 0
    assert baseline(Key("sm90", 128, 1000, 1000, 1, 0, 2)).width == 128  # capacity 128
    # max_seq_len beyond max_model_len: clamped to the capacity, never above it.
    assert baseline(Key("sm90", 128, 40_000, 10**7, 1, 0, 2)).width == 384


@settings(max_examples=HEAVY_EXAMPLES * 10)
@given(st.integers(1, 1 << 40))
def test_next_power_of_two_inside_the_width(n: int) -> None:
    key = Key("sm90", 1, INT_CAP, n, 1, 0, 1)
    assert baseline(key).width == max(oracle_next_pow2(n), 128)


def test_baseline_tile_and_source() -> None:
    launch = baseline(Key("sm80", 128, 65536, 5000, 2, 100, 4))
    assert launch.compile_key() == (1, 1024, 4)
    assert launch.split_width is False and launch.source == "baseline"
    assert isinstance(launch, Launch)
    with pytest.raises(dataclasses.FrozenInstanceError):
        launch.width = 1  # type: ignore[misc]


@pytest.mark.parametrize("field, value, message", [
    ("arch", "hopper", "Key.arch: arch 'hopper' is not an SM architecture name"),
    ("arch", "SM90", "is not an SM architecture name"),
    ("arch", "sm90\n", "is not an SM architecture name"),
    ("arch", 90, "Key.arch"),
    ("compress_ratio", 0, "Key.compress_ratio: 0 is below the smallest valid compress_ratio, 1"),
    ("max_model_len", 0, "Key.max_model_len: 0 is below"),
    ("max_seq_len", -1, "Key.max_seq_len: -1 is below"),
    ("num_decode_tokens", -3, "Key.num_decode_tokens"),
    ("block_size", 0, "Key.block_size"),
    ("max_seq_len", True, "Key.max_seq_len must be an integer >= 0; got boolean true"),
    ("max_seq_len", 3.0, "got float 3.0"),
    ("num_prefill_tokens", "8", "got string '8'"),
    ("max_model_len", 2**63, "above the largest valid max_model_len"),
])
def test_bad_keys_are_refused_with_the_field_named(field: str, value: object, message: str) -> None:
    good = {"arch": "sm90", "compress_ratio": 128, "max_model_len": 4096, "max_seq_len": 100,
            "num_decode_tokens": 1, "num_prefill_tokens": 0, "block_size": 2}
    good[field] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        Key(**good)


def test_key_behaves_as_a_frozen_dataclass() -> None:
    key = Key("sm90", 128, 4096, 100, 1, 0, 2)
    assert key == Key(arch="sm90", compress_ratio=128, max_model_len=4096, max_seq_len=100,
                      num_decode_tokens=1, num_prefill_tokens=0, block_size=2)
    assert hash(key) == hash(Key("sm90", 128, 4096, 100, 1, 0, 2))
    assert dataclasses.replace(key, max_seq_len=7).max_seq_len == 7
    with pytest.raises(ValueError, match=r"Key\.max_seq_len"):
        dataclasses.replace(key, max_seq_len=-7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        key.arch = "sm80"  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(Key)] == [
        "arch", "compress_ratio", "max_model_len", "max_seq_len", "num_decode_tokens",
        "num_prefill_tokens", "block_size"]


def test_capacity_refuses_nonpositive_inputs() -> None:
    with pytest.raises(ValueError, match="compress_ratio must be a positive integer; got 0"):
        capacity(4096, 0)
    with pytest.raises(ValueError, match="max_model_len must be a positive integer"):
        capacity(-1, 128)
