"""The Triton kernel behind :mod:`dsv4_kernels.fused_inv_rope_fp8_quant.launch`.

What it computes is vLLM 0.33.0's ``FusedInvRopeFP8QuantKernel.kernel`` (see
:mod:`.reference` for the specification): for every token ``t < num_tokens`` and head
``h``, the head's ``head_dim`` values (bf16, loaded and widened to fp32) get the inverse
interleaved (GPT-J) rotation on their last ``rope_dim`` lanes, then either go out as
they are (``QUANTIZE=False``, stored in the output's dtype) or are quantised to FP8
e4m3 in blocks of ``QUANT_GROUP_SIZE`` lanes, one power-of-two scale per block, written
in the MN-major scale layout ``fp8_einsum`` reads (FP32, or four UE8M0 bytes packed in
an int32 with ``TMA_ALIGNED_SCALES``). Scale rows ``num_tokens <= t < rows`` (the pad up
to the TMA-aligned token count) are written as zeros, as vLLM's kernel writes them.

Why a new body: vLLM launches one single-warp program per (token, head), each moving
1 KB in and 528 B out; at decode sizes that leaves the GPU latency bound far above its
byte floor, and no launch setting of that body helps. Here one program owns a tile of
``BLOCK_T`` tokens x ``BLOCK_H`` heads as one 3-D ``[BLOCK_T, BLOCK_H, HEAD_DIM]``
block: whole heads are loaded as contiguous vectors, each token's cos/sin row is loaded
once as a ``[BLOCK_T, 1, HEAD_DIM]`` block and broadcast over the tile's heads, and the
tile's scales are stored together (for one scale column the tile's tokens are adjacent
in the MN-major layout). Grid: ``(cdiv(rows, BLOCK_T), cdiv(num_heads, BLOCK_H))``.

Bit-identity with vLLM's kernel comes from doing every floating-point operation of an
element in the same form and order: ``.to(float32)`` of the loaded value; partner lane
``d ^ 1`` loaded with the same masks and fill values (partner 0, cos 1, sin 0 outside
the rope lanes); ``x * cos + x_partner * sin`` and ``x * cos - x_partner * sin`` written
as vLLM writes them (so the compiler contracts them into the same fused multiply-adds);
``max(|x|)`` per block, ``maximum(amax, eps)``, ``* (1.0 / fp8_max)``,
``exp2(ceil(log2(.)))``, ``x / scale`` (a true division, not a reciprocal multiply),
``clamp(-fp8_max, fp8_max)`` and the ``float8e4nv`` cast; the UE8M0 byte is bits 23..30
of the FP32 scale, packed little-endian four to an int32 with an integer sum.

PDL: with ``launch_pdl`` (vLLM passes ``is_arch_support_pdl()``, true on sm90+) the
program first allows its dependents to launch and then waits for its predecessor's
results (``gdc_launch_dependents``, ``gdc_wait``), as vLLM's kernel does; Triton also
takes the constexpr named ``launch_pdl`` as its launch option, so the launch carries the
programmatic-serialization attribute exactly when vLLM's does.

``ARG_DTYPES`` is not used by the body: it names the dtypes of ``o`` and ``positions``
(which select a binary as argument types do) among the constexprs, so that a launcher
keyed by the constexprs (:class:`dsv4_kernels._direct_launch.DirectLauncher`) never
reuses one dtype's binary for another.

Compile key: the constexprs (``HEADS_PER_GROUP``, ``fp8_max``, ``eps``, the head
geometry, ``QUANTIZE``, ``TMA_ALIGNED_SCALES``, the tile and ``launch_pdl``) plus
``num_warps``; every scalar that changes with the token count (and the head count) is
in ``do_not_specialize``, so a new T reuses the binary. All addresses are int64, as in
vLLM's kernel (which casts every stride), so large prefill batches never wrap.
"""

from __future__ import annotations

import triton
import triton.language as tl

