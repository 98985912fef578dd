"""The Triton kernel behind :func:`dsv4_kernels.c128a.build_c128a_topk_metadata`.

One ``@triton.jit`` function whose constexprs are the tile shape (``TOKENS_PER_PROGRAM``
x ``COLS_PER_PROGRAM``) and ``HAS_DECODE``. Every other scalar (width, compress ratio,
block size, token counts, strides) and every input pointer is listed in
``do_not_specialize``, so a new width, block size or batch size reuses the binary
already built for the tile: the compile key is ``(tpp, cpp, num_warps)``, and each key
has two binaries, one for batches with decode tokens and one for prefill-only batches
(:func:`dsv4_kernels.c128a.warmup` builds both).

``HAS_DECODE=False`` compiles the decode rows' block-table gather out. Even never taken,
that code sets the register budget of the whole kernel (27 against 56 registers per
thread at 8 x 128 on sm90), and a long prefill of narrow rows, which is a short burst of
stores, ran 5-20 % faster without it on an H200.

The two output buffers keep Triton's 16-byte alignment specialisation (the public
wrapper rejects misaligned buffers, so that key never changes either); with the
row-stride and width hints below it lets the compiler emit vector stores.

Grid: ``(cdiv(num_tokens, TPP), S)``. Program ``(p, q)`` owns tokens
``[p*TPP, p*TPP + TPP)`` and the column blocks starting at ``(q + k*S) * CPP`` for
``k = 0, 1, ...`` while they start below ``width``. ``S = 1`` is one program walking a
whole row (with ``TPP = 1``, ``CPP = 1024``, 4 warps: the upstream launch); ``S =
cdiv(width, CPP)`` gives each column block its own program.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Run-time arguments: never part of the compile key. Tests check that this list is
# exactly the kernel's non-constexpr parameters minus the two output buffers.
RUNTIME_ARGS: tuple[str, ...] = (
    "lens_ptr",
    "positions_ptr",
    "token_to_req_ptr",
    "block_table_ptr",
    "slot_mapping_ptr",
    "decode_stride",
    "prefill_stride",
    "block_table_stride",
    "compress_ratio",
    "width",
    "block_size",
    "num_decode",
    "num_tokens",
)
# Output buffers: specialised on 16-byte alignment only (checked by the wrapper).
ALIGNED_ARGS: tuple[str, ...] = ("decode_ptr", "prefill_ptr")
# The columns are walked in blocks, and the wrapper guarantees these divisibilities.
WIDTH_MULTIPLE = 128
STRIDE_MULTIPLE = 16


@triton.jit(do_not_specialize=RUNTIME_ARGS)
def c128a_topk_metadata_kernel(
    decode_ptr,
    prefill_ptr,
    lens_ptr,
    positions_ptr,
    token_to_req_ptr,
    block_table_ptr,
    slot_mapping_ptr,
    decode_stride,
    prefill_stride,
    block_table_stride,
    compress_ratio,
    width,
    block_size,
    num_decode,
    num_tokens,
    TOKENS_PER_PROGRAM: tl.constexpr,
    COLS_PER_PROGRAM: tl.constexpr,
    HAS_DECODE: tl.constexpr,
):
    # Re-derive values the wrapper guarantees are multiples, in a form the compiler's
    # divisibility analysis understands (value-preserving: x // m * m == x here).
    width = width // 128 * 128
    decode_stride = decode_stride // 16 * 16
    prefill_stride = prefill_stride // 16 * 16

    tile_row = tl.program_id(0)
    col_program = tl.program_id(1)
    col_programs = tl.num_programs(1)
    first_row = tile_row * TOKENS_PER_PROGRAM
    rows = first_row + tl.arange(0, TOKENS_PER_PROGRAM)
    row_in_batch = rows < num_tokens
    row_is_decode = rows < num_decode

    positions = tl.load(positions_ptr + rows, mask=row_in_batch, other=0)
    # The visible count is clamp((positions + 1) // compress_ratio, 0, width), with //
    # truncating toward zero as upstream's kernel does (columns are non-negative, so the
    # clamp changes no output). Clamping the dividend into [0, width * compress_ratio]
    # first gives the same count, and then the division fits int32: a 64-bit division
    # is a long software sequence, and on a short prefill it is what the stores wait for.
    # Only a deployment with width * compress_ratio >= 2**31 takes the 64-bit branch.
    limit = width.to(tl.int64) * compress_ratio
    if limit < 2147483648:
        dividend = tl.minimum(tl.maximum(positions + 1, 0), limit).to(tl.int32)
        visible = dividend // compress_ratio.to(tl.int32)
    else:
        visible = (positions + 1) // compress_ratio
        visible = tl.minimum(tl.maximum(visible, 0), width).to(tl.int32)

    lane = tl.arange(0, COLS_PER_PROGRAM)
    first_col = col_program * COLS_PER_PROGRAM
    col_step = col_programs * COLS_PER_PROGRAM
    num_blocks = (width - first_col + col_step - 1) // col_step

    if HAS_DECODE and first_row < num_decode:
        decode_rows = row_in_batch & row_is_decode
        req = tl.load(token_to_req_ptr + rows, mask=decode_rows, other=0)
        table_row = block_table_ptr + req.to(tl.int64) * block_table_stride
        out_row = decode_ptr + rows.to(tl.int64) * decode_stride
        if col_program == 0:
            slot = tl.load(slot_mapping_ptr + rows, mask=decode_rows, other=-1)
            tl.store(lens_ptr + rows, tl.where(slot >= 0, visible, 0), mask=decode_rows)
        for k in range(0, num_blocks):
            cols = (col_program + k * col_programs) * COLS_PER_PROGRAM + lane
            block = cols // block_size
            offset = cols - block * block_size
            store_mask = decode_rows[:, None] & (cols < width)[None, :]
            shown = cols[None, :] < visible[:, None]
            table_ptrs = table_row[:, None] + block[None, :]
            physical = tl.load(table_ptrs, mask=store_mask & shown, other=0)
            slots = tl.where(shown, physical * block_size + offset[None, :], -1)
            tl.store(out_row[:, None] + cols[None, :], slots, mask=store_mask)

    if first_row + TOKENS_PER_PROGRAM > num_decode:
        prefill_rows = row_in_batch & (rows >= num_decode)
        local_row = rows - num_decode
        out_row = prefill_ptr + local_row.to(tl.int64) * prefill_stride
        # Every program owns at least one column block (the grid never has more column
        # programs than blocks), so the first is written outside the loop: on a long
        # prefill of narrow rows that block is all the work, and the loop's set-up
        # costs as much as the stores.
        cols = first_col + lane
        store_mask = prefill_rows[:, None] & (cols < width)[None, :]
        local = tl.where(cols[None, :] < visible[:, None], cols[None, :], -1)
        tl.store(out_row[:, None] + cols[None, :], local, mask=store_mask)
        for k in range(1, num_blocks):
            cols = (col_program + k * col_programs) * COLS_PER_PROGRAM + lane
            store_mask = prefill_rows[:, None] & (cols < width)[None, :]
            local = tl.where(cols[None, :] < visible[:, None], cols[None, :], -1)
            tl.store(out_row[:, None] + cols[None, :], local, mask=store_mask)


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices.

    Every entry was built (or loaded from Triton's on-disk cache) on first use of its
    specialisation key, so the count grows exactly when a launch needed a new binary.
    Under ``TRITON_INTERPRET=1`` nothing is compiled and this is 0.
    """
    caches = getattr(c128a_topk_metadata_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
