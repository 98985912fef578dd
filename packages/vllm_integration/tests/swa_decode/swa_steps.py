"""vLLM's real SWA metadata builders and decode steps for them, for the tests.

The builders are vLLM 0.33.0's own ``DeepseekSparseSWAMetadataBuilder`` and FlashMLA's CUDA
subclass ``DeepseekSparseSWAFlashMLAMetadataBuilder``, constructed from minimal config
objects (only the attributes their constructor and ``build`` read) with DeepSeek-V4's SWA
KV spec (``SlidingWindowMLASpec``: window 128, 64-token blocks, one latent head of 512).
A step is vLLM's own ``CommonAttentionMetadata`` laid out as its model runner V2 lays out a
decode batch: one token per request at its context's last position, then CUDA-graph
padding requests with no token and no context and padding tokens with slot -1.

Every builder buffer ``build`` may write is poisoned with seeded random values (nonzero
ints, random bools), the same on both sides of a comparison, so what a build leaves
untouched is checked too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
FLASHMLA = "vllm.models.deepseek_v4.nvidia.flashmla"
METADATA = "vllm.v1.attention.ops.metadata"
WINDOW = 128
BLOCK_SIZE = 64
MAX_MODEL_LEN = 1 << 20
WIDTH = MAX_MODEL_LEN // BLOCK_SIZE
"""Block-table columns of every step (a 1M context's blocks)."""
LAYER = "model.layers.0.self_attn.swa_cache"
RATIOS = [0, 0, 4, 128, 4, 128]
"""The layers' compress ratios: SWA-only, C4A and C128A, so three FlashMLA plans per step."""
BUFFERS = ("token_to_req_indices", "decode_swa_indices", "decode_swa_lens",
           "prefill_swa_indices", "prefill_swa_lens", "is_valid_token")
"""Every builder buffer ``build`` may write on some path (poisoned before each build)."""


def vllm_config(max_num_batched_tokens: int = 96, max_num_seqs: int = 48,
                max_model_len: int = MAX_MODEL_LEN, window: int = WINDOW,
                speculative_tokens: int = 0, dspark: bool = False) -> SimpleNamespace:
    """A minimal VllmConfig: the fields the SWA builder reads."""
    speculative = None
    if speculative_tokens or dspark:
        speculative = SimpleNamespace(num_speculative_tokens=speculative_tokens,
                                      parallel_drafting=False, use_dspark=lambda: dspark)
    return SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=max_model_len,
            hf_config=SimpleNamespace(sliding_window=window, compress_ratios=RATIOS)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=max_num_batched_tokens,
                                         max_num_seqs=max_num_seqs),
        speculative_config=speculative,
        use_v2_model_runner=True,
    )


def spec(window: int = WINDOW, block_size: int = BLOCK_SIZE) -> Any:
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    return SlidingWindowMLASpec(block_size=block_size, num_kv_heads=1, head_size=512,
                                dtype=torch.uint8, sliding_window=window)


def builder_class(name: str = "base") -> type:
    """vLLM's base class (``"base"``) or FlashMLA's subclass (``"flashmla"``)."""
    import importlib

    if name == "flashmla":
        return importlib.import_module(FLASHMLA).DeepseekSparseSWAFlashMLAMetadataBuilder
    return importlib.import_module(MODULE).DeepseekSparseSWAMetadataBuilder


def make_builder(cls: type | str = "base", device: torch.device | str = "cpu", *,
                 config: SimpleNamespace | None = None, window: int = WINDOW,
                 seed: int = 0) -> Any:
    """vLLM's own SWA builder of class ``cls`` on ``device`` (its buffers poisoned)."""
    cls = builder_class(cls) if isinstance(cls, str) else cls
    builder = cls(spec(window), [LAYER], vllm_config(window=window) if config is None
                  else config, torch.device(device))
    poison(builder, seed)
    return builder


