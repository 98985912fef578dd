"""C128A's vLLM target: ``build_c128a_topk_metadata`` and its stand-in.

vLLM's metadata builder looks the function up as a module global on every call, so
replacing that global with a :class:`C128ADispatch` routes every C128A metadata
build through here. Per call it builds the policy ``Key`` from the arguments and
either

* runs ``dsv4_kernels`` with the table's tile (a table hit), keeping vLLM's width
  and the buffers' capacity row stride, or
* calls vLLM's original function with the very same arguments, in the same
  positional/keyword form (a miss), so the result is upstream's by construction.

Anything the wrapper cannot read with certainty is a miss. The decision is cached
per call shape, so the hot path is a tuple lookup plus the launch.

The warm-up (:func:`warm_compile_keys`) compiles every tile the table can ask for at a
deployment's ``max_model_len``, when vLLM builds ``DeepseekV4SparseMLAMetadataBuilder``
(before CUDA-graph capture): a Triton compile in the middle of serving, on one
tensor-parallel rank, can stall the whole engine.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import torch
from dsv4_kernels import c128a as kernels_c128a
from dsv4_policy.kernels import c128a as policy_c128a
from dsv4_policy.kernels.c128a import Key, Launch, Table

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import Dispatch, Options, device_token
from dsv4_vllm.guard import POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Builder, Target

Resolver = Callable[[Key], Launch]

MODULE = "vllm.models.deepseek_v4.sparse_mla"
FUNCTION = "build_c128a_topk_metadata"
BUILDER_CLASS = "DeepseekV4SparseMLAMetadataBuilder"
EXPECTED_PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("positions", REQUIRED),
    ("compress_ratio", REQUIRED),
    ("num_decode_tokens", REQUIRED),
    ("token_to_req_indices", REQUIRED),
    ("block_table", REQUIRED),
    ("block_size", REQUIRED),
    ("slot_mapping", REQUIRED),
    ("global_decode_buffer", REQUIRED),
    ("decode_lens_buffer", REQUIRED),
    ("prefill_buffer", REQUIRED),
    ("max_compressed_tokens", 8192),
)
"""``build_c128a_topk_metadata`` in vLLM 0.33.x: names, order and defaults (all
positional-or-keyword)."""
SIGNATURE = Signature(tuple((name, default, POSITIONAL) for name, default in EXPECTED_PARAMETERS))
EXPECTED_BUILDER_INIT = ("self", "kv_cache_spec", "layer_names", "vllm_config", "device")
"""``DeepseekV4SparseMLAMetadataBuilder.__init__`` in vLLM 0.33.x, for the warm-up hook."""

_NAMES = tuple(name for name, _ in EXPECTED_PARAMETERS)
_WIDTH_DEFAULT = EXPECTED_PARAMETERS[-1][1]
_KWARGS_AFTER = tuple(frozenset(_NAMES[i:]) for i in range(len(_NAMES) + 1))


def warm_compile_keys(
    arch: str,
    max_model_len: int,
    device: torch.device | str,
    *,
    table: Table | None = None,
) -> int:
    """Compile each tile of ``compile_keys(table, arch, max_model_len)`` on ``device``.

    ``table=None`` means the shipped table. Returns how many binaries were new to
    this process (tiles compiled earlier count 0; so does everything under
    ``TRITON_INTERPRET=1``) and logs the key count, the compile count and the time.
    """
    if not isinstance(max_model_len, int) or max_model_len <= 0:
        raise ValueError(
            f"warm_compile_keys: max_model_len: got {max_model_len!r}; expected a "
            "positive int (vLLM's resolved --max-model-len)"
        )
    keys = sorted(policy_c128a.compile_keys(table, arch, max_model_len))
    started = time.perf_counter()
    compiled = kernels_c128a.warmup(keys, device) if keys else 0
    logger.info(
        "dsv4 warm-up: %d C128A compile key(s) for %s, max_model_len=%d on %s; "
        "%d compiled in %.2f s",
        len(keys), arch, max_model_len, device, compiled, time.perf_counter() - started,
    )
    return compiled


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The 11 arguments in declaration order, or ``None`` when the call is unusual.

    An unusual call (too many arguments, an unknown or repeated keyword, a missing
    one) goes to the original function, which raises exactly as upstream would.
    """
    count = len(args)
    if count == 10 and len(kwargs) == 1 and "max_compressed_tokens" in kwargs:
        return (*args, kwargs["max_compressed_tokens"])  # how vLLM 0.33.0 calls it
    if not kwargs and count == len(_NAMES):
        return args
    if count > len(_NAMES) or not kwargs.keys() <= _KWARGS_AFTER[count]:
        return None
    tail = []
    for name in _NAMES[count:]:
        if name in kwargs:
            tail.append(kwargs[name])
        elif name == "max_compressed_tokens":
            tail.append(_WIDTH_DEFAULT)
        else:
            return None
    return (*args, *tail)


class Decision(NamedTuple):
    """A table hit for one call shape: the launch and what its warm-up is keyed by.

    ``build`` is the kernel wrapper with the launch's tile already checked
    (:func:`dsv4_kernels.c128a.prepare`), so a hit pays only the data-argument checks
    and the launch.
    """

    launch: Launch
    arch: str
    deployment: tuple[int]
    warm_token: tuple[str, int, str]
    build: Callable[..., Any]
    width: int
    view_width: int


@functools.lru_cache(maxsize=256)
def _prepared(tpp: int, cpp: int, warps: int, split: bool) -> Callable[..., Any]:
    """One prepared wrapper per tile (a deployment uses a handful)."""
    return kernels_c128a.prepare(tpp, cpp, warps, split)


