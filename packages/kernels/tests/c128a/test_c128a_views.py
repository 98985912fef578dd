"""The returned views are exactly what slicing the buffers gives, for any valid buffers.

The wrapper builds them with ``as_strided`` from the strides its checks read (cheaper
than slicing on the host), so these compare every view's sizes, strides, offset and
storage with the slices upstream returns, including buffers that are themselves
offset views and single-row or single-element buffers with odd strides.
"""

from __future__ import annotations

import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a.testing import make_batch

pytestmark = pytest.mark.usefixtures("interpreter")


def _same_as_slices(views: tuple, batch: object) -> None:
    view_width = batch.decode_view_width or batch.width
    d, p = batch.num_decode_tokens, batch.num_prefill_tokens
    slices = (batch.global_decode_buffer[:d, :view_width], batch.decode_lens_buffer[:d],
              batch.prefill_buffer[:p, :batch.width])
    for view, want in zip(views, slices, strict=True):
        assert view.shape == want.shape
        assert view.stride() == want.stride()
        assert view.storage_offset() == want.storage_offset()
        assert view.untyped_storage().data_ptr() == want.untyped_storage().data_ptr()
        assert view.dtype == want.dtype and view.device == want.device
        assert torch.equal(view, want)


@pytest.mark.parametrize(("num_decode", "num_prefill"), [(0, 5), (4, 0), (3, 6), (1, 1), (0, 0)])
@pytest.mark.parametrize("view_full", [False, True])
def test_views_equal_slices(num_decode: int, num_prefill: int, view_full: bool) -> None:
    batch = make_batch(num_decode=num_decode, num_prefill=num_prefill, context=70_000,
                       capacity=640, seed=num_decode * 10 + num_prefill, spare_rows=2,
                       decode_view_width=640 if view_full else None)
    _same_as_slices(batch.call(c128a.build_c128a_topk_metadata), batch)


def test_views_of_offset_buffers_and_odd_single_element_strides() -> None:
    batch = make_batch(num_decode=1, num_prefill=2, context=40_000, capacity=384, seed=5)
    rows, cols = batch.global_decode_buffer.shape
    # Buffers that are views at a 16-byte aligned offset into larger allocations, and a
    # one-element lens buffer with stride 7 (any stride is valid for one element).
    big_d = torch.full((rows + 3, cols + 32), -5, dtype=torch.int32)
    big_p = torch.full((rows + 3, cols + 32), -6, dtype=torch.int32)
    batch.global_decode_buffer = big_d[2:, 4:4 + cols]
    batch.prefill_buffer = big_p[1:, 8:8 + cols]
    batch.decode_lens_buffer = torch.full((30,), -7, dtype=torch.int32)[3::7][:1]
    assert batch.decode_lens_buffer.stride() == (7,)
    _same_as_slices(batch.call(c128a.build_c128a_topk_metadata), batch)
