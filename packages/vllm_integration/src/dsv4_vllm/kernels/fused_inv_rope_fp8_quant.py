"""FusedInvRopeFP8Quant's vLLM target: the kernel object ``_FUSED_INV_ROPE_FP8_QUANT_KERNEL``.

In every DeepSeek-V4 attention layer, inside the FULL decode CUDA graph (and eagerly in
prefill), ``deep_gemm_fp8_o_proj`` calls vLLM 0.33.0's ``fused_inv_rope_fp8_quant``
(``vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py``). That wrapper runs
the custom op ``torch.ops.vllm.fused_inv_rope_fp8_quant_kernel``, whose implementation
allocates ``out_buf``/``scale_buf`` and then launches the module global
``_FUSED_INV_ROPE_FP8_QUANT_KERNEL``, looked up at every call. That global is what is
replaced: the op, its registration and fake, the allocation and the wrapper stay vLLM's,
so inductor still sees one opaque op and only the launch inside it changes. (The op's
implementation function was bound by ``direct_register_custom_op`` at import, so
rebinding it would never be called; replacing the wrapper would put a bare launch
outside the opaque op.)

Per call, :class:`FusedInvRopeFP8QuantDispatch` builds the policy key from what the host
knows without reading device memory (T = ``num_tokens``, local heads = ``grid[1]``,
``head_dim = nope_dim + 2 * half_rope``, the group size and the two flags) and either

* runs :func:`dsv4_kernels.fused_inv_rope_fp8_quant.launch.kernel_call` with the table
  entry's tile (a hit): the same arguments and buffers, bit-identical FP8 bytes and
  scales (pad rows included); or
* calls vLLM's object with the very same arguments (a miss, an unusual call, a call
  whose dtypes the warm-up does not build, or one dsv4's checks refuse before writing
  anything), so the result is upstream's by construction.

What a hit relies on at this call site: dsv4's body reads ``positions`` and their
``cos_sin_cache`` rows before its PDL wait and ``o`` after it
(:mod:`dsv4_kernels.fused_inv_rope_fp8_quant.kernel`). Here ``positions`` is the step's
input, copied into vLLM's persistent buffer before the forward (and before a graph
replays), and ``cos_sin_cache`` is the layer's rotary table, written at model load; the
kernels that run just before this op (the attention that writes ``o``) write neither, and
those are all a PDL launch can overlap.

Every other attribute (``register_warmup``'s vLLM half, ``get_warmup_keys``, ``compile``,
``kernel``, ``CompileKey``, ...) is vLLM's object's, so vLLM's own warm-up of its kernel
stays as it is: every miss needs those binaries.

Warm-up hook, and why there. The compile keys depend on the arch, the layer's head
geometry (local heads, heads per group, nope/rope dims, group size) and the flags vLLM
passes (scale layout, ``quantize``, ``launch_pdl``); never on T, so one warm-up covers
every T the capture sizes produce. The vLLM module holds no metadata builder to hook, and
the builders do not know the head geometry; what knows all of it is vLLM's own JIT
warm-up of this very kernel object:

1. each attention layer's ``__init__`` (``vllm/models/deepseek_v4/attention.py``, on CUDA
   with ``kernel_config.enable_jit_warmup``, the default) calls
   ``_FUSED_INV_ROPE_FP8_QUANT_KERNEL.register_warmup()``, reading the global at that
   moment, which is the stand-in (the plugin runs at process start). Its
   :meth:`~FusedInvRopeFP8QuantDispatch.register_warmup` registers vLLM's object as vLLM
   would, then a :class:`StartUpWarmup` with the same registry;
2. the worker runs that registry in ``kernel_warmup`` (``compile_or_warm_up_model``), on
   its own device, after the KV cache and its metadata builders are set up and before
   ``capture_model``. The registry hands :class:`StartUpWarmup` the ``vllm_config``; its
   deployments are vLLM's own warm-up keys for the kernel (so scale layout and PDL are
   what vLLM's platform says) with the local head count, and each one compiles every
   table tile the deployment can reach (:func:`warm_compile_keys`).

Where that registry does not run (``--enforce-eager`` turns JIT warm-up off, and there
are no graphs to capture), or for a deployment vLLM's keys do not name (a bf16 ``wo_a``
passes ``quantize=False``), the first call of a deployment outside a graph capture warms
it, hit or miss: vLLM's memory-profiling run calls every layer eagerly before capture.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple, Unpack

import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import launch as kernels_firq
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy_firq
from dsv4_policy.kernels.fused_inv_rope_fp8_quant import Key, Launch, Table

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import Dispatch, Options, device_token
from dsv4_vllm.guard import KEYWORD, POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Target

Resolver = Callable[[Key], Launch]

MODULE = "vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant"
OBJECT = "_FUSED_INV_ROPE_FP8_QUANT_KERNEL"
JIT_WARMUP_MODULE = "vllm.model_executor.warmup.jit_warmup"
"""Where vLLM 0.33.0's ``JitWarmupRegistry`` lives (imported only when vLLM asks for a
warm-up registration, never at import)."""
LABEL = "FusedInvRopeFP8Quant"
POSITIONAL_NAMES = ("o", "positions", "cos_sin_cache", "out_buf", "scale_buf", "num_tokens")
KEYWORD_NAMES = ("heads_per_group", "quant_group_size", "chunks_per_head", "nope_dim",
                 "half_rope", "tma_aligned_scales", "quantize", "fp8_max", "launch_pdl", "grid")
"""``FusedInvRopeFP8QuantKernel.__call__``'s arguments in vLLM 0.33.0: six positional,
then ten keyword-only, none with a default."""
SIGNATURE = Signature(
    (*((name, REQUIRED, POSITIONAL) for name in POSITIONAL_NAMES),
     *((name, REQUIRED, KEYWORD) for name in KEYWORD_NAMES)),
    attributes=("register_warmup", "get_warmup_keys"),
)
ARITY = len(POSITIONAL_NAMES)
KEYWORDS = frozenset(KEYWORD_NAMES)
WARMED_DTYPES = (torch.bfloat16, torch.int64)
"""``o`` and ``positions`` dtypes the warm-up builds (vLLM's, and its own warm-up's):
another pair would need a binary no warm-up made, so such a call is a miss."""
WARM_UP = "warm-up with vLLM's JIT kernel warm-up, before CUDA-graph capture"


class Deployment(NamedTuple):
    """What one layer's binaries depend on, besides the tile (the warm-up's key)."""

    num_heads: int
    heads_per_group: int
    nope_dim: int
    rope_dim: int
    quant_group_size: int
    tma_aligned_scales: bool
    quantize: bool
    launch_pdl: bool


def kernel_compile_keys(table: Table | None, arch: str,
                        deployment: Deployment) -> list[kernels_firq.CompileKey]:
    """dsv4's binaries a deployment's table hits can launch, sorted.

    The tiles are ``compile_key_sources(table, arch, ...)`` without the baseline's own
    (a baseline launch runs vLLM's kernel, not dsv4's; a tile an entry also names stays),
    each with the deployment's head geometry and flags. ``table`` None is the shipped one.
    """
    d = deployment
    sources = policy_firq.compile_key_sources(
        table, arch, num_heads=d.num_heads, head_dim=d.nope_dim + d.rope_dim,
        quant_group_size=d.quant_group_size)
    tiles = sorted(tile for tile, found in sources.items() if found != ("baseline",))
    return [kernels_firq.CompileKey(*tile, d.heads_per_group, d.nope_dim, d.rope_dim,
                                    d.quant_group_size, d.tma_aligned_scales, d.quantize,
                                    d.launch_pdl) for tile in tiles]


def warm_compile_keys(arch: str, num_heads: int, heads_per_group: int, nope_dim: int,
                      rope_dim: int, quant_group_size: int, tma_aligned_scales: bool,
                      quantize: bool, launch_pdl: bool, device: torch.device | str, *,
                      table: Table | None = None) -> int:
    """Build every binary of :func:`kernel_compile_keys` on ``device``; return how many
    were new to this process. Logs the key count, the compile count and the time, as
    every kernel's warm-up does."""
    deployment = Deployment(num_heads, heads_per_group, nope_dim, rope_dim, quant_group_size,
                            tma_aligned_scales, quantize, launch_pdl)
    keys = kernel_compile_keys(table, arch, deployment)
    started = time.perf_counter()
    compiled = kernels_firq.warmup(keys, device) if keys else 0
    logger.info(
        "dsv4 warm-up: %d %s compile key(s) for %s, num_heads=%d, heads_per_group=%d, "
        "head_dim=%d, quant_group_size=%d, tma_aligned_scales=%s, quantize=%s, "
        "launch_pdl=%s on %s; %d compiled in %.2f s", len(keys), LABEL, arch, num_heads,
        heads_per_group, nope_dim + rope_dim, quant_group_size, tma_aligned_scales, quantize,
        launch_pdl, device, compiled, time.perf_counter() - started,
    )
    return compiled


