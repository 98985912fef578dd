"""The SWA builders' decode half as a vLLM target: ``DeepseekSparseSWAMetadataBuilder.build``.

Every DeepSeek-V4 step, vLLM 0.33.0 builds the sliding-window metadata of each SWA KV-cache
group (two for DeepSeek-V4-Flash) with ``DeepseekSparseSWAMetadataBuilder.build``
(``vllm/v1/attention/backends/mla/sparse_swa.py``). For a causal step whose first ``T``
tokens are decodes it runs, after the step's token-to-request map, three device operations
on the builder's buffers: ``torch.ge(slot_mapping, 0, out=is_valid_token[:S])``, a zero
fill of ``decode_swa_lens[T:]`` (to the end of the buffer) and vLLM's SWA rows kernel for
rows ``0..T-1``; in a mixed step it then runs the rows kernel for the prefill rows and its
prefill metadata; last it slices the views it returns and plans the FlashMLA tile
schedulers. The stand-in owns that build for the steps the policy covers and returns a
metadata object equal to vLLM's in every field, every tensor's shape, stride, storage
offset and bytes, and every buffer:

* the token-to-request map through vLLM's own ``CommonAttentionMetadata.
  token_to_req_indices`` with the builder's buffer (so the step's second SWA builder
  reuses the map the first one made, as vLLM's does);
* one launch of :mod:`dsv4_kernels.swa_decode` for ``is_valid_token[:S]``, the zeros of
  ``decode_swa_lens[T:]`` and rows ``0..T-1`` of ``decode_swa_indices`` and
  ``decode_swa_lens`` (``S = slot_mapping.shape[0]``);
* in a mixed step, the prefill half exactly as vLLM's build runs it: the prefill rows
  through the module's ``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL`` (the ``swa`` target's
  stand-in when it is installed) with vLLM's arguments, then vLLM's own
  ``_build_deepseek_v4_metadata``; a step without prefills gets nothing from the latter,
  so it is not called there;
* the views vLLM returns (the same buffers, sizes, strides and offsets), made with
  ``as_strided`` from the strides the kernel's checks saw, or sliced as vLLM slices them;
* vLLM's own ``build_tile_scheduler`` (one fresh FlashMLA plan holder per layer type) and
  vLLM's own metadata class.

Covered builds: vLLM's ``DeepseekSparseSWAMetadataBuilder`` itself and FlashMLA's CUDA
subclass ``DeepseekSparseSWAFlashMLAMetadataBuilder`` (``vllm/models/deepseek_v4/nvidia/
flashmla.py``; covered only while it overrides none of ``build``, ``build_tile_scheduler``
and ``_build_deepseek_v4_metadata``), with no speculative decoding and no DSpark, for a
causal step (``causal is True``) of at least one request and ``1 <= T <= S`` decode tokens,
whose tensors the kernel's checks accept and whose key ``(arch, index_width, T)`` the table
covers, and which is either

* decode-only: ``max_query_len`` an int at most 1 (and ``1 <= decode_threshold``, so
  vLLM's split makes every request a decode); or
* mixed: ``decode_threshold == 1 < max_query_len``, and vLLM's own
  ``split_decodes_and_prefills`` finds at least one decode token before the prefills,
  with no image spans in the step (a builder with ``max_image_tokens > 0`` and
  ``mm_req_doc_ranges`` is vLLM's).

Every other build calls vLLM's ``build`` with the same arguments: prefill-only steps (or a
prefill first), multi-token decodes, ``T == 0``, speculative decoding, DSpark or a
non-causal step, any other subclass (ROCm, CPU, FlashInfer, V4.1), image spans, an
argument the kernel's checks refuse (before the launch writes anything; remembered per
step shape) and every key no table entry covers. The table's key is the decode tokens
``T`` in both kinds of step: the kernel's work is the same but for the validity fill over
a mixed step's prefill slots, which its grid spreads over one program per 1,024 slots.

Why this module holds the object. vLLM's object is a method: there is no module global to
rebind, and the plugin rebinds ``Target.attribute`` of ``Target.module``. This module
answers ``DeepseekSparseSWAMetadataBuilder.build`` as vLLM's class attribute itself
(reading it returns the class's own ``build``, writing it sets the class's ``build``) and
``DeepseekSparseSWAMetadataBuilder`` as vLLM's class, so the plugin's patching, restoring,
builder hook and kill switch and the step benchmark's on/off switch work on it as on every
other target, with no change to them. FlashMLA's subclass inherits the class attribute. The
stand-in binds as a method (:meth:`SWADecodeDispatch.__get__`); an instance attribute
``build`` set by a tool (the step benchmark's timers) still wins over it.

Warm-up hook: the same class's ``__init__`` (FlashMLA's subclass inherits it). vLLM builds
the SWA builders while it sets up the KV cache, before CUDA graphs are captured; their
device is the step's. The compile keys depend on the arch alone
(:func:`warm_compile_keys`).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from dsv4_kernels.swa_decode import launch as kernels_swd
from dsv4_policy.kernels import swa_decode as policy_swd
from dsv4_policy.kernels.swa_decode import Key, Launch

from dsv4_vllm._log import logger
from dsv4_vllm.builder_method import (
    BuilderMethod,
    BuilderMethodDispatch,
    Decision,
    arch_warm_up,
    hold,
    readable,
)
from dsv4_vllm.guard import POSITIONAL, REQUIRED, Signature
from dsv4_vllm.registry import Builder, Target

Resolver = Callable[[Key], Launch]

VLLM_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
BUILDER_CLASS = "DeepseekSparseSWAMetadataBuilder"
FLASHMLA_MODULE = "vllm.models.deepseek_v4.nvidia.flashmla"
FLASHMLA_BUILDER_CLASS = "DeepseekSparseSWAFlashMLAMetadataBuilder"
METHOD = "build"
ATTRIBUTE = f"{BUILDER_CLASS}.{METHOD}"
"""What the plugin reads and rebinds here: vLLM's class attribute, through this module."""
LABEL = "SWA decode metadata"
OVERRIDES = ("build", "build_tile_scheduler", "_build_deepseek_v4_metadata")
"""What FlashMLA's subclass must not define for its builds to be covered."""
PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("self", REQUIRED),
    ("common_prefix_len", REQUIRED),
    ("common_attn_metadata", REQUIRED),
    ("fast_build", False),
    ("replay_start", None),
)
"""``DeepseekSparseSWAMetadataBuilder.build`` in vLLM 0.33.x: names, order, defaults."""
SIGNATURE = Signature(tuple((name, default, POSITIONAL) for name, default in PARAMETERS))
_NAMES = ("common_prefix_len", "common_attn_metadata", "fast_build", "replay_start")
"""``build``'s parameters after ``self``."""
_LAYER_TYPES = ("_LAYER_TYPE_SWAONLY", "_LAYER_TYPE_C4A", "_LAYER_TYPE_C128A",
                "_LAYER_TYPE_C1A", "_LAYER_TYPE_C2A")