def poison(builder: Any, seed: int = 0) -> None:
    """Fill every buffer ``build`` may write with seeded random values: nonzero ints
    (negative and positive), random bools."""
    gen = torch.Generator().manual_seed(seed)
    for name in BUFFERS:
        buffer = getattr(builder, name, None)
        if not isinstance(buffer, torch.Tensor):
            continue
        if buffer.dtype == torch.bool:
            values = torch.randint(0, 2, buffer.shape, generator=gen).bool()
        else:
            values = torch.randint(1, 1 << 30, buffer.shape, generator=gen, dtype=torch.int32)
            values[torch.rand(buffer.shape, generator=gen) < 0.5] *= -1
        buffer.copy_(values)


def buffers(builder: Any) -> dict[str, torch.Tensor]:
    """Copies of every builder tensor (buffers and constants), by attribute name."""
    return {name: value.clone() for name, value in vars(builder).items()
            if isinstance(value, torch.Tensor)}


def token_map(query_start_loc: torch.Tensor, out: torch.Tensor, num_mapped_tokens: int,
              num_tokens: int) -> torch.Tensor:
    """vLLM's ``compute_token_to_req_indices`` in plain torch (its Triton kernel cannot run
    in a process where vLLM's Triton is its CPU placeholder): token ``t < num_mapped_tokens``
    maps to the request whose query holds it (requests without tokens are skipped), every
    later token to 0; ``out[:num_tokens]`` is written and returned."""
    num_reqs = query_start_loc.shape[0] - 1
    tokens = torch.arange(num_tokens, dtype=torch.int32, device=out.device)
    ends = query_start_loc[1:num_reqs + 1].to(torch.int32)
    req = torch.searchsorted(ends, tokens, right=True).clamp_(max=max(num_reqs - 1, 0))
    out[:num_tokens] = torch.where(tokens < num_mapped_tokens, req.to(torch.int32), 0)
    return out[:num_tokens]


@contextlib.contextmanager
def plan_holders(module: Any) -> Iterator[list[Any]]:
    """``sparse_swa.get_mla_metadata`` where vLLM's compiled FlashMLA is absent (vLLM's
    placeholder raises): a fresh ``FlashMLASchedMeta`` per call, as FlashMLA's Python
    function returns. Yields the objects handed out."""
    from vllm.v1.attention.ops import flashmla

    made: list[Any] = []
    original = module.get_mla_metadata
    if original is not flashmla._raise_flashmla_unavailable:
        yield made
        return

    def get_mla_metadata(*_args: Any, **_kwargs: Any) -> tuple[Any, None]:
        made.append(flashmla.FlashMLASchedMeta())
        return made[-1], None

    module.get_mla_metadata = get_mla_metadata
    try:
        yield made
    finally:
        module.get_mla_metadata = original


