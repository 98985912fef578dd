"""Bad calls to the SWA kernel and reference raise ValueError naming the argument, before
anything is written."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from dsv4_kernels import swa
from dsv4_kernels.swa import reference as swa_reference
from dsv4_kernels.swa.testing import POISON, SwaCall, make_swa_step

pytestmark = pytest.mark.usefixtures("interpreter")

FUNCTIONS = [swa.compute_swa_indices_and_lens, swa_reference.compute_swa_indices_and_lens]


def _call() -> SwaCall:
    step = make_swa_step(7, decode_contexts=[30], prefill_queries=[(4, 9)], window_size=16,
                         block_size=4, max_image_tokens=8, image_spans=True, row_pad=3)
    assert step.prefill is not None and step.prefill.has_image
    return step.prefill


def _i32(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int32)


CASES: list[tuple[str, Callable[[SwaCall], SwaCall], str]] = [
    ("indices dtype", lambda c: dataclasses.replace(c, swa_indices=c.swa_indices.long()),
     "swa_indices: got dtype torch.int64"),
    ("indices middle dim", lambda c: dataclasses.replace(
        c, swa_indices=c.swa_indices.expand(-1, 2, -1)), "(tokens, 1, columns)"),
    ("indices too few rows", lambda c: dataclasses.replace(c, swa_indices=c.swa_indices[:2]),
     "at least num_tokens"),
    ("width past the row", lambda c: dataclasses.replace(c, index_width=100),
     "index_width: got 100; expected at most the buffer's"),
    ("columns not contiguous", lambda c: dataclasses.replace(
        c, swa_indices=c.swa_indices[:, :, ::2]), "stride 1 in the last dimension"),
    ("lens too short", lambda c: dataclasses.replace(c, swa_lens=c.swa_lens[:1]),
     "swa_lens: got 1 entries"),
    ("lens dtype", lambda c: dataclasses.replace(c, swa_lens=c.swa_lens.float()),
     "swa_lens: got dtype torch.float32"),
    ("window zero", lambda c: dataclasses.replace(c, window_size=0), "window_size: got 0"),
    ("window bool", lambda c: dataclasses.replace(c, window_size=True), "window_size: got True"),
    ("block size", lambda c: dataclasses.replace(c, block_size=-2), "block_size: got -2"),
    ("num tokens", lambda c: dataclasses.replace(c, num_tokens=-1), "num_tokens: got -1"),
    ("token offset", lambda c: dataclasses.replace(c, token_offset=1.0), "token_offset: got 1.0"),
    ("offset past the map", lambda c: dataclasses.replace(c, token_offset=10_000),
     "left_visible: got 10 entries; expected at least 10009 (token_offset + num_tokens)"),
    ("has_image", lambda c: dataclasses.replace(c, has_image="yes"), "has_image: got 'yes'"),
    ("left visible short", lambda c: dataclasses.replace(c, left_visible=_i32(2)),
     "left_visible: got 2 entries"),
    ("right visible dtype", lambda c: dataclasses.replace(
        c, right_visible=c.right_visible.long()), "right_visible: got dtype torch.int64"),
    ("valid mask dtype", lambda c: dataclasses.replace(
        c, is_valid_token=c.is_valid_token.int()), "is_valid_token: got dtype torch.int32"),
    ("block table 1-D", lambda c: dataclasses.replace(c, block_table=c.block_table[0]),
     "block_table: got 1 dimensions"),
    ("query starts", lambda c: dataclasses.replace(c, query_start_loc=[0, 1]),
     "query_start_loc: got list"),
    ("seq lens dtype", lambda c: dataclasses.replace(c, seq_lens=c.seq_lens.long()),
     "seq_lens: got dtype torch.int64"),
    ("replay start 2-D", lambda c: dataclasses.replace(c, replay_start=_i32(1, 2)),
     "replay_start: got 2 dimensions"),
]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=["kernel", "reference"])
@pytest.mark.parametrize("name, change, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_arguments_raise_before_writing(fn: Callable[..., None], name: str,
                                            change: Callable[[SwaCall], SwaCall],
                                            fragment: str) -> None:
    call = change(_call().fresh())
    with pytest.raises(ValueError) as info:
        fn(*call.args(), **call.kwargs())
    assert fragment in str(info.value), str(info.value)
    assert str(info.value).startswith("compute_swa_indices_and_lens: ")
    assert bool((call.swa_indices == POISON).all()) and bool((call.swa_lens == POISON).all())


@pytest.mark.parametrize("tile, fragment", [
    ((3, 128, 4), "tokens_per_program: got 3"),
    ((1, 8, 4), "cols_per_program: got 8"),
    ((1, 128, 6), "num_warps: got 6"),
    ((256, 8192, 1), "elements per thread"),
    ((1.0, 128, 4), "tokens_per_program: got 1.0"),
])
def test_bad_tiles_raise_before_writing(tile: tuple, fragment: str) -> None:
    call = _call().fresh()
    tpp, cpp, warps = tile
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        swa.compute_swa_indices_and_lens(*call.args(), **call.kwargs(), tokens_per_program=tpp,
                                         cols_per_program=cpp, num_warps=warps)
    assert bool((call.swa_indices == POISON).all())


def test_unused_visibility_buffers_are_not_checked_without_images() -> None:
    call = dataclasses.replace(_call(), has_image=False, left_visible=_i32(1),
                               right_visible=_i32(1))
    got = call.run(swa.compute_swa_indices_and_lens)
    want = call.run(swa_reference.compute_swa_indices_and_lens)
    assert torch.equal(got.swa_indices, want.swa_indices)
    assert torch.equal(got.swa_lens, want.swa_lens)
