"""vLLM's real indexer metadata builder and decode steps for it, for the tests.

The builder is vLLM 0.33.0's own ``DeepseekV32IndexerMetadataBuilder``, constructed from
minimal config objects (only the attributes its constructor and ``build`` read) with a
DeepSeek-V4 indexer KV spec (``MLAAttentionSpec``, compress ratio 4, 256-token blocks);
vLLM's ``num_compute_units`` is answered with the SM count (or 132) where the platform
cannot (it sizes a DeepGEMM buffer only). A step is vLLM's own
``CommonAttentionMetadata`` laid out as its model runner V2 lays out a decode batch:
one token per request, then CUDA-graph padding requests with no token and no context.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

MODULE = "vllm.v1.attention.backends.mla.indexer"
POISON = -0x5EED_BAD
BLOCK_SIZE = 256
MAX_MODEL_LEN = 1 << 20
WIDTH = MAX_MODEL_LEN // BLOCK_SIZE + 2
"""Block-table columns of every step and of the builder's ``block_table_width``."""
BUFFERS = ("decode_lens_buffer", "per_req_decode_lens_buffer", "expanded_seq_lens_buffer",
           "compressed_slot_mapping_buffer", "decode_seq_lens_buffer",
           "global_decode_seq_lens_buffer", "decode_indices_buffer",
           "expanded_block_table_buffer", "scheduler_metadata_buffer")
"""Every builder buffer ``build`` may write on some path (poisoned before each build)."""


def vllm_config(max_num_batched_tokens: int = 96, max_num_seqs: int = 48,
                max_model_len: int = MAX_MODEL_LEN, speculative_tokens: int = 0,
                dcp: int = 1) -> SimpleNamespace:
    """A minimal VllmConfig: the fields the indexer builder reads."""
    from vllm.config import AttentionConfig
    from vllm.config.compilation import CUDAGraphMode

    return SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=max_model_len,
                                     hf_config=SimpleNamespace(model_type="deepseek_v4"),
                                     architectures=["DeepseekV4ForCausalLM"]),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=max_num_batched_tokens,
                                         max_num_seqs=max_num_seqs),
        parallel_config=SimpleNamespace(decode_context_parallel_size=dcp,
                                        prefill_context_parallel_size=1,
                                        tensor_parallel_size=1, cp_kv_cache_interleave_size=1),
        attention_config=AttentionConfig(sparse_mla_prefill_workspace_factor=2),
        speculative_config=(SimpleNamespace(num_speculative_tokens=speculative_tokens,
                                            enable_adaptive_verification=False)
                            if speculative_tokens else None),
        num_speculative_tokens=speculative_tokens,
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE),
    )


def spec(ratio: int = 4) -> Any:
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    return MLAAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, max_tp_shards=1,
                            head_size=132, dtype=torch.uint8, tokens_per_state=ratio,
                            alignment=576)


@contextlib.contextmanager
def compute_units(module: Any) -> Iterator[None]:
    """vLLM's ``num_compute_units`` for the builder's constructor, where the platform has
    none (the CPU, or vLLM's sources without a platform)."""
    original = module.num_compute_units

    def units(device_id: int | None = 0) -> int:
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(device_id or 0).multi_processor_count
        return 132

    module.num_compute_units = units
    try:
        yield
    finally:
        module.num_compute_units = original


def make_builder(module: Any, device: torch.device | str = "cpu", *, ratio: int = 4,
                 config: SimpleNamespace | None = None, cls: Any = None) -> Any:
    """vLLM's own indexer builder on ``device`` (its buffers poisoned)."""
    cls = module.DeepseekV32IndexerMetadataBuilder if cls is None else cls
    with compute_units(module):
        builder = cls(spec(ratio), ["model.layers.2.self_attn.indexer.k_cache"],
                      vllm_config() if config is None else config, torch.device(device),
                      block_table_width=WIDTH)
    poison(builder)
    return builder


def poison(builder: Any) -> None:
    """Fill every buffer ``build`` may write with :data:`POISON`."""
    for name in BUFFERS:
        buffer = getattr(builder, name, None)
        if isinstance(buffer, torch.Tensor):
            buffer.fill_(POISON)


def buffers(builder: Any) -> dict[str, torch.Tensor]:
    """Copies of every builder tensor (buffers and constants), by attribute name."""
    return {name: value.clone() for name, value in vars(builder).items()
            if isinstance(value, torch.Tensor)}


def step(gen: torch.Generator, real: int, *, padded: int | None = None,
         context: int = 1 << 17, device: torch.device | str = "cpu",
         query_lens: list[int] | None = None, max_query_len: int | None = None,
         num_tokens: int | None = None) -> Any:
    """vLLM's ``CommonAttentionMetadata`` for a decode step of ``real`` requests padded to
    ``padded`` (FULL CUDA-graph padding: query length 0, context 0, the null block).

    ``query_lens`` replaces the one token per real request (prefills, or a step whose
    host and device lengths disagree), ``max_query_len`` and ``num_tokens`` what the
    runner says (default: from the lengths; padded steps have ``padded`` tokens).
    """
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.attention.backends.utils import PAD_SLOT_ID

    num_reqs = padded or real
    lens = list(query_lens) if query_lens is not None else [1] * real
    lens += [0] * (num_reqs - len(lens))
    real_tokens = sum(lens)
    tokens = num_tokens if num_tokens is not None else (padded or real_tokens)
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(lens, dtype=torch.int32).cumsum(0)
    seq = [max(context - int(torch.randint(0, max(context // 8, 1), (1,), generator=gen)), 1)
           for _ in range(real)] + [0] * (num_reqs - real)
    seq_lens = torch.tensor(seq, dtype=torch.int32)
    # Random block ids in the columns a row's context uses, the null block 0 elsewhere
    # and in padding rows.
    table = torch.randint(1, 1 << 20, (num_reqs, WIDTH), generator=gen, dtype=torch.int32)
    used = (seq_lens.to(torch.int64) + BLOCK_SIZE - 1) // BLOCK_SIZE
    table.masked_fill_(torch.arange(WIDTH)[None, :] >= used[:, None], 0)
    slots = torch.full((max(tokens, real_tokens),), PAD_SLOT_ID, dtype=torch.int64)
    slots[:real_tokens] = torch.randint(0, 1 << 26, (real_tokens,), generator=gen)
    dev = torch.device(device)
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(dev), query_start_loc_cpu=qsl, seq_lens=seq_lens.to(dev),
        num_reqs=num_reqs, num_actual_tokens=tokens,
        max_query_len=max(lens) if max_query_len is None else max_query_len,
        max_seq_len=int(seq_lens.max()) if num_reqs else 0,
        block_table_tensor=table.to(dev), slot_mapping=slots.to(dev),
        seq_lens_cpu_upper_bound=seq_lens,
        is_prefilling=torch.tensor([q > 1 for q in lens], dtype=torch.bool))


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every place two values differ; tensors by shape, stride, dtype, device and bytes."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
        if (a.shape, a.stride(), a.dtype, a.device, a.storage_offset()) != (
                b.shape, b.stride(), b.dtype, b.device, b.storage_offset()):
            return [f"{path}: {tuple(a.shape)}/{a.stride()}/{a.dtype} vs "
                    f"{tuple(b.shape)}/{b.stride()}/{b.dtype}"]
        return [] if torch.equal(a, b) else [f"{path}: values differ"]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
    if dataclasses.is_dataclass(a):
        return [d for f in dataclasses.fields(a)
                for d in differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys differ"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}[{k}]")]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]
