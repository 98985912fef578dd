"""The Triton kernel behind :func:`dsv4_kernels.swa_decode.launch.build_swa_decode`.

For a decode-only causal step, vLLM 0.33.0's ``DeepseekSparseSWAMetadataBuilder.build``
runs three device operations on its buffers: ``torch.ge(slot_mapping, 0,
out=is_valid_token[:S])``, a zero fill of ``decode_swa_lens[T:]`` and the SWA rows
kernel over ``T`` tokens (one program per token). Here one grid of ``max(cdiv(T, TPP),
cdiv(S, FILL_ELEMENTS))`` programs does all three (``S > T`` when prefill tokens follow
the decode tokens, as in a mixed step: the validity fill then spreads over more programs
than the rows need, and the programs past the rows write no row):

- program ``p`` owns rows ``[p*TPP, p*TPP + TPP)`` and writes them as
  :mod:`dsv4_kernels.swa.kernel` does (its ``index_width`` columns in blocks of
  ``CPP``, at the buffer's row stride, and ``swa_lens[t]``), with the validity of row
  ``t`` read straight from ``slot_mapping[t] >= 0``: the same value the first operation
  stores in ``is_valid_token[t]``, without reading back what another program writes;
- the programs share the two fills, in blocks of :data:`FILL_BLOCK` elements taken in
  turn (block ``b`` by program ``b % grid``): ``is_valid_token[i] = slot_mapping[i] >= 0``
  for ``i < S`` and ``swa_lens[i] = 0`` for ``T <= i < len(swa_lens)``, so one launch
  covers any ``T >= 1`` and any buffer length.

The constexprs are the tile only (``TOKENS_PER_PROGRAM`` x ``COLS_PER_PROGRAM``); every
pointer and scalar is in ``do_not_specialize``, so a new batch, window, block size,
stride or buffer reuses the binary already built. Triton also builds one binary per
pointer element type, so an int32 ``slot_mapping`` is a second binary of a tile (vLLM's
is int64).
"""

from __future__ import annotations

import triton
import triton.language as tl

from dsv4_kernels._swa_rows import store_padding_rows, store_window_rows

# Every non-constexpr parameter: none of them is part of the compile key. A test checks
# this list is exactly the kernel's non-constexpr parameters, in order.
RUNTIME_ARGS: tuple[str, ...] = (
    "indices_ptr",
    "lens_ptr",
    "is_valid_ptr",
    "slot_mapping_ptr",
    "query_start_ptr",
    "seq_lens_ptr",
    "token_to_req_ptr",
    "block_table_ptr",
    "replay_start_ptr",
    "indices_stride",
    "block_table_stride",
    "window_size",
    "index_width",
    "block_size",
    "num_tokens",
    "num_slots",
    "num_lens",
)
CONSTEXPRS: tuple[str, ...] = ("TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM")
FILL_ELEMENTS = 1024
"""Elements of ``is_valid_token`` / ``swa_lens`` one program fills per loop turn."""
FILL_BLOCK = tl.constexpr(FILL_ELEMENTS)


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def swa_decode_kernel(
    indices_ptr,
    lens_ptr,
    is_valid_ptr,
    slot_mapping_ptr,
    query_start_ptr,
    seq_lens_ptr,
    token_to_req_ptr,
    block_table_ptr,
    replay_start_ptr,
    indices_stride,
    block_table_stride,
    window_size,
    index_width,
    block_size,
    num_tokens,
    num_slots,
    num_lens,
    TOKENS_PER_PROGRAM: tl.constexpr,
    COLS_PER_PROGRAM: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    # A block's first element lies inside its buffer (below 2**31), so its offset fits
    # int32; the lanes past it are added in int64, where a buffer's last block near
    # 2**31 entries cannot overflow.
    fill = tl.arange(0, FILL_BLOCK).to(tl.int64)
    # (a) is_valid_token[:num_slots] = slot_mapping >= 0.
    for chunk in range(pid, tl.cdiv(num_slots, FILL_BLOCK), programs):
        at = chunk * FILL_BLOCK + fill
        inside = at < num_slots
        slot = tl.load(slot_mapping_ptr + at, mask=inside, other=-1)
        tl.store(is_valid_ptr + at, slot >= 0, mask=inside)
    # (b) swa_lens[num_tokens:] = 0.
    for chunk in range(pid, tl.cdiv(num_lens - num_tokens, FILL_BLOCK), programs):
        at = num_tokens + chunk * FILL_BLOCK + fill
        tl.store(lens_ptr + at, tl.zeros_like(fill).to(tl.int32), mask=at < num_lens)

    # (c) rows [0, num_tokens): the decode rows kernel, validity from the slot mapping.
    rows = pid * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    in_batch = rows < num_tokens
    # Validity and the request index are read side by side; a padding token's request
    # index is never read through (it becomes 0 and every load behind it is masked).
    live = tl.load(slot_mapping_ptr + rows, mask=in_batch, other=-1) >= 0
    req = tl.load(token_to_req_ptr + rows, mask=in_batch, other=0)
    out_row = indices_ptr + rows.to(tl.int64) * indices_stride
    if tl.max(live.to(tl.int32), axis=0) == 0:
        # Only padding (or rows past the batch): length 0 and a row of -1, no request
        # read at all. CUDA-graph padding makes whole programs of these.
        store_padding_rows(out_row, lens_ptr, rows, in_batch, index_width,
                           TOKENS_PER_PROGRAM, COLS_PER_PROGRAM)
        return
    req = tl.where(live, req, 0)
    query_start = tl.load(query_start_ptr + req, mask=live, other=0)
    query_end = tl.load(query_start_ptr + req + 1, mask=live, other=0)
    seq_len = tl.load(seq_lens_ptr + req, mask=live, other=0)
    pos = seq_len - (query_end - query_start) + rows - query_start
    start = tl.maximum(pos - (window_size - 1), 0)
    start = tl.maximum(start, tl.load(replay_start_ptr + req, mask=live, other=0))
    length = tl.where(live, pos + 1 - start, 0)
    tl.store(lens_ptr + rows, length, mask=in_batch)

    table_row = block_table_ptr + req.to(tl.int64) * block_table_stride
    store_window_rows(out_row, table_row, start, length, in_batch, index_width, block_size,
                      COLS_PER_PROGRAM)


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices.

    Every entry was built (or loaded from Triton's on-disk cache) on first use of its
    specialisation key, so the count grows exactly when a launch needed a new binary.
    Under ``TRITON_INTERPRET=1`` nothing is compiled and this is 0.
    """
    caches = getattr(swa_decode_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
