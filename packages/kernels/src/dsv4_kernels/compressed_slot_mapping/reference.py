"""The compressed slot mapping in plain torch: the specification (the tests' oracle).

Facts from vLLM 0.33.0 (``CompressedSlotMappingKernel`` and ``get_compressed_slot_mapping``
in ``vllm/v1/attention/backends/mla/compressor_utils.py``), restated:

- Requests are the rows ``r < R = block_table.shape[0]`` of the block table. Request
  ``r`` owns the token rows ``query_start_loc[r] + i`` for ``i < q_len``, ``q_len =
  query_start_loc[r + 1] - query_start_loc[r]`` (none when ``q_len <= 0``).
- Token ``i`` of request ``r`` sits at position ``pos = seq_lens[r] - q_len + i`` (int32).
- Every ``compress_ratio`` consecutive positions share one compressed state, written by
  the last of them: the token is *valid* when ``(pos + 1) % compress_ratio == 0`` and its
  own ``slot_mapping`` entry is not -1 (PAD: a replayed token, or under decode context
  parallelism a token another rank owns).
- Under DCP (``dcp_world_size > 1``) the position is first made rank-local:
  ``local = pos // (cp_interleave * dcp_world_size) * cp_interleave + pos % cp_interleave``.
  Without, ``local = pos``.
- A valid token's row holds ``block_table[r, c // block_size] * block_size + c %
  block_size`` (int64) with ``c = local // compress_ratio``; an invalid token's row -1.
  The block-table read is at flat offset ``r * block_table.stride(0) + c // block_size``
  from the table's first element, as vLLM's kernel addresses it.
- Every ``//`` and ``%`` above truncates toward zero (C semantics: ``-5 // 4 == -1``,
  ``-5 % 4 == -1``), as Triton's integer operations do; it matters only for negative
  positions (``seq_lens[r] < q_len``).
- ``get_compressed_slot_mapping`` first sets every row of ``out`` to -1 (the whole
  buffer, past ``num_tokens`` too), then writes the requests' rows, and returns
  ``out[:num_tokens]``; without ``out`` it does the same on a new ``num_tokens``-row
  int64 tensor. The kernel object's call writes the requests' rows only.

Where vLLM's behaviour is undefined this specification says what dsv4's kernel does,
and :class:`ValueError` where even that is undefined: a request row at or past the
output's length is not written (vLLM writes past the tensor); a row at or past
``slot_mapping``'s length reads as PAD (vLLM reads past the tensor); a block-table read
outside the table, or a decreasing ``query_start_loc`` (overlapping requests), raises.
"""

from __future__ import annotations

import torch

from dsv4_kernels.compressed_slot_mapping.checks import FN, KERNEL_FN, explain_inputs


def _trunc_div(a: torch.Tensor, b: int) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="trunc")


def request_rows(
    num_rows: int, slot_mapping: torch.Tensor, query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor, block_table: torch.Tensor, block_size: int, compress_ratio: int,
    dcp_world_size: int, cp_interleave: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)``: every row below ``num_rows`` a request owns, and its value."""
    device = query_start_loc.device
    num_reqs = block_table.shape[0]
    bounds = query_start_loc[: num_reqs + 1].long()
    q_lens = (bounds[1:] - bounds[:-1]).clamp(min=0)
    if num_reqs and bool((bounds[1:] < bounds[:-1]).any()):
        raise ValueError(f"{FN}: query_start_loc decreases; requests would overlap")
    req = torch.repeat_interleave(torch.arange(num_reqs, device=device), q_lens)
    first_row = torch.repeat_interleave(bounds[:-1], q_lens)
    offset = torch.arange(req.shape[0], device=device) - torch.repeat_interleave(
        torch.cumsum(q_lens, 0) - q_lens, q_lens)
    rows = first_row + offset
    pos = seq_lens[:num_reqs].long()[req] - q_lens[req] + offset
    in_slots = (rows >= 0) & (rows < slot_mapping.shape[0])
    slot = torch.full_like(rows, -1)
    slot[in_slots] = slot_mapping[rows[in_slots]].long()
    valid = (torch.fmod(pos + 1, compress_ratio) == 0) & (slot != -1)
    if dcp_world_size > 1:
        local = (_trunc_div(pos, cp_interleave * dcp_world_size) * cp_interleave
                 + torch.fmod(pos, cp_interleave))
    else:
        local = pos
    compressed = _trunc_div(local, compress_ratio)
    block = _trunc_div(compressed, block_size)
    flat_index = req * block_table.stride(0) + block
    span = ((num_reqs - 1) * block_table.stride(0) + block_table.shape[1]) if num_reqs else 0
    wanted = flat_index[valid]
    if wanted.numel() and (int(wanted.min()) < 0 or int(wanted.max()) >= span):
        raise ValueError(f"{FN}: a valid token reads block_table outside the table")
    flat = block_table.as_strided((span,), (1,))
    physical = torch.zeros_like(rows)
    physical[valid] = flat[wanted].long()
    values = torch.where(valid, physical * block_size + (compressed - block * block_size), -1)
    keep = (rows >= 0) & (rows < num_rows)
    return rows[keep], values[keep]


def get_compressed_slot_mapping(
    num_tokens: int,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    compress_ratio: int,
    out: torch.Tensor | None = None,
    dcp_world_size: int = 1,
    cp_interleave: int = 1,
) -> torch.Tensor:
    """What vLLM 0.33.0's ``get_compressed_slot_mapping`` leaves in ``out`` and returns."""
    checked = explain_inputs(num_tokens, slot_mapping, query_start_loc, seq_lens, block_table,
                             block_size, compress_ratio, out, dcp_world_size, cp_interleave)
    rows, values = request_rows(checked.num_rows, slot_mapping, query_start_loc, seq_lens,
                                block_table, block_size, compress_ratio, dcp_world_size,
                                cp_interleave)
    if out is None:
        out = torch.empty(num_tokens, dtype=torch.int64, device=query_start_loc.device)
    out.fill_(-1)
    out[rows] = values
    return out[:num_tokens]


def compressed_slot_mapping_kernel(
    compressed_slot_mapping: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    compress_ratio: int,
    dcp_world_size: int,
    cp_interleave: int,
) -> None:
    """What vLLM 0.33.0's kernel object writes: the requests' rows, nothing else."""
    checked = explain_inputs(0, slot_mapping, query_start_loc, seq_lens, block_table,
                             block_size, compress_ratio, compressed_slot_mapping,
                             dcp_world_size, cp_interleave, fn=KERNEL_FN)
    rows, values = request_rows(checked.num_rows, slot_mapping, query_start_loc, seq_lens,
                                block_table, block_size, compress_ratio, dcp_world_size,
                                cp_interleave)
    compressed_slot_mapping[rows] = values
