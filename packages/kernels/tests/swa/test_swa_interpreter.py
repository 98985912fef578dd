"""The SWA Triton kernel, run by Triton's CPU interpreter, against the plain-torch reference.

Every check compares whole buffers: the rows the call owns (``[0, index_width)`` of
its first ``num_tokens`` rows, at the buffer's own row stride) must equal the
reference, and every other element must still hold the poison.
"""

from __future__ import annotations

import inspect

import pytest
from dsv4_kernels import swa
from dsv4_kernels.swa import kernel as _swa_kernel
from dsv4_kernels.swa import reference as swa_reference
from dsv4_kernels.swa.testing import POISON, SwaStep, assert_same_outputs, make_swa_step
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = (1, 1024, 4)
TILES = [BASELINE, (8, 128, 4), (4, 64, 2), (16, 128, 8), (1, 128, 1), (32, 16, 4), (2, 256, 2)]


def check_step(step: SwaStep, tiles: list[tuple[int, int, int]]) -> None:
    assert step.calls(), "a step with no rows tests nothing"
    for call in step.calls():
        want = call.run(swa_reference.compute_swa_indices_and_lens)
        rows = want.swa_indices.select(1, 0)
        assert bool((rows[: want.num_tokens, : want.index_width] != POISON).all())
        for tpp, cpp, warps in tiles:
            got = call.run(swa.compute_swa_indices_and_lens, tokens_per_program=tpp,
                           cols_per_program=cpp, num_warps=warps)
            assert_same_outputs(got, want)


def test_decode_rows_hold_the_paged_causal_window() -> None:
    step = make_swa_step(1, decode_contexts=[1, 2, 127, 128, 129, 1000], block_size=16)
    check_step(step, TILES)
    want = step.decode.run(swa_reference.compute_swa_indices_and_lens)  # type: ignore[union-attr]
    assert want.swa_lens.tolist() == [1, 2, 127, 128, 128, 128]
    table = step.decode.block_table  # type: ignore[union-attr]
    # Context 1000: positions 872..999; column 0 is position 872, in block 54 at offset 8.
    assert int(want.swa_indices[5, 0, 0]) == int(table[5, 54]) * 16 + 8
    assert int(want.swa_indices[0, 0, 1]) == -1


def test_prefill_rows_start_at_token_offset() -> None:
    step = make_swa_step(2, decode_contexts=[50, 400], prefill_queries=[(0, 33), (300, 20)],
                         window_size=32, block_size=8)
    assert step.prefill is not None and step.prefill.token_offset == 2
    check_step(step, TILES)


def test_padding_tokens_get_cleared_rows_and_zero_lengths() -> None:
    step = make_swa_step(3, decode_contexts=[70, 80], prefill_queries=[(10, 12)], pad_tokens=7,
                         invalid_fraction=0.3, window_size=16, block_size=4, row_pad=5)
    check_step(step, TILES)
    call = step.prefill
    assert call is not None
    want = call.run(swa_reference.compute_swa_indices_and_lens)
    pad = slice(call.num_tokens - 7, call.num_tokens)
    assert want.swa_lens[pad].tolist() == [0] * 7
    assert bool((want.swa_indices[pad, 0, : call.index_width] == -1).all())


def test_an_all_padding_batch_takes_the_early_exit_and_clears_every_row() -> None:
    # A CUDA-graph-padded decode batch can be padding only: every program of every tile
    # sees no live row, and must still write length 0 and a row of -1 (nothing else).
    step = make_swa_step(11, decode_contexts=[40, 700, 3], prefill_queries=[(5, 9)],
                         pad_tokens=3, row_pad=4, window_size=16, block_size=4)
    for call in step.calls():
        call.is_valid_token.fill_(False)  # the step's calls share one mask
    check_step(step, TILES)
    for call in step.calls():
        want = call.run(swa_reference.compute_swa_indices_and_lens)
        assert want.swa_lens[: call.num_tokens].tolist() == [0] * call.num_tokens
        assert bool((want.swa_indices[: call.num_tokens, 0, : call.index_width] == -1).all())


