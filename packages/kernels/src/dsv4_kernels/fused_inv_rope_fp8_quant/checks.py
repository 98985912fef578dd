"""Argument checks for ``fused_inv_rope_fp8_quant`` and its kernel-object entry.

They read tensor attributes only (no device sync, so they can run inside CUDA-graph
capture), and each failure raises :class:`ValueError` naming the function, the
argument, what it got and what is accepted, before anything is allocated or written.

vLLM's asserts, each a ``ValueError`` here: ``num_heads == n_groups *
heads_per_group``, ``head_dim == nope_dim + rope_dim``, ``head_dim % quant_group_size
== 0``, ``rope_dim % 2 == 0``, ``cos_sin_cache.shape[-1] == rope_dim``,
``cos_sin_cache.dtype == float32``, and with ``quantize and tma_aligned_scales``:
``chunks_per_head % 4 == 0``.

Refused beyond them, where vLLM's kernel would fail to compile or read or write the
wrong memory (a caller such as the vLLM plugin then runs vLLM's own kernel): ``o`` not
3-D, of a dtype other than bf16 (see :data:`O_DTYPES`), or with a last-dimension stride
other than 1;
``head_dim``/``quant_group_size`` not powers of two (``tl.arange`` and
``tl.reshape`` need them); an odd ``nope_dim``, or ``rope_dim / 2`` not a power of two
(the rope lanes are loaded as aligned (even, odd) pairs); ``positions`` not a 1-D
integer tensor of unit stride with at least T entries; ``cos_sin_cache`` not 2-D with
unit column stride; tensors on different devices; dimensions that are not Python
ints (or flags that are not bools); tensors
that are not 16-byte aligned, and row strides of ``o`` and ``cos_sin_cache`` that are
not multiples of 16 elements (the kernel takes them in units of 16 elements, so that
its loads are whole 16-byte vectors without specialising a binary on any stride); and
2**31 scale rows or more (:data:`MAX_ROWS`: the token count, rounded up to a multiple of
4 when quantising), which vLLM's kernel cannot launch either (one program per row along
a CUDA grid's x, at most ``2**31 - 1``) and whose token indices the kernel compares in 32
bits.

Refused by the GPU it would run on (:func:`check_arch`), where Triton cannot build the
binary (a compile error in the middle of a launch otherwise): ``quantize=True`` below
compute capability 8.9, where Triton has no FP8 e4m3 (``float8e4nv``), and
``launch_pdl=True`` below 9.0, where there is no ``griddepcontrol``. vLLM itself
quantizes only when ``wo_a``'s weights are FP8 and launches with PDL by
``is_arch_support_pdl()`` (9.0 and newer), so an A100 (8.0) or an SM86 card runs this op
with ``quantize=False`` and without PDL, and that is what the GPU tests and the bench run
there.

The caller's promise, as it is vLLM's: every ``positions[t]`` (t < T) indexes a row of
``cos_sin_cache``; reading it would need a device sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FN = "fused_inv_rope_fp8_quant"
FP8_MAX = 448.0
O_DTYPES = (torch.bfloat16,)
"""``o``'s accepted dtype: DeepSeek-V4's attention output is bf16, and bf16 is the input
whose bytes the GPU tests and the bench check equal to vLLM's kernel. With fp32 ``o``
this body's rotation rounds differently from the specification on the H200 (the
compiler fuses the other product of ``x * cos + x_partner * sin`` once the cos/sin loads
come first), so fp16 and fp32 are refused and a caller runs vLLM's own kernel."""
POSITION_DTYPES = (torch.int64, torch.int32)
MAX_ROWS = 1 << 31
"""Scale rows (the TMA-aligned token count) a call may have, exclusive: vLLM's kernel runs
one program per row along the grid's x, which CUDA caps at ``2**31 - 1``, and the kernel
bodies compare token indices with the row count in 32 bits (the block-rows body's scale
mask: one instruction where the 64-bit compare took seven, sm90)."""
MAX_WARPS = 16
ALIGN_BYTES = 16
STRIDE_MULTIPLE = 16
DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
"""``o``'s dtype as the kernel's ``ARG_DTYPES`` constexpr (+3 for int32 positions)."""
MAX_ELEMENTS_PER_THREAD = 128
BODIES = ("head_rows", "block_rows")
"""The kernel's two bodies (both in :mod:`.kernel`), as a tile names them."""
DEFAULT_BODY = "head_rows"
FP8_MIN_CAPABILITY = (8, 9)
"""The oldest GPU whose binaries Triton builds with FP8 e4m3 (``float8e4nv``) in them:
sm89 (Ada) and newer. Below it the quantized output cannot be compiled."""
PDL_MIN_CAPABILITY = (9, 0)
"""The oldest GPU with programmatic dependent launch (``griddepcontrol``): sm90. vLLM's
``is_arch_support_pdl()`` is the same rule."""


