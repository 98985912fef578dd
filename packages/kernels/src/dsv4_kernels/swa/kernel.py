"""The Triton kernel behind :func:`dsv4_kernels.swa.compute_swa_indices_and_lens`.

The only constexprs are the tile (``TOKENS_PER_PROGRAM`` x ``COLS_PER_PROGRAM``) and
``HAS_IMAGE``. Every scalar and every pointer is in ``do_not_specialize``, so a new
window, width, block size, batch size, offset, stride or buffer address reuses the
binary already built: the compile key is ``(tpp, cpp, num_warps, has_image)``.

Grid: ``(cdiv(num_tokens, TPP),)``. Program ``p`` owns rows ``[p*TPP, p*TPP + TPP)``
and walks their ``index_width`` columns in blocks of ``CPP``. With ``TPP = 1``,
``CPP = 1024`` and 4 warps it is the upstream launch; for a 128-entry window a
``TPP x 128`` tile keeps every lane busy instead of 1024 lanes for 128 columns.
"""

from __future__ import annotations

import triton
import triton.language as tl

from dsv4_kernels._swa_rows import store_padding_rows, store_window_rows

# Every non-constexpr parameter: none of them is part of the compile key. A test
# checks this list is exactly the kernel's non-constexpr parameters.
RUNTIME_ARGS: tuple[str, ...] = (
    "indices_ptr",
    "lens_ptr",
    "left_ptr",
    "right_ptr",
    "query_start_ptr",
    "seq_lens_ptr",
    "token_to_req_ptr",
    "is_valid_ptr",
    "block_table_ptr",
    "replay_start_ptr",
    "indices_stride",
    "block_table_stride",
    "window_size",
    "index_width",
    "block_size",
    "num_tokens",
    "token_offset",
)


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def swa_indices_and_lens_kernel(
    indices_ptr,
    lens_ptr,
    left_ptr,
    right_ptr,
    query_start_ptr,
    seq_lens_ptr,
    token_to_req_ptr,
    is_valid_ptr,
    block_table_ptr,
    replay_start_ptr,
    indices_stride,
    block_table_stride,
    window_size,
    index_width,
    block_size,
    num_tokens,
    token_offset,
    HAS_IMAGE: tl.constexpr,
    TOKENS_PER_PROGRAM: tl.constexpr,
    COLS_PER_PROGRAM: tl.constexpr,
):
    rows = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    in_batch = rows < num_tokens
    token = rows + token_offset
    # The validity flag and the request index are read side by side (one memory round
    # trip, not two); a padding token's request index may be anything, so nothing is
    # read through it: it is replaced by 0 and every load behind it is masked.
    valid = tl.load(is_valid_ptr + token, mask=in_batch, other=0) != 0
    req = tl.load(token_to_req_ptr + token, mask=in_batch, other=0)
    live = in_batch & valid
    out_row = indices_ptr + rows.to(tl.int64) * indices_stride
    if tl.max(live.to(tl.int32), axis=0) == 0:
        # Only padding (or rows past the batch) here: length 0 and a row of -1, with
        # no request read at all. CUDA-graph padding makes whole programs of these, and
        # this keeps them as cheap as vLLM's early return.
        store_padding_rows(out_row, lens_ptr, rows, in_batch, index_width,
                           TOKENS_PER_PROGRAM, COLS_PER_PROGRAM)
        return
    req = tl.where(live, req, 0)
    query_start = tl.load(query_start_ptr + req, mask=live, other=0)
    query_end = tl.load(query_start_ptr + req + 1, mask=live, other=0)
    seq_len = tl.load(seq_lens_ptr + req, mask=live, other=0)
    pos = seq_len - (query_end - query_start) + token - query_start
    if HAS_IMAGE:
        left = tl.load(left_ptr + token, mask=live, other=0)
        right = tl.load(right_ptr + token, mask=live, other=0)
        # In-image visibility reaches back past the window by what exceeds it.
        start = pos - (window_size - 1) - tl.maximum(left - (window_size - 1), 0)
    else:
        right = tl.zeros_like(pos)
        start = pos - (window_size - 1)
    start = tl.maximum(start, 0)
    start = tl.maximum(start, tl.load(replay_start_ptr + req, mask=live, other=0))
    length = tl.where(live, pos + right + 1 - start, 0)
    tl.store(lens_ptr + rows, length, mask=in_batch)

    table_row = block_table_ptr + req.to(tl.int64) * block_table_stride
    store_window_rows(out_row, table_row, start, length, in_batch, index_width, block_size,
                      COLS_PER_PROGRAM)


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices (0 when
    Triton's interpreter runs it)."""
    caches = getattr(swa_indices_and_lens_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
