"""Seeded inputs and bitwise comparisons for the FusedInvRopeFP8Quant kernel.

The ``cos_sin_cache`` tables are built as vLLM 0.33.0 builds them for DeepSeek-V4:
``vllm/models/deepseek_v4/common/rope.py`` (``build_deepseek_v4_rope``) turns the
checkpoint's rope settings into a ``DeepseekV4ScalingRotaryEmbedding``
(``vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py``, YaRN helpers
in ``.../rotary_embedding/common.py``): ``rope_dim = qk_rope_head_dim = 64``,
``is_neox_style=False``, ``mscale = mscale_all_dim = 0`` (so the magnitude factor is
1.0), and

- compressed layers (C4A, C128A; ``compress_ratio > 1``): ``rope_type
  "deepseek_yarn"``, ``base = compress_rope_theta = 160000``, ``factor = 16``,
  ``original_max_position_embeddings = 65536``, ``beta_fast = 32``, ``beta_slow = 1``;
- sliding-window layers: ``base = rope_theta = 10000``, ``factor = 1.0``,
  ``original_max_position_embeddings = max_position_embeddings = 1048576``;

(DeepSeek-V4-Flash's ``config.json``: ``rope_theta`` 10000, ``compress_rope_theta``
160000, ``rope_scaling`` {type yarn, factor 16, original_max_position_embeddings
65536, beta_fast 32, beta_slow 1}, ``max_position_embeddings`` 1048576,
``qk_rope_head_dim`` 64, ``head_dim`` 512, ``num_attention_heads`` 64, ``o_groups`` 8).
The table has ``original_max_position * factor`` = 1,048,576 rows of ``cos || sin``
(fp32), computed with the same torch operations in the same order.

Attention outputs are bf16 with per-head magnitudes spread over decades, outliers,
and whole 128-lane blocks of zeros (``amax = 0``, the ``eps`` path), some of them the
block that holds the rope lanes. Comparisons view FP8 as ``uint8``, scales as ``int32``
and bf16 as ``int16``, and cover the whole scale buffer, pad rows included.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from dsv4_kernels import offline_build
from dsv4_kernels.fused_inv_rope_fp8_quant import reference

MAX_POSITION = 1 << 20
ROPE_DIM = 64
HEAD_DIM = 512
ROPE_KINDS = ("compress", "swa")


def _yarn_correction_dim(rotations: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (rotations * 2 * math.pi))) / (2 * math.log(base))


def _inv_freq(base: float, rope_dim: int, factor: float, original_max: int,
              beta_fast: int = 32, beta_slow: int = 1) -> torch.Tensor:
    """``DeepseekScalingRotaryEmbedding._compute_inv_freq`` (CPU, float32)."""
    pos_freqs = base ** (torch.arange(0, rope_dim, 2, dtype=torch.float) / rope_dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    low = max(math.floor(_yarn_correction_dim(beta_fast, rope_dim, base, original_max)), 0)
    high = min(math.ceil(_yarn_correction_dim(beta_slow, rope_dim, base, original_max)),
               rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(rope_dim // 2, dtype=torch.float) - low) / (high - low),
                       0, 1)
    mask = 1 - ramp
    return interpolation * (1 - mask) + extrapolation * mask


@functools.lru_cache(maxsize=4)
def rope_table(kind: str = "compress", device: str = "cpu") -> torch.Tensor:
    """DeepSeek-V4-Flash's ``cos_sin_cache`` (1,048,576 x 64 fp32) for a layer kind."""
    if kind == "compress":
        base, factor, original = 160000.0, 16.0, 65536
    elif kind == "swa":
        base, factor, original = 10000.0, 1.0, MAX_POSITION
    else:
        raise ValueError(f"rope_table: kind: got {kind!r}; expected one of {ROPE_KINDS}")
    inv_freq = _inv_freq(base, ROPE_DIM, factor, original).to(device)
    t = torch.arange(original * factor, device=device, dtype=torch.float32)
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    mscale = 1.0
    return torch.cat((freqs.cos() * mscale, freqs.sin() * mscale), dim=-1)