RUNTIME_ARGS: tuple[str, ...] = (
    "num_tokens",
    "rows",
    "num_heads",
    "out_stride_group",
    "scale_stride_group",
    "scale_stride_k",
)
"""Scalars that vary with the batch (or the deployment's head count): never specialised."""

CONSTEXPRS: tuple[str, ...] = (
    "HEADS_PER_GROUP",
    "fp8_max",
    "eps",
    "QUANT_GROUP_SIZE",
    "CHUNKS_PER_HEAD",
    "NOPE_DIM",
    "HALF_ROPE",
    "QUANTIZE",
    "TMA_ALIGNED_SCALES",
    "BLOCK_T",
    "BLOCK_H",
    "ARG_DTYPES",
    "launch_pdl",
)
"""The kernel's constexpr parameters, in signature order (after every run-time one)."""


@triton.jit(do_not_specialize=list(RUNTIME_ARGS))
def fused_inv_rope_fp8_quant_kernel(
    o_ptr,
    positions_ptr,
    cos_sin_cache_ptr,
    out_ptr,
    scale_ptr,
    num_tokens,
    rows,
    num_heads,
    o_stride_token,
    o_stride_head,
    cache_stride_pos,
    out_stride_group,
    out_stride_token,
    scale_stride_group,
    scale_stride_k,
    HEADS_PER_GROUP: tl.constexpr,
    fp8_max: tl.constexpr,
    eps: tl.constexpr,
    QUANT_GROUP_SIZE: tl.constexpr,
    CHUNKS_PER_HEAD: tl.constexpr,
    NOPE_DIM: tl.constexpr,
    HALF_ROPE: tl.constexpr,
    QUANTIZE: tl.constexpr,
    TMA_ALIGNED_SCALES: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    ARG_DTYPES: tl.constexpr,
    launch_pdl: tl.constexpr,
):
    HEAD_DIM: tl.constexpr = CHUNKS_PER_HEAD * QUANT_GROUP_SIZE
    if launch_pdl:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()

    tok = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    head = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H).to(tl.int64)
    lane = tl.arange(0, HEAD_DIM)
    live_t = tok < num_tokens
    live_h = head < num_heads
    group = head // HEADS_PER_GROUP
    head_in_group = head % HEADS_PER_GROUP

    t3 = tok[:, None, None]
    g3 = group[None, :, None]
    hg3 = head_in_group[None, :, None]
    d3 = lane[None, None, :]
    live3 = live_t[:, None, None] & live_h[None, :, None] & (d3 < HEAD_DIM)

    src = (o_ptr + t3 * o_stride_token.to(tl.int64)
           + head[None, :, None] * o_stride_head.to(tl.int64))
    x = tl.load(src + d3, mask=live3, other=0.0).to(tl.float32)

    # The rope lanes as (even, odd) pairs: vLLM's lane d with partner d ^ 1 (NOPE_DIM is
    # even), written per pair with the lane's own value first, as vLLM's expression is.
    ROPE: tl.constexpr = 2 * HALF_ROPE
    half = tl.arange(0, HALF_ROPE)
    pos = tl.load(positions_ptr + tok, mask=live_t, other=0).to(tl.int64)
    cache_row = cos_sin_cache_ptr + pos[:, None, None] * cache_stride_pos.to(tl.int64)
    live_c = live_t[:, None, None] & (half < HALF_ROPE)[None, None, :]
    cos_v = tl.load(cache_row + half[None, None, :], mask=live_c, other=1.0)
    sin_v = tl.load(cache_row + HALF_ROPE + half[None, None, :], mask=live_c, other=0.0)
    pair = tl.arange(0, 2)[None, None, None, :]
    live_rows = live_t[:, None, None] & live_h[None, :, None]
    live4 = live_rows[:, :, :, None] & (half < HALF_ROPE)[None, None, :, None] & (pair < 2)
    xr = tl.load(src[:, :, :, None] + NOPE_DIM + 2 * half[None, None, :, None] + pair,
                 mask=live4, other=0.0).to(tl.float32)
    x_even, x_odd = tl.split(xr)
    rot_even = x_even * cos_v + x_odd * sin_v
    rot_odd = x_odd * cos_v - x_even * sin_v
    rope = tl.reshape(tl.join(rot_even, rot_odd), (BLOCK_T, BLOCK_H, ROPE))
    r3 = tl.arange(0, ROPE)[None, None, :]
    live_r = live_rows & (r3 < ROPE)
    is_nope = live3 & (d3 < NOPE_DIM)

    dst = (out_ptr + g3 * out_stride_group.to(tl.int64) + t3 * out_stride_token.to(tl.int64)
           + hg3 * HEAD_DIM)
    if not QUANTIZE:
        tl.store(dst + d3, x, mask=is_nope)
        tl.store(dst + NOPE_DIM + r3, rope, mask=live_r)
    else:
        # Block amax over the nope lanes (rope lanes as 0) and over the rotated rope
        # lanes of each block: max is exact, so this is vLLM's max over the block.
        x_nope = tl.where(d3 < NOPE_DIM, x, 0.0)
        amax_nope = tl.max(tl.abs(tl.reshape(
            x_nope, (BLOCK_T, BLOCK_H, CHUNKS_PER_HEAD, QUANT_GROUP_SIZE))), axis=3)
        chunk = tl.arange(0, CHUNKS_PER_HEAD)[None, None, :, None]
        in_chunk = ((NOPE_DIM + r3) // QUANT_GROUP_SIZE)[:, :, None, :] == chunk
        amax_rope = tl.max(tl.where(in_chunk, tl.abs(rope)[:, :, None, :], 0.0), axis=3)
        block_absmax = tl.maximum(tl.maximum(amax_nope, amax_rope), eps)
        scale_raw = block_absmax * (1.0 / fp8_max)
        scales = tl.math.exp2(tl.ceil(tl.log2(scale_raw)))

        x4 = tl.reshape(x, (BLOCK_T, BLOCK_H, CHUNKS_PER_HEAD, QUANT_GROUP_SIZE))
        q_nope = tl.clamp(x4 / scales[:, :, :, None], -fp8_max, fp8_max).to(tl.float8e4nv)
        tl.store(dst + d3, tl.reshape(q_nope, (BLOCK_T, BLOCK_H, HEAD_DIM)), mask=is_nope)
        rope_scale = tl.sum(tl.where(in_chunk, scales[:, :, :, None], 0.0), axis=2)
        q_rope = tl.clamp(rope / rope_scale, -fp8_max, fp8_max).to(tl.float8e4nv)
        tl.store(dst + NOPE_DIM + r3, q_rope, mask=live_r)

        # Scale rows [num_tokens, rows) are the TMA pad: zeros, as vLLM writes them.
        in_rows = (tok < rows)[:, None, None] & live_h[None, :, None]
        pad = ~live_t[:, None, None]
        scale_base = (scale_ptr + g3 * scale_stride_group.to(tl.int64) + t3)
        stride_k = scale_stride_k.to(tl.int64)
        if TMA_ALIGNED_SCALES:
            PACKED: tl.constexpr = CHUNKS_PER_HEAD // 4
            ue8m0 = (scales.to(tl.int32, bitcast=True) >> 23) & 0xFF
            shifts = tl.arange(0, 4)[None, None, None, :] * 8
            packed = tl.sum(tl.reshape(ue8m0, (BLOCK_T, BLOCK_H, PACKED, 4)) << shifts, axis=3)
            packed = tl.where(pad, 0, packed)
            k = hg3 * PACKED + tl.arange(0, PACKED)[None, None, :]
            tl.store(scale_base + k * stride_k, packed, mask=in_rows & (k >= 0))
        else:
            scales = tl.where(pad, 0.0, scales)
            k = hg3 * CHUNKS_PER_HEAD + tl.arange(0, CHUNKS_PER_HEAD)[None, None, :]
            tl.store(scale_base + k * stride_k, scales, mask=in_rows & (k >= 0))


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel in this process, over all devices (0 when
    Triton's interpreter runs it)."""
    caches = getattr(fused_inv_rope_fp8_quant_kernel, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())
