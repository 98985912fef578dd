"""The indexer's decode tensors in plain torch: the specification (the tests' oracle).

Facts from vLLM 0.33.0 (``DeepseekV32IndexerMetadataBuilder.build`` in
``vllm/v1/attention/backends/mla/indexer.py``), restated for a decode-only step on the
native decode path with compress ratio > 1, ``n`` decode requests and ``m`` decode
tokens:

- ``decode_lens[:n]`` receives ``torch.diff(query_start_loc[:n + 1])`` (int32, written
  through ``out=``), and ``per_req_decode_lens[:n]`` a copy of it: each request's query
  length, 0 for a CUDA-graph padding request;
- ``expanded_seq_lens[:n]`` receives ``seq_lens[:n] // compress_ratio``, torch's floor
  division of an int32 tensor by a Python int (rounding toward minus infinity:
  ``-5 // 4 == -2``), and ``expanded_seq_lens[n:m]`` zeros (nothing when ``m <= n``);
- nothing else of those buffers is written.

The functions below run those very ops, in vLLM's order, after the same argument checks
as the kernel.
"""

from __future__ import annotations

import torch

from dsv4_kernels.indexer_decode.checks import explain_inputs


def indexer_decode_metadata(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    decode_lens: torch.Tensor,
    per_req_decode_lens: torch.Tensor,
    expanded_seq_lens: torch.Tensor,
    num_reqs: int,
    num_tokens: int,
    compress_ratio: int,
) -> None:
    """What vLLM 0.33.0's decode path leaves in the four buffers."""
    explain_inputs(query_start_loc, seq_lens, decode_lens, per_req_decode_lens,
                   expanded_seq_lens, num_reqs, num_tokens, compress_ratio)
    n = num_reqs
    torch.diff(query_start_loc[: n + 1], out=decode_lens[:n])
    per_req_decode_lens[:n].copy_(decode_lens[:n])
    expanded_seq_lens[:n] = seq_lens[:n] // compress_ratio
    expanded_seq_lens[n:num_tokens] = 0


def host_facts(query_start_loc_cpu: torch.Tensor, num_reqs: int) -> tuple[int, int]:
    """``(max_decode_len, min_decode_len)`` as vLLM computes them on the host: the largest
    and smallest of ``torch.diff(query_start_loc_cpu[:num_reqs + 1])``."""
    lens = torch.diff(query_start_loc_cpu[: num_reqs + 1])
    return int(lens.max().item()), int(lens.min().item())
