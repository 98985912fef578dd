"""The TOML writer every table renderer uses: what it writes, tomllib reads back."""

from __future__ import annotations

import tomllib

import pytest
from dsv4_policy import toml_out
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_strategies import HEAVY_EXAMPLES


@settings(max_examples=HEAVY_EXAMPLES * 10)
@given(st.text())
def test_strings_round_trip_through_tomllib(text: str) -> None:
    assert tomllib.loads(f"x = {toml_out.string(text)}")["x"] == text
    assert tomllib.loads(f"{toml_out.key(text or 'k')} = 1") == {text or "k": 1}


@settings(max_examples=HEAVY_EXAMPLES * 10)
@given(st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(),
                 st.floats(allow_nan=False, allow_infinity=False),
                 st.lists(st.integers(-5, 5), max_size=4),
                 st.dictionaries(st.sampled_from(["min", "max", "a b"]), st.integers(0, 9))))
def test_values_round_trip_through_tomllib(value: object) -> None:
    parsed = tomllib.loads(f"x = {toml_out.value(value)}")["x"]
    assert parsed == value and type(parsed) is type(value)


def test_writer_refuses_values_it_does_not_cover() -> None:
    with pytest.raises(ValueError, match="cannot write object"):
        toml_out.value(object())