def step(gen: torch.Generator, real: int, *, padded: int | None = None,
         context: int = 1 << 17, device: torch.device | str = "cpu",
         query_lens: list[int] | None = None, max_query_len: int | None = None,
         num_tokens: int | None = None, block_size: int = BLOCK_SIZE,
         causal: Any = True, cache: torch.Tensor | None = None) -> Any:
    """vLLM's ``CommonAttentionMetadata`` for a decode step of ``real`` requests padded to
    ``padded`` (FULL CUDA-graph padding: query length 0, context 0, the null block, and
    padding tokens with slot -1).

    ``query_lens`` replaces the one token per real request (prefills), ``max_query_len``
    and ``num_tokens`` what the runner says (default: from the lengths; a padded step has
    ``padded`` tokens); ``cache`` is a token-to-request map an earlier builder of the step
    made (vLLM's model runner hands it to the next group's metadata).
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
    seq = [max(context - int(torch.randint(0, max(context // 8, 1), (1,), generator=gen)),
               lens[r], 1) for r in range(real)] + [0] * (num_reqs - real)
    seq_lens = torch.tensor(seq, dtype=torch.int32)
    # Random block ids in the columns a row's context uses, the null block 0 elsewhere
    # and in padding rows.
    width = -(-MAX_MODEL_LEN // block_size)
    table = torch.randint(1, 1 << 20, (num_reqs, width), generator=gen, dtype=torch.int32)
    used = (seq_lens.to(torch.int64) + block_size - 1) // block_size
    table.masked_fill_(torch.arange(width)[None, :] >= used[:, None], 0)
    slots = torch.full((max(tokens, real_tokens),), PAD_SLOT_ID, dtype=torch.int64)
    for r in range(real):
        start, stop = int(qsl[r]), int(qsl[r + 1])
        pos = torch.arange(seq[r] - (stop - start), seq[r])
        slots[start:stop] = table[r, pos // block_size].to(torch.int64) * block_size \
            + pos % block_size
    dev = torch.device(device)
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(dev), query_start_loc_cpu=qsl, seq_lens=seq_lens.to(dev),
        num_reqs=num_reqs, num_actual_tokens=tokens,
        max_query_len=max(lens, default=0) if max_query_len is None else max_query_len,
        max_seq_len=int(seq_lens.max()) if num_reqs else 0,
        block_table_tensor=table.to(dev), slot_mapping=slots.to(dev),
        seq_lens_cpu_upper_bound=seq_lens, causal=causal,
        is_prefilling=torch.tensor([q > 1 for q in lens], dtype=torch.bool),
        _token_to_req_indices_cache=cache)


def fresh(cam: Any) -> Any:
    """``cam`` without a cached token-to-request map (a step's first builder)."""
    return dataclasses.replace(cam, _token_to_req_indices_cache=None)


def replay_start(gen: torch.Generator, cam: Any, *, length: int | None = None) -> torch.Tensor:
    """A replay start per request (SWA bounded replay): 0 for some, a position inside the
    window or below it for others, on the step's device."""
    seq = cam.seq_lens.cpu().to(torch.int64)
    n = seq.shape[0] if length is None else length
    out = torch.zeros(n, dtype=torch.int32)
    for r in range(min(n, seq.shape[0])):
        if int(seq[r]) > 1 and bool(torch.rand((), generator=gen) < 0.7):
            low = max(int(seq[r]) - 2 * WINDOW, 0)
            out[r] = int(torch.randint(low, int(seq[r]), (1,), generator=gen))
    return out.to(cam.seq_lens.device)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every place two values differ; tensors by shape, stride, storage offset, dtype,
    device and bytes; objects by type and attributes."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
        layout_a = (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype, a.device)
        layout_b = (tuple(b.shape), b.stride(), b.storage_offset(), b.dtype, b.device)
        if layout_a != layout_b:
            return [f"{path}: {layout_a} vs {layout_b}"]
        if a.dtype == torch.bool:
            a, b = a.to(torch.uint8), b.to(torch.uint8)
        if a.numel() and not torch.equal(a, b):
            where = (a != b).nonzero()[:3].tolist()
            shown = ", ".join(f"{tuple(i)}: {a[tuple(i)].item()} vs {b[tuple(i)].item()}"
                              for i in where)
            return [f"{path}: {int((a != b).sum())} of {a.numel()} elements differ ({shown})"]
        return []
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return [d for f in dataclasses.fields(a)
                for d in differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}[{k!r}]")]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, int | float | str | bool | type(None)):
        return [] if a == b else [f"{path}: {a!r} vs {b!r}"]
    if hasattr(a, "__dict__"):
        return differences(vars(a), vars(b), path)
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def views(builder: Any, metadata: Any) -> dict[str, str]:
    """Which builder attribute each returned tensor views (CUDA graphs read them there):
    field name -> attribute name (``""``: none of the builder's)."""
    found = {}
    for field in dataclasses.fields(metadata):
        value = getattr(metadata, field.name)
        if not isinstance(value, torch.Tensor):
            continue
        ptr = value.untyped_storage().data_ptr()
        owners = [name for name, held in vars(builder).items()
                  if isinstance(held, torch.Tensor) and held.untyped_storage().data_ptr() == ptr]
        found[field.name] = ",".join(owners)
    return found


# --------------------------------------------------------------------------- a whole step
@dataclasses.dataclass
class Groups:
    """Two SWA KV-cache groups (DeepSeek-V4-Flash has two) with one attention group each,
    their builders made by vLLM's own ``AttentionGroup.create_metadata_builders`` for
    FlashMLA's SWA backend, as vLLM's CUDA model runner makes them."""

    attn_groups: list[list[Any]]
    kv_cache_config: SimpleNamespace

    def builders(self) -> list[Any]:
        return [groups[0].get_metadata_builder(0) for groups in self.attn_groups]

    def layers(self) -> list[str]:
        return [groups[0].layer_names[0] for groups in self.attn_groups]


def swa_groups(device: torch.device | str = "cpu", *, config: SimpleNamespace | None = None,
               seed: int = 0) -> Groups:
    """Two SWA groups of vLLM's FlashMLA SWA backend on ``device`` (buffers poisoned)."""
    import importlib

    from vllm.v1.worker.utils import AttentionGroup

    backend = importlib.import_module(FLASHMLA).DeepseekSparseSWAFlashMLABackend
    config = vllm_config() if config is None else config
    made = []
    for gid in range(2):
        group = AttentionGroup(backend, [f"model.layers.{gid}.self_attn.swa_cache"], spec(),
                               gid)
        group.create_metadata_builders(config, torch.device(device), None)
        poison(group.get_metadata_builder(0), seed + gid)
        made.append([group])
    return Groups(made, SimpleNamespace(kv_cache_groups=[SimpleNamespace(), SimpleNamespace()]))


def second_group(gen: torch.Generator, cam: Any, block_size: int = BLOCK_SIZE
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The second SWA group's block table and slot mapping for ``cam``'s requests: other
    random blocks in the same columns, the slots of the same positions in them."""
    table = cam.block_table_tensor.cpu()
    other = torch.randint(1, 1 << 20, table.shape, generator=gen, dtype=torch.int32)
    other.masked_fill_(table == 0, 0)
    slots = cam.slot_mapping.cpu().clone()
    qsl, seq = cam.query_start_loc_cpu, cam.seq_lens_cpu_upper_bound
    for r in range(cam.num_reqs):
        start, stop = int(qsl[r]), int(qsl[r + 1])
        pos = torch.arange(int(seq[r]) - (stop - start), int(seq[r]))
        real = slots[start:stop] >= 0
        slots[start:stop][real] = (other[r, pos // block_size].to(torch.int64) * block_size
                                   + pos % block_size)[real]
    device = cam.block_table_tensor.device
    return other.to(device), slots.to(device)


def build_step(groups: Groups, cam: Any,
               second: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict:
    """One step's metadata for both groups through vLLM's model runner V2
    ``build_attn_metadata`` (the second group gets the first group's token-to-request
    map); ``second`` is the second group's block table and slot mapping (default: the
    first's)."""
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

    table, slots = second or (cam.block_table_tensor, cam.slot_mapping)
    return build_attn_metadata(
        attn_groups=groups.attn_groups, num_reqs=cam.num_reqs,
        num_tokens=cam.num_actual_tokens, query_start_loc_gpu=cam.query_start_loc,
        query_start_loc_cpu=cam.query_start_loc_cpu, max_query_len=cam.max_query_len,
        seq_lens=cam.seq_lens, max_seq_len=cam.max_seq_len,
        block_tables=(cam.block_table_tensor, table),
        slot_mappings=torch.stack([cam.slot_mapping, slots]),
        kv_cache_config=groups.kv_cache_config,
        seq_lens_cpu_upper_bound=cam.seq_lens_cpu_upper_bound,
        is_prefilling=cam.is_prefilling)
