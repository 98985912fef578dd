"""The compressed slot mapping's vLLM target: ``get_compressed_slot_mapping`` and its stand-in.

vLLM 0.33.0's ``get_compressed_slot_mapping`` (``compressor_utils``) fills the whole
``out`` buffer with -1 and then runs its kernel; the C4A/C128A builders
(``vllm.models.deepseek_v4.sparse_mla``, ``vllm.models.deepseek_v41.sparse_mla``) and
the indexer builder (``vllm.v1.attention.backends.mla.indexer``) call it at least three
times per step. The fill lives in the function, so the function is what is replaced:
dsv4's kernel writes the fill and the slots in one launch. Each of those modules
from-imported it, so the target names the indexer's module and the others as
``aliases``; the plugin rebinds every one that still holds vLLM's function.

Per call, :class:`CompressedSlotMappingDispatch` builds the policy key from what the
host knows without reading device memory (token count, ``block_table.shape[0]``, the
buffer's rows, block size, compress ratio, DCP world size) and either

* runs :func:`dsv4_kernels.compressed_slot_mapping.prepare`'s launch with the table
  entry's tile (a hit): vLLM's arguments, the same whole buffer and return value; or
* calls vLLM's own function with the very same arguments (a miss, or a call dsv4's
  checks refuse), so the result is upstream's by construction.

Warm-up hook: the indexer builder (``DeepseekV32IndexerMetadataBuilder``). It is built
for every DeepSeek-V4 and V4.1 deployment (its C4A layers have an indexer), while
vLLM sets up the KV cache and before CUDA graphs are captured, on the device of every
builder of the step, and it knows the one deployment fact the compile keys depend on,
``decode_context_parallel_size``. The sparse-MLA builders pass the default DCP world
size 1, so both 1 and the indexer's are warmed; both ``slot_mapping`` dtypes are built
per tile (:func:`dsv4_kernels.compressed_slot_mapping.warmup`). V4 and V4.1 each have
their own sparse-MLA builder class, so hooking one of them would leave the other
deployment to the lazy warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import torch
from dsv4_kernels import compressed_slot_mapping as kernels_csm
from dsv4_policy.kernels import compressed_slot_mapping as policy_csm
from dsv4_policy.kernels.compressed_slot_mapping import Key, Launch, Table

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import Dispatch, Options
from dsv4_vllm.guard import POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Builder, Target

Resolver = Callable[[Key], Launch]

MODULE = "vllm.v1.attention.backends.mla.indexer"
FUNCTION = "get_compressed_slot_mapping"
ALIASES = (
    "vllm.v1.attention.backends.mla.compressor_utils",
    "vllm.models.deepseek_v4.sparse_mla",
    "vllm.models.deepseek_v41.sparse_mla",
)
"""The function's home and the other modules that from-import it (vLLM 0.33.0)."""
BUILDER_CLASS = "DeepseekV32IndexerMetadataBuilder"
PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("num_tokens", REQUIRED),
    ("slot_mapping", REQUIRED),
    ("query_start_loc", REQUIRED),
    ("seq_lens", REQUIRED),
    ("block_table", REQUIRED),
    ("block_size", REQUIRED),
    ("compress_ratio", REQUIRED),
    ("out", None),
    ("dcp_world_size", 1),
    ("cp_interleave", 1),
)
"""``get_compressed_slot_mapping`` in vLLM 0.33.x: names, order, defaults."""
SIGNATURE = Signature(tuple((name, default, POSITIONAL) for name, default in PARAMETERS))
_NAMES = tuple(name for name, _ in PARAMETERS)
_DEFAULTS = tuple(default for _, default in PARAMETERS)
_ARITY = len(PARAMETERS)


def warm_compile_keys(
    arch: str,
    dcp_world_size: int,
    device: torch.device | str,
    *,
    table: Table | None = None,
) -> int:
    """Build every tile of ``compile_keys(table, arch, dcp_world_size)`` on ``device``
    (both slot dtypes each); return how many binaries were new. Logs as every warm-up."""
    keys = sorted(policy_csm.compile_keys(table, arch, dcp_world_size=dcp_world_size))
    started = time.perf_counter()
    compiled = kernels_csm.warmup(keys, device) if keys else 0
    logger.info(
        "dsv4 warm-up: %d compressed slot mapping compile key(s) for %s, dcp_world_size=%d "
        "on %s; %d compiled in %.2f s", len(keys), arch, dcp_world_size, device, compiled,
        time.perf_counter() - started,
    )
    return compiled


class Decision(NamedTuple):
    """A table hit for one call shape: the prepared launch and its warm-up key."""

    launch: Launch
    run: Callable[..., torch.Tensor]
    arch: str
    dcp_world_size: int


