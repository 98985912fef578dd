"""Inverse RoPE + block FP8 quantisation of DeepSeek-V4's attention output, with a tile.

Which vLLM name a plugin replaces, and why: the kernel *object*
``_FUSED_INV_ROPE_FP8_QUANT_KERNEL`` of ``vllm.models.deepseek_v4.common.ops.
fused_inv_rope_fp8_quant``, through :func:`kernel_call`, which takes exactly that
object's ``__call__`` arguments (``o, positions, cos_sin_cache, out_buf, scale_buf,
num_tokens`` and the keywords ``heads_per_group ... launch_pdl, grid``).

- vLLM runs the kernel inside the custom op ``torch.ops.vllm.
  fused_inv_rope_fp8_quant_kernel`` so that inductor sees an opaque boundary (and its
  fake implementation gives the shapes). The op's implementation
  ``_fused_inv_rope_fp8_quant_kernel_impl`` allocates ``out_buf``/``scale_buf`` and then
  looks the kernel object up as a module global at every call. Replacing that global
  keeps the op, its registration, its fake, the allocation and the Python wrapper
  ``fused_inv_rope_fp8_quant`` exactly vLLM's: inductor and the CUDA graphs see the same
  op, and only the launch inside it changes.
- Replacing the implementation function instead would not take effect:
  ``direct_register_custom_op`` registered the function object at import, so a new
  module attribute is never called (re-registering the op is refused by torch.library).
- Replacing the Python wrapper ``fused_inv_rope_fp8_quant`` would put a bare Triton
  launch in the traced graph, outside the opaque op: exactly the inductor problem
  (vLLM issue 41106) the op exists to avoid; the wrapper is also bound by name in its
  callers (``nvidia/ops/o_proj.py`` imports it from ``common.ops``).

So the stand-in is an object whose ``__call__`` resolves the policy from the call's
arguments (T = ``num_tokens``, heads = ``grid[1]``, ...), runs :func:`kernel_call` with
the entry's tile on a hit and vLLM's object with the same arguments on a miss (or when
:mod:`.checks` refuses the call, before anything is written), and forwards every other
attribute (``register_warmup``, ``kernel``...) to vLLM's object, so vLLM's own warm-up of
its kernel stays as it is (the fallback needs those binaries).

:func:`fused_inv_rope_fp8_quant` is vLLM's function (same signature, allocation and
returned views) with our kernel, for tests and benchmarks.

Tile: ``tokens_per_program`` x ``heads_per_program`` (token x head) per program,
``num_warps``, and the ``body`` (:data:`BODIES`): ``"head_rows"`` or ``"block_rows"``,
the two kernels of :mod:`.kernel`, which write the same bytes with the same grid. The
defaults ``(1, 1, 1, "head_rows")`` are vLLM's own launch shape (one warp per (token,
head)); ``num_stages`` is not a tile field: neither body has a loop to pipeline.
``launch_pdl=None`` means vLLM's rule, ``is_arch_support_pdl()``: compute capability 9
or newer (never under the interpreter).

What the GPU cannot build is refused before anything is allocated or written
(:func:`.checks.check_arch`, a ``ValueError``): ``quantize=True`` below compute
capability 8.9 (no FP8 e4m3 in Triton there) and ``launch_pdl=True`` below 9.0. An A100
runs the op as vLLM does there, unquantized and without PDL.

The host path goes through :class:`dsv4_kernels._direct_launch.DirectLauncher`: after a
binary's first launch on a device it is launched with its C launcher directly (one
``cuLaunchKernelEx`` on the current stream, so CUDA-graph capturable: in decode this
runs inside the FULL graph capture, in prefill eagerly, where the host time counts).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import NamedTuple

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.fused_inv_rope_fp8_quant import kernel as _k
from dsv4_kernels.fused_inv_rope_fp8_quant.checks import (
    BODIES,
    DEFAULT_BODY,
    FN,
    FP8_MAX,
    Checked,
    check_arch,
    check_buffers,
    check_inputs,
    check_tile,
    fail,
    fp8_supported,
    pdl_supported,
)

EPS = 1e-10
BASELINE_TILE = (1, 1, 1, DEFAULT_BODY)
"""vLLM 0.33.0's launch: one token and one head per program, one warp (head-rows body)."""
KERNEL_CALL = "kernel_call"

