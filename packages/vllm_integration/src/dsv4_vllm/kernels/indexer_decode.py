"""The indexer's decode-only step as a vLLM target: ``DeepseekV32IndexerMetadataBuilder.build``.

Every DeepSeek-V4 step, vLLM 0.33.0 builds the C4A layers' indexer metadata with
``DeepseekV32IndexerMetadataBuilder.build`` (``vllm/v1/attention/backends/mla/indexer.py``).
For a decode-only step on the path DeepSeek-V4 takes (compress ratio 4, no speculative
decoding, no decode or prefill context parallelism, no varlen or flattened decode), after
its compressed slot mapping it runs a chain of small ATen ops on the host and the device:
the device ``torch.diff`` of ``query_start_loc`` into ``decode_lens_buffer``, a copy into
``per_req_decode_lens_buffer``, a host ``torch.diff`` of ``query_start_loc_cpu`` with
``.max().item()`` and ``.min().item()`` (the minimum twice), ``expanded_seq_lens_buffer[:n]
= seq_lens // compress_ratio``, a zero fill up to the decode tokens, slices and an
unsqueeze, then (with DeepGEMM on CUDA) the paged MQA logits schedule. The stand-in owns
that whole build for the steps the policy covers and returns a metadata object equal to
vLLM's in every field, every tensor's shape, stride and bytes, and every buffer:

* the compressed slot mapping through the indexer module's own
  ``get_compressed_slot_mapping`` global, with vLLM's arguments (so the compressed slot
  mapping target's stand-in serves it when installed);
* one launch of :mod:`dsv4_kernels.indexer_decode` for ``decode_lens``,
  ``per_req_decode_lens`` and ``expanded_seq_lens`` (its zeros included);
* the host integers (largest and smallest query length) from one pass over
  ``query_start_loc_cpu``, as the same integers vLLM's ``torch.diff`` and ``.item()``
  give;
* with DeepGEMM, vLLM's own ``get_paged_mqa_logits_metadata`` on the same view, into the
  same buffer slice;
* the views vLLM returns (the same buffers, sizes and strides) and vLLM's own metadata
  classes.

Every other build calls vLLM's ``build`` with the same arguments: prefills in the step,
``num_tokens == 0``, speculative decoding, DCP or PCP, varlen or flattened decode, a
compress ratio of 1, a query longer than one token on the host or the device side, a
builder of any other class (vLLM's subclasses inherit this ``build``), an argument the
kernel's checks refuse (before anything is written), and every key no table entry
covers.

Why this module holds the object. vLLM's object is a method: there is no module global
to rebind, and the plugin rebinds ``Target.attribute`` of ``Target.module``. This module
answers ``DeepseekV32IndexerMetadataBuilder.build`` as vLLM's class attribute itself
(reading it returns the class's own ``build``, writing it sets the class's ``build``)
and ``DeepseekV32IndexerMetadataBuilder`` as vLLM's class, so the plugin's patching,
restoring, aliases-free rebinding, builder hook and kill switch work on it as on every
other target, with no change to them. The stand-in binds as a method
(:meth:`IndexerDecodeDispatch.__get__`); an instance attribute ``build`` set by a tool
(the step benchmark's timers) still wins over it, and deleting that attribute brings it
back.

Warm-up hook: the same class's ``__init__``. vLLM builds the indexer builder while it
sets up the KV cache, before CUDA graphs are captured; its device is the step's. The
compile keys depend on the arch alone (:func:`warm_compile_keys`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from dsv4_kernels.indexer_decode import launch as kernels_idm
from dsv4_policy.kernels import indexer_decode as policy_idm
from dsv4_policy.kernels.indexer_decode import Key, Launch

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

VLLM_MODULE = "vllm.v1.attention.backends.mla.indexer"
BUILDER_CLASS = "DeepseekV32IndexerMetadataBuilder"
METHOD = "build"
ATTRIBUTE = f"{BUILDER_CLASS}.{METHOD}"
"""What the plugin reads and rebinds here: vLLM's class attribute, through this module."""
LABEL = "indexer decode metadata"
PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("self", REQUIRED),
    ("common_prefix_len", REQUIRED),
    ("common_attn_metadata", REQUIRED),
    ("fast_build", False),
)
"""``DeepseekV32IndexerMetadataBuilder.build`` in vLLM 0.33.x: names, order, defaults."""
SIGNATURE = Signature(tuple((name, default, POSITIONAL) for name, default in PARAMETERS))
_NAMES = ("common_prefix_len", "common_attn_metadata", "fast_build")
"""``build``'s parameters after ``self``."""


