"""vLLM 0.33.0's own DeepSeek-V4 per-step metadata build, for a DeepSeek-V4-Flash deployment.

Everything that runs per step is vLLM's code: the KV-cache specs come from the layers'
own ``get_kv_cache_spec`` methods, the KV-cache groups from vLLM's own
``get_kv_cache_groups``, the metadata builders are vLLM's classes built by vLLM's own
``AttentionGroup.create_metadata_builders``, and one step is vLLM's own model-runner-V2
``build_attn_metadata`` over real ``CommonAttentionMetadata`` objects. Only the config
objects are minimal (``SimpleNamespace`` carrying the fields the code reads; the list is
in the README), and the batch tensors are made here the way vLLM's model runner V2 lays
them out.

Layout (DeepSeek-V4-Flash; where each number comes from):

- 43 decoder layers (``DeepseekV4Config.num_hidden_layers``, transformers): 2
  sliding-window-only, 21 C4A (CSA, compress ratio 4, with a lightning indexer), 20 C128A
  (HCA, compress ratio 128); counts from the project's CONTEXT.md ("The DeepSeek-V4
  step"), order from the model card's description "CSA/HCA interleaving after the first
  sliding-window layers": ratios ``[0, 0, 4, 128, 4, ..., 128, 4]`` plus one MTP layer
  (ratio 0) as ``get_compress_ratios`` appends. The order does not change any builder's
  work (builders are per group, not per layer).
- sliding window 128 and ``index_topk`` 512: ``DeepseekV4Config`` defaults (transformers
  ``configuration_deepseek_v4.py``).
- block sizes: KV-cache ``block_size`` 256 (``DeepseekV4SparseMLABackend`` and
  ``DeepseekV4IndexerBackend`` support only 256-token kernel blocks); SWA cache 64
  (``DeepseekV4SWACache`` default); compressor state 4 for C4 and 8 for C128
  (``CompressorStateCache.__init__``); ``kv_cache_dtype`` ``fp8_ds_mla`` (the serve
  table's keep-rule).
- per-layer KV caches: every layer has an SWA cache; a C4A layer has its compressed MLA
  cache, its compressor state, the indexer's K cache and the indexer compressor's state;
  a C128A layer has its compressed MLA cache and its compressor state (167 caches).
  vLLM groups them (block-outermost layout, which DeepSeek-V4's indexer requires) into 5
  KV-cache groups: two SWA groups (22 + 21 layers), one compressed group (21 C4A + 21
  indexer + 20 C128A caches), C4 compressor states (42) and C128 compressor states (20).
  Per (backend, layer spec) in a group there is one builder, 8 per step:
  ``DeepseekSparseSWAFlashMLAMetadataBuilder`` x2 (SWA, one per SWA group),
  ``DeepseekV4FlashMLAMetadataBuilder`` for C4A and for C128A (the C128A top-k metadata
  and compressed slot mapping), ``DeepseekV32IndexerMetadataBuilder`` (the C4A
  indexer), ``CompressorMetadataBuilder`` x3 (C4 attention and indexer compressor
  states, C128 compressor state).
- TP: ``tensor_parallel_size`` 1. Every DeepSeek-V4 KV spec has ``max_tp_shards=1`` (KV
  replicated), so each TP rank builds the same metadata; the only TP-dependent builder
  code is the indexer's prefill row sharding, taken only on vLLM's CUDA platform with
  TP > 1 (``--tp`` sets it).
- deployment: ``max_model_len`` 1,048,576 (the model's ``max_position_embeddings``),
  ``max_num_batched_tokens`` 8192, ``max_num_seqs`` 512, no speculative decoding, model
  runner V2 (vLLM 0.33.0's default).

Two stand-ins are applied only where vLLM cannot provide the object (both recorded in
every result, ``shims``): without vLLM's compiled FlashMLA, ``sparse_swa.get_mla_metadata``
is vLLM's raising placeholder, and the SWA builder calls it for every decode step; the
shim returns ``(FlashMLASchedMeta(), None)`` as FlashMLA's own Python function does (an
empty plan object). Without a platform that implements ``num_compute_units`` (vLLM's
``UnspecifiedPlatform`` on a runner with vLLM's Python sources only), the indexer
builder's constructor cannot size a buffer that only DeepGEMM reads; the shim answers
the device's SM count. Neither runs a kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

# ----------------------------------------------------------------------------- layout
NUM_LAYERS = 43
NUM_MTP_LAYERS = 1
SLIDING_WINDOW = 128
INDEX_TOPK = 512
HEAD_DIM = 512
INDEX_HEAD_DIM = 128
QUANT_BLOCK = 128
KV_BLOCK_SIZE = 256
SWA_BLOCK_SIZE = 64
KV_CACHE_DTYPE = "fp8_ds_mla"
KV_LAYOUT = "BLNHC"
"""vLLM resolves one block-outermost layout; DeepSeek-V4's indexer supports BLHNC/BLNHC."""