class C128ADispatch(Dispatch):
    """Drop-in for ``build_c128a_topk_metadata``: table hits run dsv4 kernels.

    ``resolve`` (a ``Key -> Launch`` function) and ``arch_of`` (a ``torch.device ->
    "smXY" | None`` function) are injectable, so the decision can be tested on a
    machine without a GPU. ``table`` is the policy table; ``None`` is the shipped one.
    """

    policy = policy_c128a
    label = "C128A"
    deployment_fields = ("max_model_len",)
    default_warm = staticmethod(warm_compile_keys)

    def __init__(self, original: Callable[..., Any], **options: Unpack[Options]) -> None:
        functools.update_wrapper(self, original)
        super().__init__(original, **options)
        self.max_model_lens: dict[tuple[int, int], int] = {}

    # -- deployment facts, recorded while vLLM starts ---------------------------------

    def record_deployment(self, max_model_len: int, compress_ratio: int) -> int:
        """Remember the real ``max_model_len`` behind buffers of its capacity.

        Without it the key uses ``capacity * compress_ratio``, whose policy capacity
        is the same (capacity is a multiple of 128), so both pick the same entries
        unless a table keys on ``max_model_len`` more finely than capacity does.
        """
        capacity = policy_c128a.capacity(max_model_len, compress_ratio)
        self.max_model_lens[(capacity, compress_ratio)] = max_model_len
        self._decisions.clear()
        return capacity

    def on_builder_ready(
        self, compress_ratio: int, max_model_len: int, device: torch.device
    ) -> None:
        """Called after vLLM built a DSV4 metadata builder: record and warm up."""
        if compress_ratio != 128:
            return
        self.record_deployment(max_model_len, compress_ratio)
        arch = self.arch_of(device)
        if arch is not None:
            self.warm_once(arch, (max_model_len,), device)

    # -- per call ---------------------------------------------------------------------

    def decide(self, values: tuple[Any, ...]) -> Decision | None:
        """A hit's launch (with what its warm-up needs), or ``None`` for a miss.

        Cached by the call's shape and device index, so a repeated shape costs a few
        attribute reads and one dict lookup. Arguments that are not what vLLM passes
        (not tensors, say) are a miss: the original then fails as upstream would.
        """
        try:
            positions = values[0]
            shape = (
                positions.get_device(),
                values[1],
                values[9].shape[1],
                values[7].shape[1],
                values[10],
                positions.shape[0],
                values[2],
                values[5],
            )
        except Exception:
            return None
        return self.cached(shape, lambda: self._decide_uncached(positions.device, *shape[1:]))

    def _decide_uncached(
        self,
        device: torch.device,
        compress_ratio: int,
        capacity: int,
        decode_capacity: int,
        width: int,
        num_tokens: int,
        num_decode: int,
        block_size: int,
    ) -> Decision | None:
        arch = self.arch_of(device)
        if arch is None:
            return None
        ints = (compress_ratio, capacity, width, num_tokens, num_decode, block_size)
        if decode_capacity != capacity or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in ints
        ):
            return None
        if compress_ratio <= 0 or not 0 <= num_decode <= num_tokens or width <= 0:
            return None
        max_model_len = self.max_model_lens.get(
            (capacity, compress_ratio), capacity * compress_ratio
        )
        try:
            if policy_c128a.capacity(max_model_len, compress_ratio) != capacity:
                return None
            key = Key(
                arch=arch,
                compress_ratio=compress_ratio,
                max_model_len=max_model_len,
                # Any max_seq_len in (w/2 * r, (w + 1) * r) gives vLLM's width w; w * r is
                # inside that class, capped by max_model_len, which keeps the width
                # when w is the capacity (the check below makes sure).
                max_seq_len=min(width * compress_ratio, max_model_len),
                num_decode_tokens=num_decode,
                num_prefill_tokens=num_tokens - num_decode,
                block_size=block_size,
            )
            if policy_c128a.active_width(key) != width:
                return None
            launch = self._resolve(key)
        except Exception:
            logger.warning(
                "dsv4: could not resolve a C128A launch for %s; using vLLM's kernel",
                (arch, compress_ratio, capacity, width, num_tokens, num_decode, block_size),
                exc_info=True,
            )
            return None
        if (
            launch.source == "baseline"
            or launch.width != width
            or launch.row_stride != capacity
        ):
            return None
        try:
            build = _prepared(launch.tokens_per_program, launch.cols_per_program,
                              launch.num_warps, launch.split_width)
        except ValueError:
            logger.warning("dsv4: the kernel refuses the tile of %s; using vLLM's kernel",
                           launch.source, exc_info=True)
            return None
        return Decision(launch, arch, (max_model_len,), (arch, max_model_len, device_token(device)),
                        build, launch.width, launch.decode_view_width)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.enabled:
            values = _bind(args, kwargs)
            decision = None if values is None else self.decide(values)
            if decision is not None and (
                decision.warm_token in self._warmed
                or self.warm_lazily(values[0], decision.arch, decision.deployment)
            ):
                self.hits += 1
                return decision.build(*values[:10], decision.width, decision.view_width)  # type: ignore[index]
        self.misses += 1
        return self.original(*args, **kwargs)


def _on_builder_ready(dispatch: C128ADispatch, builder: Any) -> None:
    if builder.compress_ratio == 128:
        dispatch.on_builder_ready(builder.compress_ratio, builder.model_config.max_model_len,
                                  builder.c128a_prefill_buffer.device)


TARGET = Target(
    name="c128a",
    label="C128A",
    module=MODULE,
    attribute=FUNCTION,
    signature=SIGNATURE,
    dispatch=C128ADispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready, EXPECTED_BUILDER_INIT),
)
