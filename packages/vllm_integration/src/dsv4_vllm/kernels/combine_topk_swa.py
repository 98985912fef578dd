"""CombineTopkSwaIndices' vLLM target: the function ``combine_topk_swa_indices``.

In every DeepSeek-V4 layer's prefill, vLLM 0.33.0's FlashMLA path
(``vllm/models/deepseek_v4/nvidia/flashmla.py``) calls ``combine_topk_swa_indices``
once per chunk of prefill requests. That function fills its whole output with ``-1``
and then runs ``_COMBINE_TOPK_SWA_INDICES_KERNEL`` on a fixed ``(num_reqs, 256)`` grid.
The stand-in replaces the *function*, not the kernel object: the fill lives in the
function, and :func:`dsv4_kernels.combine_topk_swa.combine_topk_swa_indices` writes it
as part of its one launch. ``flashmla.py`` binds the function by name at import
(``from vllm.models.deepseek_v4.common.ops import combine_topk_swa_indices``), so the
target is that module's global, with ``...common.ops`` and ``...common.ops.cache_utils``
(which hold the same function) as aliases the plugin rebinds too.

Per call the stand-in builds the policy key from what the host knows for free (the
layer's ``compress_ratio``, ``topk``, ``window_size`` and ``max_image_tokens``, whether
visibility tensors are passed, ``len(seq_lens)`` and ``topk_indices.shape[0]``; no
device memory is read) and either

* runs dsv4's kernel with the table entry's tile (a hit): same arguments, same outputs,
  bit for bit on the whole buffers; or
* calls vLLM's own function with the very same arguments (a miss, an unusual call, or a
  call dsv4's argument checks refuse before writing anything), so the result is
  upstream's by construction.

Decisions are cached per call shape. vLLM's own warm-up of its kernel object stays as
it is: every miss still needs those binaries.

Warm-up: the compile keys depend on the GPU arch, the window and the image tokens a
prefill row may add. ``DeepseekSparseSWAMetadataBuilder`` knows all three (and the
device); vLLM builds it while it sets up the KV cache, before CUDA graphs are captured.
The hook sits on that class, which ``flashmla.py`` imports under the same name, and not
on FlashMLA's subclass ``DeepseekSparseSWAFlashMLAMetadataBuilder``: the subclass has no
``__init__`` of its own, so a wrap there would call the parent's ``__init__`` captured
when the hook was installed and bypass the SWA target's hook, which the plugin adds to
the parent afterwards. :func:`_on_builder_ready` warms only when the built builder is the
FlashMLA one (the FlashInfer, ROCm and CPU builders never reach this function).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Unpack

import torch
from dsv4_kernels import combine_topk_swa as kernels_cts
from dsv4_policy.kernels import combine_topk_swa as policy_cts
from dsv4_policy.kernels.combine_topk_swa import Key, Launch, Table

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import Dispatch, Options, device_token
from dsv4_vllm.guard import POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Builder, Target

Resolver = Callable[[Key], Launch]

MODULE = "vllm.models.deepseek_v4.nvidia.flashmla"
ALIASES = ("vllm.models.deepseek_v4.common.ops",
           "vllm.models.deepseek_v4.common.ops.cache_utils")
FUNCTION = "combine_topk_swa_indices"
BUILDER_CLASS = "DeepseekSparseSWAMetadataBuilder"
FLASHMLA_BUILDER_CLASS = "DeepseekSparseSWAFlashMLAMetadataBuilder"
PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("topk_indices", REQUIRED), ("query_start_loc", REQUIRED), ("seq_lens", REQUIRED),
    ("gather_lens", REQUIRED), ("window_size", REQUIRED), ("compress_ratio", REQUIRED),
    ("topk", REQUIRED), ("M", REQUIRED), ("N", REQUIRED), ("out", None),
    ("left_visible", None), ("right_visible", None), ("max_image_tokens", 0),
)
"""``combine_topk_swa_indices`` in vLLM 0.33.x: names, order and defaults (all
positional-or-keyword)."""
SIGNATURE = Signature(tuple((name, default, POSITIONAL) for name, default in PARAMETERS))
_KEYWORDS_AFTER = tuple(frozenset(name for name, _ in PARAMETERS[i:])
                        for i in range(len(PARAMETERS) + 1))


def warm_compile_keys(
    arch: str,
    window_size: int,
    max_image_tokens: int,
    device: torch.device | str,
    *,
    table: Table | None = None,
) -> int:
    """Compile every CombineTopkSwaIndices compile key of a deployment on ``device``.

    The keys are ``compile_keys(table, arch, window_size=..., max_image_tokens=...)``
    (the baseline's and every entry the deployment can reach); ``table`` None is the
    shipped table. Returns how many binaries were new to this process and logs the key
    count, the compile count and the time, as every kernel's warm-up does.
    """
    keys = sorted(policy_cts.compile_keys(table, arch, window_size=window_size,
                                          max_image_tokens=max_image_tokens))
    started = time.perf_counter()
    compiled = kernels_cts.warmup(keys, device) if keys else 0
    logger.info(
        "dsv4 warm-up: %d CombineTopkSwaIndices compile key(s) for %s, window_size=%d, "
        "max_image_tokens=%d on %s; %d compiled in %.2f s",
        len(keys), arch, window_size, max_image_tokens, device, compiled,
        time.perf_counter() - started,
    )
    return compiled


def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The 13 arguments in declaration order, or ``None`` for an unusual call (too many
    arguments, an unknown or repeated keyword, a missing one): vLLM's function then
    raises exactly as upstream would."""
    count = len(args)
    if count > len(PARAMETERS) or not kwargs.keys() <= _KEYWORDS_AFTER[count]:
        return None
    tail = []
    for name, default in PARAMETERS[count:]:
        if name in kwargs:
            tail.append(kwargs[name])
        elif default is REQUIRED:
            return None
        else:
            tail.append(default)
    return (*args, *tail)


class Decision(NamedTuple):
    """A table hit for one call shape: the launch, what its warm-up is keyed by, and
    the kernel entry point with the tile already checked."""

    launch: Launch
    arch: str
    deployment: tuple[int, int]
    warm_token: tuple[Any, ...]
    run: Callable[..., Any]
    shape: Hashable


@functools.lru_cache(maxsize=256)
def _prepared(tpp: int, cpp: int, warps: int) -> Callable[..., Any]:
    """One prepared entry point per tile (a deployment uses a handful)."""
    return kernels_cts.prepare(tpp, cpp, warps)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class CombineTopkSwaDispatch(Dispatch):
    """Drop-in for ``combine_topk_swa_indices``: table hits run dsv4's kernel.

    ``resolve`` (``Key -> Launch``), ``arch_of`` (``torch.device -> "smXY" | None``)
    and ``warm`` are injectable so the decision can be tested without a GPU; ``table``
    None is the shipped table.
    """

    policy = policy_cts
    label = "CombineTopkSwaIndices"
    deployment_fields = ("window_size", "max_image_tokens")
    default_warm = staticmethod(warm_compile_keys)

    def __init__(self, original: Callable[..., Any], **options: Unpack[Options]) -> None:
        functools.update_wrapper(self, original)
        super().__init__(original, **options)

    def __repr__(self) -> str:
        return f"CombineTopkSwaDispatch({self.original!r})"

    def on_builder_ready(self, window_size: int, max_image_tokens: int,
                         device: torch.device) -> None:
        """Called after vLLM built FlashMLA's SWA metadata builder: warm its keys."""
        arch = self.arch_of(torch.device(device))
        if arch is not None:
            self.warm_once(arch, (window_size, max_image_tokens), torch.device(device))

    # -- per call ---------------------------------------------------------------------

    def decide(self, values: tuple[Any, ...]) -> Decision | None:
        """A hit's launch, or ``None`` for a miss; cached by the call's shape.

        The shape is read from tensor attributes and the int arguments only, so a
        repeated shape costs a few attribute reads and one dict lookup, and nothing
        waits for the GPU. Arguments that are not what vLLM passes are a miss.
        """
        try:
            topk_indices = values[0]
            shape = (topk_indices.get_device(), values[5], values[6], values[4], values[12],
                     values[10] is not None, values[2].shape[0], topk_indices.shape[0])
        except Exception:
            return None
        return self.cached(shape, lambda: self._decide_uncached(topk_indices.device, shape))

    def _decide_uncached(self, device: torch.device, shape: tuple[Any, ...]) -> Decision | None:
        _, compress_ratio, topk, window_size, image, has_image, num_reqs, num_tokens = shape
        arch = self.arch_of(device)
        ints = (compress_ratio, topk, window_size, image)
        if arch is None or not all(_is_int(v) for v in ints):
            return None
        try:
            key = Key(arch, compress_ratio, topk, window_size, image, int(has_image), num_reqs,
                      num_tokens)
            launch = self._resolve(key)
        except Exception:
            logger.warning("dsv4: could not resolve a CombineTopkSwaIndices launch for %s; "
                           "using vLLM's function", (arch, *shape[1:]), exc_info=True)
            return None
        if launch.source == "baseline":
            return None
        try:
            run = _prepared(*launch.compile_key())
        except ValueError:
            logger.warning("dsv4: the kernel refuses the tile of %s; using vLLM's function",
                           launch.source, exc_info=True)
            return None
        return Decision(launch, arch, (window_size, image),
                        (arch, window_size, image, device_token(device)), run, shape)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.enabled:
            values = bind(args, kwargs)
            decision = None if values is None else self.decide(values)
            if decision is not None and (
                decision.warm_token in self._warmed
                or self.warm_lazily(values[0], decision.arch, decision.deployment)  # type: ignore[index]
            ):
                try:
                    result = decision.run(*values)  # type: ignore[misc]
                except ValueError:
                    # Refused before anything was written: vLLM's function decides.
                    logger.warning("dsv4: the CombineTopkSwaIndices kernel refused a call vLLM "
                                   "made; this call shape uses vLLM's function from now on",
                                   exc_info=True)
                    self.forget(decision.shape)
                else:
                    self.hits += 1
                    return result
        self.misses += 1
        return self.original(*args, **kwargs)


def _on_builder_ready(dispatch: CombineTopkSwaDispatch, builder: Any) -> None:
    flashmla = sys.modules.get(MODULE)
    flashmla_builder = getattr(flashmla, FLASHMLA_BUILDER_CLASS, None)
    if isinstance(flashmla_builder, type) and isinstance(builder, flashmla_builder):
        dispatch.on_builder_ready(builder.window_size,
                                  int(getattr(builder, "max_image_tokens", 0)), builder.device)


TARGET = Target(
    name="combine_topk_swa",
    label="CombineTopkSwaIndices",
    module=MODULE,
    attribute=FUNCTION,
    signature=SIGNATURE,
    dispatch=CombineTopkSwaDispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready),
    aliases=ALIASES,
)
