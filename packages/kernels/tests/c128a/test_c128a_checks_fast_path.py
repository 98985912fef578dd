"""The single-pass acceptance in ``check_inputs`` never accepts what the detailed checks
refuse, and when it accepts, it returns exactly what the detailed checks return."""

from __future__ import annotations

import torch
from dsv4_kernels.c128a import checks as v
from hypothesis import given, settings
from hypothesis import strategies as st

FAULTS = (
    "positions_dtype", "req_dtype", "slots_dtype", "table_dtype", "decode_dtype",
    "lens_dtype", "prefill_dtype", "ratio", "block_size", "num_decode_low",
    "num_decode_high", "width_unaligned", "width_zero", "width_float", "width_too_wide",
    "prefill_narrow", "view_small", "view_wide", "decode_misaligned", "prefill_strided",
    "decode_transposed", "positions_strided", "req_short", "slots_short", "lens_short",
    "decode_short", "prefill_short", "table_empty", "bool_ratio",
)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str | None, tuple, dict]:
    """A valid call, or one with exactly one fault (so each fault is seen in isolation)."""
    fault = draw(st.one_of(st.none(), st.sampled_from(FAULTS)))
    num_tokens = draw(st.integers(1, 12))
    num_decode = draw(st.integers(0, num_tokens))
    capacity = 128 * draw(st.integers(1, 6))
    width = 128 * draw(st.integers(1, capacity // 128))
    slack = draw(st.integers(0, 3))

    def dt(name: str, good: torch.dtype) -> torch.dtype:
        return torch.int16 if fault == name else good

    def short(name: str, n: int) -> int:
        return n - 1 if fault == name else n + slack

    def buffer(name: str, cols: int, rows: int) -> torch.Tensor:
        base = torch.full((rows + 1, 2 * cols), -5, dtype=dt(f"{name}_dtype", torch.int32))
        if fault == f"{name}_misaligned":
            return base[1:, :cols]
        if fault == f"{name}_strided":
            return base[:rows, ::2]
        if fault == f"{name}_transposed":
            return base[:rows, :cols].t()
        return base[:rows, :cols]

    positions = torch.arange(2 * num_tokens, dtype=dt("positions_dtype", torch.int64))
    positions = positions[::2] if fault == "positions_strided" else positions[:num_tokens]
    nd = {"num_decode_low": -1, "num_decode_high": num_tokens + 1}.get(fault, num_decode)
    p_cols = width - 128 if fault == "prefill_narrow" and width > 128 else capacity
    args = (
        positions,
        {"ratio": 0, "bool_ratio": True}.get(fault, 128),
        nd,
        torch.zeros(max(short("req_short", num_decode), 0), dtype=dt("req_dtype", torch.int32)),
        torch.zeros((0, 0) if fault == "table_empty" else (2, 4),
                    dtype=dt("table_dtype", torch.int32)),
        -2 if fault == "block_size" else 2,
        torch.zeros(max(short("slots_short", num_decode), 0), dtype=dt("slots_dtype", torch.int64)),
        buffer("decode", capacity, max(short("decode_short", num_decode), 0)),
        torch.zeros(max(short("lens_short", num_decode), 0), dtype=dt("lens_dtype", torch.int32)),
        buffer("prefill", p_cols, max(short("prefill_short", num_tokens - num_decode), 0)),
    )
    w = {"width_unaligned": width + 64, "width_zero": 0, "width_float": float(width),
         "width_too_wide": capacity + 128}.get(fault, width)
    view = {"view_small": width - 64, "view_wide": capacity + 128}.get(
        fault, draw(st.sampled_from([None, width, capacity])))
    return fault, args, {"width": w, "decode_view_width": view}


@settings(max_examples=600)
@given(calls())
def test_fast_acceptance_agrees_with_the_detailed_checks(call) -> None:
    fault, args, kwargs = call
    fast = v._accept_fast(*args, kwargs["width"], kwargs["decode_view_width"])
    try:
        detailed = v.explain_inputs(*args, **kwargs)
    except ValueError:
        assert fast is None, f"accepted a call the detailed checks refuse ({fault})"
        return
    if fault is None:
        assert fast is not None, "a plain valid call missed the fast path"
    assert fast is None or fast == detailed
    assert v.check_inputs(*args, **kwargs) == detailed


def test_a_plain_valid_call_takes_the_fast_path() -> None:
    t, cap = 6, 256
    args = (
        torch.arange(t, dtype=torch.int64), 128, 2, torch.zeros(t, dtype=torch.int32),
        torch.zeros((2, 4), dtype=torch.int32), 2, torch.zeros(t, dtype=torch.int64),
        torch.empty((t, cap), dtype=torch.int32), torch.empty(t, dtype=torch.int32),
        torch.empty((t, cap), dtype=torch.int32),
    )
    fast = v._accept_fast(*args, 128, None)
    assert fast == v.explain_inputs(*args, width=128, decode_view_width=None)
    assert fast.num_decode == 2 and fast.num_prefill == 4 and fast.decode_view_width == 128