def deployments_of(original: Any, vllm_config: Any) -> list[Deployment]:
    """The deployments vLLM's own warm-up keys for its kernel name, with local heads.

    vLLM's ``get_warmup_keys`` reads the model's head geometry and asks vLLM's platform
    for the scale layout and PDL exactly as the op's implementation does at run time;
    the local head count is its heads per group times the local ``o_groups``.
    """
    hf_config = vllm_config.model_config.hf_config
    tp_size = int(vllm_config.parallel_config.tensor_parallel_size)
    local_groups = int(getattr(hf_config, "o_groups", 0) or 0) // max(tp_size, 1)
    if local_groups <= 0:
        return []
    found = {}
    for key in original.get_warmup_keys(vllm_config):
        deployment = Deployment(
            local_groups * int(key.heads_per_group), int(key.heads_per_group),
            int(key.nope_dim), 2 * int(key.half_rope), int(key.quant_group_size),
            bool(key.tma_aligned_scales), bool(key.quantize), bool(key.launch_pdl))
        found[deployment] = None
    return list(found)


def _current_cuda_device() -> torch.device | None:
    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", torch.cuda.current_device())


class StartUpWarmup:
    """dsv4's entry in vLLM's JIT warm-up registry, next to vLLM's own kernel object.

    The registry calls ``get_warmup_keys(vllm_config=...)`` and then ``compile_many``
    with what it returned, on the worker's device, before CUDA-graph capture. Neither
    ever raises into vLLM's start-up: a failure logs a warning, and the first call of a
    deployment warms it instead (or the stand-in turns itself off, as any failed warm-up
    does).
    """

    def __init__(self, dispatch: FusedInvRopeFP8QuantDispatch) -> None:
        self.dispatch = dispatch
        self.current_device: Callable[[], torch.device | None] = _current_cuda_device

    def __repr__(self) -> str:
        return f"StartUpWarmup({LABEL})"

    def get_warmup_keys(self, vllm_config: Any = None, *args: Any,
                        **kwargs: Any) -> list[Deployment]:
        try:
            return deployments_of(self.dispatch.original, vllm_config)
        except Exception:
            logger.warning("dsv4: could not read the %s deployments from vLLM's config; they "
                           "are warmed on their first call instead", LABEL, exc_info=True)
            return []

    def compile_many(self, deployments: Iterable[Deployment]) -> None:
        try:
            device = self.current_device()
            arch = None if device is None else self.dispatch.arch_of(device)
        except Exception:
            logger.warning("dsv4: no device for the %s start-up warm-up; deployments are "
                           "warmed on their first call instead", LABEL, exc_info=True)
            return
        if device is None or arch is None:
            return
        for deployment in deployments:
            if not self.dispatch.warm_once(arch, deployment, device):
                return


