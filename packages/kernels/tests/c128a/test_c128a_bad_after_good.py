"""A bad call that follows many good ones still raises, before anything is written.

The wrapper keeps state between calls (a binary handle per tile, a prepared wrapper
per tile in the plugin), so a check must never be skipped because the same buffers,
tile or shapes passed a moment ago. Each example makes a run of good calls on one
seeded batch, then breaks one argument (any case of ``test_c128a_checks``), and checks
the ValueError and that every buffer still holds what the good calls left.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from dsv4_kernels import c128a
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_c128a_checks import CASES, valid_batch

TILES = [(1, 1024, 4, False), (4, 256, 4, True), (8, 128, 4, True)]


@settings(max_examples=12, deadline=None)
@given(case=st.sampled_from(CASES), good_calls=st.integers(2, 6),
       tile=st.sampled_from(TILES), prepared=st.booleans())
def test_a_bad_call_after_good_ones_still_raises(case, good_calls, tile, prepared) -> None:
    _, breaker, name, accepted = case
    good = valid_batch()
    tpp, cpp, warps, split = tile
    build = c128a.prepare(*tile)

    def call(batch):
        if prepared:
            return build(*batch.args(), batch.width, batch.decode_view_width)
        return batch.call(c128a.build_c128a_topk_metadata, tokens_per_program=tpp,
                          cols_per_program=cpp, num_warps=warps, split_width=split)

    for _ in range(good_calls):
        call(good)
    before = [b.clone() for b in good.buffers]
    bad = breaker(good)
    kept = [b.clone() for b in bad.buffers]
    with pytest.raises(ValueError) as info:
        call(bad)
    assert f"{name}:" in str(info.value) and accepted in str(info.value), str(info.value)
    for buf, want in zip(good.buffers, before, strict=True):
        assert torch.equal(buf, want)
    for buf, want in zip(bad.buffers, kept, strict=True):
        assert torch.equal(buf, want)


def test_prepare_refuses_a_bad_tile_at_once() -> None:
    with pytest.raises(ValueError, match="tokens_per_program"):
        c128a.prepare(3, 256, 4, True)
    with pytest.raises(ValueError, match="split_width"):
        c128a.prepare(1, 256, 4, 1)
