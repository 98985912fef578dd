"""The two row writers that both SWA metadata kernels share, as ``@triton.jit`` helpers.

:mod:`dsv4_kernels.swa.kernel` (vLLM's SWA rows kernel, any rows of a step) and
:mod:`dsv4_kernels.swa_decode.kernel` (a step's decode rows, with its two fills) write a
program's ``TOKENS_PER_PROGRAM`` rows of window slot ids the same way; only how each
finds a row's request, position and window differs. Triton inlines a helper into its
caller, so the compiled code is what each kernel had written out itself.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def store_padding_rows(out_row, lens_ptr, rows, in_batch, index_width,
                       TOKENS_PER_PROGRAM: tl.constexpr, COLS_PER_PROGRAM: tl.constexpr):
    """Rows of padding tokens (or rows past the batch): length 0 and every column -1.

    ``out_row`` holds each row's first element, ``rows`` the program's row numbers and
    ``in_batch`` which of them belong to the step (the others are not written)."""
    tl.store(lens_ptr + rows, tl.zeros_like(rows), mask=in_batch)
    lane = tl.arange(0, COLS_PER_PROGRAM)
    for first in range(0, index_width, COLS_PER_PROGRAM):
        cols = first + lane
        tl.store(out_row[:, None] + cols[None, :], tl.full(
            (TOKENS_PER_PROGRAM, COLS_PER_PROGRAM), -1, tl.int32),
            mask=in_batch[:, None] & (cols < index_width)[None, :])


@triton.jit
def store_window_rows(out_row, table_row, start, length, in_batch, index_width, block_size,
                      COLS_PER_PROGRAM: tl.constexpr):
    """Each row's window: column ``c < length`` holds the slot id of position
    ``start + c`` (through the row's block table, ``table_row``), every later column -1.

    Columns past ``index_width`` and rows outside ``in_batch`` are not written."""
    lane = tl.arange(0, COLS_PER_PROGRAM)
    for first in range(0, index_width, COLS_PER_PROGRAM):
        cols = first + lane
        shown = cols[None, :] < length[:, None]
        at = start[:, None] + cols[None, :]
        block = at // block_size
        physical = tl.load(table_row[:, None] + block, mask=shown, other=0)
        slots = tl.where(shown, physical * block_size + (at - block * block_size), -1)
        tl.store(out_row[:, None] + cols[None, :], slots,
                 mask=in_batch[:, None] & (cols < index_width)[None, :])