class Decision(NamedTuple):
    """A table hit for one call shape: the launch, what its warm-up is keyed by."""

    launch: Launch
    arch: str
    deployment: Deployment
    warm_token: tuple[Any, ...]
    shape: Hashable


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class FusedInvRopeFP8QuantDispatch(Dispatch):
    """Drop-in for vLLM's ``_FUSED_INV_ROPE_FP8_QUANT_KERNEL``: table hits run dsv4's kernel.

    ``resolve`` (``Key -> Launch``), ``arch_of`` (``torch.device -> "smXY" | None``) and
    ``warm`` are injectable so the decision can be tested without a GPU; ``table`` None
    is the shipped table.
    """

    policy = policy_firq
    label = LABEL
    deployment_fields = Deployment._fields
    default_warm = staticmethod(warm_compile_keys)

    def __init__(self, original: Any, **options: Unpack[Options]) -> None:
        super().__init__(original, **options)
        # inspect.signature(dispatch) is vLLM's __call__ signature.
        self.__wrapped__ = original.__call__
        self.start_up = StartUpWarmup(self)
        self._registration_failed = False

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this object does not have: vLLM's own API on the object.
        if name == "original":
            raise AttributeError(name)
        return getattr(self.original, name)

    def __repr__(self) -> str:
        return f"FusedInvRopeFP8QuantDispatch({self.original!r})"

    # -- start-up ---------------------------------------------------------------------

    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's own registration of its kernel, then dsv4's warm-up in the same registry."""
        self.original.register_warmup(*args, **kwargs)
        try:
            registry = importlib.import_module(JIT_WARMUP_MODULE).JitWarmupRegistry
            registry.register(self.start_up, *args, **kwargs)
        except Exception:
            if not self._registration_failed:
                logger.warning("dsv4: could not register the %s warm-up with vLLM's JIT "
                               "warm-up; each deployment is warmed on its first call instead",
                               LABEL, exc_info=True)
            self._registration_failed = True

    # -- per call ---------------------------------------------------------------------

    def decide(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Decision | None:
        """A hit's launch, or ``None`` for a miss; cached by the call's shape.

        The shape is the host-known arguments (no device memory is read), so a repeated
        shape costs a few reads and one dict lookup.
        """
        try:
            o, positions = args[0], args[1]
            shape = (o.get_device(), args[5], *map(kwargs.__getitem__, KEYWORD_NAMES),
                     o.dtype, positions.dtype)
            hash(shape)
        except Exception:
            return None
        return self.cached(shape, lambda: self._decide_uncached(o, shape))

    def _decide_uncached(self, o: torch.Tensor, shape: tuple[Any, ...]) -> Decision | None:
        (_, num_tokens, heads_per_group, group_size, _chunks, nope_dim, half_rope, tma,
         quantize, _fp8_max, pdl, grid, o_dtype, positions_dtype) = shape
        arch = self.arch_of(o.device)
        if arch is None or (o_dtype, positions_dtype) != WARMED_DTYPES:
            return None
        ints = (num_tokens, heads_per_group, group_size, nope_dim, half_rope)
        if not (all(_is_int(v) for v in ints) and all(type(f) is bool for f in (tma, quantize, pdl))
                and isinstance(grid, tuple) and len(grid) == 2 and _is_int(grid[1])
                and min(ints) >= 0 and grid[1] >= 1 and group_size >= 1):
            return None
        deployment = Deployment(grid[1], heads_per_group, nope_dim, 2 * half_rope, group_size,
                                tma, quantize, pdl)
        # The deployment's first call warms it, hit or miss (never inside a capture).
        if not self.warm_lazily(o, arch, deployment):
            return None
        try:
            key = Key(arch, num_tokens, grid[1], nope_dim + 2 * half_rope, group_size, int(tma),
                      int(quantize))
            launch = self._resolve(key)
        except Exception:
            logger.warning("dsv4: could not resolve a %s launch for %s; using vLLM's kernel",
                           LABEL, (arch, *shape[1:]), exc_info=True)
            return None
        if launch.source == "baseline":
            return None
        return Decision(launch, arch, deployment, (arch, *deployment, device_token(o.device)),
                        shape)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.enabled and len(args) == ARITY and kwargs.keys() == KEYWORDS:
            decision = self.decide(args, kwargs)
            if decision is not None and (
                decision.warm_token in self._warmed
                or self.warm_lazily(args[0], decision.arch, decision.deployment)
            ):
                launch = decision.launch
                try:
                    kernels_firq.kernel_call(
                        *args, **kwargs, tokens_per_program=launch.tokens_per_program,
                        heads_per_program=launch.heads_per_program, num_warps=launch.num_warps,
                        body=launch.body)
                except ValueError:
                    # Refused before anything was written: vLLM's kernel decides.
                    logger.warning("dsv4: the %s kernel refused a call vLLM made; this call "
                                   "shape uses vLLM's kernel from now on", LABEL, exc_info=True)
                    self.forget(decision.shape)
                else:
                    self.hits += 1
                    return None  # what vLLM's object returns (its launch spec has no outputs)
        self.misses += 1
        return self.original(*args, **kwargs)


TARGET = Target(
    name="fused_inv_rope_fp8_quant",
    label=LABEL,
    module=MODULE,
    attribute=OBJECT,
    signature=SIGNATURE,
    dispatch=FusedInvRopeFP8QuantDispatch,
    warm_up=WARM_UP,
)