def compress_ratios() -> list[int]:
    """Per-decoder-layer compress ratios: 2 SWA-only, then C4A/C128A interleaved."""
    ratios = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(2, NUM_LAYERS)]
    assert (ratios.count(0), ratios.count(4), ratios.count(128)) == (2, 21, 20)
    return ratios


@dataclass(frozen=True)
class Deployment:
    """The serving configuration the builders are made for."""

    max_model_len: int = 1 << 20
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 512
    tensor_parallel_size: int = 1

    @property
    def workspace_factor(self) -> int:
        # VllmConfig.__post_init__: 5 when max_model_len <= 256K, else 2.
        return 5 if self.max_model_len <= 256 * 1024 else 2


FLASH = Deployment()
TINY = Deployment(max_model_len=4096, max_num_batched_tokens=160, max_num_seqs=8)
"""What the CPU check builds: the same layout, at sizes the Triton interpreter can run."""


def vllm_config(dep: Deployment) -> SimpleNamespace:
    """A minimal VllmConfig: only the fields vLLM's grouping and builders read."""
    from vllm.config import AttentionConfig
    from vllm.config.compilation import CUDAGraphMode

    ratios = compress_ratios()
    hf_config = SimpleNamespace(
        model_type="deepseek_v4",
        num_hidden_layers=NUM_LAYERS,
        num_nextn_predict_layers=NUM_MTP_LAYERS,
        compress_ratios=ratios + [0] * NUM_MTP_LAYERS,
        sliding_window=SLIDING_WINDOW,
        index_topk=INDEX_TOPK,
    )
    cache_config = SimpleNamespace(block_size=KV_BLOCK_SIZE, cache_dtype=KV_CACHE_DTYPE,
                                   kv_cache_layout=KV_LAYOUT)

    def resolved_layout() -> Any:
        from vllm.config.cache import _layout_from_name

        return _layout_from_name(cache_config.kv_cache_layout)

    cache_config.get_resolved_kv_cache_layout = resolved_layout
    return SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=dep.max_model_len, hf_config=hf_config,
                                     architectures=["DeepseekV4ForCausalLM"]),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=dep.max_num_batched_tokens, max_num_seqs=dep.max_num_seqs,
            async_scheduling=False, disable_hybrid_kv_cache_manager=False),
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1,
            tensor_parallel_size=dep.tensor_parallel_size, cp_kv_cache_interleave_size=1),
        attention_config=AttentionConfig(sparse_mla_prefill_workspace_factor=dep.workspace_factor),
        compilation_config=SimpleNamespace(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE),
        cache_config=cache_config,
        speculative_config=None,
        num_speculative_tokens=0,
        use_v2_model_runner=True,
    )


def config_fields(config: SimpleNamespace) -> dict[str, list[str]]:
    """Which fields the minimal config carries (for the README and the results)."""
    out: dict[str, list[str]] = {}
    for name, value in vars(config).items():
        if isinstance(value, SimpleNamespace):
            out[name] = sorted(k for k in vars(value) if not callable(getattr(value, k)))
        elif name == "attention_config":
            out[name] = ["vllm.config.AttentionConfig (sparse_mla_prefill_workspace_factor)"]
        else:
            out[name] = []
    out["model_config.hf_config"] = sorted(vars(config.model_config.hf_config))
    return out


# ----------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class LayerCache:
    name: str
    spec: Any
    backend: type
    role: str


def _swa_backend() -> type:
    """The SWA backend the CUDA FlashMLA attention layer declares (``swa_backend_cls``)."""
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention

    return DeepseekV4FlashMLAAttention.swa_backend_cls


