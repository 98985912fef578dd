"""vLLM's real DeepSeek-V4 metadata builder and look-alike steps, for the tests.

The builder is vLLM 0.33.0's own class, constructed from minimal config objects
(only the attributes its constructor reads). A step is a CommonAttentionMetadata
look-alike with the fields ``_build_c128a_metadata`` reads: decodes first, then
prefills, as vLLM orders a batch.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from c128a_batches import capacity_of

MAX_TOKENS = 16


def builder(module: Any, max_model_len: int, device: str | torch.device = "cpu") -> Any:
    """vLLM's own DeepSeek-V4 metadata builder, from minimal configs."""
    spec = SimpleNamespace(tokens_per_state=128, block_size=256, num_states=64)
    config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=max_model_len,
                                     hf_config=SimpleNamespace(index_topk=512)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=MAX_TOKENS),
        speculative_config=None,
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
    )
    return module.DeepseekV4SparseMLAMetadataBuilder(spec, ["layers.2.attn"], config,
                                                      torch.device(device))


def step(gen: torch.Generator, max_model_len: int, max_seq_len: int, decode_reqs: int,
         prefill_lens: list[int], device: str | torch.device = "cpu",
         ) -> tuple[SimpleNamespace, torch.Tensor]:
    """A CommonAttentionMetadata look-alike: decodes first, then prefills."""
    query_lens = [1] * decode_reqs + prefill_lens
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    starts = torch.tensor([0, *query_lens], dtype=torch.int32).cumsum(0).to(torch.int32)
    req_of_token = torch.repeat_interleave(torch.arange(num_reqs, dtype=torch.int32),
                                           torch.tensor(query_lens))
    positions = torch.randint(0, max_seq_len, (num_tokens,), generator=gen)
    positions[0] = max_seq_len - 1
    blocks = capacity_of(max_model_len) // 2
    block_table = (torch.randperm(num_reqs * blocks * 2, generator=gen)[: num_reqs * blocks]
                   .to(torch.int32).reshape(num_reqs, blocks))
    slots = torch.randint(0, 1 << 20, (num_tokens,), generator=gen)
    slots[torch.rand(num_tokens, generator=gen) < 0.25] = -1
    cm = SimpleNamespace(
        max_query_len=max(query_lens), num_reqs=num_reqs, num_actual_tokens=num_tokens,
        query_start_loc_cpu=starts, positions=positions.to(device), max_seq_len=max_seq_len,
        block_table_tensor=block_table.to(device), slot_mapping=slots.to(device),
    )
    req_id_per_token = torch.zeros(MAX_TOKENS, dtype=torch.int32)
    req_id_per_token[:num_tokens] = req_of_token
    return cm, req_id_per_token.to(device)