_BUILDER = BuilderMethod(VLLM_MODULE, BUILDER_CLASS, METHOD)
_vllm_module = _BUILDER.module
_vllm_class = _BUILDER.cls
"""vLLM's ``DeepseekV32IndexerMetadataBuilder`` (AttributeError when it cannot be had)."""


# ----------------------------------------------------------------------------- warm-up
warm_compile_keys = arch_warm_up(policy_idm, kernels_idm, LABEL)
"""``warm_compile_keys(arch, device, *, table=None)``: build every tile of
``compile_keys(table, arch)`` on ``device``; return how many binaries were new."""


# ----------------------------------------------------------------------------- per call
class Plan(NamedTuple):
    """Everything a covered build needs, established before anything is written."""

    cam: Any
    num_reqs: int
    num_tokens: int
    ratio: int
    max_len: int
    min_len: int
    deep_gemm: bool
    decision: Decision
    shape: tuple[Any, ...]


_Tensor = torch.Tensor
_VllmState = tuple[tuple[type], types.ModuleType]
"""vLLM's builder class (the only class whose builds are taken over) and module."""


def _reducer(name: str) -> Callable[[Any], Any]:
    import numpy

    return getattr(numpy, name).reduce  # type: ignore[no-any-return]


_max, _min = _reducer("maximum"), _reducer("minimum")


def query_length_bounds(query_start_loc_cpu: torch.Tensor, num_reqs: int) -> tuple[int, int]:
    """``(max, min)`` of ``query_start_loc_cpu[1:num_reqs + 1] - query_start_loc_cpu[:num_reqs]``:
    the integers vLLM takes from ``torch.diff(...).max().item()`` and ``.min().item()``, in
    the tensor's own integer type (so a wrap is the same wrap)."""
    values = query_start_loc_cpu.numpy()
    lens = values[1:num_reqs + 1] - values[:num_reqs]
    return int(_max(lens)), int(_min(lens))


