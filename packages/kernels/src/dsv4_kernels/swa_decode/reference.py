"""The SWA builder's decode step in plain torch: the specification (the tests' oracle).

Facts from vLLM 0.33.0 (``DeepseekSparseSWAMetadataBuilder.build`` in
``vllm/v1/attention/backends/mla/sparse_swa.py``), restated for a decode-only causal
step of ``T`` tokens (no DSpark, no prefill), in vLLM's order:

- ``is_valid_token[:S]`` receives ``slot_mapping >= 0`` (``torch.ge`` through ``out=``),
  ``S = slot_mapping.shape[0]``;
- ``decode_swa_lens[T:]`` receives zeros, to the end of the buffer;
- the SWA rows kernel writes rows ``0..T-1`` of ``decode_swa_indices`` and
  ``decode_swa_lens`` with ``index_width = decode_swa_indices.shape[-1]``, no image
  spans and ``token_offset = 0``, reading each token's validity from the mask just
  written (:func:`dsv4_kernels.swa.reference.compute_swa_indices_and_lens` states what
  it writes);
- nothing else of those buffers is written.

:func:`build_swa_decode` runs those very operations, after the same argument checks as
the kernel.
"""

from __future__ import annotations

import torch

from dsv4_kernels.swa.reference import compute_swa_indices_and_lens
from dsv4_kernels.swa_decode.checks import explain_inputs


def build_swa_decode(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    is_valid_token: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    block_table: torch.Tensor,
    replay_start: torch.Tensor,
    *,
    window_size: int,
    block_size: int,
    num_tokens: int,
) -> None:
    """What vLLM 0.33.0's decode-only causal build leaves in the three buffers."""
    explain_inputs(swa_indices, swa_lens, is_valid_token, slot_mapping, query_start_loc,
                   seq_lens, token_to_req_indices, block_table, replay_start, window_size,
                   block_size, num_tokens)
    is_valid = is_valid_token[: slot_mapping.shape[0]]
    torch.ge(slot_mapping, 0, out=is_valid)
    swa_lens[num_tokens:] = 0
    compute_swa_indices_and_lens(
        swa_indices, swa_lens, window_size, swa_indices.shape[-1], swa_lens, swa_lens,
        query_start_loc, seq_lens, token_to_req_indices, is_valid, block_table, block_size,
        replay_start, num_tokens=num_tokens, token_offset=0, has_image=False,
    )
