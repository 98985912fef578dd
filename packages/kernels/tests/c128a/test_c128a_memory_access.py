"""Every address the kernel reads and writes, recorded through Triton's interpreter.

Output equality cannot show that a hidden column never read its block-table entry
(the value is discarded either way) or that a store outside the region wrote the
value already there. Here the interpreter's load and store entry points are wrapped
to record the address of every unmasked lane, and the sets are compared with what
the specification allows:

* block-table reads: only entry ``(req[t], j // block_size)`` for a decode token
  ``t`` and a visible column ``j < n[t]``;
* stores: exactly the written region of the three buffers, each element once per
  launch (a split-width launch must not write a column block twice).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from dsv4_kernels import c128a
from dsv4_kernels.c128a.testing import Batch, make_batch
from triton.runtime import interpreter as triton_interpreter

pytestmark = pytest.mark.usefixtures("interpreter")


class Recorder:
    def __init__(self) -> None:
        self.loads: list[int] = []
        self.stores: list[int] = []


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    builder = triton_interpreter.InterpreterBuilder
    real_load, real_store = builder.create_masked_load, builder.create_masked_store

    def load(self, ptrs, mask, other, *args):  # type: ignore[no-untyped-def]
        rec.loads.extend(np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)].tolist())
        return real_load(self, ptrs, mask, other, *args)

    def store(self, ptrs, value, mask, *args):  # type: ignore[no-untyped-def]
        rec.stores.extend(np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)].tolist())
        return real_store(self, ptrs, value, mask, *args)

    monkeypatch.setattr(builder, "create_masked_load", load)
    monkeypatch.setattr(builder, "create_masked_store", store)
    return rec


def allowed_table_reads(batch: Batch) -> set[int]:
    table = batch.block_table
    base, stride, item = table.data_ptr(), table.stride(0), table.element_size()
    allowed = set()
    for t in range(batch.num_decode_tokens):
        pos = int(batch.positions[t])
        n = min(max(int(np.trunc((pos + 1) / batch.compress_ratio)), 0), batch.width)
        req = int(batch.token_to_req_indices[t])
        for j in range(n):
            allowed.add(base + (req * stride + j // batch.block_size) * item)
    return allowed


def region_addresses(buf: torch.Tensor, rows: int, cols: int | None) -> set[int]:
    base, item = buf.data_ptr(), buf.element_size()
    if cols is None:
        return {base + r * item for r in range(rows)}
    return {base + (r * buf.stride(0) + c) * item for r in range(rows) for c in range(cols)}


def in_tensor(addresses: list[int], tensor: torch.Tensor) -> list[int]:
    storage = tensor.untyped_storage()
    low = storage.data_ptr()
    high = low + storage.nbytes()
    return [a for a in addresses if low <= a < high]


TILES = [(1, 1024, 4, False), (16, 256, 4, True), (4, 128, 2, False), (32, 128, 1, True)]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("block_size", [1, 2, 3, 16])
def test_reads_and_writes_stay_in_bounds(
    recorder: Recorder, tile: tuple[int, int, int, bool], block_size: int
) -> None:
    # Table columns are sized for each request's own visible blocks only
    # (table_spare_cols=0), so any read of a hidden column's block would fall
    # outside the allowed set, often outside the table's row altogether.
    batch = make_batch(
        num_decode=13, num_prefill=9, context=90_000, capacity=1024, block_size=block_size,
        num_reqs=5, seed=block_size, table_spare_cols=0, table_stride_pad=0,
        padding=[i % 4 == 1 for i in range(13)],
    )
    assert batch.width == 1024
    tpp, cpp, warps, split = tile
    batch.call(c128a.build_c128a_topk_metadata, tokens_per_program=tpp,
               cols_per_program=cpp, num_warps=warps, split_width=split)

    table_reads = in_tensor(recorder.loads, batch.block_table)
    assert table_reads, "the audit saw no block-table read at all"
    stray = set(table_reads) - allowed_table_reads(batch)
    assert not stray, f"{len(stray)} block-table reads of hidden columns"

    d, p, w = batch.num_decode_tokens, batch.num_prefill_tokens, batch.width
    counts = Counter(recorder.stores)
    assert max(counts.values()) == 1, "an element was stored twice in one launch"
    expected = (
        region_addresses(batch.global_decode_buffer, d, w)
        | region_addresses(batch.decode_lens_buffer, d, None)
        | region_addresses(batch.prefill_buffer, p, w)
    )
    assert set(counts) == expected
