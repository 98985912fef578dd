"""The Triton kernels behind :mod:`dsv4_kernels.fused_inv_rope_fp8_quant.launch`: two
bodies of one signature, the head-rows body (:func:`fused_inv_rope_fp8_quant_kernel`,
described here) and the block-rows body
(:func:`fused_inv_rope_fp8_quant_block_rows_kernel`, described in its docstring). They
write the same bytes; a tile's ``body`` picks one.

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
``BLOCK_T`` tokens x ``BLOCK_H`` heads, flattened to ``BLOCK_T * BLOCK_H`` rows (row
``i`` is token ``i // BLOCK_H``, head ``i % BLOCK_H`` of the tile), each row one head as a
``[CHUNKS_PER_HEAD, QUANT_GROUP_SIZE]`` block: the quantisation blocks are an axis of
the tile, so a block's amax is one reduction and its scale broadcasts back without a
reshape. The rope lanes are a separate ``[rows, rope_dim]`` strip, so the rotation's
partner and cos/sin loads are issued for the rope lanes only (vLLM's body issues them,
masked, for every lane). Grid: ``(cdiv(rows, BLOCK_T), cdiv(num_heads, BLOCK_H))``.

What made the decode sizes fast (H200, CUDA-graph replay, 2026-12-02): the output
strides are computed here from constexprs (``d = HEADS_PER_GROUP * HEAD_DIM`` per token,
``num_tokens * d`` per group, the layout vLLM allocates and :mod:`.checks` enforces), so
the compiler knows they are multiples of 16 and stores whole 16-byte vectors; passed as
an unspecialised argument, the per-group stride had no known alignment and every FP8
store was split into single bytes (T=256 with 64 heads: 11.7 -> 8.6 us). The input
row strides get the same treatment: :mod:`.checks` requires them to be multiples of 16
elements wherever they are used, so the launcher passes them in units of 16 elements
(``*_16``) and the body multiplies back by 16, which lets the compiler vectorise the
loads while no stride is ever specialised into a binary.

Bit-identity with vLLM's kernel comes from doing every floating-point operation of an
element in the same form and order: ``.to(float32)`` of the loaded value; partner lane
``d ^ 1`` of each rope lane; ``x * cos + x_partner * sin`` and ``x * cos - x_partner *
sin`` written as vLLM writes them (so the compiler contracts them into the same fused
multiply-adds) and chosen by the lane's parity; ``max(|x|)`` per block (exact in any
order), ``maximum(amax, eps)``, ``* (1.0 / fp8_max)``, ``exp2(ceil(log2(.)))``,
``clamp(-fp8_max, fp8_max)`` and the ``float8e4nv`` cast; the UE8M0 byte is bits 23..30
of the FP32 scale, packed little-endian four to an int32 with an integer sum. Two
operations differ in form and not in value. The scale ``exp2(ceil(log2(.)))`` is read
off the bits of its argument (:func:`_exp2_ceil_log2` says why that is the same float at
every input, and which tests check it at every float32). And vLLM divides every lane by
its block's scale, this body multiplies it by the scale's reciprocal. A scale is
``exp2`` of an integer, a power of two ``2**e`` with ``-42 <= e <= 120`` (``eps /
fp8_max`` rounded up, and the largest bf16 over ``fp8_max``), so its reciprocal
``2**-e`` is an exact normal float, written straight from the scale's exponent bits
(``(254 - biased) << 23``; no division is issued at all), and ``x * 2**-e`` is the same
correctly rounded value as ``x / scale`` for every ``x``. An infinite block (scale
``inf``) takes the reciprocal 0, which gives signed zeros, and NaN for the infinite
lane, as the division does; a NaN scale stays NaN. The kernels GPU test
``test_every_scale_exponent_bitwise`` runs blocks at every one of the 163 scales against
the specification, and ``test_special_values_bitwise`` subnormals and signed zeros; the
bench's bitwise sweep checks infinities and NaN against vLLM's kernel, since what a NaN
becomes is Triton's clamp and cast. (H200, CUDA-graph replay, best tile: the per-block
``1 / scale`` instead of a division per lane took 8 heads at T=512 from 3.76 to 3.19 µs;
the exponent-bit reciprocal then took 64 heads at T=64 from 3.03 to 2.70 µs.)

Where every rope lane falls in one quantisation block (``ONE_ROPE_CHUNK``, true for
DeepSeek-V4's 448 + 64 lanes in 128-lane blocks), that block's amax is the nope lanes'
max joined with one ``[rows]`` max of the rotated lanes, and the rope strip takes that
block's reciprocal with a 4-wide select; the general path (rope lanes over several
blocks) broadcasts the strip against every block. Max is exact in any order, so both
give vLLM's amax (64 heads at T=100: 4.21 -> 3.63 µs).

PDL: with ``launch_pdl`` (vLLM passes ``is_arch_support_pdl()``, true on sm90+) the
program allows its dependents to launch and then waits for its predecessor's results
(``gdc_launch_dependents``, ``gdc_wait``), as vLLM's kernel does; Triton also takes the
constexpr named ``launch_pdl`` as its launch option, so the launch carries the
programmatic-serialization attribute exactly when vLLM's does. One thing moves: the
positions and their cos/sin rows are loaded *before* the wait, and only ``o`` after it.
That takes the two dependent round trips (position, then its table row) off the path
that starts when the predecessor finishes (H200, back-to-back graph: 8 heads T=64 1.52
-> 1.36 µs; 64 heads T=64 3.76 -> 3.13 µs). It is safe because of where the op sits:
``positions`` is the step's input, written before the step starts (the copy into the
persistent buffer precedes the graph's replay or the eager forward), and
``cos_sin_cache`` is the rotary table, written when the model loads; neither is written
by the attention kernels that run just before this op, which is all a PDL launch can
overlap. ``o`` is that predecessor's output and is only read after ``gdc_wait``, which
the GPU test ``test_pdl_wait_guards_o`` checks: a preceding kernel that releases its
dependents first and writes ``o`` last must still be seen. A caller whose positions or
table are written by the kernel immediately before this op must launch it without PDL.

The addresses move too: each row's addresses in ``o`` and in the output, and the start
of its scales, are made before the wait and handed through its instruction
(:func:`_pdl_wait_returning`), so little but the data's own arithmetic runs after it
(compiled for sm90, the head-rows body's tile (2, 1, 1) runs 408 instructions after the
wait; the same code with the addresses made after the wait runs 453).

``ARG_DTYPES`` is not used by the body: it names the dtypes of ``o`` and ``positions``
(which select a binary as argument types do) among the constexprs, so that a launcher
keyed by the constexprs (:class:`dsv4_kernels._direct_launch.DirectLauncher`) never
reuses one dtype's binary for another.

Compile key: the constexprs (``HEADS_PER_GROUP``, ``fp8_max``, ``eps``, the head
geometry, ``QUANTIZE``, ``TMA_ALIGNED_SCALES``, the tile and
``launch_pdl``) plus ``num_warps``; every scalar argument is in ``do_not_specialize``, so
a new T, head count or buffer reuses the binary and nothing about a scalar is baked into
it. All addresses are int64, as in vLLM's kernel (which casts every stride), so large
prefill batches never wrap.
"""

