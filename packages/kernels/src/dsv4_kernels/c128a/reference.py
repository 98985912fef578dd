"""The specification of the C128A top-k metadata, in plain vectorised torch.

This module is what the Triton kernel is tested against, and it states the
semantics of vLLM 0.33.0's ``build_c128a_topk_metadata``. It runs on any device
(CPU or GPU) and is written for clarity, not speed.

For token ``t`` at ``positions[t]``, ``n[t] = clamp((positions[t] + 1) // ratio, 0,
width)`` compressed entries are visible (``//`` truncates toward zero, as integer
division does in Triton; for the non-negative positions vLLM produces this is plain
floor division). Only columns ``[0, width)`` are written:

* decode token ``t < num_decode_tokens``, row ``t`` of ``global_decode_buffer``:
  column ``j`` holds the global slot id ``block_table[req, j // bs] * bs + j % bs``
  (``req = token_to_req_indices[t]``, ``bs = block_size``) when ``j < n[t]``, else -1.
  ``decode_lens_buffer[t]`` is ``n[t]``, or 0 for a padding token
  (``slot_mapping[t] < 0``), whose row is still written as usual.
* prefill token ``t >= num_decode_tokens``, row ``t - num_decode_tokens`` of
  ``prefill_buffer``: column ``j`` holds ``j`` when ``j < n[t]``, else -1.

Nothing else is touched: not the columns from ``width`` on, not the rows past the
token counts, and no ``block_table`` entry of a column that is not visible.
"""

from __future__ import annotations

import torch

from dsv4_kernels.c128a.checks import check_inputs


def build_c128a_topk_metadata(
    positions: torch.Tensor,
    compress_ratio: int,
    num_decode_tokens: int,
    token_to_req_indices: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    slot_mapping: torch.Tensor,
    global_decode_buffer: torch.Tensor,
    decode_lens_buffer: torch.Tensor,
    prefill_buffer: torch.Tensor,
    *,
    width: int,
    decode_view_width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Write the C128A metadata into the buffers; return their views.

    Returns ``(global_decode_buffer[:num_decode, :decode_view_width],
    decode_lens_buffer[:num_decode], prefill_buffer[:num_prefill, :width])``, views
    that keep the buffers' row stride. ``decode_view_width`` defaults to ``width``.
    Invalid arguments raise ``ValueError`` before anything is written.
    """
    checked = check_inputs(
        positions, compress_ratio, num_decode_tokens, token_to_req_indices, block_table,
        block_size, slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer,
        width=width, decode_view_width=decode_view_width,
    )
    num_decode, num_prefill = checked.num_decode, checked.num_prefill
    views = (
        global_decode_buffer[:num_decode, : checked.decode_view_width],
        decode_lens_buffer[:num_decode],
        prefill_buffer[:num_prefill, :width],
    )
    if checked.num_tokens == 0:
        return views

    cols = torch.arange(width, dtype=torch.int64, device=positions.device)  # [W]
    num_visible = torch.div(positions + 1, compress_ratio, rounding_mode="trunc")
    num_visible = num_visible.clamp(0, width)  # [T]
    visible = cols[None, :] < num_visible[:, None]  # [T, W]
    minus_one = torch.tensor(-1, dtype=torch.int64, device=positions.device)

    if num_decode:
        shown = visible[:num_decode]  # [D, W]
        req = token_to_req_indices[:num_decode].long()  # [D]
        # Hidden columns look up block 0 of the row instead of their own block, so no
        # entry beyond a token's visible blocks is ever read; their result is -1.
        block = torch.where(shown, cols // block_size, 0)  # [D, W]
        physical = block_table[req[:, None], block].long()  # [D, W]
        slot_ids = physical * block_size + cols % block_size
        # int32 arithmetic wraps on overflow, in the kernel as in this cast.
        global_decode_buffer[:num_decode, :width] = torch.where(
            shown, slot_ids, minus_one
        ).to(torch.int32)
        padding = slot_mapping[:num_decode] < 0
        decode_lens_buffer[:num_decode] = torch.where(
            padding, 0, num_visible[:num_decode]
        ).to(torch.int32)

    if num_prefill:
        prefill_buffer[:num_prefill, :width] = torch.where(
            visible[num_decode:], cols, minus_one
        ).to(torch.int32)
    return views
