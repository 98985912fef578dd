"""Argument checks for the indexer decode kernel, its reference and warm-up.

They run on every model step, so they read tensor attributes only: no device syncs, no
tensor operations. Each failure raises :class:`ValueError` naming the function, the
argument, what it got and what is accepted, before anything is written.

Every tensor is int32, one-dimensional and unit-strided (vLLM's builder buffers and the
step's ``query_start_loc`` / ``seq_lens`` are), on one device. The sizes are what the
call reads and writes: ``query_start_loc`` holds at least ``num_reqs + 1`` entries,
``seq_lens``, ``decode_lens`` and ``per_req_decode_lens`` at least ``num_reqs``, and
``expanded_seq_lens`` at least ``max(num_reqs, num_tokens)``. (vLLM's slices would
silently stop at a buffer's end instead; a caller that must match that refuses such a
step before asking.)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

FN = "indexer_decode_metadata"
"""The host entry point's name, for messages."""
INT32_MAX = 2**31 - 1
MIN_TOKENS_PER_PROGRAM = 16
MAX_TOKENS_PER_PROGRAM = 8192
MAX_ELEMENTS_PER_THREAD = 128
NUM_WARPS = (1, 2, 4, 8, 16)
NAMES = ("query_start_loc", "seq_lens", "decode_lens", "per_req_decode_lens",
         "expanded_seq_lens")
"""The tensor arguments, in call order."""


class Checked(NamedTuple):
    """What the checks established, for the caller to launch with.

    A named tuple: it is built on every model step, and a frozen dataclass's
    initializer costs several times more on the host."""

    num_rows: int
    """Rows the launch covers: ``max(num_reqs, num_tokens)``."""
    cuda_index: int
    """The CUDA device index of every tensor, or -1 when they are not on a CUDA device."""