from __future__ import annotations

import triton
import triton.language as tl

RUNTIME_ARGS: tuple[str, ...] = (
    "num_tokens",
    "rows",
    "num_heads",
    "o_stride_token_16",
    "o_stride_head_16",
    "cache_stride_pos_16",
    "scale_stride_group",
    "scale_stride_k",
)
"""Every scalar argument: never specialised (the input strides arrive in units of 16
elements)."""

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


@triton.jit
def _tile_rows(head_row, num_tokens, num_heads, HEADS_PER_GROUP: tl.constexpr,
               BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """Where head-row ``head_row`` of this program's ``BLOCK_T`` x ``BLOCK_H`` tile lies
    (token ``head_row // BLOCK_H``, head ``head_row % BLOCK_H`` of the tile), both bodies'
    one indexing: ``(tok, head, live_t, live_h, live, group, head_in_group)``, int64."""
    tok = tl.program_id(0).to(tl.int64) * BLOCK_T + (head_row // BLOCK_H).to(tl.int64)
    head = tl.program_id(1).to(tl.int64) * BLOCK_H + (head_row % BLOCK_H).to(tl.int64)
    live_t = tok < num_tokens
    live_h = head < num_heads
    return (tok, head, live_t, live_h, live_t & live_h, head // HEADS_PER_GROUP,
            head % HEADS_PER_GROUP)


@triton.jit
def _exp2_ceil_log2(x):
    """``exp2(ceil(log2(x)))`` for float32 ``x >= 2**-43`` (and +inf, NaN), the value
    vLLM's kernel computes with Triton's ``log2``, ``ceil`` and ``exp2``, made from
    ``x``'s bits with one fused multiply-add instead of ``log2``'s polynomial, which sat
    on every block's dependent chain after the PDL wait.

    Why it is the same value: write ``x = 2**e * (1 + f)``, ``f = m * 2**-23``. ``log2``
    reduces ``x`` to ``e`` and a remainder ``L ~ log2(1 + f)``, and its last step is the
    float32 sum ``e + L``. ``ceil`` gives ``e + 1`` exactly when that sum rounds above
    ``e``, that is when ``L`` exceeds half of float32's spacing next to ``e`` (for ``e =
    0``, whenever ``L > 0``); otherwise the sum is ``e`` and so is the ceiling. Here the
    same sum is made with ``L`` replaced by ``f * (1 / ln 2)`` in one fused multiply-add
    and compared with ``e``: the result, ``e`` or ``e + 1``, goes straight into the
    scale's exponent bits. For each ``e`` both sums grow with ``m``, so they agree at
    every ``m`` once they agree on the first ``m`` that rounds up: ``m > 2**(k - 1) *
    ln 2`` where ``2**k`` is the power of two at or below ``|e|`` (``|e + 1|`` for ``e <
    0``), which gives ``m`` = 1, 2, 3, 6, 12 and 23 from ``|e|`` = 1, 4, 8, 16, 32 and 64.
    The multiplier may be anything from 1.392 to 1.454 (``1 / ln 2 = 1.4427``) without
    moving one of those thresholds, so neither ``log2``'s error nor the constant's
    rounding changes a result. The GPU test ``test_exp2_ceil_log2_every_float`` compares it
    with the compiled ``exp2(ceil(log2(x)))`` at every float32 from ``2**-43`` to
    ``2**121``, +inf and NaN, and the CPU test ``test_exp2_ceil_log2_thresholds`` with
    torch's float32 ``log2`` around every threshold.

    ``x`` here is ``max(amax, eps) / fp8_max >= 2**-43``; +inf gives +inf (``e = 128``,
    ``f = 0``) and NaN comes back as it came."""
    bits = x.to(tl.int32, bitcast=True)
    e = ((bits >> 23) - 127).to(tl.float32)
    fraction = ((bits & 0x7FFFFF) | 0x3F800000).to(tl.float32, bitcast=True) - 1.0
    rounds_up = tl.fma(fraction, 1.4426950408889634, e) > e
    scale = ((bits & 0x7F800000) + tl.where(rounds_up, 0x800000, 0)).to(tl.float32,
                                                                      bitcast=True)
    return tl.where(x != x, x, scale)


@triton.jit
def _power_of_two_scale(block_absmax, fp8_max: tl.constexpr):
    """vLLM's block scale ``exp2(ceil(log2(amax * (1 / fp8_max))))`` (``block_absmax``
    already floored at ``eps``; :func:`_exp2_ceil_log2`) and its exact reciprocal.

    A scale is a power of two 2**e, -42 <= e <= 120, or +inf (a block holding an
    infinity; NaN passes through as NaN). Its reciprocal 2**-e is exact, written from the
    exponent bits ((127 - e) << 23 = 0x7F000000 minus the scale's bits), and x * 2**-e is
    x / scale bit for bit: no division at all. Infinity's bits give a negative number,
    taken to 0 (+0.0: signed zeros, and NaN for the infinite lane, as the division
    gives); NaN stays NaN."""
    scales = _exp2_ceil_log2(block_absmax * (1.0 / fp8_max))
    inv = tl.maximum(0x7F000000 - scales.to(tl.int32, bitcast=True), 0).to(tl.float32,
                                                                          bitcast=True)
    return scales, tl.where(scales != scales, scales, inv)


@triton.jit
def _pdl_wait_returning(src, dst, scale_at, SRC_ALIGN: tl.constexpr, DST_ALIGN: tl.constexpr):
    """The PDL wait (``griddepcontrol.wait``), handing a row's three addresses back
    through it: in ``o``, in the output and in the scales (both bodies; the block-rows
    body's packed UE8M0 scales, addressed per four blocks, are addressed after it).

    Why: the compiler places the arithmetic of an address next to its load or store, so
    with a plain ``gdc_wait`` every address (a dozen dependent integer operations each)
    was computed after the wait, on the path that starts when the predecessor finishes,
    where at decode sizes up to four warps share each scheduler and every instruction
    counts. As inputs of the wait's own instruction they are computed before it, and the
    load of ``o``, whose addresses come out of it, cannot move above the wait. The asm
    is pure, so the compiler drops the copies it makes while choosing layouts (a
    side-effecting one kept its wait in every copy: 12 waits at tile (4, 2, 16)). The
    compiler cannot see through the instruction, so the caller restates the alignment, in
    bytes, of ``src`` and ``dst`` (without it, nothing is vectorised; it is stated here,
    on the values the casts make, where the compiler keeps it)."""
    src_out, dst_out, scale_out = tl.inline_asm_elementwise(
        "griddepcontrol.wait;\n\tmov.b64 $0, $3;\n\tmov.b64 $1, $4;\n\tmov.b64 $2, $5;",
        "=l,=l,=l,l,l,l", [src.to(tl.int64), dst.to(tl.int64), scale_at.to(tl.int64)],
        dtype=(tl.int64, tl.int64, tl.int64), is_pure=True, pack=1)
    return (tl.multiple_of(src_out.to(src.dtype), SRC_ALIGN),
            tl.multiple_of(dst_out.to(dst.dtype), DST_ALIGN), scale_out.to(scale_at.dtype))


@triton.jit
def _store_per_row(ptrs, values, mask):
    """``tl.store(ptrs, values, mask=mask)`` of one 32-bit value per row, straight from
    the layout the row's reduction left it in.

    Why: a reduction's result is held by every thread of its row, and ``tl.store``
    first moves it to a layout with one owner per value, through shared memory and two
    barriers that every warp of the program waits at (about 10 % of the block-rows
    body's instructions after the PDL wait at tile (4, 2, 8), sm90). Here each thread
    stores the value it holds; the threads of a row write the same 4 bytes to the same
    address. Triton's CPU interpreter runs no PTX, so there it is ``tl.store``."""
    if _COMPILED:
        tl.inline_asm_elementwise(
            "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t@p st.global.b32 [$1], $3;"
            "\n\tmov.b32 $0, 0;\n\t}",
            "=r,l,r,r", [ptrs.to(tl.int64), mask.to(tl.int32), values.to(tl.int32, bitcast=True)],
            dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.store(ptrs, values, mask=mask)


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
    o_stride_token_16,
    o_stride_head_16,
    cache_stride_pos_16,
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
    OUT_ROW: tl.constexpr = HEADS_PER_GROUP * HEAD_DIM
    ROWS: tl.constexpr = BLOCK_T * BLOCK_H
    ROPE: tl.constexpr = 2 * HALF_ROPE
    tok, head, live_t, live_h, live, group, head_in_group = _tile_rows(
        tl.arange(0, ROWS), num_tokens, num_heads, HEADS_PER_GROUP, BLOCK_T, BLOCK_H)

    # The rope strip: lanes NOPE_DIM + j, j < ROPE, each with vLLM's per-lane expression
    # (partner lane (NOPE_DIM + j) ^ 1, cos/sin column j >> 1; NOPE_DIM is even). The
    # positions and their cos/sin rows are the step's inputs, never the preceding
    # kernel's output (see the module docstring), so they are read before the PDL wait.
    j = tl.arange(0, ROPE)[None, :]
    live2 = live[:, None] & (j < ROPE)
    pos = tl.load(positions_ptr + tok, mask=live_t, other=0)
    cache_row = (cos_sin_cache_ptr
                 + pos * (cache_stride_pos_16.to(tl.int64) * 16))[:, None]
    cs = j >> 1
    cos_v = tl.load(cache_row + cs, mask=live2, other=1.0)
    sin_v = tl.load(cache_row + HALF_ROPE + cs, mask=live2, other=0.0)
    # Each head-row's addresses in ``o``, in the output (vLLM's (n_groups, num_tokens, d)
    # buffer, contiguous: checks.py; strides from constexprs) and in the scales, made
    # before the PDL wait and handed through it.
    row_src = (o_ptr + tok * (o_stride_token_16.to(tl.int64) * 16)
               + head * (o_stride_head_16.to(tl.int64) * 16))
    row_dst = (out_ptr + group * (num_tokens.to(tl.int64) * OUT_ROW) + tok * OUT_ROW
               + head_in_group * HEAD_DIM)
    scale_row = scale_ptr + group * scale_stride_group.to(tl.int64) + tok
    if launch_pdl:
        tl.extra.cuda.gdc_launch_dependents()
        # In bytes: 16-byte aligned buffers (checks.py), rows of 16 elements of ``o`` and
        # of HEAD_DIM elements of the output (FP8, or bf16 when not quantising).
        row_src, row_dst, scale_row = _pdl_wait_returning(
            row_src, row_dst, scale_row, 16, min(16, HEAD_DIM * (1 if QUANTIZE else 2)))

    # Each row as [CHUNKS_PER_HEAD, QUANT_GROUP_SIZE]: lane d = chunk * group size + k.
    # ``o`` is the preceding kernel's output: read only after the wait.
    chunk = tl.arange(0, CHUNKS_PER_HEAD)[None, :, None]
    d = chunk * QUANT_GROUP_SIZE + tl.arange(0, QUANT_GROUP_SIZE)[None, None, :]
    live3 = live[:, None, None] & (d < HEAD_DIM)
    x = tl.load(row_src[:, None, None] + d, mask=live3, other=0.0).to(tl.float32)
    xr = tl.load(row_src[:, None] + NOPE_DIM + j, mask=live2, other=0.0).to(tl.float32)
    x_partner = tl.load(row_src[:, None] + ((NOPE_DIM + j) ^ 1), mask=live2,
                        other=0.0).to(tl.float32)
    x_add = xr * cos_v + x_partner * sin_v
    x_sub = xr * cos_v - x_partner * sin_v
    rope = tl.where((j & 1) == 0, x_add, x_sub)

    is_nope = live3 & (d < NOPE_DIM)
    if not QUANTIZE:
        tl.store(row_dst[:, None, None] + d, x, mask=is_nope)
        tl.store(row_dst[:, None] + NOPE_DIM + j, rope, mask=live2)
    else:
        # Block amax: the nope lanes of each block (rope lanes as 0) and the rotated rope
        # lanes that fall in it; max is exact, so this is vLLM's max over the block.
        amax_nope = tl.max(tl.abs(tl.where(d < NOPE_DIM, x, 0.0)), axis=2)
        ROPE_CHUNK: tl.constexpr = NOPE_DIM // QUANT_GROUP_SIZE
        ONE_ROPE_CHUNK: tl.constexpr = (NOPE_DIM + ROPE - 1) // QUANT_GROUP_SIZE == ROPE_CHUNK
        if ONE_ROPE_CHUNK:
            # Every rope lane falls in block ROPE_CHUNK (DeepSeek-V4: lanes 448..511 in the
            # last 128-lane block): one [rows] max joins that block's nope max.
            is_rope_chunk = tl.arange(0, CHUNKS_PER_HEAD)[None, :] == ROPE_CHUNK
            amax_rope = tl.max(tl.abs(rope), axis=1)
            block_absmax = tl.maximum(
                tl.where(is_rope_chunk, tl.maximum(amax_nope, amax_rope[:, None]), amax_nope),
                eps)
        else:
            in_chunk = (((NOPE_DIM + j) // QUANT_GROUP_SIZE)[:, None, :]
                        == tl.arange(0, CHUNKS_PER_HEAD)[None, :, None])
            amax_rope = tl.max(tl.where(in_chunk, tl.abs(rope)[:, None, :], 0.0), axis=2)
            block_absmax = tl.maximum(tl.maximum(amax_nope, amax_rope), eps)
        scales, inv = _power_of_two_scale(block_absmax, fp8_max)
        q = tl.clamp(x * inv[:, :, None], -fp8_max, fp8_max).to(tl.float8e4nv)
        tl.store(row_dst[:, None, None] + d, q, mask=is_nope)
        if ONE_ROPE_CHUNK:
            rope_inv = tl.sum(tl.where(is_rope_chunk, inv, 0.0), axis=1)[:, None]
        else:
            rope_inv = tl.sum(tl.where(in_chunk, inv[:, :, None], 0.0), axis=1)
        q_rope = tl.clamp(rope * rope_inv, -fp8_max, fp8_max).to(tl.float8e4nv)
        tl.store(row_dst[:, None] + NOPE_DIM + j, q_rope, mask=live2)

        # Scale rows [num_tokens, rows) are the TMA pad: zeros, as vLLM writes them.
        in_rows = ((tok < rows) & live_h)[:, None]
        pad = (~live_t)[:, None]
        scale_row = scale_row[:, None]
        stride_k = scale_stride_k.to(tl.int64)
        if TMA_ALIGNED_SCALES:
            PACKED: tl.constexpr = CHUNKS_PER_HEAD // 4
            ue8m0 = (scales.to(tl.int32, bitcast=True) >> 23) & 0xFF
            shifts = tl.arange(0, 4)[None, None, :] * 8
            packed = tl.sum(tl.reshape(ue8m0, (ROWS, PACKED, 4)) << shifts, axis=2)
            packed = tl.where(pad, 0, packed)
            k = head_in_group[:, None] * PACKED + tl.arange(0, PACKED)[None, :]
            tl.store(scale_row + k * stride_k, packed, mask=in_rows & (k >= 0))
        else:
            scales = tl.where(pad, 0.0, scales)
            k = head_in_group[:, None] * CHUNKS_PER_HEAD + tl.arange(0, CHUNKS_PER_HEAD)[None, :]
            tl.store(scale_row + k * stride_k, scales, mask=in_rows & (k >= 0))


# --------------------------------------------------------------------------- block rows
@triton.jit(do_not_specialize=list(RUNTIME_ARGS))
def fused_inv_rope_fp8_quant_block_rows_kernel(
    o_ptr,
    positions_ptr,
    cos_sin_cache_ptr,
    out_ptr,
    scale_ptr,
    num_tokens,
    rows,
    num_heads,
    o_stride_token_16,
    o_stride_head_16,
    cache_stride_pos_16,
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
    """The block-rows body: every quantisation block a row of the tile.

    It computes exactly what the head-rows body computes, with the same signature,
    constexprs and launch grid, so :mod:`.launch` runs either one for a tile and the
    policy's table says which (``body = "block_rows"``).

    Why a second body: at decode sizes a call is a few hundred programs whose time is
    the dependent chain each warp runs after the PDL wait, not bytes. The head-rows body
    gives a warp whole heads (a ``[blocks, 128]`` row of 32 lanes per thread at one
    warp), a long chain per thread, with the rope lanes in a strip of their own that is
    joined back through shared memory. Here a program's tile of ``BLOCK_T`` tokens x
    ``BLOCK_H`` heads is flattened to ``BLOCK_T * BLOCK_H * CHUNKS_PER_HEAD`` rows of
    ``QUANT_GROUP_SIZE`` lanes, one quantisation block each (row ``b`` is block ``b %
    CHUNKS_PER_HEAD`` of head-row ``b // CHUNKS_PER_HEAD``), so with enough warps a
    thread holds one 16-byte vector of one block:

    - a block's amax is a reduction along the row, inside one warp (no shared memory);
    - its scale and reciprocal broadcast back along the row in the same layout;
    - the rope lanes are rotated where they lie: the row is viewed as ``(lane pair, 2)``
      and split into its even and odd lanes, which the 16-byte vector already holds in
      one thread, so the partner of every lane is a register, not a second load; cos/sin
      are loaded per pair (masked off outside the rope lanes) before the PDL wait.

    After the PDL wait a warp runs as few instructions as the bytes allow, nothing goes
    through shared memory and no warp waits for another: each row's addresses (in ``o``,
    in the output, at its FP32 scale) are made before the wait and handed through it
    (:func:`_pdl_wait_returning`), a block's amax is one reduction over both lanes of
    each pair, the scale is made from its argument's bits with one fused multiply-add
    (:func:`_exp2_ceil_log2`) and its reciprocal with an integer max, and the scale is
    stored by the threads that hold it (:func:`_store_per_row`). Compiled for sm90 at 8
    heads, a warp runs 89 instructions from the wait to its exit at the one-vector tiles
    (4, 2, 16), (8, 1, 16) and (4, 1, 8), against 186, 187 and 181 in the body last
    timed on the H200, and 154 against 251 at (4, 2, 8); the barriers are gone.

    Measured on the H200 (CUDA-graph replay, PDL on, 2026-12-04, against the head-rows
    body at the shipped table's tile): 8 heads T=1 1.02 -> 0.87 µs, T=64 1.26 -> 1.16
    µs, T=160 2.08 -> 1.59 µs, T=256 1.99 -> 1.79 µs; at prefill sizes it is slower (8
    heads T=2,048 6.80 -> 8.58 µs; 64 heads T=512 15.42 -> 17.81 µs), so it is one more
    body the tuner may choose per entry, not a replacement. See
    ``benchmarks/RESULTS.md``.

    Bit-identity: every float operation of an element has the form and order of vLLM's
    (see the module docstring): ``x * cos + x_partner * sin`` for an even lane and ``x *
    cos - x_partner * sin`` for an odd one, written with the lane's own value first,
    ``max`` of the absolute values (exact in any order), ``maximum(amax, eps)``, ``*
    (1.0 / fp8_max)``, ``exp2(ceil(log2(.)))``, the reciprocal from the scale's exponent
    bits, the clamp and the ``float8e4nv`` cast; lanes outside the rope keep their
    loaded value through a select, never a multiply by cos = 1 (which would turn -0.0
    into +0.0). Both rotated values are computed before either select, the even one
    first: the compiler's contraction into fused multiply-adds follows that order, and in
    it this body's sm90 binary is the one whose bytes were checked. On the H200 its bytes
    equal vLLM's kernel's over 172 calls (generated
    calls over every argument plus infinities, NaN, subnormals and signed zeros), as the
    bench's bitwise sweep checks.

    PDL: as in the head-rows body, the positions and their cos/sin rows (the step's
    inputs, never the preceding kernel's output) are read before the wait and ``o``
    after it; here ``o``'s addresses pass through the wait instruction itself, so the
    load depends on the wait by data as well as by order.
    """
    PAIRS: tl.constexpr = QUANT_GROUP_SIZE // 2
    HEAD_DIM: tl.constexpr = CHUNKS_PER_HEAD * QUANT_GROUP_SIZE
    OUT_ROW: tl.constexpr = HEADS_PER_GROUP * HEAD_DIM
    BLOCKS: tl.constexpr = BLOCK_T * BLOCK_H * CHUNKS_PER_HEAD
    b = tl.arange(0, BLOCKS)
    chunk = (b % CHUNKS_PER_HEAD).to(tl.int64)
    tok, head, live_t, live_h, live, group, head_in_group = _tile_rows(
        b // CHUNKS_PER_HEAD, num_tokens, num_heads, HEADS_PER_GROUP, BLOCK_T, BLOCK_H)

    # Pair q of block row b holds lanes chunk * QUANT_GROUP_SIZE + 2q (even) and + 1
    # (odd); a rope pair's cos/sin column is its pair index from NOPE_DIM (even), read
    # before the PDL wait: positions and the table are never the preceding kernel's output.
    lane0 = chunk[:, None] * QUANT_GROUP_SIZE + 2 * tl.arange(0, PAIRS)[None, :]
    rope_pair = live[:, None] & (lane0 >= NOPE_DIM)
    pair = chunk[:, None] * PAIRS + tl.arange(0, PAIRS)[None, :] - NOPE_DIM // 2
    pos = tl.load(positions_ptr + tok, mask=live_t, other=0)
    cache_row = cos_sin_cache_ptr + pos * (cache_stride_pos_16.to(tl.int64) * 16)
    cos_v = tl.load(cache_row[:, None] + pair, mask=rope_pair, other=1.0)
    sin_v = tl.load(cache_row[:, None] + HALF_ROPE + pair, mask=rope_pair, other=0.0)
    # Each row's addresses in ``o``, in the output (vLLM's (n_groups, num_tokens, d)
    # buffer, contiguous: checks.py) and at its FP32 scale, made before the PDL wait.
    src = (o_ptr + tok * (o_stride_token_16.to(tl.int64) * 16)
           + head * (o_stride_head_16.to(tl.int64) * 16) + chunk * QUANT_GROUP_SIZE)
    dst = (out_ptr + group * (num_tokens.to(tl.int64) * OUT_ROW) + tok * OUT_ROW
           + head_in_group * HEAD_DIM + chunk * QUANT_GROUP_SIZE)
    if TMA_ALIGNED_SCALES:
        scale_at = src  # not used: the packed scales are addressed per four blocks, below
    else:
        scale_at = (scale_ptr + group * scale_stride_group.to(tl.int64) + tok
                    + (head_in_group * CHUNKS_PER_HEAD + chunk) * scale_stride_k.to(tl.int64))
    if launch_pdl:
        tl.extra.cuda.gdc_launch_dependents()
        # What the compiler knew before the wait, in bytes: 16-byte aligned buffers
        # (checks.py), row strides of 16 elements, blocks of the group size.
        src, dst, scale_at = _pdl_wait_returning(
            src, dst, scale_at, min(16, 2 * QUANT_GROUP_SIZE),
            min(16, QUANT_GROUP_SIZE * (1 if QUANTIZE else 2)))
    # ``o`` is the preceding kernel's output: read only after the wait.
    k = tl.arange(0, QUANT_GROUP_SIZE)[None, :]
    x = tl.load(src[:, None] + k, mask=live[:, None], other=0.0).to(tl.float32)
    x_even, x_odd = tl.split(tl.reshape(x, (BLOCKS, PAIRS, 2)))
    rotated_even = x_even * cos_v + x_odd * sin_v
    rotated_odd = x_odd * cos_v - x_even * sin_v
    y_even = tl.where(rope_pair, rotated_even, x_even)
    y_odd = tl.where(rope_pair, rotated_odd, x_odd)

    dst = dst[:, None] + k
    if not QUANTIZE:
        y = tl.reshape(tl.join(y_even, y_odd), (BLOCKS, QUANT_GROUP_SIZE))
        tl.store(dst, y, mask=live[:, None])
    else:
        amax = tl.max(tl.maximum(tl.abs(y_even), tl.abs(y_odd)), axis=1)
        scales, inv = _power_of_two_scale(tl.maximum(amax, eps), fp8_max)
        q_even = tl.clamp(y_even * inv[:, None], -fp8_max, fp8_max)
        q_odd = tl.clamp(y_odd * inv[:, None], -fp8_max, fp8_max)
        quant = tl.reshape(tl.join(q_even, q_odd), (BLOCKS, QUANT_GROUP_SIZE)).to(tl.float8e4nv)
        tl.store(dst, quant, mask=live[:, None])

        # Scale rows [num_tokens, rows) are the TMA pad: zeros, as vLLM writes them.
        if TMA_ALIGNED_SCALES:
            # Four consecutive blocks of one head (CHUNKS_PER_HEAD % 4 == 0) pack into one
            # int32, little-endian, bits 23..30 of each FP32 scale.
            PACKED: tl.constexpr = BLOCKS // 4
            ue8m0 = (scales.to(tl.int32, bitcast=True) >> 23) & 0xFF
            packed = tl.sum(tl.reshape(ue8m0, (PACKED, 4)) << (tl.arange(0, 4)[None, :] * 8),
                            axis=1)
            first = 4 * tl.arange(0, PACKED)
            p_tok, _, p_live_t, p_live_h, _, p_group, p_head_in_group = _tile_rows(
                first // CHUNKS_PER_HEAD, num_tokens, num_heads, HEADS_PER_GROUP, BLOCK_T,
                BLOCK_H)
            p_k = p_head_in_group * (CHUNKS_PER_HEAD // 4) + (first % CHUNKS_PER_HEAD) // 4
            packed = tl.where(p_live_t, packed, 0)
            p_addr = (scale_ptr + p_group * scale_stride_group.to(tl.int64) + p_tok
                      + p_k * scale_stride_k.to(tl.int64))
            _store_per_row(p_addr, packed, (p_tok < rows) & p_live_h)
        else:
            scales = tl.where(live_t, scales, 0.0)
            # rows < 2**31 (checks.MAX_ROWS) is an int32, and tok < cdiv(rows, BLOCK_T) *
            # BLOCK_T <= 2**31 (BLOCK_T a power of two): the compare fits 32 bits.
            _store_per_row(scale_at, scales, (tok.to(tl.int32) < rows) & live_h)


COMPILED: bool = hasattr(fused_inv_rope_fp8_quant_kernel, "device_caches")
"""False under Triton's CPU interpreter (``TRITON_INTERPRET=1``), which runs no PTX."""
_COMPILED = tl.constexpr(COMPILED)
""":data:`COMPILED` as the bodies read it (a global a kernel reads must be a constexpr)."""


def compiled_binaries() -> int:
    """Binaries the JIT holds for this kernel's two bodies in this process, over all
    devices (0 when Triton's interpreter runs it)."""
    total = 0
    for jit in (fused_inv_rope_fp8_quant_kernel, fused_inv_rope_fp8_quant_block_rows_kernel):
        caches = getattr(jit, "device_caches", None)
        if caches is not None:
            total += sum(len(entry[0]) for entry in caches.values())
    return total
