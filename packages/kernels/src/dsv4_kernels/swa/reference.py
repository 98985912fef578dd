"""The SWA indices-and-lens computation in plain torch: the specification.

Facts from vLLM 0.33.0's ``_compute_swa_indices_and_lens_kernel``, restated: row ``t``
describes token ``i = token_offset + t`` of request ``r = token_to_req_indices[i]``.

- A token with ``is_valid_token[i]`` false (padding) gets length 0 and -1 in all
  ``index_width`` columns.
- Otherwise its position is ``p = seq_lens[r] - q_len + (i - query_start_loc[r])``
  with ``q_len = query_start_loc[r+1] - query_start_loc[r]``. With ``has_image`` it
  also sees ``left = left_visible[i]`` / ``right = right_visible[i]`` tokens; without,
  both are 0. The window starts at ``max(p - (w-1) - max(left - (w-1), 0), 0,
  replay_start[r])`` and ends before ``p + right + 1``; the length is end - start
  (negative when a replay start lies past the end; it is stored as it is).
- Column ``j < index_width`` holds the slot id of position ``start + j`` when ``j <
  length``: ``block_table[r, pos // block_size] * block_size + pos % block_size``, in
  int32; else -1. Rows are written at the buffer's own row stride; nothing past
  ``index_width`` or ``num_tokens`` is written.
"""

from __future__ import annotations

import torch

from dsv4_kernels.swa.checks import check_inputs


def compute_swa_indices_and_lens(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    window_size: int,
    index_width: int,
    left_visible: torch.Tensor,
    right_visible: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    is_valid_token: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    replay_start: torch.Tensor,
    *,
    num_tokens: int,
    token_offset: int,
    has_image: bool = False,
) -> None:
    """Write what vLLM 0.33.0 writes, with torch operations (any device)."""
    checked = check_inputs(
        swa_indices, swa_lens, window_size, index_width, left_visible, right_visible,
        query_start_loc, seq_lens, token_to_req_indices, is_valid_token, block_table,
        block_size, replay_start, num_tokens=num_tokens, token_offset=token_offset,
        has_image=has_image,
    )
    if num_tokens == 0:
        return
    device = checked.device
    tokens = torch.arange(token_offset, token_offset + num_tokens, device=device)
    valid = is_valid_token[tokens]
    req = torch.where(valid, token_to_req_indices[tokens].long(), 0)
    zero = torch.zeros_like(req)
    q_start = torch.where(valid, query_start_loc[req].long(), zero)
    q_end = torch.where(valid, query_start_loc[req + 1].long(), zero)
    seq = torch.where(valid, seq_lens[req].long(), zero)
    pos = seq - (q_end - q_start) + tokens - q_start
    if has_image:
        left = torch.where(valid, left_visible[tokens].long(), zero)
        right = torch.where(valid, right_visible[tokens].long(), zero)
    else:
        left = right = zero
    w = window_size - 1
    start = (pos - w - (left - w).clamp(min=0)).clamp(min=0)
    start = torch.maximum(start, torch.where(valid, replay_start[req].long(), zero))
    length = torch.where(valid, pos + right + 1 - start, zero)
    cols = torch.arange(index_width, device=device)
    shown = cols[None, :] < length[:, None]
    at = start[:, None] + cols[None, :]
    block = torch.where(shown, at // block_size, 0)
    physical = block_table.long()[req[:, None], block.clamp(max=block_table.shape[1] - 1)]
    slots = torch.where(shown, physical * block_size + at % block_size, -1)
    checked.rows[:num_tokens, :index_width] = slots.to(torch.int32)
    swa_lens[:num_tokens] = length.to(torch.int32)