"""vLLM's names of ``build_tile_scheduler``'s keys, in the order of the metadata's
``tile_sched_*`` fields."""


_BUILDER = BuilderMethod(VLLM_MODULE, BUILDER_CLASS, METHOD)
_vllm_module = _BUILDER.module
_vllm_class = _BUILDER.cls
"""vLLM's ``DeepseekSparseSWAMetadataBuilder`` (AttributeError when it cannot be had)."""


def overridden(subclass: type, base: type) -> list[str]:
    """The names of :data:`OVERRIDES` that ``subclass`` (or a class between it and ``base``)
    defines itself; every name when ``subclass`` does not derive from ``base``."""
    if not (isinstance(subclass, type) and issubclass(subclass, base)):
        return list(OVERRIDES)
    mro = subclass.__mro__
    return [name for cls in mro[:mro.index(base)] for name in OVERRIDES if name in vars(cls)]


def covered_classes(module: types.ModuleType) -> tuple[type, ...]:
    """The builder classes whose builds may be taken over: vLLM's class and, while it
    overrides nothing :data:`OVERRIDES` names, FlashMLA's CUDA subclass."""
    base = getattr(module, BUILDER_CLASS)
    try:
        flashmla = importlib.import_module(FLASHMLA_MODULE)
    except Exception:
        logger.debug("dsv4: %s cannot be imported; only %s builds are taken over",
                     FLASHMLA_MODULE, BUILDER_CLASS, exc_info=True)
        return (base,)
    sub = getattr(flashmla, FLASHMLA_BUILDER_CLASS, None)
    if not isinstance(sub, type) or sub is base:
        return (base,)
    found = overridden(sub, base)
    if found:
        logger.warning("dsv4: %s.%s defines %s itself; its builds stay vLLM's",
                       FLASHMLA_MODULE, FLASHMLA_BUILDER_CLASS, ", ".join(found))
        return (base,)
    return (base, sub)


# ----------------------------------------------------------------------------- warm-up
warm_compile_keys = arch_warm_up(policy_swd, kernels_swd, LABEL)
"""``warm_compile_keys(arch, device, *, table=None)``: build every tile of
``compile_keys(table, arch)`` on ``device``; return how many binaries were new."""


