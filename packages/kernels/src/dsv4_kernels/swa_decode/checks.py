"""Argument checks for the SWA decode kernel, its reference and warm-up.

They run on every model step, so they read tensor attributes only: no device syncs, no
tensor operations. Each failure raises :class:`ValueError` naming the function, the
argument, what it got and what is accepted, before anything is written.

- ``num_tokens`` (``T``) is in ``[1, S]`` with ``S = slot_mapping.shape[0]``, and at
  most the rows of ``swa_indices`` and the entries of ``swa_lens``;
- ``is_valid_token`` is bool, one-dimensional and unit-strided, with at least ``S``
  entries; ``slot_mapping`` is int64 or int32, one-dimensional and unit-strided;
- every other tensor is int32: ``swa_indices`` is ``(L, 1, W)`` (as vLLM allocates it)
  or ``(L, W)`` with unit column stride, rows not overlapping; ``block_table`` is 2-D
  with unit column stride; ``swa_lens``, ``query_start_loc``, ``seq_lens``,
  ``token_to_req_indices`` and ``replay_start`` are one-dimensional and unit-strided,
  ``token_to_req_indices`` with at least ``T`` entries, the other three holding at least
  the step's first request (2, 1 and 1 entries);
- ``window_size`` and ``block_size`` are ints >= 1; strides and lengths fit in int32;
  every tensor is on one device (a CUDA device, or the CPU under Triton's interpreter).

What cannot be checked without reading device memory is documented instead, as in
:mod:`dsv4_kernels.swa.checks`: every valid token's request index must index
``query_start_loc`` (and its successor), ``seq_lens``, ``replay_start`` and a row of
``block_table``; that row must hold the blocks of the token's window; slot ids
(block id * block_size + offset) must fit in int32.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from dsv4_kernels.swa.checks import (
    INT32_MAX,
    MAX_ELEMENTS_PER_THREAD,
    MIN_COLS_PER_PROGRAM,
    NUM_WARPS,
    _is_int,
)

FN = "build_swa_decode"
"""The host entry point's name, for messages."""
MIN_TOKENS_PER_PROGRAM = 1
MAX_TOKENS_PER_PROGRAM = 1024
MAX_COLS_PER_PROGRAM = 1024
SLOT_DTYPES = (torch.int64, torch.int32)
NAMES = ("swa_indices", "swa_lens", "is_valid_token", "slot_mapping", "query_start_loc",
         "seq_lens", "token_to_req_indices", "block_table", "replay_start")
"""The tensor arguments, in call order."""

__all__ = ["FN", "INT32_MAX", "MAX_COLS_PER_PROGRAM", "MAX_ELEMENTS_PER_THREAD",
           "MAX_TOKENS_PER_PROGRAM", "MIN_COLS_PER_PROGRAM", "MIN_TOKENS_PER_PROGRAM",
           "NAMES", "NUM_WARPS", "SLOT_DTYPES", "Checked", "check_inputs", "check_tile",
           "explain_inputs"]


class Checked(NamedTuple):
    """What the checks established, for the caller to launch with.

    A named tuple: it is built on every model step, and a frozen dataclass's
    initializer costs several times more on the host."""

    num_slots: int
    """``S = slot_mapping.shape[0]``: the entries of ``is_valid_token`` written."""
    num_lens: int
    """``swa_lens.shape[0]``: zeros go to ``[num_tokens, num_lens)``."""
    index_width: int
    """``W = swa_indices.shape[-1]``: the columns written per row."""
    row_stride: int
    """``swa_indices.stride(0)``, in elements."""
    table_stride: int
    """``block_table.stride(0)``, in elements."""
    cuda_index: int
    """The CUDA device index of every tensor, or -1 when they are not on a CUDA device."""


def _fail(name: str, got: object, accepted: str) -> ValueError:
    return ValueError(f"{FN}: {name}: got {got}; expected {accepted}")