_LAUNCHERS = {
    "head_rows": DirectLauncher(_k.fused_inv_rope_fp8_quant_kernel, _k.CONSTEXPRS),
    "block_rows": DirectLauncher(_k.fused_inv_rope_fp8_quant_block_rows_kernel,
                                 _k.CONSTEXPRS),
}
"""One launcher per body of :data:`BODIES`."""
assert tuple(_LAUNCHERS) == BODIES
_data_ptr = torch.Tensor.data_ptr
Pair = tuple[torch.Tensor, torch.Tensor]


class CompileKey(NamedTuple):
    """What selects one binary (with ``o`` bf16 and ``positions`` int64, as in vLLM)."""

    tokens_per_program: int
    heads_per_program: int
    num_warps: int
    body: str
    heads_per_group: int
    nope_dim: int
    rope_dim: int
    quant_group_size: int
    tma_aligned_scales: bool
    quantize: bool
    launch_pdl: bool


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not _k.COMPILED


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder (both bodies)."""
    return sum(launcher.direct_launches for launcher in _LAUNCHERS.values())


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    major, minor = torch.cuda.get_device_capability(index)
    return major, minor


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of the GPU ``device`` names, or None where no GPU runs the
    kernel (a CPU tensor, or Triton's interpreter)."""
    if device.type != "cuda" or interpreting():
        return None
    return _capability(device.index if device.index is not None else torch.cuda.current_device())


def default_launch_pdl(device: torch.device) -> bool:
    """vLLM's ``is_arch_support_pdl()`` for ``device``: sm90 and newer (False on CPU and
    under the interpreter, which has no PDL)."""
    if device.type != "cuda" or interpreting():
        return False
    capability = device_capability(device)
    return capability is not None and pdl_supported(capability)


def quantize_supported(device: torch.device) -> bool:
    """Whether ``device`` can run the FP8 output (``quantize=True``): sm89 and newer, and
    Triton's interpreter."""
    capability = device_capability(device)
    return capability is None or fp8_supported(capability)


def fused_inv_rope_fp8_quant(
    o: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    n_groups: int,
    heads_per_group: int,
    nope_dim: int = 448,
    rope_dim: int = 64,
    quant_group_size: int = 128,
    tma_aligned_scales: bool = False,
    quantize: bool = True,
    *,
    tokens_per_program: int = 1,
    heads_per_program: int = 1,
    num_warps: int = 1,
    body: str = DEFAULT_BODY,
    launch_pdl: bool | None = None,
) -> Pair:
    """vLLM's ``(output, scales)`` for the attention output ``o`` ``(T, heads, head_dim)``.

    ``output`` is ``(T, n_groups, heads_per_group * head_dim)`` (FP8 e4m3, or ``o``'s
    dtype without ``quantize``) with strides ``(d, T * d, 1)``; ``scales`` is ``(T,
    n_groups, scale_inner)`` over vLLM's MN-major TMA-aligned buffer (FP32, or packed
    UE8M0 int32 with ``tma_aligned_scales``), its pad rows zero; an empty tensor
    without ``quantize``. Bit-identical to vLLM's kernel on the GPU. Invalid arguments
    raise ``ValueError`` before anything is allocated.
    """
    checked = check_inputs(o, positions, cos_sin_cache, n_groups, heads_per_group, nope_dim,
                           rope_dim, quant_group_size, tma_aligned_scales, quantize)
    check_tile(tokens_per_program, heads_per_program, num_warps, checked.head_dim, body=body)
    pdl = _pdl(launch_pdl, checked.device)
    _require_device(checked.device, quantize, launch_pdl is True)
    out_buf, scale_buf = allocate(checked, o.dtype, n_groups, tma_aligned_scales, quantize)
    _launch(checked, o, positions, cos_sin_cache, out_buf, scale_buf, heads_per_group,
            nope_dim, rope_dim // 2, quant_group_size, tma_aligned_scales, quantize, pdl,
            tokens_per_program, heads_per_program, num_warps, body)
    return out_buf.transpose(0, 1), scale_buf.transpose(0, 1) if quantize else scale_buf


