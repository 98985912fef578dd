"""The pure checks behind register(): kill switch, version and signature."""

from __future__ import annotations

import inspect

import pytest
from dsv4_vllm import guard
from hypothesis import given
from hypothesis import strategies as st


def _case_variants(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from((c.lower(), c.upper())) for c in word)).map("".join)


@given(st.sampled_from(["0", "off", "false", "no"]).flatmap(_case_variants),
       st.sampled_from(["", " ", "  "]))
def test_switch_off_values_turn_the_policy_off(value: str, pad: str) -> None:
    reason = guard.switch_off_reason({"DSV4_POLICY": pad + value + pad})
    assert reason is not None and "DSV4_POLICY" in reason and "off" in reason


@given(st.sampled_from(["1", "on", "true", "yes", ""]).flatmap(_case_variants))
def test_switch_on_values_and_unset_keep_it_on(value: str) -> None:
    assert guard.switch_off_reason({"DSV4_POLICY": value}) is None
    assert guard.switch_off_reason({}) is None


@given(st.text(min_size=1, max_size=8).filter(
    lambda s: s.strip().lower() not in {"", "0", "1", "on", "off", "true", "false", "yes", "no"}
))
def test_unknown_switch_values_fail_safe_to_off_and_say_what_is_accepted(value: str) -> None:
    reason = guard.switch_off_reason({"DSV4_POLICY": value})
    assert reason is not None
    assert "not understood" in reason and "0/off/false" in reason


@pytest.mark.parametrize("version", ["0.33.0", "0.33.1", "0.33.12", "0.33.0+cu130",
                                     "0.33.2.post1", "0.33.0rc1"])
def test_supported_versions(version: str) -> None:
    assert guard.version_reason(version) is None


@pytest.mark.parametrize("version", ["0.32.9", "0.34.0", "1.33.0", "0.330.0", "0.3.3",
                                     "dev", "0.33", ""])
def test_unsupported_versions_name_the_supported_series(version: str) -> None:
    reason = guard.version_reason(version)
    assert reason is not None and "0.33.x" in reason and repr(version)[1:-1] in reason


def test_vllm_function_has_the_expected_signature(sparse_mla) -> None:
    assert guard.signature_reason(sparse_mla.build_c128a_topk_metadata) is None


def _lookalike(params: list[inspect.Parameter]):
    def fn(*args, **kwargs):  # pragma: no cover - never called
        raise AssertionError

    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return fn


def _expected_params() -> list[inspect.Parameter]:
    return [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
        for n, d in guard.EXPECTED_PARAMETERS
    ]


def test_a_faithful_lookalike_passes() -> None:
    assert guard.signature_reason(_lookalike(_expected_params())) is None


@pytest.mark.parametrize("change", ["default", "rename", "swap", "extra", "missing", "kwonly"])
def test_any_signature_drift_is_refused(change: str) -> None:
    params = _expected_params()
    P = inspect.Parameter
    if change == "default":
        params[-1] = params[-1].replace(default=4096)
    elif change == "rename":
        params[5] = params[5].replace(name="kv_block_size")
    elif change == "swap":
        params[7], params[8] = params[8], params[7]
    elif change == "extra":
        params.append(P("use_adaptive_width", P.POSITIONAL_OR_KEYWORD, default=True))
    elif change == "missing":
        params.pop()
    elif change == "kwonly":
        params[-1] = params[-1].replace(kind=P.KEYWORD_ONLY)
    reason = guard.signature_reason(_lookalike(params))
    assert reason is not None and "build_c128a_topk_metadata" in reason


def test_builder_init_check(sparse_mla) -> None:
    builder = sparse_mla.DeepseekV4SparseMLAMetadataBuilder
    assert guard.builder_init_reason(builder.__init__) is None

    def other(self, vllm_config, device):  # pragma: no cover - never called
        raise AssertionError

    assert "warm-up hook" in guard.builder_init_reason(other)
