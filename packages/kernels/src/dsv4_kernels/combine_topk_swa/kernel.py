"""The Triton kernel behind :func:`dsv4_kernels.combine_topk_swa.launch.combine_topk_swa_indices`.

One launch writes the whole output buffer: every cell of ``combined_indices`` (its
``rows x cols`` view) gets its final value, the top-k part, the window part or the
``-1`` fill, and every token row of ``combined_lens`` its length. vLLM 0.33.0 instead
fills the buffer with ``-1`` in one launch and then runs a kernel over a fixed grid of
``(num_reqs, 256)`` programs, each walking its request's tokens one at a time; for one
long request that is 256 programs for 32K rows, and every cell is written twice.

Grid: ``(cdiv(rows, TPP),)``, so the number of programs grows with the chunk (the row
count is a shape, known on the host without reading device memory). Program ``p``
owns rows ``[p*TPP, p*TPP + TPP)`` of the output and finds each row's request with a
binary search over ``query_start_loc`` (``search_steps`` = ``ceil(log2(num_reqs + 1))``
rounds, a host-known count), so uneven requests split evenly over the programs and
rows past the chunk's last token (padding) are only filled. The program then walks the
row's columns in blocks of ``CPP``.

Only the tile is constexpr (``TOKENS_PER_PROGRAM`` x ``COLS_PER_PROGRAM``, plus
``num_warps`` at launch). vLLM's constexprs (``TOP_K``, ``COMPRESS_RATIO``,
``WINDOW_SIZE``, ``IMAGE_WIDTH``, ``PADDED_TOP_K``) are run-time values here, and every
scalar and input pointer is in ``do_not_specialize``: a new width, window, ratio,
request count, stride or address reuses the binary already built for the tile.

The two pointers the kernel streams through, the output and the top-k rows, keep
Triton's 16-byte alignment specialisation, and their row strides are re-derived as
multiples of 4 elements: the wrapper refuses anything else (and passes the output's
own pointer for top-k when top-k is never read), so that specialisation never changes
either and the compiler may emit 16-byte vector stores and loads.

All index arithmetic is int32, as in vLLM's kernel, so values wrap exactly as vLLM's
do; only addresses are 64-bit.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Every non-constexpr parameter except the two aligned pointers: none of them is part
# of the compile key. A test checks this list against the kernel's signature.
RUNTIME_ARGS: tuple[str, ...] = (
    "lens_ptr",
    "query_start_ptr",
    "seq_lens_ptr",
    "gather_lens_ptr",
    "left_ptr",
    "right_ptr",
    "out_stride",
    "out_rows",
    "out_cols",
    "topk_stride",
    "num_reqs",
    "search_steps",
    "M",
    "N",
    "top_k",
    "compress_ratio",
    "window_size",
    "swa_cap",
    "has_image",
    "write_end",
)
# Specialised on 16-byte alignment only (the wrapper refuses misaligned buffers).
ALIGNED_ARGS: tuple[str, ...] = ("out_ptr", "topk_ptr")
STRIDE_MULTIPLE = 4
"""Row strides (in int32 elements) the wrapper guarantees: 16 bytes."""
CONSTEXPRS: tuple[str, ...] = ("TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM")


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def combine_topk_swa_kernel(
    out_ptr,
    topk_ptr,
    lens_ptr,
    query_start_ptr,
    seq_lens_ptr,
    gather_lens_ptr,
    left_ptr,
    right_ptr,
    out_stride,
    out_rows,
    out_cols,
    topk_stride,
    num_reqs,
    search_steps,
    M,
    N,
    top_k,
    compress_ratio,
    window_size,
    swa_cap,
    has_image,
    write_end,
    TOKENS_PER_PROGRAM: tl.constexpr,
    COLS_PER_PROGRAM: tl.constexpr,
):
    # Value-preserving (the wrapper guarantees the multiples), in a form the compiler's
    # divisibility analysis understands.
    out_stride = out_stride // 4 * 4
    topk_stride = topk_stride // 4 * 4

    rows = tl.program_id(0) * TOKENS_PER_PROGRAM + tl.arange(0, TOKENS_PER_PROGRAM)
    in_view = rows < out_rows

    # query_start_loc is global; rows are chunk-local, so rebase on its first entry.
    base = tl.load(query_start_ptr)
    # The row's request: the largest b in [0, num_reqs] with query_start[b] <= row
    # (num_reqs means the row is past the chunk's last token: padding).
    lo = tl.zeros([TOKENS_PER_PROGRAM], dtype=tl.int32)
    hi = lo + num_reqs
    for _ in range(search_steps):
        active = lo < hi
        mid = (lo + hi + 1) // 2
        start = tl.load(query_start_ptr + mid, mask=in_view & active, other=0) - base
        up = active & (start <= rows)
        hi = tl.where(active & (start > rows), mid - 1, hi)
        lo = tl.where(up, mid, lo)
    req = lo
    live = in_view & (req < num_reqs)
    req = tl.where(live, req, 0)

    query_start = tl.load(query_start_ptr + req, mask=live, other=0) - base
    query_end = tl.load(query_start_ptr + req + 1, mask=live, other=0) - base
    seq_len = tl.load(seq_lens_ptr + req, mask=live, other=0)
    gather_len = tl.load(gather_lens_ptr + req, mask=live, other=0)
    pos = seq_len - (query_end - query_start) + (rows - query_start)
    # Integer // truncates toward zero, as in vLLM's kernel.
    topk_len = tl.minimum((pos + 1) // compress_ratio, top_k)
    image = live & (has_image != 0)
    left = tl.load(left_ptr + rows, mask=image, other=0)
    right = tl.load(right_ptr + rows, mask=image, other=0)
    left_add = tl.maximum(left - (window_size - 1), 0)
    swa_start = tl.maximum(pos - (window_size - 1) - left_add, 0)
    swa_len = pos + right - swa_start + 1
    tl.store(lens_ptr + rows, topk_len + swa_len, mask=live)

    # Per row: columns [0, topk_len) hold top-k + M * req; the next min(swa_len,
    # swa_cap) columns hold the gathered window's indices; the rest of the view -1.
    topk_len = tl.where(live, topk_len, 0)
    swa_count = tl.where(live, tl.minimum(swa_len, swa_cap), 0)
    topk_offset = M * req
    swa_first = topk_offset + N + swa_start - (seq_len - gather_len)

    out_row = out_ptr + rows.to(tl.int64) * out_stride
    topk_row = topk_ptr + rows.to(tl.int64) * topk_stride
    lane = tl.arange(0, COLS_PER_PROGRAM)
    # Whole blocks first: their store mask is the row mask alone, constant along a
    # row, so the stores can be vectors. A block inside every live row's top-k (most of
    # a C4A row) loads with the row mask alone too, so those loads can be vectors; a
    # block past every row's top-k loads nothing.
    top_min = tl.min(tl.where(live, topk_len, 2147483647))
    top_max = tl.max(topk_len)
    full_blocks = out_cols // COLS_PER_PROGRAM
    for block in range(0, full_blocks):
        first = block * COLS_PER_PROGRAM
        c = (first + lane)[None, :]
        if first + COLS_PER_PROGRAM <= top_min:
            picked = tl.load(topk_row[:, None] + c, mask=live[:, None], other=0)
            value = tl.where(live[:, None], picked + topk_offset[:, None], -1)
        elif first >= top_max:
            s = c - topk_len[:, None]
            in_swa = (s >= 0) & (s < swa_count[:, None])
            value = tl.where(in_swa, swa_first[:, None] + s, -1)
        else:
            in_topk = c < topk_len[:, None]
            s = c - topk_len[:, None]
            in_swa = (s >= 0) & (s < swa_count[:, None])
            picked = tl.load(topk_row[:, None] + c, mask=in_topk, other=0)
            value = tl.where(in_topk, picked + topk_offset[:, None],
                             tl.where(in_swa, swa_first[:, None] + s, -1))
        tl.store(out_row[:, None] + c, value, mask=in_view[:, None])
    # The last, partial block of the view, and any column past the view a row's window
    # reaches (vLLM writes those too, at the same addresses; the view is filled only).
    for first in range(full_blocks * COLS_PER_PROGRAM, write_end, COLS_PER_PROGRAM):
        cols = first + lane
        c = cols[None, :]
        in_topk = c < topk_len[:, None]
        s = c - topk_len[:, None]
        in_swa = (s >= 0) & (s < swa_count[:, None])
        picked = tl.load(topk_row[:, None] + c, mask=in_topk, other=0)
        value = tl.where(in_topk, picked + topk_offset[:, None],
                         tl.where(in_swa, swa_first[:, None] + s, -1))
        keep = (in_view[:, None] & (c < out_cols)) | in_topk | in_swa
        tl.store(out_row[:, None] + c, value, mask=keep)


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices (0 when
    Triton's interpreter runs it)."""
    caches = getattr(combine_topk_swa_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