def attention_output(num_tokens: int, num_heads: int, head_dim: int = HEAD_DIM, *,
                     seed: int, device: str | torch.device = "cpu",
                     dtype: torch.dtype = torch.bfloat16,
                     quant_group_size: int = 128) -> torch.Tensor:
    """Seeded ``o``: magnitudes 1e-3..1e2 per (token, head), ~0.5% outliers x50..x3000,
    and ~6% of the 128-lane blocks all zero (at least one when there are 8 or more).
    Generated on ``device`` (a seed gives other values on the GPU than on the CPU)."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(seed)
    on = dict(generator=g, device=device)
    x = torch.randn((num_tokens, num_heads, head_dim), **on)
    mag = 10.0 ** (torch.rand((num_tokens, num_heads, 1), **on) * 5 - 3)
    x = x * mag
    outlier = torch.rand(x.shape, **on) < 0.005
    boost = 50.0 + torch.rand(x.shape, **on) * 2950.0
    x = torch.where(outlier, x * boost, x)
    chunks = max(head_dim // quant_group_size, 1)
    blocks = x.reshape(num_tokens, num_heads, chunks, -1)
    zero = torch.rand((num_tokens, num_heads, chunks, 1), **on) < 0.06
    if zero.numel() >= 8 and not zero.any():
        zero.view(-1)[int(torch.randint(zero.numel(), (1,), **on))] = True
    blocks = torch.where(zero, 0.0, blocks)
    return blocks.reshape(num_tokens, num_heads, head_dim).to(dtype)


def add_special_values(o: torch.Tensor, *, non_finite: bool = False) -> torch.Tensor:
    """Write into ``o`` (at least 8 tokens and 8 heads of 512 lanes) the values block
    quantisation must get right besides ordinary ones: bf16's largest finite value (the
    largest scale, ``2**120``), subnormal bf16 values alone (an amax below eps, the
    smallest scale ``2**-42``) and beside a large outlier (quotients below fp32's normal
    range), a lone tiny value in a zero block, and negative zeros; with ``non_finite``
    also +inf, -inf (an infinite scale) and a NaN. Returns ``o``."""
    big = torch.finfo(torch.bfloat16).max
    tiny = torch.finfo(torch.bfloat16).smallest_normal / 128
    o[2, 3, 7] = big
    o[2, 3, 8] = -big
    o[3, 1, 0:128] = tiny
    o[3, 1, 1:128:2] = -tiny
    o[4, 4, 300] = 3.0e38
    o[4, 4, 301:384] = tiny * 5
    o[5, 5, 0:64] = -0.0
    o[6, 6, 448:512] = tiny
    o[7, 7, 128:256] = 0.0
    o[7, 7, 129] = 1.0e-30
    if non_finite:
        o[0, 0, 5] = float("inf")
        o[1, 2, 200] = -float("inf")
        o[1, 5, 470] = float("inf")
        o[6, 0, 33] = float("nan")
    return o


def positions(num_tokens: int, *, seed: int, max_position: int = MAX_POSITION,
              device: str | torch.device = "cpu") -> torch.Tensor:
    """Seeded int64 positions in ``[0, max_position)``, the two ends included when room."""
    g = torch.Generator().manual_seed(seed + 7)
    pos = torch.randint(0, max_position, (num_tokens,), generator=g, dtype=torch.int64)
    if num_tokens >= 2:
        pos[0], pos[-1] = 0, max_position - 1
    return pos.to(device)


@dataclass(frozen=True)
class Case:
    """One call's arguments (besides the tensors, built from ``seed``)."""

    num_tokens: int
    n_groups: int
    heads_per_group: int
    tma_aligned_scales: bool
    quantize: bool
    seed: int
    nope_dim: int = 448
    rope_dim: int = 64
    quant_group_size: int = 128
    rope_kind: str = "compress"

    @property
    def num_heads(self) -> int:
        return self.n_groups * self.heads_per_group

    def tensors(self, device: str | torch.device = "cpu", table: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(o, positions, cos_sin_cache)``; positions bounded by the table's rows."""
        cache = table if table is not None else rope_table(self.rope_kind, str(device))
        o = attention_output(self.num_tokens, self.num_heads, self.nope_dim + self.rope_dim,
                             seed=self.seed, device=device,
                             quant_group_size=self.quant_group_size)
        pos = positions(self.num_tokens, seed=self.seed, max_position=cache.shape[0],
                        device=device)
        return o, pos, cache

    def args(self) -> tuple:
        """The scalar arguments after the tensors, in vLLM's order."""
        return (self.n_groups, self.heads_per_group, self.nope_dim, self.rope_dim,
                self.quant_group_size, self.tma_aligned_scales, self.quantize)


HEAD_LAYOUTS = ((1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (1, 16), (2, 4), (8, 1))
"""(n_groups, heads_per_group): DeepSeek-V4-Flash's 64 heads in 8 groups over TP 8..1,
128 heads, and a few other splits."""


def random_cases(count: int, *, seed: int, max_tokens: int, max_heads: int = 128
                 ) -> Iterator[Case]:
    """Seeded calls over T in 1..max_tokens (non-multiples of 4 included), head layouts,
    both scale layouts, quantize on and off, both rope tables."""
    rng = random.Random(seed)
    layouts = [lay for lay in HEAD_LAYOUTS if lay[0] * lay[1] <= max_heads]
    for i in range(count):
        groups, hpg = rng.choice(layouts)
        t = rng.choice([1, 2, 3, 5, rng.randint(1, max_tokens)])
        yield Case(min(t, max_tokens), groups, hpg, rng.random() < 0.5, rng.random() < 0.8,
                   seed=seed * 1000 + i, rope_kind=rng.choice(ROPE_KINDS))


def scale_storage(scales: torch.Tensor) -> torch.Tensor:
    """The whole MN-major buffer behind a ``(T, G, inner)`` scales view, pad rows included."""
    _, g, inner = scales.shape
    aligned = scales.stride(2) if inner else 0
    return torch.as_strided(scales, (g * inner * aligned,), (1,), scales.storage_offset())


POISON_WORD = -1
"""The scale poison as an int32 (0xFFFFFFFF)."""


def poison_like_vllm(out_buf: torch.Tensor, scale_buf: torch.Tensor) -> None:
    """Fill vLLM-shaped buffers with values no kernel writes: FP8 NaN bytes (0x7F, never
    produced after the clamp), and all-ones scale words over the whole buffer (pad rows
    included): an FP32 NaN, and UE8M0 bytes 0xFF, which no finite scale has."""
    out_buf.view(torch.uint8).fill_(0x7F) if out_buf.element_size() == 1 else out_buf.fill_(
        float("nan"))
    if scale_buf.numel():
        scale_storage(scale_buf.transpose(0, 1)).view(torch.int32).fill_(POISON_WORD)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """An integer view of the same bytes (uint8 for FP8, int16 for 16-bit, int32 else)."""
    size = tensor.element_size()
    kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[size]
    return tensor.view(kind)


def mismatches(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many elements' bits differ (shapes and strides must agree too)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"shape/dtype differ: {tuple(a.shape)} {a.dtype} vs "
                             f"{tuple(b.shape)} {b.dtype}")
    return int((bits(a) != bits(b)).sum())


def assert_same(ours: tuple[torch.Tensor, torch.Tensor],
                theirs: tuple[torch.Tensor, torch.Tensor], what: str) -> None:
    """Outputs equal bit for bit: values, shapes, strides, dtypes, scale pad rows."""
    (out_a, sc_a), (out_b, sc_b) = ours, theirs
    for name, a, b in (("output", out_a, out_b), ("scales", sc_a, sc_b)):
        if a.stride() != b.stride() or a.shape != b.shape or a.dtype != b.dtype:
            raise AssertionError(f"{what}: {name} {tuple(a.shape)}/{a.stride()}/{a.dtype} vs "
                                 f"{tuple(b.shape)}/{b.stride()}/{b.dtype}")
    bad = mismatches(out_a, out_b)
    if bad:
        idx = (bits(out_a) != bits(out_b)).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: {bad} output elements differ, first at {idx}")
    if sc_a.numel() or sc_b.numel():
        full_a, full_b = scale_storage(sc_a), scale_storage(sc_b)
        bad = mismatches(full_a, full_b)
        if bad:
            idx = (bits(full_a) != bits(full_b)).nonzero()[:4].flatten().tolist()
            raise AssertionError(f"{what}: {bad} scale buffer elements differ (pad rows "
                                 f"included), first at flat {idx}")


def interpreter_cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` (float32) converted as Triton's CPU interpreter converts them on store.

    The interpreter emulates float casts in numpy (``triton.runtime.interpreter.
    _convert_float``): to e4m3 it rounds half away from zero on the cut bit without
    carrying into the exponent, and to bf16 (a plain ``.to``) it truncates. Neither is
    the GPU's round-to-nearest-even, so interpreter tests compare the kernel's bytes with
    the reference's pre-cast values passed through this same function, and the GPU tests
    carry the bitwise check of the real casts.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    if dtype == torch.float8_e4m3fn:
        target, mode, view = tl.float8e4nv, interpreter._ir.ROUNDING_MODE.RTNE, np.uint8
    elif dtype == torch.bfloat16:
        target, mode, view = tl.bfloat16, None, np.int16
    else:
        raise ValueError(f"interpreter_cast: dtype: got {dtype}; expected float8_e4m3fn or "
                         "bfloat16")
    data = interpreter._convert_float(values.detach().cpu().float().contiguous().numpy(),
                                      tl.float32, target, mode)
    return torch.from_numpy(np.ascontiguousarray(data).view(view)).reshape(values.shape)


def interpreter_expected(case: Case, o: torch.Tensor, pos: torch.Tensor, cache: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernel writes under the interpreter: the reference with numpy's separate
    roundings of the rotation and the interpreter's own casts (``(T, G, d)`` integer
    views of the output, and the scales view as the reference returns it)."""
    x = reference.rotate(o.float(), pos[: case.num_tokens], cache, case.nope_dim,
                         case.rope_dim, "separate")
    t, d = case.num_tokens, case.heads_per_group * (case.nope_dim + case.rope_dim)
    _, scales = reference.fused_inv_rope_fp8_quant(o, pos, cache, *case.args(),
                                                   rotation="separate")
    if not case.quantize:
        return interpreter_cast(x, o.dtype).reshape(t, case.n_groups, d), scales
    s = reference.block_scales(x, case.quant_group_size)
    q = reference.pre_cast(x, s, case.quant_group_size)
    return interpreter_cast(q, torch.float8_e4m3fn).reshape(t, case.n_groups, d), scales


# --------------------------------------------------------------------------- offline builds
BUILD_TILES: tuple[tuple[int, int, int, str], ...] = (
    (1, 1, 1, "head_rows"), (2, 1, 1, "head_rows"), (2, 2, 1, "head_rows"),
    (2, 4, 2, "head_rows"), (4, 1, 1, "head_rows"), (4, 4, 4, "head_rows"),
    (1, 1, 2, "block_rows"), (2, 1, 4, "block_rows"), (4, 1, 8, "block_rows"),
    (4, 2, 8, "block_rows"), (8, 1, 16, "block_rows"), (4, 2, 16, "block_rows"),
)
"""Tiles the CPU tests build offline: each body from its smallest tile to 16 warps."""

PTX_COUNTED: tuple[str, ...] = ("griddepcontrol.launch_dependents", "griddepcontrol.wait",
                                "ld.global.v4.b32", "ld.global.b16", "st.global.b8",
                                "st.global.b16")
"""PTX instructions each offline build counts (and finds first): the PDL release and wait,
16-byte loads, and the bf16 loads and FP8 stores of single lanes that a lost alignment
hint would turn whole vectors into."""


@dataclass(frozen=True)
class Build:
    """One binary of DeepSeek-V4's geometry (448 + 64 lanes, 128-lane blocks, 8 heads per
    group, bf16 ``o``, int64 positions): a tile of a body for a compute capability, with
    the call's flags, typed as :mod:`.launch` passes them."""

    tokens_per_program: int
    heads_per_program: int
    num_warps: int
    body: str
    capability: tuple[int, int]
    quantize: bool = True
    tma_aligned_scales: bool = False
    launch_pdl: bool = False


def build(spec: Build) -> offline_build.Built:
    """:func:`dsv4_kernels.offline_build.build` of ``spec``: ``Built(ok, error, ...)``.
    The kernel module (triton) is imported here, so loading this module needs no triton."""
    from dsv4_kernels.fused_inv_rope_fp8_quant import kernel

    fn = {"head_rows": kernel.fused_inv_rope_fp8_quant_kernel,
          "block_rows": kernel.fused_inv_rope_fp8_quant_block_rows_kernel}[spec.body]
    pointers = {"o_ptr": "*bf16", "positions_ptr": "*i64", "cos_sin_cache_ptr": "*fp32",
                "out_ptr": "*fp8e4nv" if spec.quantize else "*bf16",
                "scale_ptr": "*i32" if spec.tma_aligned_scales else "*fp32"}
    constexprs = dict(HEADS_PER_GROUP=8, fp8_max=448.0, eps=1e-10, QUANT_GROUP_SIZE=128,
                      CHUNKS_PER_HEAD=4, NOPE_DIM=448, HALF_ROPE=32, QUANTIZE=spec.quantize,
                      TMA_ALIGNED_SCALES=spec.tma_aligned_scales,
                      BLOCK_T=spec.tokens_per_program, BLOCK_H=spec.heads_per_program,
                      ARG_DTYPES=0, launch_pdl=spec.launch_pdl)
    assert tuple(constexprs) == kernel.CONSTEXPRS
    signature = {**pointers, **dict.fromkeys(kernel.RUNTIME_ARGS, "i32")}
    return offline_build.build(fn, signature, constexprs, spec.capability, spec.num_warps,
                               aligned=tuple(pointers), count=PTX_COUNTED)


def builds_json(payload: str) -> str:
    """A JSON list of :class:`Build` fields in, a JSON list of ``{"build", "ok", "error",
    "shared_bytes", "ptx_counts", "ptx_first"}`` out (what
    :func:`dsv4_kernels.offline_build.run_child` runs)."""
    out = []
    for row in json.loads(payload):
        spec = Build(**{**row, "capability": tuple(row["capability"])})
        out.append({"build": asdict(spec), **asdict(build(spec))})
    return json.dumps(out)
