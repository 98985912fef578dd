"""SWA's vLLM target: ``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL`` and its stand-in.

vLLM 0.33.0's SWA metadata builder looks that module global up on every build and
calls it twice per step (decode rows, then prefill rows). Replacing it with a
:class:`SWADispatch` routes every call through here. Per call it builds the policy
key from the arguments and either

* runs :func:`dsv4_kernels.swa.compute_swa_indices_and_lens` with the table's tile (a
  table hit): same arguments, same outputs, another tile; or
* calls vLLM's own object with the very same arguments (a miss), so the result is
  upstream's by construction.

Everything else vLLM uses on the object (``register_warmup``, ``warmup``,
``compile``, ``CompileKey``, ...) is forwarded to vLLM's own object. Anything the
wrapper cannot read with certainty is a miss. Decisions are cached per call shape.

vLLM builds ``DeepseekSparseSWAMetadataBuilder`` while it sets up the KV cache, before
CUDA graphs are captured; its constructor knows every fact the SWA compile keys depend
on (the window, the SWA cache block size, the image tokens a prefill row may add, the
device), so that is when :func:`warm_swa_compile_keys` runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, Unpack

import torch
from dsv4_kernels import swa as kernels_swa
from dsv4_policy.kernels import swa as policy_swa
from dsv4_policy.kernels.swa import Key, Launch, Table

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import Dispatch, Options
from dsv4_vllm.guard import KEYWORD, POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Builder, Target

Resolver = Callable[[Key], Launch]

MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
OBJECT = "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL"
BUILDER_CLASS = "DeepseekSparseSWAMetadataBuilder"
POSITIONAL_NAMES = (
    "swa_indices", "swa_lens", "window_size", "index_width", "left_visible", "right_visible",
    "query_start_loc", "seq_lens", "token_to_req_indices", "is_valid_token", "block_table",
    "block_size", "replay_start")
"""``ComputeSWAIndicesAndLensKernel.__call__``'s positional arguments in vLLM 0.33.0."""
ARITY = len(POSITIONAL_NAMES)
SIGNATURE = Signature(
    (*((name, REQUIRED, POSITIONAL) for name in POSITIONAL_NAMES),
     ("num_tokens", REQUIRED, KEYWORD), ("token_offset", REQUIRED, KEYWORD),
     ("has_image", False, KEYWORD)),
    attributes=("register_warmup",),
)
"""``ComputeSWAIndicesAndLensKernel.__call__`` in vLLM 0.33.x (without ``self``): the
wrapper passes the arguments through unchanged and reads some by position."""
KEYWORDS = frozenset({"num_tokens", "token_offset", "has_image"})


def warm_swa_compile_keys(
    arch: str,
    window_size: int,
    block_size: int,
    max_image_tokens: int,
    device: torch.device | str,
    *,
    table: Table | None = None,
) -> int:
    """Compile every SWA compile key of a deployment on ``device``; return how many were new.

    The keys are ``dsv4_policy.kernels.swa.compile_keys`` for the deployment (the baseline's
    and every reachable entry's, per ``has_image`` the deployment uses). Logs the key
    count, the compile count and the time, as the C128A warm-up does.
    """
    keys = sorted(policy_swa.compile_keys(table, arch, window_size=window_size,
                                          block_size=block_size,
                                          max_image_tokens=max_image_tokens))
    started = time.perf_counter()
    compiled = kernels_swa.warmup(keys, device) if keys else 0
    logger.info(
        "dsv4 warm-up: %d SWA compile key(s) for %s, window_size=%d, block_size=%d, "
        "max_image_tokens=%d on %s; %d compiled in %.2f s",
        len(keys), arch, window_size, block_size, max_image_tokens, device, compiled,
        time.perf_counter() - started,
    )
    return compiled


class Decision(NamedTuple):
    """A table hit for one call shape: the launch and what its warm-up is keyed by."""

    launch: Launch
    arch: str
    deployment: tuple[int, int, int]


