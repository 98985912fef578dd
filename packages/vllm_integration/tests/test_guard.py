"""The pure checks behind register(): kill switch, version, and the signature rule."""

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


SIG = guard.Signature((("a", guard.REQUIRED, guard.POSITIONAL), ("b", 3, guard.POSITIONAL),
                       ("c", guard.REQUIRED, guard.KEYWORD)), attributes=("warm",))


class _Kernel:
    def __call__(self, a, b=3, *, c):  # pragma: no cover - never called
        raise AssertionError

    def warm(self) -> None:  # pragma: no cover - never called
        raise AssertionError


def test_a_matching_object_passes_the_signature_rule() -> None:
    assert SIG.reason(_Kernel(), "m.K") is None
    assert str(SIG.expected()) == "(a, b=3, *, c)"


@pytest.mark.parametrize("change", ["default", "rename", "kind", "extra", "missing", "attribute",
                                    "not callable"])
def test_any_drift_is_refused_naming_the_object(change: str) -> None:
    P = inspect.Parameter
    params = [P("a", P.POSITIONAL_OR_KEYWORD), P("b", P.POSITIONAL_OR_KEYWORD, default=3),
              P("c", P.KEYWORD_ONLY)]
    if change == "default":
        params[1] = params[1].replace(default=4)
    elif change == "rename":
        params[0] = params[0].replace(name="x")
    elif change == "kind":
        params[2] = params[2].replace(kind=P.POSITIONAL_OR_KEYWORD, default=0)
    elif change == "extra":
        params.append(P("d", P.KEYWORD_ONLY, default=None))
    elif change == "missing":
        params.pop()
    obj: object = _Kernel()
    if change == "attribute":
        obj = lambda a, b=3, *, c: None  # noqa: E731
    elif change == "not callable":
        obj = object()
    else:
        type(obj).__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    try:
        reason = SIG.reason(obj, "m.K")
    finally:
        if hasattr(_Kernel, "__signature__"):
            del _Kernel.__signature__
    assert reason is not None and reason.startswith("m.K ")


def test_builder_init_rule() -> None:
    def init(self, vllm_config, device):  # pragma: no cover - never called
        raise AssertionError

    assert guard.builder_init_reason(init, "m.B", ("self", "vllm_config", "device")) is None
    reason = guard.builder_init_reason(init, "m.B", ("self", "spec", "device"))
    assert reason is not None and "m.B.__init__" in reason and "warm-up hook" in reason
