"""The combine_topk_swa Triton kernel in Triton's CPU interpreter, against the reference.

Every check compares whole allocations: every cell of the index buffer (the ``out[0]``
view must be fully written, with the ``-1`` fill; cells outside it must still hold the
poison) and every length (only the chunk's rows written).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from dsv4_kernels.combine_topk_swa import launch, reference
from dsv4_kernels.combine_topk_swa.testing import (
    POISON,
    Chunk,
    assert_same_outputs,
    make_chunk,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("interpreter")

BASELINE = (1, 1024, 4)
TILES = [BASELINE, (4, 16, 1), (2, 64, 2), (8, 32, 4), (1, 16, 1), (16, 16, 2)]


def check(chunk: Chunk, tiles: list[tuple[int, int, int]]) -> Chunk:
    """Run the reference and every tile on fresh poisoned copies; all must agree."""
    want = chunk.run(reference.combine_topk_swa_indices)
    for tpp, cpp, warps in tiles:
        got = chunk.run(launch.combine_topk_swa_indices, tokens_per_program=tpp,
                        cols_per_program=cpp, num_warps=warps)
        assert_same_outputs(got, want)
    return want


def test_a_hand_computed_row() -> None:
    # One fresh request of 10 tokens: token 9 is at position 9 and sees (9 + 1) // 4 = 2
    # top-k entries and the window [6, 9]; the gather starts at position 0, N = 2, M = 12.
    chunk = make_chunk(1, kind="c4a", queries=[(0, 10)], window_size=4, index_topk=8)
    assert (chunk.N, chunk.M, chunk.topk) == (2, 12, 8)
    want = check(chunk, TILES)
    row = want.indices_storage[9].tolist()
    topk = chunk.topk_indices[9].tolist()
    assert row[:2] == topk[:2]
    assert row[2:6] == [2 + 6, 2 + 7, 2 + 8, 2 + 9]
    assert row[6:] == [-1] * (128 - 6)
    assert int(want.lens_storage[9]) == 6
    # Token 0: no top-k entry yet, a window of one token.
    assert want.indices_storage[0, :2].tolist() == [2, -1]
    assert int(want.lens_storage[0]) == 1


def test_later_requests_are_offset_by_m_and_rebased_rows() -> None:
    chunk = make_chunk(2, kind="c4a", queries=[(40, 6), (1000, 5), (0, 9)], window_size=8,
                       index_topk=16, qsl_tail=2)
    want = check(chunk, TILES)
    # Request 1's rows start at chunk row 6; its top-k values carry + M.
    k = min((1000 + 0 + 1) // 4, 16)
    assert want.indices_storage[6, :k].tolist() == [v + chunk.M for v in
                                                   chunk.topk_indices[6, :k].tolist()]


@pytest.mark.parametrize("kind", ["c128a", "c4a", "swa"])
def test_each_layer_kind_matches_the_reference(kind: str) -> None:
    chunk = make_chunk(3, kind=kind, queries=[(300, 20), (0, 13), (9000, 7)], window_size=16,
                       index_topk=32, max_model_len=16384, replay=True)
    check(chunk, TILES)


def test_full_top_k_rows_take_the_vector_path_and_match() -> None:
    # Long prefixes: every row sees all its top-k columns, so whole blocks lie inside
    # every row's top-k (and others wholly past it).
    chunk = make_chunk(4, kind="c4a", queries=[(5000, 9), (7000, 12)], window_size=16,
                       index_topk=64)
    want = check(chunk, TILES)
    n = chunk.num_tokens
    assert bool((want.lens_storage[:n] == 64 + 16).all())


def test_the_fill_covers_the_whole_view_and_padding_rows() -> None:
    chunk = make_chunk(5, kind="c4a", queries=[(3, 11), (60, 4)], window_size=8, index_topk=16,
                       pad_rows=5, extra_rows=3, row_pad=7, stride_pad=6)
    want = check(chunk, TILES)
    n, rows = chunk.num_tokens, chunk.out_rows
    view = want.indices_storage[:rows, : chunk.out_cols]
    assert bool((view[n:] == -1).all()), "padding rows must be -1"
    assert bool((want.lens_storage[n:] == POISON).all()), "padding rows keep their lengths"
    # Past each row's top-k and window, -1 up to the view's last column.
    lens = want.lens_storage[:n]
    cols = torch.arange(chunk.out_cols)
    assert bool((view[:n][cols[None, :] >= lens[:, None]] == -1).all())
    assert bool((want.indices_storage[:, chunk.out_cols:] == POISON).all())


def test_empty_requests_and_zero_request_chunks() -> None:
    chunk = make_chunk(6, kind="c4a", queries=[(5, 10), (3, 0), (0, 7), (9, 0)], window_size=8,
                       index_topk=16, pad_rows=2)
    check(chunk, TILES[:3])
    # No request at all: only the fill.
    empty = dataclasses.replace(chunk, seq_lens=chunk.seq_lens[:0],
                                gather_lens=chunk.gather_lens[:0],
                                query_start_loc=chunk.query_start_loc[:1], num_tokens=0)
    want = check(empty, TILES[:3])
    assert bool((want.indices_storage[: empty.out_rows, : empty.out_cols] == -1).all())
    assert bool((want.lens_storage == POISON).all())


def test_image_visibility_widens_windows() -> None:
    chunk = make_chunk(7, kind="swa", queries=[(10, 30), (0, 25)], window_size=8,
                       index_topk=16, max_image_tokens=12)
    assert chunk.left_visible is not None and bool(chunk.left_visible.any())
    widened = check(chunk, TILES[:3])
    plain = dataclasses.replace(chunk, left_visible=None, right_visible=None)
    causal = check(plain, TILES[:2])
    n = chunk.num_tokens
    assert bool((widened.lens_storage[:n] >= causal.lens_storage[:n]).all())
    assert bool((widened.lens_storage[:n] > causal.lens_storage[:n]).any())
    # With visibility tensors but max_image_tokens 0, vLLM reads none of them.
    ignored = dataclasses.replace(chunk, max_image_tokens=0)
    want = check(ignored, TILES[:2])
    assert torch.equal(want.lens_storage, causal.lens_storage)
    assert torch.equal(want.indices_storage, causal.indices_storage)


def test_a_window_not_a_power_of_two_with_image_blocks() -> None:
    # vLLM writes the window in blocks of w lanes: cap = ceil((w + image) / w) * w.
    chunk = make_chunk(8, kind="c4a", queries=[(20, 30)], window_size=6, index_topk=8,
                       max_image_tokens=9, stride_pad=20)
    check(chunk, TILES)


def test_allocating_calls_match_the_reference() -> None:
    chunk = make_chunk(9, kind="c128a", queries=[(2000, 9), (10, 6)], window_size=16,
                       max_model_len=8192)
    args = list(chunk.args())
    args[9] = None
    want_indices, want_lens = reference.combine_topk_swa_indices(*args)
    assert want_indices.shape == (chunk.topk_indices.shape[0], 256)
    for tpp, cpp, warps in TILES[:3]:
        indices, lens = launch.combine_topk_swa_indices(
            *args, tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps)
        assert torch.equal(indices, want_indices)
        assert torch.equal(lens, want_lens)


def test_prepare_launches_like_the_keyword_call() -> None:
    chunk = make_chunk(10, kind="c4a", queries=[(30, 12), (5, 5)], window_size=8, index_topk=16)
    want = chunk.run(launch.combine_topk_swa_indices, tokens_per_program=4, cols_per_program=32,
                     num_warps=2)
    got = chunk.run(launch.prepare(4, 32, 2))
    assert_same_outputs(got, want)
    with pytest.raises(ValueError, match="cols_per_program"):
        launch.prepare(4, 24, 2)


@st.composite
def chunks(draw: st.DrawFn) -> Chunk:
    kind = draw(st.sampled_from(["c128a", "c4a", "swa"]))
    window = draw(st.sampled_from([1, 3, 8, 16]))
    image = draw(st.sampled_from([0, 0, 5, 20]))
    queries = draw(st.lists(st.tuples(st.sampled_from([0, 0, 3, 50, 700, 5000]),
                                      st.integers(0, 14)), min_size=1, max_size=4))
    if sum(q for _, q in queries) == 0:
        queries[0] = (queries[0][0], 1)
    event(f"{kind} {len(queries)} request(s){' image' if image else ''}")
    return make_chunk(
        draw(st.integers(0, 2**31)), kind=kind, queries=queries, window_size=window,
        index_topk=draw(st.sampled_from([8, 16, 40])), max_model_len=draw(
            st.sampled_from([2048, 16384])),
        max_image_tokens=image, image_spans=bool(image) and draw(st.booleans()),
        replay=draw(st.booleans()), pad_rows=draw(st.integers(0, 4)),
        extra_rows=draw(st.integers(0, 3)), row_pad=draw(st.integers(0, 9)),
        stride_pad=draw(st.integers(0, 9)), qsl_tail=draw(st.integers(0, 2)),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks(), st.sampled_from(TILES))
def test_generated_chunks_match_the_reference(chunk: Chunk, tile: tuple[int, int, int]) -> None:
    check(chunk, [tile])


def test_the_signature_is_vllms_then_the_tile() -> None:
    vllm = ["topk_indices", "query_start_loc", "seq_lens", "gather_lens", "window_size",
            "compress_ratio", "topk", "M", "N", "out", "left_visible", "right_visible",
            "max_image_tokens"]
    params = list(inspect.signature(launch.combine_topk_swa_indices).parameters.values())
    assert [p.name for p in params] == [*vllm, "tokens_per_program", "cols_per_program",
                                        "num_warps"]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:13])
    defaults = {p.name: p.default for p in params}
    assert (defaults["out"], defaults["left_visible"], defaults["right_visible"],
            defaults["max_image_tokens"]) == (None, None, None, 0)
    assert (defaults["tokens_per_program"], defaults["cols_per_program"],
            defaults["num_warps"]) == BASELINE == launch.BASELINE_TILE
    ref = list(inspect.signature(reference.combine_topk_swa_indices).parameters)
    assert ref == vllm