# ----------------------------------------------------------------------------- per call
class Plan(NamedTuple):
    """Everything a covered build needs, established before anything is written."""

    cam: Any
    replay_start: Any
    num_reqs: int
    num_tokens: int
    """The decode tokens ``T`` (the first ``T`` tokens of the step)."""
    max_query_len: int
    decision: Decision
    shape: tuple[Any, ...]
    num_prefills: int = 0
    num_prefill_tokens: int = 0
    """A mixed step's prefill requests and tokens (after the decodes); 0 in a decode-only
    step."""


_Tensor = torch.Tensor
_VllmState = tuple[tuple[type, ...], types.ModuleType, tuple[str, ...]]
"""The covered builder classes, vLLM's module and its layer-type keys."""


class SWADecodeDispatch(BuilderMethodDispatch):
    """Drop-in for vLLM's ``DeepseekSparseSWAMetadataBuilder.build``: the decode-only and
    mixed steps the table covers are built by dsv4 (a mixed step's prefill half as vLLM's
    build runs it), every other build is vLLM's."""

    policy = policy_swd
    label = LABEL
    step_label = "SWA decode"
    warm_tensor = "decode_swa_indices"
    default_warm = staticmethod(warm_compile_keys)

    def _look_up(self) -> _VllmState:
        """The covered builder classes, vLLM's module and its layer-type keys."""
        module = _vllm_module()
        keys = tuple(getattr(module, name) for name in _LAYER_TYPES)
        return (covered_classes(module), module, keys)

    @staticmethod
    def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """vLLM's ``(common_attn_metadata, replay_start)`` from ``build``'s arguments after
        ``self``, or None when the call cannot be read for sure (vLLM's ``build`` then
        raises its own error)."""
        if not readable(args, kwargs, _NAMES):
            return None
        if len(args) >= 2:
            cam = args[1]
        elif "common_attn_metadata" in kwargs:
            cam = kwargs["common_attn_metadata"]
        else:
            return None
        return cam, (args[3] if len(args) == 4 else kwargs.get("replay_start"))

    # -- the decision -----------------------------------------------------------------

    def _plan(self, builder: Any, state: _VllmState, call: tuple[Any, Any]) -> Plan | None:
        """A covered step's plan, or None (vLLM's build). Reads host facts only."""
        cam, replay_start = call
        b = builder
        if not (b.num_speculative_tokens == 0 and b.is_dspark is False
                and cam.causal is True):
            return None
        n, m, longest, threshold = (cam.num_reqs, cam.num_actual_tokens, cam.max_query_len,
                                    b.decode_threshold)
        if not (type(n) is int and type(m) is int and type(longest) is int
                and type(threshold) is int and n >= 1 and m >= 1 and threshold >= 1):
            return None
        slots = cam.slot_mapping
        if not (type(slots) is _Tensor and slots.dim() == 1 and m <= slots.shape[0]):
            return None
        if longest <= 1:
            # vLLM's split: max_query_len <= decode_threshold makes every request a decode.
            decodes, prefills, t, p = n, 0, m, 0
        elif longest > threshold == 1:
            # A mixed step (or a prefill-only one): vLLM's own split finds the boundary.
            # Its decodes then have one token each, as in a decode-only step. A prefill
            # first means no decodes in vLLM's split (it reads the same two entries): that
            # is told apart here for less than the split costs, as vLLM's build splits
            # again.
            start, stop = cam.query_start_loc_cpu[:2].tolist()
            if stop - start > threshold:
                return None
            decodes, prefills, t, p = state[1].split_decodes_and_prefills(
                cam, decode_threshold=threshold)
            if not (type(t) is int and type(p) is int and t >= 1 and p >= 1
                    and t + p == m and decodes + prefills == n):
                return None
            if b.max_image_tokens > 0 and cam.mm_req_doc_ranges and any(
                    cam.mm_req_doc_ranges.values()):
                return None  # image spans in the prefill rows: vLLM's build
        else:
            return None
        rows = b.decode_swa_indices
        width = rows.shape[-1]
        shape = (rows.get_device(), width, t)
        decision = self.cached(shape, lambda: self._decide(rows.device, Key, (width, t)))
        if decision is None:
            return None
        return Plan(cam, replay_start, decodes, t, longest, decision, shape, prefills, p)

    # -- the call ---------------------------------------------------------------------

    def _build(self, b: Any, plan: Plan, state: _VllmState) -> Any:
        """vLLM's build of a covered step; None when dsv4's checks refuse it (before the
        launch writes anything)."""
        _, vllm, layer_types = state
        cam, m = plan.cam, plan.num_tokens
        # vLLM's own map, first as in vLLM's build (cached on cam: a second SWA builder of
        # the step gets the first one's).
        token_to_req = cam.token_to_req_indices(b.token_to_req_indices)
        replay_start = b.no_replay_start if plan.replay_start is None else plan.replay_start
        rows, lens, valid = b.decode_swa_indices, b.decode_swa_lens, b.is_valid_token
        slots, qsl, seq_lens, table = (cam.slot_mapping, cam.query_start_loc, cam.seq_lens,
                                       cam.block_table_tensor)
        window, block_size = b.window_size, b.block_size
        checked = self._checked(kernels_swd, "build_swa_decode", plan.shape, rows, lens, valid,
                                slots, qsl, seq_lens, token_to_req, table, replay_start,
                                window, block_size, m)
        if checked is None:
            return None
        tpp, cpp, warps = plan.decision.tile
        kernels_swd.launch_checked(checked, rows, lens, valid, slots, qsl, seq_lens,
                                   token_to_req, table, replay_start, window, block_size, m,
                                   tpp, cpp, warps)
        is_valid_token = valid.as_strided((checked.num_slots,), (1,))
        prefill: dict[str, Any] = {}
        p = plan.num_prefill_tokens
        if p:
            # A mixed step's prefill half, as vLLM's build runs it: its rows through the
            # module's rows kernel object (dsv4's stand-in when installed), then vLLM's
            # own prefill metadata.
            prefill_rows, prefill_lens = b.prefill_swa_indices[:p], b.prefill_swa_lens[:p]
            vllm._COMPUTE_SWA_INDICES_AND_LENS_KERNEL(
                prefill_rows, prefill_lens, window, b.prefill_index_width, prefill_lens,
                prefill_lens, qsl, seq_lens, token_to_req, is_valid_token, table, block_size,
                replay_start, num_tokens=p, token_offset=m, has_image=False)
            prefill = b._build_deepseek_v4_metadata(
                plan.num_reqs, plan.num_prefills, seq_lens, cam.seq_lens_cpu_upper_bound, qsl,
                cam.query_start_loc_cpu, replay_start)
            prefill["prefill_swa_indices"] = b.prefill_swa_indices[:p]
            prefill["prefill_swa_lens"] = b.prefill_swa_lens[:p]
        sched = b.build_tile_scheduler(m)
        swaonly, c4a, c128a, c1a, c2a = layer_types
        # The views vLLM returns: is_valid_token[:S], decode_swa_indices[:T] and
        # decode_swa_lens[:T] (the checks saw unit strides for is_valid_token and
        # decode_swa_lens; a leading slice keeps every stride and the storage offset).
        return vllm.DeepseekSparseSWAMetadata(
            seq_lens=seq_lens, query_start_loc=qsl, query_start_loc_cpu=cam.query_start_loc_cpu,
            block_table=table, slot_mapping=slots,
            is_valid_token=is_valid_token, token_to_req_indices=token_to_req,
            decode_swa_indices=rows.as_strided((m, *rows.shape[1:]), rows.stride()),
            decode_swa_lens=lens.as_strided((m,), (1,)), decode_swa_width=window,
            replay_start=replay_start, block_size=block_size, num_decodes=plan.num_reqs,
            num_prefills=plan.num_prefills, num_decode_tokens=m, num_prefill_tokens=p,
            max_decode_query_len=min(plan.max_query_len, b.decode_threshold),
            tile_sched_swaonly=sched[swaonly], tile_sched_c4a=sched[c4a],
            tile_sched_c128a=sched[c128a], tile_sched_c1a=sched[c1a], tile_sched_c2a=sched[c2a],
            **prefill)


def _on_builder_ready(dispatch: SWADecodeDispatch, builder: Any) -> None:
    if type(builder) not in dispatch.covered():
        return  # ROCm, CPU, FlashInfer, V4.1: their builds stay vLLM's
    if builder.num_speculative_tokens != 0 or builder.is_dspark is not False:
        return  # never a covered step
    dispatch.on_builder_ready(builder.decode_swa_indices.device)


TARGET = Target(
    name="swa_decode",
    label=LABEL,
    module=__name__,
    attribute=ATTRIBUTE,
    signature=SIGNATURE,
    dispatch=SWADecodeDispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready),
)

# This module answers ATTRIBUTE as vLLM's class attribute and BUILDER_CLASS as vLLM's class.
hold(__name__, _BUILDER)