class CompressedSlotMappingDispatch(Dispatch):
    """Drop-in for vLLM's ``get_compressed_slot_mapping``: table hits run dsv4's kernel.

    ``resolve``, ``arch_of`` and ``warm`` are injectable so the decision can be tested
    without a GPU; ``table`` None is the shipped table.
    """

    policy = policy_csm
    label = "compressed slot mapping"
    deployment_fields = ("dcp_world_size",)
    default_warm = staticmethod(warm_compile_keys)

    def __init__(self, original: Any, **options: Unpack[Options]) -> None:
        super().__init__(original, **options)
        # inspect.signature(dispatch) is vLLM's function's signature.
        self.__wrapped__ = original
        self._prepared: dict[tuple[int, int], Callable[..., torch.Tensor]] = {}

    def __repr__(self) -> str:
        return f"CompressedSlotMappingDispatch({self.original!r})"

    def on_builder_ready(self, dcp_world_size: int, device: torch.device) -> None:
        """After vLLM built an indexer builder: warm DCP 1 (the sparse-MLA builders'
        calls) and the deployment's DCP world size (the indexer's)."""
        arch = self.arch_of(device)
        if arch is None:
            return
        for dcp in dict.fromkeys((1, dcp_world_size)):
            self.warm_once(arch, (dcp,), device)

    # -- per call ---------------------------------------------------------------------

    @staticmethod
    def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """vLLM's ten arguments in order, or None when the call cannot be read for sure."""
        if len(args) > _ARITY:
            return None
        values = list(args) + list(_DEFAULTS[len(args):])
        for name, value in kwargs.items():
            try:
                index = _NAMES.index(name)
            except ValueError:
                return None
            if index < len(args):
                return None
            values[index] = value
        return tuple(values)

    @staticmethod
    def _shape(values: tuple[Any, ...]) -> tuple[Any, ...]:
        (num_tokens, _slots, query_start_loc, _seq, block_table, block_size, ratio, out,
         dcp, _interleave) = values
        rows = num_tokens if out is None else out.shape[0]
        return (query_start_loc.get_device(), ratio, block_size, dcp, block_table.shape[0],
                num_tokens, rows)

    def _decide(self, device: torch.device, ratio: Any, block_size: Any, dcp: Any,
                num_reqs: int, num_tokens: Any, rows: Any) -> Decision | None:
        arch = self.arch_of(device)
        ints = (ratio, block_size, dcp, num_tokens, rows)
        if arch is None or not all(type(v) is int for v in ints):
            return None
        try:
            launch = self._resolve(Key(arch, ratio, block_size, dcp, num_reqs, num_tokens,
                                       rows))
        except Exception:
            logger.warning("dsv4: could not resolve a compressed slot mapping launch for %s; "
                           "using vLLM's function", (arch, *ints, num_reqs), exc_info=True)
            return None
        if launch.source == "baseline":
            return None
        tile = launch.compile_key()
        run = self._prepared.get(tile)
        if run is None:
            run = self._prepared[tile] = kernels_csm.prepare(*tile)
        return Decision(launch, run, arch, dcp)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._arguments(args, kwargs) if self.enabled else None
        if values is not None:
            try:
                shape = self._shape(values)
            except Exception:
                shape = None
            if shape is not None:
                decision = self.cached(shape, lambda: self._decide(values[2].device, *shape[1:]))
                if decision is not None and self.warm_lazily(values[2], decision.arch,
                                                             (decision.dcp_world_size,)):
                    try:
                        result = decision.run(*values)
                    except ValueError:
                        # Refused before anything was written: vLLM's function decides.
                        logger.warning("dsv4: the compressed slot mapping kernel refused a "
                                       "call vLLM made; this call shape uses vLLM's function "
                                       "from now on", exc_info=True)
                        self.forget(shape)
                    else:
                        self.hits += 1
                        return result
        self.misses += 1
        return self.original(*args, **kwargs)


def _on_builder_ready(dispatch: CompressedSlotMappingDispatch, builder: Any) -> None:
    if int(getattr(builder, "compress_ratio", 1)) <= 1:
        return  # a DeepSeek-V3.2 indexer: it never calls the function
    dispatch.on_builder_ready(int(getattr(builder, "dcp_world_size", 1)),
                              torch.device(builder.device))


TARGET = Target(
    name="compressed_slot_mapping",
    label="compressed slot mapping",
    module=MODULE,
    attribute=FUNCTION,
    signature=SIGNATURE,
    dispatch=CompressedSlotMappingDispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready),
    aliases=ALIASES,
)