def allocate(checked: Checked, dtype: torch.dtype, n_groups: int, tma_aligned_scales: bool,
             quantize: bool) -> Pair:
    """``(out_buf, scale_buf)`` exactly as vLLM's op implementation allocates them."""
    device = checked.device
    scale_dtype = torch.int32 if tma_aligned_scales else torch.float32
    out_buf = torch.empty((n_groups, checked.num_tokens, checked.d),
                          dtype=torch.float8_e4m3fn if quantize else dtype, device=device)
    if not quantize:
        return out_buf, torch.empty(0, dtype=scale_dtype, device=device)
    inner, aligned = checked.scale_inner, checked.tma_aligned_T
    scale_buf = torch.empty(n_groups * inner * aligned, dtype=scale_dtype,
                            device=device).as_strided((n_groups, checked.num_tokens, inner),
                                                      (inner * aligned, 1, aligned))
    return out_buf, scale_buf


def kernel_call(
    o: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    out_buf: torch.Tensor,
    scale_buf: torch.Tensor,
    num_tokens: int,
    *,
    heads_per_group: int,
    quant_group_size: int,
    chunks_per_head: int,
    nope_dim: int,
    half_rope: int,
    tma_aligned_scales: bool,
    quantize: bool,
    fp8_max: float,
    launch_pdl: bool,
    grid: tuple[int, int],
    tokens_per_program: int = 1,
    heads_per_program: int = 1,
    num_warps: int = 1,
    body: str = DEFAULT_BODY,
) -> None:
    """``FusedInvRopeFP8QuantKernel.__call__``'s arguments, our kernel with a tile.

    Writes ``out_buf`` and ``scale_buf`` (including the zero pad rows) as vLLM's kernel
    object does on the buffers its op implementation allocates; every argument is
    checked against that allocation first (a ``ValueError`` before anything is written),
    so a plugin can fall back to vLLM's object on any refusal.
    """
    fn = KERNEL_CALL
    if not (isinstance(grid, tuple) and len(grid) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in grid)):
        raise fail("grid", repr(grid), "a (tma_aligned_T, num_heads) tuple of ints", fn)
    if not isinstance(out_buf, torch.Tensor) or out_buf.dim() != 3:
        raise fail("out_buf", type(out_buf).__name__ if not isinstance(
            out_buf, torch.Tensor) else f"shape {tuple(out_buf.shape)}",
            "a (n_groups, num_tokens, d) tensor", fn)
    for name, value in (("chunks_per_head", chunks_per_head), ("half_rope", half_rope),
                        ("num_tokens", num_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise fail(name, repr(value), "an int >= 0", fn)
    if not isinstance(fp8_max, float) or fp8_max != FP8_MAX:
        raise fail("fp8_max", repr(fp8_max), f"{FP8_MAX} (torch.finfo(float8_e4m3fn).max)", fn)
    if not isinstance(launch_pdl, bool):
        raise fail("launch_pdl", repr(launch_pdl), "a bool", fn)
    n_groups = out_buf.shape[0]
    checked = check_inputs(o, positions, cos_sin_cache, n_groups, heads_per_group, nope_dim,
                           2 * half_rope, quant_group_size, tma_aligned_scales, quantize, fn)
    if num_tokens != checked.num_tokens:
        raise fail("num_tokens", num_tokens, f"o.shape[0] = {checked.num_tokens}", fn)
    if chunks_per_head != checked.chunks_per_head:
        raise fail("chunks_per_head", chunks_per_head,
                   f"head_dim / quant_group_size = {checked.chunks_per_head}", fn)
    if grid != (checked.tma_aligned_T, checked.num_heads):
        raise fail("grid", repr(grid), f"({checked.tma_aligned_T}, {checked.num_heads})", fn)
    check_buffers(checked, out_buf, scale_buf, n_groups, quantize, tma_aligned_scales,
                  torch.float8_e4m3fn if quantize else o.dtype, fn)
    check_tile(tokens_per_program, heads_per_program, num_warps, checked.head_dim, fn,
               body=body)
    _require_device(checked.device, quantize, launch_pdl, fn)
    _launch(checked, o, positions, cos_sin_cache, out_buf, scale_buf, heads_per_group,
            nope_dim, half_rope, quant_group_size, tma_aligned_scales, quantize,
            launch_pdl and not interpreting(), tokens_per_program, heads_per_program,
            num_warps, body)


def _pdl(launch_pdl: bool | None, device: torch.device) -> bool:
    if launch_pdl is None:
        return default_launch_pdl(device)
    if not isinstance(launch_pdl, bool):
        raise fail("launch_pdl", repr(launch_pdl), "a bool or None (vLLM's rule)")
    return launch_pdl and not interpreting()


def _require_device(device: torch.device, quantize: bool, launch_pdl: bool,
                    fn: str = FN) -> None:
    """A GPU (or the interpreter) that can build this call's binary."""
    if device.type != "cuda" and not interpreting():
        raise fail("o", f"device {device}", "a GPU device (or run with TRITON_INTERPRET=1 "
                   "to use Triton's CPU interpreter)", fn)
    check_arch(device_capability(device), quantize, launch_pdl, fn)


def _launch(checked: Checked, o: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor,
            out_buf: torch.Tensor, scale_buf: torch.Tensor, heads_per_group: int,
            nope_dim: int, half_rope: int, quant_group_size: int, tma: bool, quantize: bool,
            pdl: bool, tpp: int, hpp: int, num_warps: int, body: str) -> None:
    rows = checked.tma_aligned_T
    if rows == 0 or checked.num_heads == 0:
        return
    tensors = (o, positions, cache, out_buf, scale_buf)
    # Row strides in units of 16 elements (checks.py: multiples of 16 wherever used).
    scalars = (checked.num_tokens, rows, checked.num_heads, o.stride(0) // 16,
               o.stride(1) // 16, cache.stride(0) // 16,
               scale_buf.stride(0) if quantize else 0, scale_buf.stride(2) if quantize else 0)
    constexprs = (heads_per_group, FP8_MAX, EPS, quant_group_size, checked.chunks_per_head,
                  nope_dim, half_rope, quantize, tma, tpp, hpp, checked.arg_dtypes, pdl)
    device = checked.device
    index = (device.index if device.index is not None else torch.cuda.current_device()) if (
        device.type == "cuda") else -1
    _LAUNCHERS[body](index, -(-rows // tpp), -(-checked.num_heads // hpp), tensors,
              tuple(map(_data_ptr, tensors)), scalars, constexprs, num_warps)


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose :class:`CompileKey` was not seen before on its device adds one; a new
    token count, head count (at the same heads per group) or buffer does not. Both bodies
    count. Always 0 under ``TRITON_INTERPRET=1``, where nothing is compiled.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey | tuple], device: torch.device | str) -> int:
    """Build the binary of every compile key on ``device``; returns how many were new.

    Each key is launched once on tiny real buffers (one token, one group, bf16 ``o``,
    int64 positions, a 2-row table), the same specialisation as every later launch.
    Raises ``ValueError`` on an invalid key, or one ``device`` cannot build (FP8 output
    below sm89, PDL below sm90), before launching anything.
    """
    keys = [CompileKey(*config) for config in configs]
    device = torch.device(device)
    capability = device_capability(device)
    for key in keys:
        check_tile(key.tokens_per_program, key.heads_per_program, key.num_warps,
                   key.nope_dim + key.rope_dim, fn="warmup", body=key.body)
        check_arch(capability, key.quantize, key.launch_pdl, "warmup")
    before = compile_count()
    for key in dict.fromkeys(keys):
        head_dim = key.nope_dim + key.rope_dim
        o = torch.ones((1, key.heads_per_group, head_dim), dtype=torch.bfloat16, device=device)
        positions = torch.zeros(1, dtype=torch.int64, device=device)
        cache = torch.ones((2, key.rope_dim), dtype=torch.float32, device=device)
        fused_inv_rope_fp8_quant(
            o, positions, cache, 1, key.heads_per_group, key.nope_dim, key.rope_dim,
            key.quant_group_size, key.tma_aligned_scales, key.quantize,
            tokens_per_program=key.tokens_per_program, heads_per_program=key.heads_per_program,
            num_warps=key.num_warps, body=key.body, launch_pdl=key.launch_pdl)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
