"""Plain-torch specification of vLLM 0.33.0's ``fused_inv_rope_fp8_quant``.

Written from the semantics of ``vllm/models/deepseek_v4/common/ops/
fused_inv_rope_fp8_quant.py`` (the function, its custom op's implementation and
``FusedInvRopeFP8QuantKernel.kernel``), element by element, with every rounding spelled
out so that the result can be compared bit for bit:

1. ``x = float32(o[t, h, d])``.
2. Rope lanes are ``d >= nope_dim``; with ``r = d - nope_dim``, the partner lane is
   ``d ^ 1`` (the bit flip of the absolute lane, as vLLM's kernel takes it), the table
   column ``r >> 1``, ``cos = cache[pos, r >> 1]``, ``sin = cache[pos, rope_dim/2 +
   (r >> 1)]``. Even ``r``: ``x * cos + x_partner * sin``; odd ``r``: ``x * cos -
   x_partner * sin`` (the inverse rotation). Nope lanes keep ``x``.
   How the two products and the sum round is the compiler's choice on the GPU: it
   contracts ``a * b + c * d`` into one fused multiply-add. ``rotation`` names the form:
   ``"fma_cos"`` rounds ``x_partner * sin`` and then ``x * cos +/- that`` once (what
   the GPU build of vLLM's kernel does, checked bit for bit by the GPU tests);
   ``"fma_sin"`` the other way round; ``"separate"`` rounds all three operations
   (what Triton's CPU interpreter computes, with numpy).
3. Without ``quantize`` the rotated values are stored in ``o``'s dtype (round to
   nearest even).
4. With ``quantize``: per block of ``quant_group_size`` lanes, ``amax = max(|x|)``,
   ``max(amax, float32(1e-10))``, ``* float32(1 / 448)``, ``scale = exp2(ceil(log2(.)))``
   (all float32), ``q = clamp(x / scale, -448, 448)`` cast to e4m3fn (round to nearest
   even). Scales go out FP32, or with ``tma_aligned_scales`` as the UE8M0 byte (bits
   23..30 of the FP32 scale) of four consecutive blocks packed little-endian into one
   int32.
5. Layout, as vLLM allocates it: ``out_buf`` is ``(n_groups, T, heads_per_group *
   head_dim)`` contiguous, returned as ``out_buf.transpose(0, 1)``; the scales live in
   one buffer of ``n_groups * scale_inner * tma_aligned_T`` elements, element ``(g, t,
   k)`` at ``g * scale_inner * tma_aligned_T + t + k * tma_aligned_T`` (MN-major), with
   ``tma_aligned_T = align(T, 4)``; returned as a ``(T, n_groups, scale_inner)`` view.
   Scale rows ``T <= t < tma_aligned_T`` are zeros (vLLM's kernel writes them so). With
   ``quantize=False`` the scales are an empty tensor (int32 or float32 as the layout).

``log2`` is torch's float32 ``log2``; the GPU's approximate ``lg2`` and numpy's may
round differently within an ulp of an integer (a block whose scaled amax lies just
above a power of two), which the tests would report as a scale mismatch.
"""

from __future__ import annotations

from typing import Literal

import torch

Rotation = Literal["fma_cos", "fma_sin", "separate"]
FP8_MAX = 448.0
EPS = 1e-10
TMA_ALIGN = 4