def layer_caches(config: SimpleNamespace) -> list[LayerCache]:
    """Every KV cache of the model, its spec from the layer class's own ``get_kv_cache_spec``.

    The layer objects are not built (that needs weights and a model context); each spec
    method is called on a namespace holding the attributes the layer's ``__init__`` sets.
    """
    from vllm.models.deepseek_v4.attention import (
        DeepseekV4Attention,
        DeepseekV4IndexerCache,
        _resolve_dsv4_kv_cache_dtype,
    )
    from vllm.models.deepseek_v4.compressor import CompressorBackend, CompressorStateCache
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention
    from vllm.v1.attention.backends.mla.indexer import DeepseekV4IndexerBackend
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache

    cache_config = config.cache_config
    kv_dtype, kv_torch_dtype = _resolve_dsv4_kv_cache_dtype(True, KV_CACHE_DTYPE, None)
    swa_backend = _swa_backend()
    attn_backend = DeepseekV4FlashMLAAttention.backend_cls
    out: list[LayerCache] = []

    def state_cache(prefix: str, ratio: int, head_dim: int) -> LayerCache:
        coff = 1 + (ratio == 4)  # DeepseekCompressor: overlap for C4
        state = SimpleNamespace(block_size=4 if ratio == 4 else 8, state_dim=2 * coff * head_dim,
                                dtype=torch.float32, sliding_window=coff * ratio)
        return LayerCache(f"{prefix}.state_cache",
                          CompressorStateCache.get_kv_cache_spec(state, config),
                          CompressorBackend, f"c{ratio}-state")

    for i, ratio in enumerate(compress_ratios()):
        prefix = f"model.layers.{i}.self_attn"
        swa = SimpleNamespace(cache_config=cache_config, bounded_replay=False,
                              block_size=SWA_BLOCK_SIZE, head_dim=HEAD_DIM, dtype=kv_torch_dtype,
                              window_size=SLIDING_WINDOW, packed_bytes_per_token=584,
                              packed_page_alignment=576, packed_block_stride_alignment=None)
        out.append(LayerCache(f"{prefix}.swa_cache",
                              DeepseekV4SWACache.get_kv_cache_spec(swa, config), swa_backend,
                              "swa"))
        if ratio <= 1:
            continue
        attn = SimpleNamespace(compress_ratio=ratio, kv_cache_dtype=kv_dtype, head_dim=HEAD_DIM,
                               kv_cache_torch_dtype=kv_torch_dtype)
        out.append(LayerCache(prefix, DeepseekV4Attention.get_kv_cache_spec(attn, config),
                              attn_backend, f"c{ratio}a"))
        out.append(state_cache(f"{prefix}.compressor", ratio, HEAD_DIM))
        if ratio == 4:
            index = SimpleNamespace(
                cache_config=cache_config, compress_ratio=ratio, dtype=torch.uint8,
                head_dim=INDEX_HEAD_DIM + INDEX_HEAD_DIM // QUANT_BLOCK * 4)
            out.append(LayerCache(f"{prefix}.indexer.k_cache",
                                  DeepseekV4IndexerCache.get_kv_cache_spec(index, config),
                                  DeepseekV4IndexerBackend, "indexer"))
            out.append(state_cache(f"{prefix}.indexer.compressor", ratio, INDEX_HEAD_DIM))
    return out


# ----------------------------------------------------------------------------- builders
@dataclass
class Builders:
    """One deployment's KV-cache groups, attention groups and vLLM's builders for them."""

    config: SimpleNamespace
    groups: list[Any]
    attn_groups: list[list[Any]]
    kv_cache_config: SimpleNamespace
    device: torch.device

    def labelled(self) -> list[tuple[str, Any]]:
        """``(label, builder)`` in the order vLLM builds them each step."""
        out = []
        for gid, groups in enumerate(self.attn_groups):
            for group in groups:
                out.append((builder_label(gid, group), group.get_metadata_builder(0)))
        return out


def builder_label(gid: int, group: Any) -> str:
    spec = group.kv_cache_spec
    name = type(group.get_metadata_builder(0)).__name__.replace("MetadataBuilder", "")
    ratio = getattr(spec, "tokens_per_state", 1)
    detail = f"ratio{ratio}" if ratio > 1 else f"head{spec.head_size}"
    return f"g{gid}:{name}:{detail}"


def make_builders(dep: Deployment, device: torch.device | str) -> Builders:
    """vLLM's groups and builders for ``dep`` on ``device``, as vLLM's runner makes them."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs
    from vllm.v1.worker.utils import AttentionGroup

    device = torch.device(device)
    config = vllm_config(dep)
    caches = layer_caches(config)
    by_name = {c.name: c for c in caches}
    groups = get_kv_cache_groups(config, {c.name: c.spec for c in caches})
    attn_groups: list[list[Any]] = []
    for gid, group in enumerate(groups):
        # GPUModelRunner.initialize_attn_backend: one attention group per (backend, spec).
        keyed: dict[tuple[str, Any], list[str]] = {}
        for name in group.layer_names:
            spec = group.kv_cache_spec
            if isinstance(spec, UniformTypeKVCacheSpecs):
                spec = spec.kv_cache_specs[name]
            keyed.setdefault((by_name[name].backend.full_cls_name(), spec), []).append(name)
        made = []
        for (_, spec), names in keyed.items():
            made.append(AttentionGroup(by_name[names[0]].backend, names, spec, gid))
        with vllm_shims():
            for attn_group in made:
                attn_group.create_metadata_builders(config, device, None)
        attn_groups.append(made)
    return Builders(config, groups, attn_groups, SimpleNamespace(kv_cache_groups=groups), device)


def describe(builders: Builders) -> list[dict[str, Any]]:
    """The groups and builders, for the results and the README."""
    out = []
    for gid, (group, attn_groups) in enumerate(zip(builders.groups, builders.attn_groups,
                                                   strict=True)):
        spec = group.kv_cache_spec
        out.append({
            "group": gid, "layers": len(group.layer_names),
            "block_size": spec.block_size, "spec": type(spec).__name__,
            "builders": [{"label": builder_label(gid, g),
                          "class": f"{type(g.get_metadata_builder(0)).__module__}."
                                   f"{type(g.get_metadata_builder(0)).__qualname__}",
                          "backend": g.backend.full_cls_name(), "layers": len(g.layer_names),
                          "spec": type(g.kv_cache_spec).__name__,
                          "tokens_per_state": getattr(g.kv_cache_spec, "tokens_per_state", 1),
                          "head_size": g.kv_cache_spec.head_size}
                         for g in attn_groups],
        })
    return out


# ----------------------------------------------------------------------------- shims
SHIMS: dict[str, str] = {}
"""The stand-ins :func:`vllm_shims` applied in this process, with the reason."""


@contextlib.contextmanager
def vllm_shims() -> Iterator[dict[str, str]]:
    """Supply the two objects vLLM cannot without its compiled extensions / a platform.

    Each is installed only when vLLM's own object is missing or raising, and restored on
    exit. See the module docstring.
    """
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.mla import indexer, sparse_swa
    from vllm.v1.attention.ops import flashmla

    undo: list[Callable[[], None]] = []
    if sparse_swa.get_mla_metadata is flashmla._raise_flashmla_unavailable:
        original = sparse_swa.get_mla_metadata

        def get_mla_metadata(*_args: Any, **_kwargs: Any) -> tuple[Any, None]:
            return flashmla.FlashMLASchedMeta(), None

        sparse_swa.get_mla_metadata = get_mla_metadata
        undo.append(lambda: setattr(sparse_swa, "get_mla_metadata", original))
        SHIMS["get_mla_metadata"] = (
            "vLLM's compiled FlashMLA is absent, so sparse_swa.get_mla_metadata is vLLM's "
            "raising placeholder; stand-in returns (FlashMLASchedMeta(), None) like "
            "FlashMLA's Python get_mla_metadata (an empty plan, no kernel)")
    try:
        current_platform.num_compute_units(0)
    except NotImplementedError:
        original_units = indexer.num_compute_units

        def num_compute_units(device_id: int = 0) -> int:
            if torch.cuda.is_available():
                return torch.cuda.get_device_properties(device_id or 0).multi_processor_count
            return torch.get_num_threads()

        indexer.num_compute_units = num_compute_units
        undo.append(lambda: setattr(indexer, "num_compute_units", original_units))
        SHIMS["num_compute_units"] = (
            f"{type(current_platform).__name__}.num_compute_units is not implemented; "
            "stand-in answers the device's SM count (sizes the indexer's DeepGEMM "
            "schedule buffer only)")
    try:
        yield SHIMS
    finally:
        for fn in reversed(undo):
            fn()


# ----------------------------------------------------------------------------- ladder
@dataclass(frozen=True)
class Point:
    """One step: decode requests at a context, prefill chunks, and CUDA-graph padding."""

    name: str
    kind: str
    decode_reqs: int = 0
    decode_ctx: int = 0
    prefills: tuple[tuple[int, int], ...] = ()
    """``(chunk tokens, context after the chunk)`` per prefill request."""
    padded_reqs: int | None = None
    """FULL CUDA-graph padding: the capture size the decode batch is padded to."""

    @property
    def num_reqs(self) -> int:
        return self.decode_reqs + len(self.prefills)

    @property
    def num_tokens(self) -> int:
        return self.decode_reqs + sum(c for c, _ in self.prefills)

    @property
    def batch(self) -> int:
        """The x axis of the plot: tokens in the step (padding included)."""
        return self.padded_reqs or self.num_tokens

    @property
    def context(self) -> int:
        return max([self.decode_ctx] + [c for _, c in self.prefills])


K = 1024
CONTEXTS = {"4K": 4 * K, "128K": 128 * K, "1M": 1 << 20}


def ladder() -> list[Point]:
    """The full ladder (max_model_len 1M, max_num_batched_tokens 8192)."""
    out = []
    for ctx_name, ctx in CONTEXTS.items():
        for t in (1, 8, 64, 256, 512):
            out.append(Point(f"decode-T{t}-ctx{ctx_name}", "decode", t, ctx))
    out += [
        Point("prefill-c2048-ctx2K", "prefill", prefills=((2048, 2048),)),
        Point("prefill-c8192-ctx8K", "prefill", prefills=((8192, 8192),)),
        Point("prefill-c8192-ctx128K", "prefill", prefills=((8192, 128 * K),)),
        Point("mixed-d64-ctx128K-p2048", "mixed", 64, 128 * K, ((2048, 2048),)),
        Point("mixed-d256-ctx4K-p4096-ctx128K", "mixed", 256, 4 * K, ((4096, 128 * K),)),
        Point("mixed-d8-ctx1M-p4x1024", "mixed", 8, 1 << 20,
              ((1024, 1024), (1024, 16 * K), (1024, 64 * K), (1024, 200 * K))),
        Point("padded-d5of8-ctx128K", "padded", 5, 128 * K, padded_reqs=8),
        Point("padded-d60of64-ctx128K", "padded", 60, 128 * K, padded_reqs=64),
        Point("padded-d500of512-ctx4K", "padded", 500, 4 * K, padded_reqs=512),
    ]
    return out


QUICK = ("decode-T1-ctx128K", "decode-T64-ctx128K", "decode-T512-ctx128K",
         "decode-T64-ctx1M", "prefill-c8192-ctx8K", "mixed-d64-ctx128K-p2048",
         "padded-d60of64-ctx128K")


def quick_ladder() -> list[Point]:
    by_name = {p.name: p for p in ladder()}
    return [by_name[n] for n in QUICK]


def tiny_ladder() -> list[Point]:
    """Shapes for the CPU check at the :data:`TINY` deployment (interpreter-sized)."""
    return [
        Point("decode-T1-ctx4K", "decode", 1, 4096),
        Point("decode-T3-ctx300", "decode", 3, 300),
        Point("decode-T5-ctx2K", "decode", 5, 2000),
        Point("prefill-c24-ctx24", "prefill", prefills=((24, 24),)),
        Point("prefill-c16-ctx3K", "prefill", prefills=((16, 3000),)),
        # 136 tokens: past the shipped SWA table's smallest entry (T >= 129), so dsv4's
        # SWA kernel runs on the CPU check too; below it every SWA call is vLLM's.
        Point("prefill-c136-ctx136", "prefill", prefills=((136, 136),)),
        Point("mixed-d3-ctx1K-p9-p7", "mixed", 3, 1000, ((9, 9), (7, 2500))),
        Point("padded-d3of4-ctx1K", "padded", 3, 1000, padded_reqs=4),
        Point("padded-d1of2-ctx4K", "padded", 1, 4096, padded_reqs=2),
    ]


def check_point(point: Point, dep: Deployment) -> None:
    """Refuse a point the deployment could not schedule, with the reason."""
    tokens = point.padded_reqs or point.num_tokens
    if point.padded_reqs is not None and (point.prefills or point.padded_reqs < point.decode_reqs):
        raise ValueError(f"{point.name}: padding applies to decode-only batches of at most "
                         f"padded_reqs requests")
    if tokens > dep.max_num_batched_tokens:
        raise ValueError(f"{point.name}: {tokens} tokens > max_num_batched_tokens "
                         f"{dep.max_num_batched_tokens}")
    if (point.padded_reqs or point.num_reqs) > dep.max_num_seqs:
        raise ValueError(f"{point.name}: more requests than max_num_seqs {dep.max_num_seqs}")
    if point.context > dep.max_model_len:
        raise ValueError(f"{point.name}: context {point.context} > max_model_len "
                         f"{dep.max_model_len}")
    for chunk, ctx in point.prefills:
        if chunk > ctx or chunk < 2:
            raise ValueError(f"{point.name}: a prefill chunk of {chunk} at context {ctx}")


# ----------------------------------------------------------------------------- inputs
@dataclass
class StepInputs:
    """What vLLM's model runner V2 hands ``build_attn_metadata`` for one step."""

    num_reqs: int
    num_tokens: int
    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    max_query_len: int
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor
    max_seq_len: int
    block_tables: tuple[torch.Tensor, ...]
    slot_mappings: torch.Tensor
    positions: torch.Tensor
    is_prefilling: torch.Tensor
    real_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def clone(self) -> StepInputs:
        return dataclasses.replace(
            self, query_start_loc=self.query_start_loc.clone(),
            query_start_loc_cpu=self.query_start_loc_cpu.clone(),
            seq_lens=self.seq_lens.clone(), seq_lens_cpu=self.seq_lens_cpu.clone(),
            block_tables=tuple(t.clone() for t in self.block_tables),
            slot_mappings=self.slot_mappings.clone(), positions=self.positions.clone(),
            is_prefilling=self.is_prefilling.clone(), extra=dict(self.extra))


def block_table_width(spec: Any, config: SimpleNamespace) -> int:
    """The worker's block-table row length for a group, as model runner V2 sizes it."""
    from vllm.v1.worker.block_table import get_block_table_width

    blocks = spec.max_num_blocks_per_req(config, config.model_config.max_model_len)
    return get_block_table_width(blocks, spec.block_size,
                                 token_alignment=spec.block_table_token_alignment)


def make_inputs(point: Point, builders: Builders, gen: torch.Generator) -> StepInputs:
    """Fresh seeded inputs for ``point``, laid out as model runner V2 lays them out.

    Decodes first, then prefills. Under FULL-graph padding (``padded_reqs``) the padding
    requests have query length 0 (``query_start_loc`` repeats the token count), sequence
    length 0, block-table rows of the null block 0 and ``PAD_SLOT_ID`` slots, and the
    padding tokens keep stale positions; ``num_reqs``/``num_tokens`` are the padded counts.
    Block ids are random and distinct within a row; slot mappings follow each group's
    block size (``block_table[req, pos // bs] * bs + pos % bs``).
    """
    from vllm.v1.attention.backends.utils import PAD_SLOT_ID

    dep_len = builders.config.model_config.max_model_len
    device = builders.device
    query_lens = [1] * point.decode_reqs + [c for c, _ in point.prefills]
    seq_lens = []
    for _ in range(point.decode_reqs):
        jitter = int(torch.randint(0, max(point.decode_ctx // 8, 1), (1,), generator=gen))
        seq_lens.append(max(point.decode_ctx - jitter, 2))
    if point.decode_reqs:
        seq_lens[int(torch.randint(0, point.decode_reqs, (1,), generator=gen))] = point.decode_ctx
    seq_lens += [ctx for _, ctx in point.prefills]
    real_reqs, real_tokens = len(query_lens), sum(query_lens)
    num_reqs = point.padded_reqs or real_reqs
    num_tokens = point.padded_reqs or real_tokens
    query_lens += [0] * (num_reqs - real_reqs)
    seq_lens += [0] * (num_reqs - real_reqs)

    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(query_lens, dtype=torch.int32).cumsum(0)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    positions = torch.randint(0, dep_len, (num_tokens,), generator=gen, dtype=torch.int64)
    req_of_token = torch.repeat_interleave(torch.arange(real_reqs),
                                           torch.tensor(query_lens[:real_reqs]))
    for r in range(real_reqs):
        start, stop = int(qsl[r]), int(qsl[r + 1])
        positions[start:stop] = torch.arange(seq_lens[r] - query_lens[r], seq_lens[r])

    # Block tables on the device (at 1M context a row of the C4-state group has 262,144
    # entries): random ids in the used columns, the null block 0 in the rest and in
    # padding rows.
    dev_gen = torch.Generator(device=device)
    dev_gen.manual_seed(int(torch.randint(0, 1 << 62, (1,), generator=gen)))
    seq_dev = seq.to(device)
    req_dev = req_of_token.to(device)
    pos_dev = positions[:real_tokens].to(device)
    tables, slots = [], []
    for group in builders.groups:
        spec = group.kv_cache_spec
        bs = spec.block_size
        width = block_table_width(spec, builders.config)
        table = torch.randint(1, 1 << 20, (num_reqs, width), generator=dev_gen,
                              dtype=torch.int32, device=device)
        used = (seq_dev.to(torch.int64) + bs - 1) // bs
        table.masked_fill_(torch.arange(width, device=device)[None, :] >= used[:, None], 0)
        slot = torch.full((num_tokens,), PAD_SLOT_ID, dtype=torch.int64, device=device)
        slot[:real_tokens] = (table[req_dev, pos_dev // bs].to(torch.int64) * bs + pos_dev % bs)
        tables.append(table)
        slots.append(slot)
    is_prefilling = torch.zeros(num_reqs, dtype=torch.bool)
    is_prefilling[point.decode_reqs:real_reqs] = True
    return StepInputs(
        num_reqs=num_reqs, num_tokens=num_tokens, query_start_loc=qsl.to(device),
        query_start_loc_cpu=qsl, max_query_len=max(query_lens), seq_lens=seq.to(device),
        seq_lens_cpu=seq, max_seq_len=int(seq.max()), block_tables=tuple(tables),
        slot_mappings=torch.stack(slots), positions=positions.to(device),
        is_prefilling=is_prefilling, real_tokens=real_tokens)


_BUILD_ATTN_METADATA: list[Callable[..., dict[str, Any]]] = []


def build_step(builders: Builders, inputs: StepInputs) -> dict[str, Any]:
    """One step's metadata: vLLM's model runner V2 ``build_attn_metadata`` (FULL mode sizes)."""
    if not _BUILD_ATTN_METADATA:
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

        _BUILD_ATTN_METADATA.append(build_attn_metadata)
    return _BUILD_ATTN_METADATA[0](
        attn_groups=builders.attn_groups, num_reqs=inputs.num_reqs,
        num_tokens=inputs.num_tokens, query_start_loc_gpu=inputs.query_start_loc,
        query_start_loc_cpu=inputs.query_start_loc_cpu, max_query_len=inputs.max_query_len,
        seq_lens=inputs.seq_lens, max_seq_len=inputs.max_seq_len,
        block_tables=inputs.block_tables, slot_mappings=inputs.slot_mappings,
        kv_cache_config=builders.kv_cache_config,
        seq_lens_cpu_upper_bound=inputs.seq_lens_cpu, positions=inputs.positions,
        is_prefilling=inputs.is_prefilling)


def per_builder(builders: Builders, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The step's metadata, one entry per builder (its first layer's object)."""
    out = {}
    for gid, groups in enumerate(builders.attn_groups):
        for group in groups:
            out[builder_label(gid, group)] = metadata[group.layer_names[0]]
    return out


# ----------------------------------------------------------------------------- compare
def differences(a: Any, b: Any, path: str = "", seen: set[int] | None = None) -> list[str]:
    """Every place two builder outputs differ; tensors bit for bit (shape, stride, bytes)."""
    seen = set() if seen is None else seen
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
        if (a.shape, a.stride(), a.dtype, a.device) != (b.shape, b.stride(), b.dtype, b.device):
            return [f"{path}: shape/stride/dtype {tuple(a.shape)}/{a.stride()}/{a.dtype} vs "
                    f"{tuple(b.shape)}/{b.stride()}/{b.dtype}"]
        if a.numel() and not torch.equal(_bits(a), _bits(b)):
            bad = int((_bits(a) != _bits(b)).sum())
            return [f"{path}: {bad} of {a.numel()} elements differ"]
        return []
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
    if id(a) in seen:
        return []
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        seen.add(id(a))
        return [d for f in dataclasses.fields(a)
                for d in differences(getattr(a, f.name), getattr(b, f.name),
                                     f"{path}.{f.name}", seen)]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}[{k!r}]", seen)]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]", seen)]
    if isinstance(a, int | float | str | bool | slice | type(None)) or (hasattr(a, "__eq__") and (
            type(a).__eq__ is not object.__eq__)):
        return [] if a == b else [f"{path}: {a!r} vs {b!r}"]
    if hasattr(a, "__dict__"):
        seen.add(id(a))
        return differences(vars(a), vars(b), path, seen)
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return t.contiguous().view(torch.int16 if t.element_size() == 2 else
                                   torch.int32 if t.element_size() == 4 else torch.int64)
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    return t


def tensor_count(value: Any, seen: set[int] | None = None) -> int:
    """How many tensors (and elements) a builder output holds, for the results."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        return 1
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(tensor_count(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(tensor_count(v, seen) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(tensor_count(v, seen) for v in value)
    return 0


# ----------------------------------------------------------------------------- plugin
class PluginSwitch:
    """The plugin off (vLLM as shipped) and on (what ``plugin.register()`` installs).

    ``register()`` runs once; the dispatchers it installs are kept, so switching back on
    re-installs the same objects (with their decision caches and warm-ups), as in a
    serving process where ``register()`` runs once. Off puts vLLM's own objects back.
    Builders made between :meth:`__init__` and :meth:`on` carry the start-up warm-up.
    """

    def __init__(self, arch_of: Callable[[torch.device], str | None] | None = None) -> None:
        import importlib

        from dsv4_vllm import plugin, registry

        self._plugin = plugin
        plugin.unregister()
        kernels = registry.targets()
        # Every module that holds a kernel's object, aliases included: off must put
        # vLLM's own object back in each (a from-import keeps its own name for it).
        self.targets = []
        for target in kernels.values():
            for holder in target.holders:
                try:
                    module = importlib.import_module(holder)
                except ImportError:
                    continue  # the plugin skips it too
                if hasattr(module, target.attribute):
                    self.targets.append((module, target.attribute))
        self.vllm_objects = [getattr(m, n) for m, n in self.targets]
        if not plugin.register({}):
            raise RuntimeError("dsv4_vllm.plugin.register() did not install every launch "
                               "policy (see the dsv4 log lines for why)")
        self.dispatches = {name: plugin.active(name) for name in kernels}
        if arch_of is not None:
            for dispatch in self.dispatches.values():
                dispatch.configure(arch_of=arch_of)  # type: ignore[union-attr]
        self.plugin_objects = [getattr(m, n) for m, n in self.targets]
        self.state = "on"

    def on(self) -> None:
        for (module, name), obj in zip(self.targets, self.plugin_objects, strict=True):
            setattr(module, name, obj)
        self.state = "on"

    def off(self) -> None:
        for (module, name), obj in zip(self.targets, self.vllm_objects, strict=True):
            setattr(module, name, obj)
        self.state = "off"

    def set(self, side: str) -> None:
        self.on() if side == "on" else self.off()

    def counters(self) -> dict[str, int]:
        """``<kernel>_hits`` and ``<kernel>_misses`` of every installed stand-in."""
        found: dict[str, int] = {}
        for name, dispatch in self.dispatches.items():
            found[f"{name}_hits"] = dispatch.hits  # type: ignore[union-attr]
            found[f"{name}_misses"] = dispatch.misses  # type: ignore[union-attr]
        return found

    def close(self) -> None:
        self.on()
        self._plugin.unregister()
        for (module, name), obj in zip(self.targets, self.vllm_objects, strict=True):
            setattr(module, name, obj)


@dataclass
class Sides:
    """The two builder sets of one run: ``off`` made before ``register()``, ``on`` after."""

    off: Builders
    on: Builders
    switch: PluginSwitch
    deployment: Deployment

    def builders(self, side: str) -> Builders:
        return self.on if side == "on" else self.off


def make_sides(dep: Deployment, device: torch.device | str,
               arch_of: Callable[[torch.device], str | None] | None = None) -> Sides:
    from dsv4_vllm import plugin

    plugin.unregister()
    off = make_builders(dep, device)
    switch = PluginSwitch(arch_of)
    on = make_builders(dep, device)
    copy_builder_state(off, on)
    return Sides(off, on, switch, dep)


def copy_builder_state(src: Builders, dst: Builders) -> int:
    """Give ``dst``'s builders the very bytes of ``src``'s persistent tensors.

    vLLM allocates several builder buffers with ``torch.empty`` (the C128A buffers, the
    indexer's DeepGEMM schedule buffer, which nothing writes without DeepGEMM); copying
    them makes both sides start from the same memory, so a comparison sees only what the
    step wrote. Returns how many tensors were copied.
    """
    copied = 0
    for (label, a), (label_b, b) in zip(src.labelled(), dst.labelled(), strict=True):
        assert label == label_b and type(a) is type(b), (label, label_b)
        for name, value in vars(a).items():
            other = getattr(b, name, None)
            if isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor):
                assert value.shape == other.shape and value.dtype == other.dtype, name
                other.copy_(value)
                copied += 1
    return copied


def run_side(sides: Sides, side: str, inputs: StepInputs) -> dict[str, Any]:
    """One step of ``side`` (``"off"``/``"on"``) with its own builders."""
    sides.switch.set(side)
    with vllm_shims():
        return build_step(sides.builders(side), inputs)


def compare_point(sides: Sides, point: Point, gen: torch.Generator
                  ) -> tuple[list[str], dict[str, Any]]:
    """Both sides on the same fresh inputs; every returned tensor compared bit for bit."""
    base = make_inputs(point, sides.off, gen)
    outs = {}
    for side in ("off", "on"):
        outs[side] = per_builder(sides.builders(side), run_side(sides, side, base.clone()))
    if sides.off.device.type == "cuda":
        torch.cuda.synchronize(sides.off.device)
    diffs = differences(outs["off"], outs["on"], "step")
    info = {"builders": list(outs["off"]),
            "tensors": {k: tensor_count(v) for k, v in outs["off"].items()},
            "num_reqs": base.num_reqs, "num_tokens": base.num_tokens,
            "real_tokens": base.real_tokens, "max_seq_len": base.max_seq_len,
            "inputs": input_summary(base)}
    return diffs, info


def input_summary(step: StepInputs) -> dict[str, Any]:
    """Evidence that the inputs are real data (not zeros), for the results."""
    return {
        "block_table_nonzero": [round(int(t.count_nonzero()) / max(t.numel(), 1), 4)
                                for t in step.block_tables],
        "distinct_positions": int(step.positions.unique().numel()),
        "valid_slots": int((step.slot_mappings[0] >= 0).sum()),
        "seq_lens": [int(step.seq_lens_cpu.min()), int(step.seq_lens_cpu.max())],
    }


def negative_control(sides: Sides, point: Point, gen: torch.Generator) -> dict[str, Any]:
    """Flip one element of what the plugin's kernels wrote (the on side's C128A top-k
    indices and SWA indices): the comparison must see each. Each element is put back.

    Shows, on real builder outputs, that :func:`differences` is not vacuous.
    """
    base = make_inputs(point, sides.off, gen)
    outs = {side: per_builder(sides.builders(side), run_side(sides, side, base.clone()))
            for side in ("off", "on")}
    clean = differences(outs["off"], outs["on"], "step")
    checks = []
    for key, fields in (("ratio128", ("c128a_global_decode_topk_indices",
                                      "c128a_prefill_topk_indices")),
                        ("SWA", ("decode_swa_indices", "prefill_swa_indices"))):
        label = next(k for k in outs["on"] if key in k)
        tensor = next((getattr(outs["on"][label], f) for f in fields
                       if getattr(outs["on"][label], f, None) is not None
                       and getattr(outs["on"][label], f).numel()), None)
        if tensor is None:
            checks.append({"builder": label, "detected": False, "reason": "no output"})
            continue
        idx = (0,) * tensor.dim()
        element = tensor[idx].item()
        tensor[idx] = element + 1
        caught = differences(outs["off"], outs["on"], "step")
        tensor[idx] = element
        checks.append({"builder": label, "detected": bool(caught), "reported": caught[:2]})
    return {"clean_differences": clean, "detected": all(c["detected"] for c in checks),
            "checks": checks}