def _fail(name: str, got: object, accepted: str) -> ValueError:
    return ValueError(f"{FN}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(name: str, value: object, low: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= INT32_MAX:  # type: ignore[operator]
        raise _fail(name, repr(value), f"an int in [{low}, 2**31-1] ({what})")
    return value  # type: ignore[return-value]


def check_tile(tokens_per_program: object, num_warps: object) -> None:
    """Refuse a tile the kernel cannot run, naming the argument."""
    tpp = tokens_per_program
    if (not _is_int(tpp) or not MIN_TOKENS_PER_PROGRAM <= tpp <= MAX_TOKENS_PER_PROGRAM  # type: ignore[operator]
            or tpp & (tpp - 1)):  # type: ignore[operator]
        raise _fail("tokens_per_program", repr(tpp),
                    f"a power of two in [{MIN_TOKENS_PER_PROGRAM}, {MAX_TOKENS_PER_PROGRAM}]")
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise _fail("num_warps", repr(num_warps), f"one of {NUM_WARPS}")
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    if tpp > limit:  # type: ignore[operator]
        raise _fail("tokens_per_program", f"{tpp} with num_warps={num_warps}",
                    f"at most {MAX_ELEMENTS_PER_THREAD} rows per thread, "
                    f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}")


_Tensor, _I32 = torch.Tensor, torch.int32


def _accept_fast(qsl: object, seq: object, lens: object, per_req: object, expanded: object,
                 num_reqs: object, num_tokens: object, ratio: object) -> Checked | None:
    """``Checked`` when every condition of :func:`explain_inputs` plainly holds, else None.

    Deliberately narrower than the detailed checks, never wider: a test asserts that
    whatever it accepts, the detailed checks accept with the same result."""
    tensor = _Tensor
    if not (type(qsl) is tensor and type(seq) is tensor and type(lens) is tensor
            and type(per_req) is tensor and type(expanded) is tensor):
        return None
    if not (qsl.dtype is _I32 and seq.dtype is _I32 and lens.dtype is _I32
            and per_req.dtype is _I32 and expanded.dtype is _I32):
        return None
    if not (type(num_reqs) is int and type(num_tokens) is int and type(ratio) is int
            and 0 <= num_reqs < INT32_MAX and 0 <= num_tokens <= INT32_MAX
            and 0 < ratio <= INT32_MAX):
        return None
    strides = (qsl.stride(), seq.stride(), lens.stride(), per_req.stride(), expanded.stride())
    if strides != ((1,), (1,), (1,), (1,), (1,)):
        return None
    rows = num_reqs if num_reqs >= num_tokens else num_tokens
    if not (qsl.shape[0] > num_reqs and seq.shape[0] >= num_reqs
            and lens.shape[0] >= num_reqs and per_req.shape[0] >= num_reqs
            and expanded.shape[0] >= rows):
        return None
    index = expanded.get_device()
    cuda = expanded.is_cuda
    if not (cuda or expanded.is_cpu):
        return None
    for other in (qsl, seq, lens, per_req):
        if other.get_device() != index or other.is_cuda is not cuda or not (
                cuda or other.is_cpu):
            return None
    return Checked(rows, index if cuda else -1)


def _tensor(name: str, value: object, low: int, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _fail(name, type(value).__name__, "a torch.Tensor of dtype torch.int32")
    if value.dtype != torch.int32:
        raise _fail(name, f"dtype {value.dtype}", "dtype torch.int32")
    if value.dim() != 1:
        raise _fail(name, f"{value.dim()} dimensions (shape {tuple(value.shape)})",
                    "1 dimension")
    if value.shape[0] > 1 and value.stride(0) != 1:
        raise _fail(name, f"stride {value.stride(0)}",
                    "stride 1 (the kernel reads it as contiguous)")
    if value.shape[0] < low:
        raise _fail(name, f"{value.shape[0]} entries", f"at least {low} ({what})")
    return value


def explain_inputs(
    query_start_loc: object, seq_lens: object, decode_lens: object,
    per_req_decode_lens: object, expanded_seq_lens: object, num_reqs: object,
    num_tokens: object, compress_ratio: object,
) -> Checked:
    """The detailed checks: raise ``ValueError`` naming the first problem found."""
    n = _int("num_reqs", num_reqs, 0, "decode requests")
    if n == INT32_MAX:
        raise _fail("num_reqs", n, "at most 2**31-2 (query_start_loc holds num_reqs + 1)")
    m = _int("num_tokens", num_tokens, 0, "decode tokens")
    _int("compress_ratio", compress_ratio, 1, "tokens per compressed state")
    rows = max(n, m)
    tensors = (
        _tensor("query_start_loc", query_start_loc, n + 1, "num_reqs + 1"),
        _tensor("seq_lens", seq_lens, n, "num_reqs"),
        _tensor("decode_lens", decode_lens, n, "num_reqs"),
        _tensor("per_req_decode_lens", per_req_decode_lens, n, "num_reqs"),
        _tensor("expanded_seq_lens", expanded_seq_lens, rows, "max(num_reqs, num_tokens)"),
    )
    device = tensors[-1].device
    for name, t in zip(NAMES, tensors, strict=True):
        if t.device != device:
            raise _fail(name, f"device {t.device}",
                        f"the device of expanded_seq_lens ({device})")
    if device.type not in ("cuda", "cpu"):
        raise _fail("expanded_seq_lens", f"device {device}",
                    "a CUDA device (or the CPU under Triton's interpreter)")
    cuda_index = device.index if device.type == "cuda" and device.index is not None else -1
    if device.type == "cuda" and cuda_index < 0:
        cuda_index = torch.cuda.current_device()
    return Checked(rows, cuda_index)


def check_inputs(
    query_start_loc: object, seq_lens: object, decode_lens: object,
    per_req_decode_lens: object, expanded_seq_lens: object, num_reqs: object,
    num_tokens: object, compress_ratio: object,
) -> Checked:
    """Check every argument: one pass over the attributes accepts the common, valid call;
    anything it is not sure of goes to :func:`explain_inputs`."""
    checked = _accept_fast(query_start_loc, seq_lens, decode_lens, per_req_decode_lens,
                           expanded_seq_lens, num_reqs, num_tokens, compress_ratio)
    if checked is not None:
        return checked
    return explain_inputs(query_start_loc, seq_lens, decode_lens, per_req_decode_lens,
                          expanded_seq_lens, num_reqs, num_tokens, compress_ratio)