class SWADispatch(Dispatch):
    """Drop-in for vLLM's SWA indices-and-lens kernel object: table hits run dsv4's kernel.

    ``resolve`` (``Key -> Launch``), ``arch_of`` (``torch.device -> "smXY" | None``) and
    ``warm`` are injectable so the decision can be tested without a GPU; ``table`` None
    is the shipped SWA table.
    """

    policy = policy_swa
    label = "SWA"
    deployment_fields = ("window_size", "block_size", "max_image_tokens")
    default_warm = staticmethod(warm_swa_compile_keys)

    def __init__(self, original: Any, **options: Unpack[Options]) -> None:
        super().__init__(original, **options)
        # inspect.signature(dispatch) is vLLM's __call__ signature.
        self.__wrapped__ = original.__call__
        self.deployments: dict[tuple[int, int], int] = {}

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this object does not have: vLLM's own API on the object.
        if name == "original":
            raise AttributeError(name)
        return getattr(self.original, name)

    def __repr__(self) -> str:
        return f"SWADispatch({self.original!r})"

    # -- deployment facts, recorded while vLLM starts ---------------------------------

    def on_builder_ready(self, window_size: int, block_size: int, max_image_tokens: int,
                         device: torch.device) -> None:
        """Called after vLLM built an SWA metadata builder: record and warm up."""
        self.deployments[(window_size, block_size)] = max_image_tokens
        self._decisions.clear()
        arch = self.arch_of(device)
        if arch is not None:
            self.warm_once(arch, (window_size, block_size, max_image_tokens), device)

    # -- per call ---------------------------------------------------------------------

    def decide(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Decision | None:
        """A hit's launch, or ``None`` for a miss; cached by the call's shape."""
        try:
            shape = self._shape(args, kwargs)
        except Exception:
            return None
        return self.cached(shape, lambda: self._decide_uncached(args[0].device, *shape[1:]))

    def _decide_uncached(self, device: torch.device, window_size: Any, index_width: Any,
                         block_size: Any, has_image: Any, num_tokens: Any) -> Decision | None:
        arch = self.arch_of(device)
        if arch is None or not isinstance(has_image, bool | int) or has_image not in (0, 1):
            return None
        ints = (window_size, index_width, block_size, num_tokens)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            return None
        try:
            key = Key(arch, window_size, index_width, block_size, int(has_image), num_tokens)
            launch = self._resolve(key)
        except Exception:
            logger.warning("dsv4: could not resolve an SWA launch for %s; using vLLM's kernel",
                           (arch, *ints, has_image), exc_info=True)
            return None
        if launch.source == "baseline" or launch.has_image != bool(has_image):
            return None
        image = self.deployments.get((window_size, block_size))
        if image is None:
            # Not recorded at start-up: warm as for a deployment whose rows are this wide.
            image = max(index_width - window_size, 0)
        return Decision(launch, arch, (window_size, block_size, image))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if (self.enabled and len(args) == ARITY and kwargs.keys() <= KEYWORDS
                and "num_tokens" in kwargs and "token_offset" in kwargs):
            decision = self.decide(args, kwargs)
            if decision is not None and self.warm_lazily(args[0], decision.arch,
                                                         decision.deployment):
                launch = decision.launch
                try:
                    result = kernels_swa.compute_swa_indices_and_lens(
                        *args, **kwargs, tokens_per_program=launch.tokens_per_program,
                        cols_per_program=launch.cols_per_program, num_warps=launch.num_warps)
                except ValueError:
                    # Refused before anything was written: upstream decides what it means.
                    logger.warning("dsv4: the SWA kernel refused a call vLLM made; this "
                                   "call shape uses vLLM's kernel from now on", exc_info=True)
                    self.forget(self._shape(args, kwargs))
                else:
                    self.hits += 1
                    return result
        self.misses += 1
        return self.original(*args, **kwargs)

    @staticmethod
    def _shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        return (args[0].get_device(), args[2], args[3], args[11],
                kwargs.get("has_image", False), kwargs["num_tokens"])


def _on_builder_ready(dispatch: SWADispatch, builder: Any) -> None:
    dispatch.on_builder_ready(builder.window_size, builder.block_size,
                              int(getattr(builder, "max_image_tokens", 0)),
                              builder.decode_swa_indices.device)


TARGET = Target(
    name="swa",
    label="SWA",
    module=MODULE,
    attribute=OBJECT,
    signature=SIGNATURE,
    dispatch=SWADispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready),
)