def _int(name: str, value: object, low: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= INT32_MAX:  # type: ignore[operator]
        raise _fail(name, repr(value), f"an int in [{low}, 2**31-1] ({what})")
    return value  # type: ignore[return-value]


def check_tile(tokens_per_program: object, cols_per_program: object, num_warps: object) -> None:
    """Refuse a tile the kernel cannot run, naming the argument."""
    for name, value, low, high in (
        ("tokens_per_program", tokens_per_program, MIN_TOKENS_PER_PROGRAM,
         MAX_TOKENS_PER_PROGRAM),
        ("cols_per_program", cols_per_program, MIN_COLS_PER_PROGRAM, MAX_COLS_PER_PROGRAM),
    ):
        if not _is_int(value) or not low <= value <= high or value & (value - 1):  # type: ignore[operator]
            raise _fail(name, repr(value), f"a power of two in [{low}, {high}]")
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise _fail("num_warps", repr(num_warps), f"one of {NUM_WARPS}")
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    elements = tokens_per_program * cols_per_program  # type: ignore[operator]
    if elements > limit:
        raise _fail("tokens_per_program * cols_per_program",
                    f"{elements} with num_warps={num_warps}",
                    f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread, "
                    f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}")


_Tensor, _I32, _I64, _BOOL = torch.Tensor, torch.int32, torch.int64, torch.bool


def _accept_fast(indices: object, lens: object, valid: object, slots: object, qsl: object,
                 seq: object, t2r: object, table: object, replay: object, window_size: object,
                 block_size: object, num_tokens: object) -> Checked | None:
    """``Checked`` when every condition of :func:`explain_inputs` plainly holds, else None.

    Deliberately narrower than the detailed checks, never wider: a test asserts that
    whatever it accepts, the detailed checks accept with the same result."""
    tensor = _Tensor
    if not (type(indices) is tensor and type(lens) is tensor and type(valid) is tensor
            and type(slots) is tensor and type(qsl) is tensor and type(seq) is tensor
            and type(t2r) is tensor and type(table) is tensor and type(replay) is tensor):
        return None
    if not (indices.dtype is _I32 and lens.dtype is _I32 and valid.dtype is _BOOL
            and (slots.dtype is _I64 or slots.dtype is _I32) and qsl.dtype is _I32
            and seq.dtype is _I32 and t2r.dtype is _I32 and table.dtype is _I32
            and replay.dtype is _I32):
        return None
    if not (type(num_tokens) is int and type(window_size) is int and type(block_size) is int
            and 0 < window_size <= INT32_MAX and 0 < block_size <= INT32_MAX):
        return None
    i_stride = indices.stride()
    t_stride = table.stride()
    if not (len(i_stride) == 3 and indices.shape[1] == 1 and i_stride[2] == 1
            and len(t_stride) == 2 and t_stride[1] == 1):
        return None
    if (lens.stride(), valid.stride(), slots.stride(), qsl.stride(), seq.stride(),
            t2r.stride(), replay.stride()) != ((1,), (1,), (1,), (1,), (1,), (1,), (1,)):
        return None
    num_slots = slots.shape[0]
    num_lens = lens.shape[0]
    width = indices.shape[2]
    row_stride = i_stride[0]
    if not (0 < num_tokens <= num_slots <= valid.shape[0] and num_tokens <= indices.shape[0]
            and num_tokens <= num_lens <= INT32_MAX and num_slots <= INT32_MAX
            and width <= row_stride <= INT32_MAX and 0 <= t_stride[0] <= INT32_MAX
            and t2r.shape[0] >= num_tokens and qsl.shape[0] >= 2 and seq.shape[0] >= 1
            and replay.shape[0] >= 1 and width >= 1):
        return None
    if indices.is_cuda:
        index = indices.get_device()
        for other in (lens, valid, slots, qsl, seq, t2r, table, replay):
            if not other.is_cuda or other.get_device() != index:
                return None
    elif indices.is_cpu:
        index = -1
        for other in (lens, valid, slots, qsl, seq, t2r, table, replay):
            if not other.is_cpu:
                return None
    else:
        return None
    return Checked(num_slots, num_lens, width, row_stride, t_stride[0], index)


def _tensor(name: str, value: object, dtypes: tuple[torch.dtype, ...], ndim: int,
            min_len: int = 0, what: str = "") -> torch.Tensor:
    accepted = " or ".join(str(d) for d in dtypes)
    if not isinstance(value, torch.Tensor):
        raise _fail(name, type(value).__name__, f"a torch.Tensor of dtype {accepted}")
    if value.dtype not in dtypes:
        raise _fail(name, f"dtype {value.dtype}", f"dtype {accepted}")
    if value.dim() != ndim:
        raise _fail(name, f"{value.dim()} dimensions (shape {tuple(value.shape)})",
                    f"{ndim} dimension{'s' if ndim > 1 else ''}")
    if value.shape[-1] > 1 and value.stride(-1) != 1:
        last = "" if ndim == 1 else " in the last dimension"
        raise _fail(name, f"stride {value.stride(-1)}{last}",
                    f"stride 1{last} (the kernel reads it as contiguous)")
    if value.shape[0] < min_len:
        raise _fail(name, f"{value.shape[0]} entries", f"at least {min_len} ({what})")
    if value.shape[0] > INT32_MAX:
        raise _fail(name, f"{value.shape[0]} entries", "at most 2**31-1")
    return value


def _rows(swa_indices: object, num_tokens: int) -> torch.Tensor:
    """``swa_indices`` as a 2-D (token, column) view, checked."""
    if isinstance(swa_indices, torch.Tensor) and swa_indices.dim() == 3:
        if swa_indices.shape[1] != 1:
            raise _fail("swa_indices", f"shape {tuple(swa_indices.shape)}",
                        "(tokens, 1, columns) or (tokens, columns)")
        swa_indices = swa_indices.select(1, 0)
    rows = _tensor("swa_indices", swa_indices, (torch.int32,), 2)
    if rows.shape[0] < num_tokens:
        raise _fail("swa_indices", f"{rows.shape[0]} rows", f"at least num_tokens = {num_tokens}")
    width = rows.shape[1]
    if width < 1:
        raise _fail("swa_indices", f"shape {tuple(rows.shape)}", "at least one column per row")
    stride = rows.stride(0)
    if stride > INT32_MAX or (num_tokens > 1 and stride < width):
        raise _fail("swa_indices", f"row stride {stride}",
                    f"a row stride in [{width}, 2**31-1] (the {width} columns of a row must "
                    "not overlap the next row)")
    return rows


def explain_inputs(
    swa_indices: object, swa_lens: object, is_valid_token: object, slot_mapping: object,
    query_start_loc: object, seq_lens: object, token_to_req_indices: object,
    block_table: object, replay_start: object, window_size: object, block_size: object,
    num_tokens: object,
) -> Checked:
    """The detailed checks: raise ``ValueError`` naming the first problem found."""
    n = _int("num_tokens", num_tokens, 1, "decode tokens of the step")
    _int("window_size", window_size, 1, "the sliding window")
    _int("block_size", block_size, 1, "tokens per KV block")
    slots = _tensor("slot_mapping", slot_mapping, SLOT_DTYPES, 1)
    num_slots = slots.shape[0]
    if n > num_slots:
        raise _fail("num_tokens", n, f"at most slot_mapping.shape[0] = {num_slots}")
    valid = _tensor("is_valid_token", is_valid_token, (torch.bool,), 1, num_slots,
                    "slot_mapping.shape[0]")
    rows = _rows(swa_indices, n)
    lens = _tensor("swa_lens", swa_lens, (torch.int32,), 1, n, "num_tokens")
    ints = (torch.int32,)
    tensors = (
        ("swa_indices", rows), ("swa_lens", lens), ("is_valid_token", valid),
        ("slot_mapping", slots),
        ("query_start_loc", _tensor("query_start_loc", query_start_loc, ints, 1, 2,
                                    "the first request's start and end")),
        ("seq_lens", _tensor("seq_lens", seq_lens, ints, 1, 1, "the first request's")),
        ("token_to_req_indices", _tensor("token_to_req_indices", token_to_req_indices, ints,
                                         1, n, "num_tokens")),
        ("block_table", _tensor("block_table", block_table, ints, 2)),
        ("replay_start", _tensor("replay_start", replay_start, ints, 1, 1,
                                 "the first request's")),
    )
    table = tensors[7][1]
    if not 0 <= table.stride(0) <= INT32_MAX:
        raise _fail("block_table", f"row stride {table.stride(0)}", "in [0, 2**31-1]")
    device = rows.device
    for name, t in tensors:
        if t.device != device:
            raise _fail(name, f"device {t.device}", f"the device of swa_indices ({device})")
    if device.type not in ("cuda", "cpu"):
        raise _fail("swa_indices", f"device {device}",
                    "a CUDA device (or the CPU under Triton's interpreter)")
    cuda_index = device.index if device.type == "cuda" and device.index is not None else -1
    if device.type == "cuda" and cuda_index < 0:
        cuda_index = torch.cuda.current_device()
    return Checked(num_slots, lens.shape[0], rows.shape[1], rows.stride(0), table.stride(0),
                   cuda_index)


def check_inputs(
    swa_indices: object, swa_lens: object, is_valid_token: object, slot_mapping: object,
    query_start_loc: object, seq_lens: object, token_to_req_indices: object,
    block_table: object, replay_start: object, window_size: object, block_size: object,
    num_tokens: object,
) -> Checked:
    """Check every argument: one pass over the attributes accepts the common, valid call;
    anything it is not sure of goes to :func:`explain_inputs`."""
    checked = _accept_fast(swa_indices, swa_lens, is_valid_token, slot_mapping,
                           query_start_loc, seq_lens, token_to_req_indices, block_table,
                           replay_start, window_size, block_size, num_tokens)
    if checked is not None:
        return checked
    return explain_inputs(swa_indices, swa_lens, is_valid_token, slot_mapping,
                          query_start_loc, seq_lens, token_to_req_indices, block_table,
                          replay_start, window_size, block_size, num_tokens)
