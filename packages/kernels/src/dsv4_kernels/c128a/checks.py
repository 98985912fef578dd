"""Argument checks shared by the kernel wrapper and the reference.

They run on every model step, so they read tensor attributes only: no device syncs,
no tensor operations. Each failure raises :class:`ValueError` naming the argument,
what it got and what is accepted, before anything is written.

What cannot be checked without reading device memory is documented instead: every
decode token's request index must be a row of ``block_table``, and that row must
hold the blocks of the token's visible entries, ``cdiv(n, block_size)`` of them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

FN = "build_c128a_topk_metadata"
WIDTH_MULTIPLE = 128
ROW_STRIDE_MULTIPLE = 16
BUFFER_ALIGNMENT_BYTES = 16
MIN_COLS_PER_PROGRAM = 128
MAX_COLS_PER_PROGRAM = 8192
MAX_TOKENS_PER_PROGRAM = 256
MAX_ELEMENTS_PER_THREAD = 128
NUM_WARPS = (1, 2, 4, 8, 16)


class Checked(NamedTuple):
    """What the checks established, for the caller to launch or slice with.

    A named tuple, not a frozen dataclass: it is built on every model step, and a
    frozen dataclass's initializer costs several times more on the host."""

    num_tokens: int
    num_decode: int
    num_prefill: int
    width: int
    decode_view_width: int
    cuda_index: int
    """The CUDA device index of every tensor, or -1 when they are not on a CUDA device."""
    decode_row_stride: int
    prefill_row_stride: int
    table_row_stride: int
    lens_stride: int