def tma_aligned_size(num_tokens: int) -> int:
    """vLLM's ``get_tma_aligned_size(num_tokens, 4)``: T rounded up to a multiple of 4."""
    return -(-num_tokens // TMA_ALIGN) * TMA_ALIGN


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``a * b + c`` rounded once to float32 (an exact fused multiply-add).

    The product of two float32 values is exact in float64; the sum is formed in float64
    with round-to-odd (round to nearest, then, when the TwoSum error is non-zero and the
    last bit is even, one step towards the error), which makes the final rounding to
    float32 correct.
    """
    p = a.double() * b.double()
    c64 = c.double()
    s = p + c64
    bp = s - c64
    err = (p - (s - bp)) + (c64 - bp)
    bits = s.view(torch.int64)
    adjust = (err != 0) & ((bits & 1) == 0)
    step = torch.where((err > 0) == (s > 0), 1, -1)
    return torch.where(adjust, bits + step, bits).view(torch.float64).float()


def rotate(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
           nope_dim: int, rope_dim: int, rotation: Rotation = "fma_cos") -> torch.Tensor:
    """Step 2 on float32 ``x`` of shape ``(T, H, D)``: the inverse interleaved rotation."""
    head_dim = x.shape[-1]
    lanes = torch.arange(head_dim, device=x.device)
    is_rope = lanes >= nope_dim
    local = lanes - nope_dim
    col = torch.clamp(local >> 1, min=0)
    half = rope_dim // 2
    rows = cos_sin_cache[positions.long()]
    rope_t = is_rope[None, None, :]
    cos = torch.where(rope_t, rows[:, col].unsqueeze(1) if half else 1.0, 1.0)
    sin = torch.where(rope_t, rows[:, half + col].unsqueeze(1) if half else 0.0, 0.0)
    partner = torch.where(rope_t, x[..., lanes ^ 1], 0.0)
    if rotation == "separate":
        xc, ps = x * cos, partner * sin
        add, sub = xc + ps, xc - ps
    elif rotation == "fma_cos":
        ps = partner * sin
        add, sub = fma32(x, cos, ps), fma32(x, cos, -ps)
    elif rotation == "fma_sin":
        xc = x * cos
        add, sub = fma32(partner, sin, xc), fma32(-partner, sin, xc)
    else:
        raise ValueError(f"rotate: rotation: got {rotation!r}; expected 'fma_cos', "
                         "'fma_sin' or 'separate'")
    rotated = torch.where((local & 1) == 0, add, sub)
    return torch.where(rope_t, rotated, x)


def block_scales(x: torch.Tensor, quant_group_size: int) -> torch.Tensor:
    """Step 4's FP32 scales of float32 ``x`` ``(T, H, D)``: ``(T, H, D // group)``."""
    t, h, d = x.shape
    blocks = x.abs().reshape(t, h, d // quant_group_size, quant_group_size)
    eps32 = torch.tensor(EPS, dtype=torch.float32, device=x.device)
    amax = torch.maximum(blocks.amax(dim=-1), eps32)
    raw = amax * torch.tensor(1.0 / FP8_MAX, dtype=torch.float32, device=x.device)
    return torch.exp2(torch.ceil(torch.log2(raw)))


def pre_cast(x: torch.Tensor, scales: torch.Tensor, quant_group_size: int) -> torch.Tensor:
    """``clamp(x / scale, -448, 448)`` in float32, the value the e4m3 cast rounds."""
    t, h, d = x.shape
    blocks = x.reshape(t, h, d // quant_group_size, quant_group_size)
    q = torch.clamp(blocks / scales[..., None], -FP8_MAX, FP8_MAX)
    return q.reshape(t, h, d)


def pack_ue8m0(scales: torch.Tensor) -> torch.Tensor:
    """Four consecutive FP32 scales' exponent bytes, little-endian in one int32."""
    *lead, k = scales.shape
    exps = ((scales.contiguous().view(torch.int32) >> 23) & 0xFF).long()
    exps = exps.reshape(*lead, k // 4, 4)
    shifts = torch.tensor([0, 8, 16, 24], device=scales.device)
    packed = (exps << shifts).sum(dim=-1)
    return ((packed + 2**31) % 2**32 - 2**31).to(torch.int32)


def scale_buffer(scale_rows: torch.Tensor, n_groups: int, num_tokens: int,
                 fill: float | int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's MN-major scale storage for per-(token, group) rows ``(T, G, inner)``.

    Returns ``(storage, view)``: the flat buffer (pad rows set to ``fill``, zero as vLLM
    writes them) and vLLM's ``(G, T, inner)`` strided view of it.
    """
    inner = scale_rows.shape[-1]
    aligned = tma_aligned_size(num_tokens)
    storage = torch.full((n_groups * inner * aligned,), fill, dtype=scale_rows.dtype,
                         device=scale_rows.device)
    view = storage.as_strided((n_groups, num_tokens, inner), (inner * aligned, 1, aligned))
    view.copy_(scale_rows.transpose(0, 1))
    return storage, view


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
    rotation: Rotation = "fma_cos",
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``(output, scales)``: the same values, shapes, strides and dtypes.

    ``output`` is ``(T, n_groups, heads_per_group * head_dim)`` with strides ``(d, T * d,
    1)``; ``scales`` ``(T, n_groups, scale_inner)`` with strides ``(1, scale_inner *
    tma_aligned_T, tma_aligned_T)`` over a buffer whose pad rows are zero.
    """
    num_tokens, _, head_dim = o.shape
    x = rotate(o.float(), positions[:num_tokens], cos_sin_cache, nope_dim, rope_dim, rotation)
    d = heads_per_group * head_dim
    scale_dtype = torch.int32 if tma_aligned_scales else torch.float32
    out_buf = torch.empty((n_groups, num_tokens, d), dtype=torch.float8_e4m3fn if quantize
                          else o.dtype, device=o.device)
    if not quantize:
        out_buf.copy_(x.to(o.dtype).reshape(num_tokens, n_groups, d).transpose(0, 1))
        return out_buf.transpose(0, 1), torch.empty(0, dtype=scale_dtype, device=o.device)
    scales = block_scales(x, quant_group_size)
    q = pre_cast(x, scales, quant_group_size).to(torch.float8_e4m3fn)
    out_buf.copy_(q.reshape(num_tokens, n_groups, d).transpose(0, 1))
    rows = scales.reshape(num_tokens, n_groups, d // quant_group_size)
    if tma_aligned_scales:
        rows = pack_ue8m0(rows)
    _, view = scale_buffer(rows, n_groups, num_tokens)
    return out_buf.transpose(0, 1), view.transpose(0, 1)
