"""Argument checks for the compressed slot mapping kernel, its reference and warm-up.

They run on every model step, so they read tensor attributes only: no device syncs, no
tensor operations. Each failure raises :class:`ValueError` naming the function, the
argument, what it got and what is accepted, before anything is written.

What cannot be checked without reading device memory is documented instead (vLLM
0.33.0 relies on the same facts): ``query_start_loc[: num_reqs + 1]`` is non-decreasing
(requests own disjoint, ordered token ranges); a request's tokens lie below
``slot_mapping``'s length and the output's length; and every block-table entry a valid
token reads, ``block_table[r, compressed_pos // block_size]``, lies inside the table.
``num_reqs`` is ``block_table.shape[0]``, as vLLM launches one program per table row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

FN = "get_compressed_slot_mapping"
"""The function the host entry point stands in for (vLLM's name)."""
KERNEL_FN = "compressed_slot_mapping_kernel"
"""The kernel object's call (``_COMPRESSED_SLOT_MAPPING_KERNEL(...)``), for messages."""
INT32_MAX = 2**31 - 1
MIN_TOKENS_PER_PROGRAM = 16
MAX_TOKENS_PER_PROGRAM = 8192
MAX_ELEMENTS_PER_THREAD = 128
NUM_WARPS = (1, 2, 4, 8, 16)
SLOT_DTYPES = (torch.int64, torch.int32)


class Checked(NamedTuple):
    """What the checks established, for the caller to launch with.

    A named tuple: it is built on every model step, and a frozen dataclass's
    initializer costs several times more on the host."""

    num_rows: int
    """Rows of the output the launch writes (the whole buffer)."""
    num_slots: int
    num_reqs: int
    table_row_stride: int
    cuda_index: int
    """The CUDA device index of every tensor, or -1 when they are not on a CUDA device."""


def _fail(fn: str, name: str, got: object, accepted: str) -> ValueError:
    return ValueError(f"{fn}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(fn: str, name: str, value: object, low: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= INT32_MAX:  # type: ignore[operator]
        raise _fail(fn, name, repr(value), f"an int in [{low}, 2**31-1] ({what})")
    return value  # type: ignore[return-value]


def _tensor(fn: str, name: str, value: object, dtypes: tuple[torch.dtype, ...],
            ndim: int) -> torch.Tensor:
    accepted = " or ".join(str(d) for d in dtypes)
    if not isinstance(value, torch.Tensor):
        raise _fail(fn, name, type(value).__name__, f"a torch.Tensor of dtype {accepted}")
    if value.dtype not in dtypes:
        raise _fail(fn, name, f"dtype {value.dtype}", f"dtype {accepted}")
    if value.dim() != ndim:
        raise _fail(fn, name, f"{value.dim()} dimensions (shape {tuple(value.shape)})",
                    f"{ndim} dimension{'s' if ndim > 1 else ''}")
    if value.shape[-1] > 1 and value.stride(-1) != 1:
        raise _fail(fn, name, f"stride {value.stride(-1)} in the last dimension",
                    "stride 1 in the last dimension (the kernel reads it as contiguous)")
    if value.shape[0] > INT32_MAX:
        raise _fail(fn, name, f"{value.shape[0]} entries", "at most 2**31-1")
    return value


def check_tile(tokens_per_program: object, num_warps: object) -> None:
    """Refuse a tile the kernel cannot run, naming the argument."""
    tpp = tokens_per_program
    if (not _is_int(tpp) or not MIN_TOKENS_PER_PROGRAM <= tpp <= MAX_TOKENS_PER_PROGRAM  # type: ignore[operator]
            or tpp & (tpp - 1)):  # type: ignore[operator]
        raise _fail(FN, "tokens_per_program", repr(tpp),
                    f"a power of two in [{MIN_TOKENS_PER_PROGRAM}, {MAX_TOKENS_PER_PROGRAM}]")
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise _fail(FN, "num_warps", repr(num_warps), f"one of {NUM_WARPS}")
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    if tpp > limit:  # type: ignore[operator]
        raise _fail(FN, "tokens_per_program", f"{tpp} with num_warps={num_warps}",
                    f"at most {MAX_ELEMENTS_PER_THREAD} rows per thread, "
                    f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}")


_Tensor, _I32, _I64 = torch.Tensor, torch.int32, torch.int64


def _accept_fast(num_tokens: object, slots: object, qsl: object, seq: object, table: object,
                 block_size: object, ratio: object, out: object, dcp: object,
                 interleave: object) -> Checked | None:
    """``Checked`` when every condition of :func:`explain_inputs` plainly holds, else None.

    Deliberately narrower than the detailed checks, never wider: a test asserts that
    whatever it accepts, the detailed checks accept with the same result."""
    tensor = _Tensor
    if not (type(slots) is tensor and type(qsl) is tensor and type(seq) is tensor
            and type(table) is tensor and type(out) is tensor):
        return None
    if not ((slots.dtype is _I64 or slots.dtype is _I32) and qsl.dtype is _I32
            and seq.dtype is _I32 and table.dtype is _I32 and out.dtype is _I64):
        return None
    if not (type(num_tokens) is int and type(block_size) is int and type(ratio) is int
            and type(dcp) is int and type(interleave) is int
            and num_tokens >= 0 and 0 < block_size <= INT32_MAX and 0 < ratio <= INT32_MAX
            and dcp > 0 and interleave > 0 and dcp * interleave <= INT32_MAX):
        return None
    s_stride, q_stride, l_stride, o_stride, t_stride = (
        slots.stride(), qsl.stride(), seq.stride(), out.stride(), table.stride())
    if not (len(s_stride) == len(q_stride) == len(l_stride) == len(o_stride) == 1
            and len(t_stride) == 2
            and s_stride[0] == q_stride[0] == l_stride[0] == o_stride[0] == t_stride[1] == 1):
        return None
    num_rows = out.shape[0]
    num_reqs, _ = table.shape
    if not (num_tokens <= num_rows <= INT32_MAX and qsl.shape[0] > num_reqs
            and seq.shape[0] >= num_reqs and 0 <= t_stride[0] <= INT32_MAX
            and slots.shape[0] <= INT32_MAX and qsl.shape[0] <= INT32_MAX):
        return None
    index = out.get_device()
    cuda = out.is_cuda
    if not (cuda or out.is_cpu):
        return None
    for other in (slots, qsl, seq, table):
        if other.get_device() != index or other.is_cuda is not cuda or not (
                cuda or other.is_cpu):
            return None
    return Checked(num_rows, slots.shape[0], num_reqs, t_stride[0], index if cuda else -1)


def explain_inputs(
    num_tokens: object, slot_mapping: object, query_start_loc: object, seq_lens: object,
    block_table: object, block_size: object, compress_ratio: object, out: object,
    dcp_world_size: object, cp_interleave: object, *, fn: str = FN,
) -> Checked:
    """The detailed checks: raise ``ValueError`` naming the first problem found.

    ``out`` None means the caller allocates ``num_tokens`` rows itself (vLLM's
    ``out=None``); the result's ``num_rows`` is then ``num_tokens``.
    """
    out_name = "out" if fn == FN else "compressed_slot_mapping"
    n = _int(fn, "num_tokens", num_tokens, 0, "tokens of the step")
    slots = _tensor(fn, "slot_mapping", slot_mapping, SLOT_DTYPES, 1)
    qsl = _tensor(fn, "query_start_loc", query_start_loc, (torch.int32,), 1)
    seq = _tensor(fn, "seq_lens", seq_lens, (torch.int32,), 1)
    table = _tensor(fn, "block_table", block_table, (torch.int32,), 2)
    _int(fn, "block_size", block_size, 1, "compressed entries per cache block")
    _int(fn, "compress_ratio", compress_ratio, 1, "tokens per compressed entry")
    dcp = _int(fn, "dcp_world_size", dcp_world_size, 1, "decode context parallel ranks")
    interleave = _int(fn, "cp_interleave", cp_interleave, 1, "tokens per rank in turn")
    if dcp * interleave > INT32_MAX:
        raise _fail(fn, "dcp_world_size * cp_interleave", dcp * interleave, "at most 2**31-1")
    num_reqs = table.shape[0]
    if table.stride(0) > INT32_MAX or table.stride(0) < 0:
        raise _fail(fn, "block_table", f"row stride {table.stride(0)}", "in [0, 2**31-1]")
    if qsl.shape[0] < num_reqs + 1:
        raise _fail(fn, "query_start_loc", f"{qsl.shape[0]} entries",
                    f"at least block_table.shape[0] + 1 = {num_reqs + 1} (one request per "
                    "block-table row, and the end of the last)")
    if seq.shape[0] < num_reqs:
        raise _fail(fn, "seq_lens", f"{seq.shape[0]} entries",
                    f"at least block_table.shape[0] = {num_reqs} (one per request)")
    if out is None:
        rows = n
        device = qsl.device
    else:
        buf = _tensor(fn, out_name, out, (torch.int64,), 1)
        rows = buf.shape[0]
        if rows < n:
            raise _fail(fn, out_name, f"{rows} rows", f"at least num_tokens = {n} rows")
        device = buf.device
    for name, t in (("slot_mapping", slots), ("query_start_loc", qsl), ("seq_lens", seq),
                    ("block_table", table)):
        if t.device != device:
            raise _fail(fn, name, f"device {t.device}",
                        f"the device of {out_name if out is not None else 'query_start_loc'}"
                        f" ({device})")
    if device.type not in ("cuda", "cpu"):
        raise _fail(fn, out_name, f"device {device}", "a CUDA device (or the CPU under "
                    "Triton's interpreter)")
    cuda_index = device.index if device.type == "cuda" and device.index is not None else -1
    if device.type == "cuda" and cuda_index < 0:
        cuda_index = torch.cuda.current_device()
    return Checked(rows, slots.shape[0], num_reqs, table.stride(0), cuda_index)


def check_inputs(
    num_tokens: object, slot_mapping: object, query_start_loc: object, seq_lens: object,
    block_table: object, block_size: object, compress_ratio: object, out: object,
    dcp_world_size: object, cp_interleave: object, *, fn: str = FN,
) -> Checked:
    """Check every argument: one pass over the attributes accepts the common, valid call;
    anything it is not sure of goes to :func:`explain_inputs`."""
    checked = _accept_fast(num_tokens, slot_mapping, query_start_loc, seq_lens, block_table,
                           block_size, compress_ratio, out, dcp_world_size, cp_interleave)
    if checked is not None:
        return checked
    return explain_inputs(num_tokens, slot_mapping, query_start_loc, seq_lens, block_table,
                          block_size, compress_ratio, out, dcp_world_size, cp_interleave,
                          fn=fn)