def _fail(name: str, got: object, accepted: str) -> ValueError:
    return ValueError(f"{FN}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(name: str, value: object, dtype: torch.dtype, ndim: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _fail(name, type(value).__name__, f"a torch.Tensor of dtype {dtype}")
    if value.dtype != dtype:
        raise _fail(name, f"dtype {value.dtype}", f"dtype {dtype}")
    if value.dim() != ndim:
        raise _fail(name, f"{value.dim()} dimensions (shape {tuple(value.shape)})", f"{ndim}")
    if value.shape[-1] > 1 and value.stride(-1) != 1:
        raise _fail(
            name,
            f"stride {value.stride(-1)} in the last dimension",
            "stride 1 in the last dimension (contiguous rows)",
        )
    return value


def _buffer(name: str, value: object) -> torch.Tensor:
    buf = _tensor(name, value, torch.int32, 2)
    rows, cols = buf.shape
    if rows > 1 and (buf.stride(0) < cols or buf.stride(0) % ROW_STRIDE_MULTIPLE):
        raise _fail(
            name,
            f"row stride {buf.stride(0)} for {cols} columns",
            f"a row stride >= the column count and a multiple of {ROW_STRIDE_MULTIPLE}",
        )
    if buf.data_ptr() % BUFFER_ALIGNMENT_BYTES:
        raise _fail(
            name,
            f"data pointer {buf.data_ptr():#x}",
            f"a {BUFFER_ALIGNMENT_BYTES}-byte aligned buffer (a fresh allocation, not an "
            "offset view)",
        )
    return buf


def _count(name: str, value: object, low: int, high: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= high:
        raise _fail(name, repr(value), f"an int in [{low}, {high}] ({what})")
    return value


def _positive(name: str, value: object) -> int:
    if not _is_int(value) or value <= 0:
        raise _fail(name, repr(value), "a positive int")
    return value


def check_inputs(
    positions: object,
    compress_ratio: object,
    num_decode_tokens: object,
    token_to_req_indices: object,
    block_table: object,
    block_size: object,
    slot_mapping: object,
    global_decode_buffer: object,
    decode_lens_buffer: object,
    prefill_buffer: object,
    *,
    width: object,
    decode_view_width: object,
) -> Checked:
    """Check the data arguments; return the token counts and widths they imply.

    A model step pays for this on every call, so a single pass over the attributes
    accepts the common, valid call; anything it is not sure of goes to the detailed
    checks, which name the argument, what it got and what is accepted.
    """
    checked = _accept_fast(
        positions, compress_ratio, num_decode_tokens, token_to_req_indices, block_table,
        block_size, slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer,
        width, decode_view_width,
    )
    if checked is not None:
        return checked
    return explain_inputs(
        positions, compress_ratio, num_decode_tokens, token_to_req_indices, block_table,
        block_size, slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer,
        width=width, decode_view_width=decode_view_width,
    )


_I32, _I64, _Tensor = torch.int32, torch.int64, torch.Tensor


def _accept_fast(
    pos: object, ratio: object, num_decode: object, req: object, table: object,
    block_size: object, slots: object, dbuf: object, lens: object, pbuf: object,
    width: object, view: object,
) -> Checked | None:
    """``Checked`` when every condition of :func:`explain_inputs` plainly holds, else None.

    Deliberately narrower than the detailed checks (it also wants unit strides on the
    1-D inputs and real CPU or CUDA tensors), never wider: a test asserts that whatever
    it accepts, the detailed checks accept with the same result.
    """
    tensor = _Tensor
    if not (type(pos) is tensor and type(req) is tensor and type(table) is tensor
            and type(slots) is tensor and type(dbuf) is tensor and type(lens) is tensor
            and type(pbuf) is tensor):
        return None
    if not (pos.dtype is _I64 and slots.dtype is _I64 and req.dtype is _I32
            and table.dtype is _I32 and dbuf.dtype is _I32 and lens.dtype is _I32
            and pbuf.dtype is _I32):
        return None
    if not (type(ratio) is int and ratio > 0 and type(block_size) is int and block_size > 0
            and type(num_decode) is int and type(width) is int):
        return None
    pos_stride, req_stride, slot_stride, lens_stride = (
        pos.stride(), req.stride(), slots.stride(), lens.stride())
    d_stride, p_stride, t_stride = dbuf.stride(), pbuf.stride(), table.stride()
    if not (len(pos_stride) == len(req_stride) == len(slot_stride) == len(lens_stride) == 1
            and len(d_stride) == len(p_stride) == len(t_stride) == 2):
        return None
    if not (pos_stride[0] == req_stride[0] == slot_stride[0] == lens_stride[0] == 1
            and d_stride[1] == p_stride[1] == t_stride[1] == 1):
        return None
    num_tokens = pos.shape[0]
    d_rows, capacity = dbuf.shape
    p_rows, p_cols = pbuf.shape
    t_rows, t_cols = table.shape
    view_width = width if view is None else view
    if not (0 <= num_decode <= num_tokens and width > 0 and width % WIDTH_MULTIPLE == 0
            and width <= capacity and width <= p_cols
            and type(view_width) is int and width <= view_width <= capacity):
        return None
    if not (d_stride[0] >= capacity and d_stride[0] % ROW_STRIDE_MULTIPLE == 0
            and p_stride[0] >= p_cols and p_stride[0] % ROW_STRIDE_MULTIPLE == 0
            and dbuf.data_ptr() % BUFFER_ALIGNMENT_BYTES == 0
            and pbuf.data_ptr() % BUFFER_ALIGNMENT_BYTES == 0):
        return None
    num_prefill = num_tokens - num_decode
    if not (d_rows >= num_decode and lens.shape[0] >= num_decode
            and req.shape[0] >= num_decode and slots.shape[0] >= num_decode
            and p_rows >= num_prefill and (num_decode == 0 or (t_rows >= 1 and t_cols >= 1))):
        return None
    index = pos.get_device()
    cuda = pos.is_cuda
    if not (cuda or pos.is_cpu):
        return None
    for other in (req, table, slots, dbuf, lens, pbuf):
        if other.get_device() != index or other.is_cuda is not cuda or not (
                cuda or other.is_cpu):
            return None
    return Checked(num_tokens, num_decode, num_prefill, width, view_width,
                   index if cuda else -1, d_stride[0], p_stride[0], t_stride[0], 1)


def explain_inputs(
    positions: object,
    compress_ratio: object,
    num_decode_tokens: object,
    token_to_req_indices: object,
    block_table: object,
    block_size: object,
    slot_mapping: object,
    global_decode_buffer: object,
    decode_lens_buffer: object,
    prefill_buffer: object,
    *,
    width: object,
    decode_view_width: object,
) -> Checked:
    """The detailed checks: raise ``ValueError`` naming the first problem found."""
    pos = _tensor("positions", positions, torch.int64, 1)
    num_tokens = pos.shape[0]
    _positive("compress_ratio", compress_ratio)
    _positive("block_size", block_size)
    num_decode = _count(
        "num_decode_tokens", num_decode_tokens, 0, num_tokens, "at most positions.shape[0]"
    )
    num_prefill = num_tokens - num_decode

    decode_buf = _buffer("global_decode_buffer", global_decode_buffer)
    prefill_buf = _buffer("prefill_buffer", prefill_buffer)
    lens = _tensor("decode_lens_buffer", decode_lens_buffer, torch.int32, 1)
    req = _tensor("token_to_req_indices", token_to_req_indices, torch.int32, 1)
    slots = _tensor("slot_mapping", slot_mapping, torch.int64, 1)
    table = _tensor("block_table", block_table, torch.int32, 2)

    capacity = decode_buf.shape[1]
    max_width = min(capacity, prefill_buf.shape[1])
    if not _is_int(width) or width <= 0 or width % WIDTH_MULTIPLE or width > max_width:
        raise _fail(
            "width",
            repr(width),
            f"a positive multiple of {WIDTH_MULTIPLE} no larger than both buffers' widths "
            f"(global_decode_buffer {capacity}, prefill_buffer {prefill_buf.shape[1]})",
        )
    view_width = width if decode_view_width is None else decode_view_width
    if not _is_int(view_width) or not width <= view_width <= capacity:
        raise _fail(
            "decode_view_width",
            repr(decode_view_width),
            f"None or an int in [width, global_decode_buffer width] = [{width}, {capacity}]",
        )

    for name, rows in (
        ("global_decode_buffer", decode_buf.shape[0]),
        ("decode_lens_buffer", lens.shape[0]),
        ("token_to_req_indices", req.shape[0]),
        ("slot_mapping", slots.shape[0]),
    ):
        if rows < num_decode:
            raise _fail(
                name,
                f"{rows} rows",
                f"at least num_decode_tokens = {num_decode} rows",
            )
    if prefill_buf.shape[0] < num_prefill:
        raise _fail(
            "prefill_buffer",
            f"{prefill_buf.shape[0]} rows",
            f"at least positions.shape[0] - num_decode_tokens = {num_prefill} rows",
        )
    if num_decode and (table.shape[0] < 1 or table.shape[1] < 1):
        raise _fail(
            "block_table",
            f"shape {tuple(table.shape)}",
            "at least one row and one column when there are decode tokens",
        )

    device = pos.device
    for name, tensor in (
        ("token_to_req_indices", req),
        ("block_table", table),
        ("slot_mapping", slots),
        ("global_decode_buffer", decode_buf),
        ("decode_lens_buffer", lens),
        ("prefill_buffer", prefill_buf),
    ):
        if tensor.device != device:
            raise _fail(name, f"device {tensor.device}", f"the device of positions ({device})")
    cuda_index = device.index if device.type == "cuda" and device.index is not None else -1
    return Checked(num_tokens, num_decode, num_prefill, width, view_width, cuda_index,
                   decode_buf.stride(0), prefill_buf.stride(0), table.stride(0), lens.stride(0))


def _power_of_two(value: object) -> bool:
    return _is_int(value) and value > 0 and value & (value - 1) == 0


def check_tile(tokens_per_program: object, cols_per_program: object, num_warps: object,
               split_width: object) -> None:
    """Check one launch tile: the values a compile key is made of."""
    if not _power_of_two(tokens_per_program) or tokens_per_program > MAX_TOKENS_PER_PROGRAM:
        raise _fail(
            "tokens_per_program",
            repr(tokens_per_program),
            f"a power of two in [1, {MAX_TOKENS_PER_PROGRAM}]",
        )
    if (
        not _power_of_two(cols_per_program)
        or not MIN_COLS_PER_PROGRAM <= cols_per_program <= MAX_COLS_PER_PROGRAM
    ):
        raise _fail(
            "cols_per_program",
            repr(cols_per_program),
            f"a power of two in [{MIN_COLS_PER_PROGRAM}, {MAX_COLS_PER_PROGRAM}]",
        )
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise _fail("num_warps", repr(num_warps), f"one of {NUM_WARPS}")
    # Bigger tiles per thread only spill and compile slowly (measured on an H200:
    # 128 per thread ~8 s, 512 ~20 s, 2048 over 3 minutes).
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps
    if tokens_per_program * cols_per_program > limit:
        raise _fail(
            "tokens_per_program * cols_per_program",
            f"{tokens_per_program} * {cols_per_program} = "
            f"{tokens_per_program * cols_per_program} with num_warps={num_warps}",
            f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread, "
            f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}",
        )
    if not isinstance(split_width, bool):
        raise _fail("split_width", repr(split_width), "a bool")