def fail(name: str, got: object, accepted: str, fn: str = FN) -> ValueError:
    """The error every check raises: function, argument, what it got, what is accepted."""
    return ValueError(f"{fn}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pow2(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def _int(name: str, value: object, low: int, fn: str) -> int:
    if not _is_int(value) or value < low:  # type: ignore[operator]
        raise fail(name, repr(value), f"an int >= {low}", fn)
    return value  # type: ignore[return-value]


def _bool(name: str, value: object, fn: str) -> bool:
    if not isinstance(value, bool):
        raise fail(name, repr(value), "a bool", fn)
    return value


def check_tile(tokens_per_program: object, heads_per_program: object, num_warps: object,
               head_dim: int | None = None, fn: str = FN, *, body: object = DEFAULT_BODY
               ) -> None:
    """A tile is powers of two: tokens and heads per program 1..64, warps 1..16; with
    ``head_dim`` known, at most 128 elements of the tile per thread (the register
    budget; the policy's tables refuse larger tiles too); and a body of :data:`BODIES`."""
    if not isinstance(body, str) or body not in BODIES:
        raise fail("body", repr(body), f"one of {', '.join(map(repr, BODIES))}", fn)
    for name, value, high in (("tokens_per_program", tokens_per_program, 64),
                              ("heads_per_program", heads_per_program, 64),
                              ("num_warps", num_warps, MAX_WARPS)):
        if not _is_int(value) or not _pow2(value) or value > high:  # type: ignore
            raise fail(name, repr(value), f"a power of two from 1 to {high}", fn)
    if head_dim is not None:
        lanes = tokens_per_program * heads_per_program * head_dim  # type: ignore[operator]
        per_thread = lanes // (32 * num_warps)  # type: ignore[operator]
        if per_thread > MAX_ELEMENTS_PER_THREAD:
            raise fail("tile", f"{tokens_per_program} tokens x {heads_per_program} heads x "
                       f"{head_dim} lanes over {num_warps} warps ({per_thread} per thread)",
                       f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread", fn)


def fp8_supported(capability: tuple[int, int]) -> bool:
    """Whether a GPU of compute ``capability`` can run the quantized (FP8) output."""
    return tuple(capability) >= FP8_MIN_CAPABILITY


def pdl_supported(capability: tuple[int, int]) -> bool:
    """Whether a GPU of compute ``capability`` can launch with PDL."""
    return tuple(capability) >= PDL_MIN_CAPABILITY


def check_arch(capability: tuple[int, int] | None, quantize: bool, launch_pdl: bool,
               fn: str = FN) -> None:
    """Refuse what the GPU of compute ``capability`` cannot build (None: no GPU, as under
    Triton's CPU interpreter, which runs both): FP8 output below
    :data:`FP8_MIN_CAPABILITY`, PDL below :data:`PDL_MIN_CAPABILITY`."""
    if capability is None:
        return
    where = f"a compute capability {capability[0]}.{capability[1]} GPU"
    if quantize and not fp8_supported(capability):
        need = "{}.{}".format(*FP8_MIN_CAPABILITY)
        raise fail("quantize", f"True on {where}",
                   f"False there: Triton builds FP8 e4m3 output only for compute "
                   f"capability {need} or newer (vLLM quantizes only when wo_a's weights "
                   f"are FP8)", fn)
    if launch_pdl and not pdl_supported(capability):
        need = "{}.{}".format(*PDL_MIN_CAPABILITY)
        raise fail("launch_pdl", f"True on {where}",
                   f"False there: PDL (griddepcontrol) needs compute capability {need} or "
                   f"newer, vLLM's is_arch_support_pdl() rule", fn)


@dataclass(frozen=True)
class Checked:
    """What the launch needs, derived from checked arguments."""

    num_tokens: int
    num_heads: int
    head_dim: int
    chunks_per_head: int
    d: int
    scale_inner: int
    tma_aligned_T: int
    device: torch.device
    arg_dtypes: int


def _tensor(name: str, value: object, fn: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise fail(name, type(value).__name__, "a torch.Tensor", fn)
    return value


def check_inputs(o: object, positions: object, cos_sin_cache: object, n_groups: object,
                 heads_per_group: object, nope_dim: object, rope_dim: object,
                 quant_group_size: object, tma_aligned_scales: object, quantize: object,
                 fn: str = FN) -> Checked:
    """vLLM's asserts and the kernel's needs, on ``fused_inv_rope_fp8_quant``'s arguments."""
    o = _tensor("o", o, fn)
    positions = _tensor("positions", positions, fn)
    cache = _tensor("cos_sin_cache", cos_sin_cache, fn)
    n_groups = _int("n_groups", n_groups, 1, fn)
    heads_per_group = _int("heads_per_group", heads_per_group, 1, fn)
    nope_dim = _int("nope_dim", nope_dim, 0, fn)
    rope_dim = _int("rope_dim", rope_dim, 0, fn)
    quant_group_size = _int("quant_group_size", quant_group_size, 1, fn)
    tma = _bool("tma_aligned_scales", tma_aligned_scales, fn)
    quantize = _bool("quantize", quantize, fn)
    if o.dim() != 3:
        raise fail("o", f"shape {tuple(o.shape)}", "3-D (num_tokens, num_heads, head_dim)", fn)
    if o.dtype not in O_DTYPES:
        raise fail("o", f"dtype {o.dtype}", "torch.bfloat16", fn)
    num_tokens, num_heads, head_dim = o.shape
    if (-(-num_tokens // 4) * 4 if quantize else num_tokens) >= MAX_ROWS:
        raise fail("o", f"{num_tokens} tokens",
                   "a token count whose scale rows (rounded up to a multiple of 4 when "
                   f"quantising) stay below 2**31 = {MAX_ROWS}: vLLM's kernel launches one "
                   "program per row, and a CUDA grid has fewer than 2**31 along x; the "
                   "kernel compares token indices in 32 bits", fn)
    if num_heads != n_groups * heads_per_group:
        raise fail("o", f"{num_heads} heads (shape {tuple(o.shape)})",
                   f"n_groups * heads_per_group = {n_groups} * {heads_per_group} = "
                   f"{n_groups * heads_per_group} heads", fn)
    if head_dim != nope_dim + rope_dim:
        raise fail("o", f"head_dim {head_dim}",
                   f"nope_dim + rope_dim = {nope_dim} + {rope_dim} = {nope_dim + rope_dim}", fn)
    if head_dim % quant_group_size:
        raise fail("quant_group_size", quant_group_size, f"a divisor of head_dim {head_dim}", fn)
    if rope_dim % 2:
        raise fail("rope_dim", rope_dim, "an even number", fn)
    if not _pow2(head_dim) or not _pow2(quant_group_size):
        raise fail("o", f"head_dim {head_dim}, quant_group_size {quant_group_size}",
                   "powers of two (the kernel's tl.arange/tl.reshape shapes)", fn)
    if nope_dim % 2 or rope_dim < 2 or not _pow2(rope_dim // 2):
        raise fail("rope_dim", f"nope_dim {nope_dim}, rope_dim {rope_dim}",
                   "an even nope_dim and rope_dim / 2 a power of two (the kernel loads the "
                   "rope lanes as aligned pairs)", fn)
    if o.stride(2) != 1 and head_dim > 1:
        raise fail("o", f"strides {o.stride()}", "unit stride along head_dim", fn)
    chunks_per_head = head_dim // quant_group_size
    if quantize and tma and chunks_per_head % 4:
        raise fail("quant_group_size", quant_group_size,
                   f"head_dim / quant_group_size a multiple of 4 with tma_aligned_scales "
                   f"(packed UE8M0), got {chunks_per_head} chunks per head", fn)
    if cache.dim() != 2 or cache.shape[-1] != rope_dim:
        raise fail("cos_sin_cache", f"shape {tuple(cache.shape)}",
                   f"(max_position, rope_dim={rope_dim})", fn)
    if cache.dtype != torch.float32:
        raise fail("cos_sin_cache", f"dtype {cache.dtype}", "torch.float32", fn)
    if cache.stride(1) != 1 and rope_dim > 1:
        raise fail("cos_sin_cache", f"strides {cache.stride()}", "unit column stride", fn)
    if positions.dim() != 1 or positions.dtype not in POSITION_DTYPES:
        raise fail("positions", f"shape {tuple(positions.shape)} dtype {positions.dtype}",
                   "a 1-D int64 or int32 tensor", fn)
    if positions.shape[0] < num_tokens:
        raise fail("positions", f"{positions.shape[0]} entries", f"at least {num_tokens}", fn)
    if positions.shape[0] > 1 and positions.stride(0) != 1:
        raise fail("positions", f"stride {positions.stride()}", "unit stride", fn)
    for name, tensor in (("positions", positions), ("cos_sin_cache", cache)):
        if tensor.device != o.device:
            raise fail(name, f"device {tensor.device}", f"o's device {o.device}", fn)
    for name, tensor in (("o", o), ("positions", positions), ("cos_sin_cache", cache)):
        if tensor.numel() and tensor.data_ptr() % ALIGN_BYTES:
            raise fail(name, f"data_ptr {tensor.data_ptr():#x}", f"{ALIGN_BYTES}-byte aligned", fn)
    strides = (("o", o.stride(0), num_tokens > 1), ("o", o.stride(1), num_heads > 1),
               ("cos_sin_cache", cache.stride(0), cache.shape[0] > 1))
    for name, stride, used in strides:
        if used and stride % STRIDE_MULTIPLE:
            raise fail(name, f"strides {o.stride() if name == 'o' else cache.stride()}",
                       f"row strides that are multiples of {STRIDE_MULTIPLE} elements", fn)
    d = heads_per_group * head_dim
    blocks = d // quant_group_size
    inner = ((blocks + 3) // 4 if tma else blocks) if quantize else 0
    aligned = -(-num_tokens // 4) * 4 if quantize else num_tokens
    codes = DTYPE_CODES[o.dtype] + (3 if positions.dtype == torch.int32 else 0)
    return Checked(num_tokens, num_heads, head_dim, chunks_per_head, d, inner, aligned,
                   o.device, codes)


def check_buffers(checked: Checked, out_buf: object, scale_buf: object, n_groups: int,
                  quantize: bool, tma_aligned_scales: bool, out_dtype: torch.dtype,
                  fn: str) -> None:
    """``out_buf``/``scale_buf`` as vLLM's op implementation allocates them."""
    out_buf = _tensor("out_buf", out_buf, fn)
    scale_buf = _tensor("scale_buf", scale_buf, fn)
    want = (n_groups, checked.num_tokens, checked.d)
    if (tuple(out_buf.shape) != want or out_buf.dtype != out_dtype
            or out_buf.device != checked.device
            or (out_buf.numel() and out_buf.stride() != (want[1] * want[2], want[2], 1))):
        raise fail("out_buf", f"shape {tuple(out_buf.shape)} strides {out_buf.stride()} "
                   f"dtype {out_buf.dtype} on {out_buf.device}",
                   f"a contiguous {want} {out_dtype} tensor on {checked.device}", fn)
    scale_dtype = torch.int32 if tma_aligned_scales else torch.float32
    for name, tensor in (("out_buf", out_buf), ("scale_buf", scale_buf)):
        if tensor.numel() and tensor.data_ptr() % ALIGN_BYTES:
            raise fail(name, f"data_ptr {tensor.data_ptr():#x}", f"{ALIGN_BYTES}-byte aligned", fn)
    if scale_buf.dtype != scale_dtype or scale_buf.device != checked.device:
        raise fail("scale_buf", f"dtype {scale_buf.dtype} on {scale_buf.device}",
                   f"{scale_dtype} on {checked.device}", fn)
    if not quantize:
        return
    inner, aligned = checked.scale_inner, checked.tma_aligned_T
    shape = (n_groups, checked.num_tokens, inner)
    strides = (inner * aligned, 1, aligned)
    room = scale_buf.untyped_storage().nbytes() // scale_buf.element_size() - (
        scale_buf.storage_offset())
    if tuple(scale_buf.shape) != shape or (
            checked.num_tokens and tuple(scale_buf.stride()) != strides) or (
            room < n_groups * inner * aligned):
        raise fail("scale_buf", f"shape {tuple(scale_buf.shape)} strides "
                   f"{scale_buf.stride()} over {room} elements",
                   f"{shape} with strides {strides} over {n_groups * inner * aligned} "
                   "elements (vLLM's MN-major TMA-aligned layout)", fn)
