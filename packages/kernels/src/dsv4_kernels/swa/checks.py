"""Argument checks for the SWA indices-and-lens kernel and its reference.

They read tensor attributes only (no device syncs), and each failure raises
:class:`ValueError` naming the argument, what it got and what is accepted, before
anything is written. What cannot be checked without reading device memory is
documented instead: every valid token's request index must be a row of
``block_table`` and an index into ``query_start_loc`` (and its successor),
``seq_lens`` and ``replay_start``; the block table row must hold the blocks of the
token's window; and slot ids (block id * block_size + offset) must fit in int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FN = "compute_swa_indices_and_lens"
INT32_MAX = 2**31 - 1
MIN_COLS_PER_PROGRAM = 16
MAX_COLS_PER_PROGRAM = 8192
MAX_TOKENS_PER_PROGRAM = 256
MAX_ELEMENTS_PER_THREAD = 128
NUM_WARPS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Checked:
    """What the checks established, for the caller to launch with."""

    rows: torch.Tensor  # swa_indices as a 2-D (token, column) view
    device: torch.device


def _fail(name: str, got: object, accepted: str) -> ValueError:
    return ValueError(f"{FN}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(name: str, value: object, low: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= INT32_MAX:  # type: ignore[operator]
        raise _fail(name, repr(value), f"an int in [{low}, 2**31-1] ({what})")
    return value  # type: ignore[return-value]


def _tensor(name: str, value: object, dtype: torch.dtype, ndim: int,
            min_len: int | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _fail(name, type(value).__name__, f"a torch.Tensor of dtype {dtype}")
    if value.dtype != dtype:
        raise _fail(name, f"dtype {value.dtype}", f"dtype {dtype}")
    if value.dim() != ndim:
        raise _fail(name, f"{value.dim()} dimensions (shape {tuple(value.shape)})",
                    f"{ndim} dimension{'s' if ndim > 1 else ''}")
    if value.shape[-1] > 1 and value.stride(-1) != 1:
        raise _fail(name, f"stride {value.stride(-1)} in the last dimension",
                    "stride 1 in the last dimension")
    if min_len is not None and value.shape[0] < min_len:
        raise _fail(name, f"{value.shape[0]} entries", f"at least {min_len} "
                    "(token_offset + num_tokens)" if name != "swa_lens"
                    else f"at least {min_len} (num_tokens)")
    return value


def _rows(swa_indices: object, index_width: int, num_tokens: int) -> torch.Tensor:
    if not isinstance(swa_indices, torch.Tensor):
        raise _fail("swa_indices", type(swa_indices).__name__,
                    "a torch.Tensor of dtype torch.int32")
    if swa_indices.dim() == 3:
        if swa_indices.shape[1] != 1:
            raise _fail("swa_indices", f"shape {tuple(swa_indices.shape)}",
                        "(tokens, columns) or (tokens, 1, columns)")
        swa_indices = swa_indices.select(1, 0)
    rows = _tensor("swa_indices", swa_indices, torch.int32, 2)
    if rows.shape[0] < num_tokens:
        raise _fail("swa_indices", f"{rows.shape[0]} rows", f"at least num_tokens = {num_tokens}")
    if index_width > rows.shape[1]:
        raise _fail("index_width", index_width,
                    f"at most the buffer's {rows.shape[1]} columns per row")
    if num_tokens > 1 and rows.stride(0) < index_width:
        raise _fail("swa_indices", f"row stride {rows.stride(0)}",
                    f"a row stride >= index_width = {index_width} (rows must not overlap)")
    return rows


def check_tile(tokens_per_program: object, cols_per_program: object, num_warps: object) -> None:
    """Refuse a tile the kernel cannot run, naming the argument."""
    for name, value, low, high in (
        ("tokens_per_program", tokens_per_program, 1, MAX_TOKENS_PER_PROGRAM),
        ("cols_per_program", cols_per_program, MIN_COLS_PER_PROGRAM, MAX_COLS_PER_PROGRAM),
    ):
        if not _is_int(value) or not low <= value <= high or value & (value - 1):  # type: ignore[operator]
            raise _fail(name, repr(value), f"a power of two in [{low}, {high}]")
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise _fail("num_warps", repr(num_warps), f"one of {NUM_WARPS}")
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    if tokens_per_program * cols_per_program > limit:  # type: ignore[operator]
        raise _fail("tokens_per_program * cols_per_program",
                    tokens_per_program * cols_per_program,  # type: ignore[operator]
                    f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread, "
                    f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}")


def check_inputs(
    swa_indices: object, swa_lens: object, window_size: object, index_width: object,
    left_visible: object, right_visible: object, query_start_loc: object, seq_lens: object,
    token_to_req_indices: object, is_valid_token: object, block_table: object,
    block_size: object, replay_start: object, *, num_tokens: object, token_offset: object,
    has_image: object,
) -> Checked:
    """Check every argument; return the 2-D view of ``swa_indices`` and the device."""
    n = _int("num_tokens", num_tokens, 0, "rows to write")
    offset = _int("token_offset", token_offset, 0, "first token read")
    if n + offset > INT32_MAX:
        raise _fail("token_offset + num_tokens", n + offset, "at most 2**31-1")
    if not isinstance(has_image, bool) and has_image not in (0, 1):
        raise _fail("has_image", repr(has_image), "a bool")
    _int("window_size", window_size, 1, "the sliding window")
    width = _int("index_width", index_width, 1, "columns written per row")
    _int("block_size", block_size, 1, "tokens per KV block")
    rows = _rows(swa_indices, width, n)
    lens = _tensor("swa_lens", swa_lens, torch.int32, 1, n)
    tensors: list[tuple[str, torch.Tensor]] = [("swa_indices", rows), ("swa_lens", lens)]
    if has_image:
        for name, value in (("left_visible", left_visible), ("right_visible", right_visible)):
            tensors.append((name, _tensor(name, value, torch.int32, 1, n + offset)))
    for name, value in (("query_start_loc", query_start_loc), ("seq_lens", seq_lens),
                        ("replay_start", replay_start)):
        tensors.append((name, _tensor(name, value, torch.int32, 1)))
    tensors.append(("token_to_req_indices",
                    _tensor("token_to_req_indices", token_to_req_indices, torch.int32, 1,
                            n + offset)))
    tensors.append(("is_valid_token",
                    _tensor("is_valid_token", is_valid_token, torch.bool, 1, n + offset)))
    tensors.append(("block_table", _tensor("block_table", block_table, torch.int32, 2)))
    device = rows.device
    for name, t in tensors:
        if t.device != device:
            raise _fail(name, f"device {t.device}", f"the device of swa_indices, {device}")
    return Checked(rows, device)
