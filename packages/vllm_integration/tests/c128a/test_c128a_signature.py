"""C128A's signature: vLLM's ``build_c128a_topk_metadata`` as the stand-in reads it."""

from __future__ import annotations

import inspect

import pytest
from dsv4_vllm import guard
from dsv4_vllm.kernels import c128a as target

WHERE = f"{target.MODULE}.{target.FUNCTION}"


def test_vllm_function_has_the_expected_signature(sparse_mla) -> None:
    assert target.SIGNATURE.reason(sparse_mla.build_c128a_topk_metadata, WHERE) is None


def _lookalike(params: list[inspect.Parameter]):
    def fn(*args, **kwargs):  # pragma: no cover - never called
        raise AssertionError

    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return fn


def _expected_params() -> list[inspect.Parameter]:
    return [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
        for n, d in target.EXPECTED_PARAMETERS
    ]


def test_a_faithful_lookalike_passes() -> None:
    assert target.SIGNATURE.reason(_lookalike(_expected_params()), WHERE) is None


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
    reason = target.SIGNATURE.reason(_lookalike(params), WHERE)
    assert reason is not None and "build_c128a_topk_metadata" in reason


def test_builder_init_check(sparse_mla) -> None:
    builder = sparse_mla.DeepseekV4SparseMLAMetadataBuilder
    assert guard.builder_init_reason(builder.__init__, WHERE, target.EXPECTED_BUILDER_INIT) is None

    def other(self, vllm_config, device):  # pragma: no cover - never called
        raise AssertionError

    assert "warm-up hook" in guard.builder_init_reason(other, WHERE, target.EXPECTED_BUILDER_INIT)