class IndexerDecodeDispatch(BuilderMethodDispatch):
    """Drop-in for vLLM's ``DeepseekV32IndexerMetadataBuilder.build``: the decode-only steps
    the table covers are built by dsv4, every other build is vLLM's."""

    policy = policy_idm
    label = LABEL
    step_label = "indexer decode"
    warm_tensor = "expanded_seq_lens_buffer"
    default_warm = staticmethod(warm_compile_keys)

    def _look_up(self) -> _VllmState:
        """vLLM's builder class (the only class whose builds are taken over) and module."""
        module = _vllm_module()
        return ((getattr(module, BUILDER_CLASS),), module)

    @staticmethod
    def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """vLLM's ``common_attn_metadata`` from ``build``'s arguments after ``self``, or
        None when the call cannot be read for sure (vLLM's ``build`` then raises its own
        error)."""
        if not readable(args, kwargs, _NAMES):
            return None
        return args[1] if len(args) >= 2 else kwargs.get("common_attn_metadata")

    # -- the decision -----------------------------------------------------------------

    def _plan(self, builder: Any, state: _VllmState, cam: Any) -> Plan | None:
        """A covered step's plan, or None (vLLM's build). Reads host facts only."""
        vllm = state[1]
        b = builder
        ratio = b.compress_ratio
        if not (type(ratio) is int and ratio > 1 and b.dcp_world_size == 1
                and b.pcp_world_size == 1 and b.use_pcp is False
                and b.num_speculative_tokens == 0 and b.decode_threshold == 1
                and b.use_flattening is False and b.supports_varlen is False):
            return None
        n, m, longest = cam.num_reqs, cam.num_actual_tokens, cam.max_query_len
        if not (type(n) is int and type(m) is int and type(longest) is int
                and n >= 1 and m >= 1 and longest <= 1
                and cam.dcp_local_seq_lens is None):
            return None
        # vLLM's split: max_query_len <= 1 makes every request a decode.
        qsl_cpu = cam.query_start_loc_cpu
        if not (type(qsl_cpu) is _Tensor and qsl_cpu.is_cpu and qsl_cpu.dim() == 1
                and qsl_cpu.shape[0] > n and qsl_cpu.dtype in (torch.int32, torch.int64)):
            return None
        max_len, min_len = query_length_bounds(qsl_cpu, n)
        if max_len > 1:
            return None  # vLLM flattens such a step
        deep_gemm = bool(vllm.current_platform.is_cuda() and vllm.has_deep_gemm())
        expanded = b.expanded_seq_lens_buffer
        shape = (expanded.get_device(), ratio, deep_gemm, n, m)
        decision = self.cached(shape, lambda: self._decide(
            expanded.device, Key, (ratio, int(deep_gemm), n, m), (ratio, deep_gemm, n, m)))
        if decision is None:
            return None
        return Plan(cam, n, m, ratio, max_len, min_len, deep_gemm, decision, shape)

    # -- the call ---------------------------------------------------------------------

    def _build(self, b: Any, plan: Plan, state: _VllmState) -> Any:
        """vLLM's build of a covered decode-only step; None when dsv4's checks refuse it
        (before anything is written)."""
        vllm = state[1]
        cam, n, m, ratio = plan.cam, plan.num_reqs, plan.num_tokens, plan.ratio
        qsl, seq_lens = cam.query_start_loc, cam.seq_lens
        lens, per_req, expanded = (b.decode_lens_buffer, b.per_req_decode_lens_buffer,
                                   b.expanded_seq_lens_buffer)
        checked = self._checked(kernels_idm, "indexer_decode_metadata", plan.shape, qsl,
                                seq_lens, lens, per_req, expanded, n, m, ratio)
        if checked is None:
            return None
        block_table = cam.block_table_tensor
        slot_mapping = vllm.get_compressed_slot_mapping(
            m, cam.slot_mapping, qsl, seq_lens, block_table, b.kv_cache_spec.num_states,
            ratio, out=b.compressed_slot_mapping_buffer, dcp_world_size=b.dcp_world_size,
            cp_interleave=b.cp_kv_cache_interleave_size)
        tpp, warps = plan.decision.tile
        kernels_idm.launch_checked(checked, qsl, seq_lens, lens, per_req, expanded, n, m,
                                   ratio, tpp, warps)
        # The views vLLM returns: buffer[:n] and buffer[:m].unsqueeze(-1) (made from the
        # stride the checks saw, at a fraction of slicing's host time, when it is 1).
        if lens.stride(0) == per_req.stride(0) == expanded.stride(0) == 1:
            decode_lens = lens.as_strided((n,), (1,))
            per_req_lens = per_req.as_strided((n,), (1,))
            seq_view = expanded.as_strided((m, 1), (1, 1))
        else:
            decode_lens, per_req_lens = lens[:n], per_req[:n]
            seq_view = expanded[:m].unsqueeze(-1)
        schedule = b.scheduler_metadata_buffer
        if plan.deep_gemm:
            metadata = vllm.get_paged_mqa_logits_metadata(seq_view, b.kv_cache_spec.num_states,
                                                          b.num_sms, indices=None)
            schedule = b.scheduler_metadata_buffer[: metadata.shape[0]]
            schedule[:] = metadata
        same = plan.min_len == plan.max_len
        decode = vllm.DeepSeekV32IndexerDecodeMetadata(
            block_table=block_table[:n], seq_lens=seq_view, decode_lens=decode_lens,
            requires_padding=not same, schedule_metadata=schedule, indices=None,
            global_seq_lens=None, per_req_decode_lens=per_req_lens, decode_is_uniform=same,
            write_max_decode_len=plan.max_len)
        return vllm.DeepseekV32IndexerMetadata(
            seq_lens=seq_lens, max_seq_len=cam.max_seq_len, slot_mapping=slot_mapping,
            num_decodes=n, num_decode_tokens=m, num_prefills=0, num_prefill_tokens=0,
            prefill=None, decode=decode, block_table=block_table)


def _on_builder_ready(dispatch: IndexerDecodeDispatch, builder: Any) -> None:
    if type(builder) is not _vllm_class():
        return  # a subclass (V4.1, ROCm, CPU): its builds stay vLLM's
    if int(getattr(builder, "compress_ratio", 1)) <= 1:
        return  # a DeepSeek-V3.2 indexer: nothing to take over
    dispatch.on_builder_ready(torch.device(builder.device))


TARGET = Target(
    name="indexer_decode",
    label=LABEL,
    module=__name__,
    attribute=ATTRIBUTE,
    signature=SIGNATURE,
    dispatch=IndexerDecodeDispatch,
    builder=Builder(BUILDER_CLASS, _on_builder_ready),
)

# This module answers ATTRIBUTE as vLLM's class attribute and BUILDER_CLASS as vLLM's class.
hold(__name__, _BUILDER)
