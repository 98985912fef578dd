"""``combine_topk_swa_indices`` in plain torch: the specification, and the test oracle.

What vLLM 0.33.0's function and kernel do, restated from their semantics. A prefill
chunk holds ``num_reqs = len(seq_lens)`` requests; request ``b``'s query tokens are
chunk rows ``[q_b, q_{b+1})`` with ``q_b = query_start_loc[b] - query_start_loc[0]``
(``query_start_loc`` is global, the rows chunk-local). Its KV was gathered into a
workspace of ``M`` entries per request: first its compressed entries, then, from entry
``N`` on, the SWA tokens ``[seq_lens[b] - gather_lens[b], seq_lens[b])``.

- ``combined_indices`` (every cell of the buffer's view) is first ``-1``; with ``out``
  None it is allocated with ``combined_topk = round_up(topk + window_size +
  max_image_tokens, 128)`` columns, one row per ``topk_indices`` row.
- Row ``t`` of request ``b`` is the token at position ``p = seq_lens[b] - (q_{b+1} -
  q_b) + (t - q_b)``. It sees ``k = min((p + 1) // compress_ratio, topk)`` top-k
  entries (``//`` truncating toward zero): column ``j < k`` holds ``topk_indices[t, j] +
  M * b``.
- Its window: with image visibility (``left_visible`` given and ``max_image_tokens >
  0``), ``left = left_visible[t]``, ``right = right_visible[t]``, else both 0. The window
  starts at ``s0 = max(p - (w - 1) - max(left - (w - 1), 0), 0)`` and holds ``n = p + right
  - s0 + 1`` tokens; column ``k + i`` holds ``M * b + N + s0 + i - (seq_lens[b] -
  gather_lens[b])`` for ``i < min(n, cap)``, ``cap = ceil((w + image) / w) * w`` (vLLM
  writes the window in blocks of ``w`` lanes, as many as ``w + image`` columns need).
- ``combined_lens[t] = k + n``. Rows past the chunk's last token keep their ``-1`` row
  and their length untouched.

All values are int32 and wrap as int32 arithmetic does (they are computed in int64 here
and narrowed, which wraps the same way).
"""

from __future__ import annotations

import torch

from dsv4_kernels.combine_topk_swa.checks import check_inputs, combined_width


def combine_topk_swa_indices(
    topk_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    gather_lens: torch.Tensor,
    window_size: int,
    compress_ratio: int,
    topk: int,
    M: int,
    N: int,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    left_visible: torch.Tensor | None = None,
    right_visible: torch.Tensor | None = None,
    max_image_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write what vLLM 0.33.0 writes, with torch operations (any device)."""
    checked = check_inputs(topk_indices, query_start_loc, seq_lens, gather_lens, window_size,
                           compress_ratio, topk, M, N, out, left_visible, right_visible,
                           max_image_tokens)
    device = checked.device
    if out is None:
        indices = torch.full((checked.num_tokens,
                              combined_width(topk, window_size, max_image_tokens)), -1,
                             dtype=torch.int32, device=device)
        lens = torch.empty(checked.num_tokens, dtype=torch.int32, device=device)
    else:
        indices, lens = out
        indices.fill_(-1)
    rows, cols = indices.shape
    reach = topk + checked.swa_cap
    if reach > cols and rows:
        # A window may reach past the view's columns (never past its row stride, for
        # inputs that keep the caller's promises); those cells are written too.
        wide = indices.as_strided((rows, reach), (indices.stride(0), 1))
    else:
        wide = indices
    width = wide.shape[1]
    col = torch.arange(width, device=device, dtype=torch.int64)
    starts = [int(v) for v in query_start_loc[: checked.num_reqs + 1].tolist()]
    seqs = [int(v) for v in seq_lens.tolist()]
    gathers = [int(v) for v in gather_lens[: checked.num_reqs].tolist()]
    image = checked.image_width > 0
    w = window_size
    for b in range(checked.num_reqs):
        first, last = starts[b] - starts[0], starts[b + 1] - starts[0]
        if last <= first:
            continue
        t = torch.arange(first, last, device=device, dtype=torch.int64)
        pos = seqs[b] - (last - first) + (t - first)
        k = torch.div(pos + 1, compress_ratio, rounding_mode="trunc").clamp(max=topk)
        if image:
            left = left_visible[first:last].long()  # type: ignore[index]
            right = right_visible[first:last].long()  # type: ignore[index]
        else:
            left = right = torch.zeros_like(pos)
        s0 = (pos - (w - 1) - (left - (w - 1)).clamp(min=0)).clamp(min=0)
        n = pos + right - s0 + 1
        lens[first:last] = (k + n).to(torch.int32)
        picked = torch.zeros((last - first, width), dtype=torch.int64, device=device)
        picked[:, :topk] = topk_indices[first:last, :topk].long()
        in_topk = col[None, :] < k[:, None]
        i = col[None, :] - k[:, None]
        in_window = (i >= 0) & (i < n.clamp(max=checked.swa_cap)[:, None])
        gather_start = seqs[b] - gathers[b]
        value = torch.where(in_topk, picked + M * b,
                            M * b + N + s0[:, None] + i - gather_start)
        block = wide[first:last]
        wide[first:last] = torch.where(in_topk | in_window, value.to(torch.int32), block)
    return indices, lens