def test_replay_starts_shorten_windows_even_past_the_token() -> None:
    shape = dict(decode_contexts=[90, 300, 20, 500], prefill_queries=[(100, 50)],
                 window_size=64, block_size=16)
    step = make_swa_step(4, replay=True, **shape)  # type: ignore[arg-type]
    plain = make_swa_step(4, replay=False, **shape)  # type: ignore[arg-type]
    assert bool(step.decode.replay_start.any())  # type: ignore[union-attr]
    check_step(step, TILES)
    shorter = 0
    for with_replay, without in zip(step.calls(), plain.calls(), strict=True):
        a = with_replay.run(swa_reference.compute_swa_indices_and_lens).swa_lens
        b = without.run(swa_reference.compute_swa_indices_and_lens).swa_lens
        assert bool((a <= b).all())
        shorter += int((a < b).sum())
    assert shorter > 0


def test_image_spans_widen_prefill_rows() -> None:
    step = make_swa_step(5, decode_contexts=[40], prefill_queries=[(5, 60), (0, 45)],
                         window_size=16, block_size=8, max_image_tokens=24, image_spans=True)
    assert step.prefill is not None and step.prefill.has_image
    assert step.prefill.index_width == 40
    check_step(step, TILES)
    want = step.prefill.run(swa_reference.compute_swa_indices_and_lens)
    assert int(want.swa_lens.max()) > 16, "some window must be widened past the plain window"


def test_nothing_is_written_for_zero_tokens() -> None:
    step = make_swa_step(6, decode_contexts=[10], window_size=8, block_size=4)
    call = step.decode
    assert call is not None
    import dataclasses

    empty = dataclasses.replace(call, num_tokens=0)
    got = empty.run(swa.compute_swa_indices_and_lens, tokens_per_program=4,
                    cols_per_program=16, num_warps=1)
    assert bool((got.swa_indices == POISON).all()) and bool((got.swa_lens == POISON).all())


@st.composite
def steps(draw: st.DrawFn) -> SwaStep:
    window = draw(st.sampled_from([1, 3, 8, 16, 128]))
    image = draw(st.sampled_from([0, 0, 5, 24]))
    decodes = draw(st.lists(st.integers(1, 700), max_size=6))
    prefills = draw(st.lists(st.tuples(st.integers(0, 400), st.integers(1, 48)), max_size=3,
                             min_size=0 if decodes else 1))
    event(f"{'decode' if decodes else ''}{'+' if decodes and prefills else ''}"
          f"{'prefill' if prefills else ''}")
    return make_swa_step(
        draw(st.integers(0, 2**31)), decode_contexts=decodes, prefill_queries=prefills,
        window_size=window, block_size=draw(st.sampled_from([1, 2, 4, 16, 64, 256])),
        max_image_tokens=image, image_spans=bool(image) and draw(st.booleans()),
        replay=draw(st.booleans()), pad_tokens=draw(st.integers(0, 5)),
        invalid_fraction=draw(st.sampled_from([0.0, 0.2])), row_pad=draw(st.integers(0, 9)),
    )


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(steps(), st.sampled_from(TILES))
def test_generated_steps_match_the_reference(step: SwaStep, tile: tuple[int, int, int]) -> None:
    check_step(step, [tile])


def test_runtime_args_are_every_non_constexpr_parameter() -> None:
    params = inspect.signature(_swa_kernel.swa_indices_and_lens_kernel.fn).parameters
    runtime = tuple(n for n in params if not n.isupper())
    assert runtime == _swa_kernel.RUNTIME_ARGS


def test_the_signature_is_vllms_then_the_tile() -> None:
    params = list(inspect.signature(swa.compute_swa_indices_and_lens).parameters.values())
    assert [p.name for p in params] == [
        "swa_indices", "swa_lens", "window_size", "index_width", "left_visible",
        "right_visible", "query_start_loc", "seq_lens", "token_to_req_indices",
        "is_valid_token", "block_table", "block_size", "replay_start", "num_tokens",
        "token_offset", "has_image", "tokens_per_program", "cols_per_program", "num_warps"]
    kw = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    assert kw["has_image"] is False
    assert (kw["tokens_per_program"], kw["cols_per_program"], kw["num_warps"]) == BASELINE
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:13])


def test_warmup_refuses_bad_configs_before_launching() -> None:
    with pytest.raises(ValueError, match="expected \\(tokens_per_program"):
        swa.warmup([(1, 128, 4)], "cpu")
    with pytest.raises(ValueError, match="num_warps"):
        swa.warmup([(1, 128, 3, 0)], "cpu")
    assert swa.warmup([(1, 128, 4, 0), (2, 64, 2, 1)], "cpu") == 0  # interpreter: nothing built
