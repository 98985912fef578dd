"""Argument checks for ``combine_topk_swa_indices`` (the kernel and its reference).

They read tensor attributes only (no device syncs, so they cost no GPU round trip and
can run inside CUDA-graph capture), and each failure raises :class:`ValueError` naming
the function, the argument, what it got and what is accepted, before anything is
written or allocated.

What cannot be checked without reading device memory is the caller's promise, as it is
vLLM's: ``query_start_loc[:num_reqs + 1]`` is non-decreasing, the chunk's tokens
(``query_start_loc[num_reqs] - query_start_loc[0]``) are at most
``topk_indices.shape[0]``, every request's ``seq_lens[b]`` is at least its query length
(so positions are >= 0), and a row's window reaches no further than ``window_size +
image width`` columns (true of vLLM's image spans, whose visibility never exceeds
``max_image_tokens``). Under those, every cell either kernel writes lies inside the
buffers the checks below accept.

Accepted beyond what vLLM's own launch needs (its kernel constexprs ``WINDOW_SIZE`` and
the padded top-k width must be powers of two for ``tl.arange``): any window size >= 1.
Refused although vLLM would launch (a caller such as the vLLM plugin then runs vLLM's
own kernel instead): buffers that are not 16-byte aligned or whose row strides are not
multiples of 4 elements, ``TOP_K`` wider than ``topk_indices``' rows (vLLM would read
past each row), output buffers with fewer rows than ``topk_indices`` or narrower than
``TOP_K + WINDOW_SIZE + image width`` columns (vLLM would write past them), ``M``/``N``
outside int32, and index tensors of another dtype than int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FN = "combine_topk_swa_indices"
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
ALIGN_BYTES = 16
STRIDE_MULTIPLE = 4
SPARSE_PREFILL_TOPK_ALIGNMENT = 128
"""vLLM pads the combined width to this (FlashMLA's sparse prefill B_TOPK)."""
MIN_COLS_PER_PROGRAM = 16
MAX_COLS_PER_PROGRAM = 8192
MAX_TOKENS_PER_PROGRAM = 256
MAX_ELEMENTS_PER_THREAD = 128
NUM_WARPS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Checked:
    """What the checks established, for the launch."""

    num_reqs: int
    num_tokens: int  # topk_indices rows
    image_width: int  # vLLM's IMAGE_WIDTH: max_image_tokens with visibility tensors, else 0
    swa_cap: int  # columns the window part may take: ceil((W + IW) / W) * W
    device: torch.device


def combined_width(topk: int, window_size: int, max_image_tokens: int) -> int:
    """The ``combined_topk`` columns vLLM allocates when ``out`` is None."""
    a = SPARSE_PREFILL_TOPK_ALIGNMENT
    return (topk + window_size + max_image_tokens + a - 1) // a * a


def fail(name: str, got: object, accepted: str, fn: str = FN) -> ValueError:
    """The error every check raises: function, argument, what it got, what is accepted."""
    return ValueError(f"{fn}: {name}: got {got}; expected {accepted}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(name: str, value: object, low: int, high: int, what: str) -> int:
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        bound = "2**31-1" if high == INT32_MAX else str(high)
        lower = "-2**31" if low == INT32_MIN else str(low)
        raise fail(name, repr(value), f"an int in [{lower}, {bound}] ({what})")
    return value  # type: ignore[return-value]


def _tensor(name: str, value: object, ndim: int, min_len: int | None = None,
            why: str = "") -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise fail(name, type(value).__name__, "a torch.Tensor of dtype torch.int32")
    if value.dtype != torch.int32:
        raise fail(name, f"dtype {value.dtype}", "dtype torch.int32")
    if value.dim() != ndim:
        raise fail(name, f"{value.dim()} dimensions (shape {tuple(value.shape)})",
                   f"{ndim} dimension{'s' if ndim > 1 else ''}")
    if value.shape[-1] > 1 and value.stride(-1) != 1:
        raise fail(name, f"stride {value.stride(-1)} in the last dimension",
                   "stride 1 in the last dimension")
    if min_len is not None and value.shape[0] < min_len:
        raise fail(name, f"{value.shape[0]} {'rows' if ndim > 1 else 'entries'}",
                   f"at least {min_len} ({why})")
    return value


def _aligned(name: str, t: torch.Tensor, check_stride: bool) -> None:
    if t.data_ptr() % ALIGN_BYTES:
        raise fail(name, f"data pointer {t.data_ptr():#x}",
                   f"a {ALIGN_BYTES}-byte aligned buffer (a fresh allocation or a view at a "
                   f"row offset; vLLM's own kernel takes the others)")
    if check_stride and t.stride(0) % STRIDE_MULTIPLE:
        raise fail(name, f"row stride {t.stride(0)}",
                   f"a row stride that is a multiple of {STRIDE_MULTIPLE} elements (16 bytes)")


def check_tile(tokens_per_program: object, cols_per_program: object, num_warps: object,
               fn: str = FN) -> None:
    """Refuse a tile the kernel cannot run, naming the argument."""
    for name, value, low, high in (
        ("tokens_per_program", tokens_per_program, 1, MAX_TOKENS_PER_PROGRAM),
        ("cols_per_program", cols_per_program, MIN_COLS_PER_PROGRAM, MAX_COLS_PER_PROGRAM),
    ):
        if not _is_int(value) or not low <= value <= high or value & (value - 1):  # type: ignore[operator]
            raise fail(name, repr(value), f"a power of two in [{low}, {high}]", fn)
    if not _is_int(num_warps) or num_warps not in NUM_WARPS:
        raise fail("num_warps", repr(num_warps), f"one of {NUM_WARPS}", fn)
    limit = MAX_ELEMENTS_PER_THREAD * 32 * num_warps  # type: ignore[operator]
    if tokens_per_program * cols_per_program > limit:  # type: ignore[operator]
        raise fail("tokens_per_program * cols_per_program",
                   tokens_per_program * cols_per_program,  # type: ignore[operator]
                   f"at most {MAX_ELEMENTS_PER_THREAD} elements per thread, "
                   f"{MAX_ELEMENTS_PER_THREAD * 32} * num_warps = {limit}", fn)


def check_inputs(
    topk_indices: object, query_start_loc: object, seq_lens: object, gather_lens: object,
    window_size: object, compress_ratio: object, topk: object, M: object, N: object,
    out: object, left_visible: object, right_visible: object, max_image_tokens: object,
) -> Checked:
    """Check every argument of ``combine_topk_swa_indices`` (vLLM's order and names).

    ``out`` may be None (the caller allocates). Returns the counts the launch needs.
    """
    _int("window_size", window_size, 1, INT32_MAX, "the sliding window, WINDOW_SIZE")
    _int("compress_ratio", compress_ratio, 1, INT32_MAX, "COMPRESS_RATIO; 1 for SWA-only")
    k = _int("topk", topk, 0, INT32_MAX, "TOP_K: top-k columns per row; 0 for SWA-only")
    _int("M", M, INT32_MIN, INT32_MAX, "each request's stride in the gathered KV")
    _int("N", N, INT32_MIN, INT32_MAX, "the window's offset in a request's gathered KV")
    image = _int("max_image_tokens", max_image_tokens, 0, INT32_MAX,
                 "columns image visibility may add")
    if k + window_size + image > INT32_MAX:  # type: ignore[operator]
        raise fail("topk + window_size + max_image_tokens", k + window_size + image,  # type: ignore[operator]
                   "at most 2**31-1")
    topk_t = _tensor("topk_indices", topk_indices, 2)
    rows = topk_t.shape[0]
    if k > topk_t.shape[1]:
        raise fail("topk", k, f"at most topk_indices' {topk_t.shape[1]} columns (TOP_K "
                   "columns of each row are read)")
    seq = _tensor("seq_lens", seq_lens, 1)
    num_reqs = seq.shape[0]
    qsl = _tensor("query_start_loc", query_start_loc, 1, num_reqs + 1,
                  "len(seq_lens) + 1: each request's start and end")
    gather = _tensor("gather_lens", gather_lens, 1, num_reqs, "len(seq_lens)")
    tensors: list[tuple[str, torch.Tensor]] = [
        ("topk_indices", topk_t), ("query_start_loc", qsl), ("seq_lens", seq),
        ("gather_lens", gather)]
    if (left_visible is None) != (right_visible is None):
        missing = "right_visible" if right_visible is None else "left_visible"
        raise fail(missing, "None", "a tensor when the other visibility tensor is given "
                   "(both or neither)")
    has_image = left_visible is not None
    if has_image:
        for name, value in (("left_visible", left_visible), ("right_visible", right_visible)):
            tensors.append((name, _tensor(name, value, 1, rows,
                                          "topk_indices' rows: one entry per chunk token")))
    image_width = image if has_image else 0
    width = k + window_size + image_width  # type: ignore[operator]
    if out is not None:
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise fail("out", type(out).__name__ if not isinstance(out, tuple | list)
                       else f"{len(out)} items", "None or a (combined_indices, combined_lens) "
                       "pair")
        indices = _tensor("out[0] (combined_indices)", out[0], 2, rows,
                          "topk_indices' rows: one row per chunk token")
        lens = _tensor("out[1] (combined_lens)", out[1], 1, rows,
                       "topk_indices' rows: one length per chunk token")
        if indices.shape[1] < width:
            raise fail("out[0] (combined_indices)", f"{indices.shape[1]} columns",
                       f"at least topk + window_size + image width = {width} (vLLM allocates "
                       f"{combined_width(k, window_size, image)})")  # type: ignore[arg-type]
        if indices.shape[0] > 1 and indices.stride(0) < indices.shape[1]:
            raise fail("out[0] (combined_indices)", f"row stride {indices.stride(0)}",
                       f"a row stride >= its {indices.shape[1]} columns (rows must not "
                       "overlap)")
        if lens.shape[0] > 1 and lens.stride(0) != 1:
            raise fail("out[1] (combined_lens)", f"stride {lens.stride(0)}",
                       "a contiguous tensor (stride 1)")
        _aligned("out[0] (combined_indices)", indices, indices.shape[0] > 1)
        tensors += [("out[0] (combined_indices)", indices), ("out[1] (combined_lens)", lens)]
    if k > 0 and rows > 0:
        _aligned("topk_indices", topk_t, rows > 1)
    device = topk_t.device
    for name, t in tensors:
        if t.device != device:
            raise fail(name, f"device {t.device}", f"the device of topk_indices, {device}")
    swa_cap = -(-(window_size + image_width) // window_size) * window_size  # type: ignore[operator]
    return Checked(num_reqs, rows, image_width, swa_cap, device)
