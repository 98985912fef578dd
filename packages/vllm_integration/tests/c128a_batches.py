"""Random, vLLM-shaped C128A metadata batches for the tests.

A batch is what vLLM's metadata builder hands to ``build_c128a_topk_metadata``:
positions of ``num_decode`` decode tokens followed by prefill tokens, each below the
step's ``max_seq_len``; a block table with distinct physical blocks per request;
a slot mapping with some padding tokens (negative slots); pre-allocated buffers of
``capacity`` columns. Buffers start filled with a random sentinel (never zeros), so
a write outside the active width, or a missing write, shows up as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

COMPRESS_RATIO = 128
BLOCK_SIZE = 256 // COMPRESS_RATIO


def capacity_of(max_model_len: int, ratio: int = COMPRESS_RATIO) -> int:
    """Buffer columns as vLLM 0.33.0 allocates them (written out independently)."""
    compressed = -(-max_model_len // ratio)
    return -(-compressed // 128) * 128


def vllm_width(max_seq_len: int, capacity: int, ratio: int = COMPRESS_RATIO) -> int:
    """vLLM 0.33.0's active width for a step (written out independently)."""
    n = max(max_seq_len // ratio, 1)
    pow2 = 1
    while pow2 < n:
        pow2 *= 2
    return min(max(pow2, 128), capacity)


@dataclass(frozen=True)
class Batch:
    positions: torch.Tensor
    compress_ratio: int
    num_decode_tokens: int
    token_to_req_indices: torch.Tensor
    block_table: torch.Tensor
    block_size: int
    slot_mapping: torch.Tensor
    global_decode_buffer: torch.Tensor
    decode_lens_buffer: torch.Tensor
    prefill_buffer: torch.Tensor
    width: int
    max_model_len: int
    max_seq_len: int

    @property
    def capacity(self) -> int:
        return self.prefill_buffer.shape[1]

    @property
    def num_prefill_tokens(self) -> int:
        return self.positions.shape[0] - self.num_decode_tokens

    def args(self) -> tuple:
        """The ten positional arguments, in vLLM's order."""
        return (
            self.positions,
            self.compress_ratio,
            self.num_decode_tokens,
            self.token_to_req_indices,
            self.block_table,
            self.block_size,
            self.slot_mapping,
            self.global_decode_buffer,
            self.decode_lens_buffer,
            self.prefill_buffer,
        )

    def fresh_buffers(self) -> Batch:
        """The same batch writing into copies of the (sentinel-filled) buffers."""
        return replace(
            self,
            global_decode_buffer=self.global_decode_buffer.clone(),
            decode_lens_buffer=self.decode_lens_buffer.clone(),
            prefill_buffer=self.prefill_buffer.clone(),
        )


def make_batch(
    gen: torch.Generator,
    *,
    max_model_len: int,
    max_seq_len: int,
    num_decode: int,
    num_prefill: int,
    num_reqs: int = 4,
    rows: int | None = None,
    device: str | torch.device = "cpu",
) -> Batch:
    """One random batch; ``rows`` is the buffers' row count (vLLM's token budget)."""
    if not 0 < max_seq_len <= max_model_len:
        raise ValueError(f"make_batch: max_seq_len {max_seq_len} not in (0, {max_model_len}]")
    capacity = capacity_of(max_model_len)
    num_tokens = num_decode + num_prefill
    rows = max(rows or num_tokens, 1)
    blocks_per_req = -(-capacity // BLOCK_SIZE)

    def ints(low: int, high: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=gen, dtype=dtype)

    positions = ints(0, max_seq_len, (num_tokens,), torch.int64)
    if num_tokens:
        positions[ints(0, num_tokens, (1,), torch.int64)] = max_seq_len - 1
    token_to_req = ints(0, num_reqs, (max(num_decode, 1),), torch.int32)
    physical = torch.randperm(num_reqs * blocks_per_req * 2, generator=gen)[
        : num_reqs * blocks_per_req
    ]
    block_table = (physical.to(torch.int32) + 1).reshape(num_reqs, blocks_per_req)
    slot_mapping = ints(0, 1 << 20, (max(num_tokens, 1),), torch.int64)
    padding = torch.rand(slot_mapping.shape, generator=gen) < 0.2
    slot_mapping[padding] = -1
    sentinel = int(ints(1000, 1 << 30, (1,), torch.int64))
    decode_buffer = torch.full((rows, capacity), sentinel, dtype=torch.int32)
    lens_buffer = torch.full((rows,), sentinel + 1, dtype=torch.int32)
    prefill_buffer = torch.full((rows, capacity), sentinel + 2, dtype=torch.int32)
    return Batch(
        positions=positions.to(device),
        compress_ratio=COMPRESS_RATIO,
        num_decode_tokens=num_decode,
        token_to_req_indices=token_to_req.to(device),
        block_table=block_table.to(device),
        block_size=BLOCK_SIZE,
        slot_mapping=slot_mapping.to(device),
        global_decode_buffer=decode_buffer.to(device),
        decode_lens_buffer=lens_buffer.to(device),
        prefill_buffer=prefill_buffer.to(device),
        width=vllm_width(max_seq_len, capacity),
        max_model_len=max_model_len,
        max_seq_len=max_seq_len,
    )


def table_toml(entries: list[dict]) -> str:
    """Launch-table TOML text (the policy's schema 1) for test entries.

    Each entry: ``{"id": ..., "match": {...}, "launch": {tile fields}}``.
    """
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    lines = ["schema = 1"]
    for e in entries:
        lines += ["", "[[entry]]", f'id = "{e["id"]}"', "[entry.match]"]
        lines += [f"{k} = {value(v)}" for k, v in e["match"].items()]
        lines.append("[entry.launch]")
        lines += [f"{k} = {value(v)}" for k, v in e["launch"].items()]
    return "\n".join(lines) + "\n"
