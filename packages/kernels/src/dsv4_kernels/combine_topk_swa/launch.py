"""Combined top-k + SWA indices for sparse prefill, in one launch with a caller's tile.

:func:`combine_topk_swa_indices` takes exactly the arguments of vLLM 0.33.0's
``combine_topk_swa_indices`` (``vllm/models/deepseek_v4/common/ops/cache_utils.py``),
in the same order, and returns the same pair; the tile keywords come after them. It
writes what :func:`dsv4_kernels.combine_topk_swa.reference.combine_topk_swa_indices`
specifies, bit for bit on whole buffers: the ``-1`` fill of ``combined_indices`` is
part of the one launch instead of a separate ``fill_``.

Which vLLM name a plugin replaces: the *function* ``combine_topk_swa_indices``, not the
kernel object ``_COMBINE_TOPK_SWA_INDICES_KERNEL``. The fill happens in the function,
before it calls the object, so replacing the object alone would keep the second pass
over the whole buffer (a third of the time for a 32K-token C4A chunk). The CUDA caller
binds the function by name at import (``from vllm.models.deepseek_v4.common.ops import
combine_topk_swa_indices`` in ``vllm/models/deepseek_v4/nvidia/flashmla.py``), so the
plugin sets it there, in ``vllm.models.deepseek_v4.common.ops`` and in
``...common.ops.cache_utils``; a table miss, or a call :mod:`.checks` refuses, runs
vLLM's function unchanged. vLLM's own warm-up of its kernel object stays as it is (the
fallback needs those binaries).

Tile: ``tokens_per_program`` rows per program (the grid is ``cdiv(rows, tpp)``
programs, so it grows with the chunk), ``cols_per_program`` columns per step of a row,
``num_warps``. The defaults ``(1, 1024, 4)`` are vLLM's own launch shape: one token at
a time, the row's top-k and window columns in one step (vLLM's ``PADDED_TOP_K`` lanes
and ``WINDOW_SIZE`` lanes), 4 warps. Only the tile selects a compiled binary.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.combine_topk_swa import kernel as _k
from dsv4_kernels.combine_topk_swa.checks import (
    check_inputs,
    check_tile,
    combined_width,
    fail,
)

CompileKey = tuple[int, int, int]
"""(tokens_per_program, cols_per_program, num_warps): what selects one binary."""
BASELINE_TILE: CompileKey = (1, 1024, 4)
"""vLLM 0.33.0's launch shape: one token per step, 1024 lanes, 4 warps."""

_LAUNCHER = DirectLauncher(_k.combine_topk_swa_kernel, _k.CONSTEXPRS)
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""
_data_ptr = torch.Tensor.data_ptr
Pair = tuple[torch.Tensor, torch.Tensor]


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.combine_topk_swa_kernel, "device_caches")


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder."""
    return _LAUNCHER.direct_launches


def combine_topk_swa_indices(
    topk_indices: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    gather_lens: torch.Tensor,
    window_size: int,
    compress_ratio: int,
    topk: int,
    M: int,
    N: int,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    left_visible: torch.Tensor | None = None,
    right_visible: torch.Tensor | None = None,
    max_image_tokens: int = 0,
    *,
    tokens_per_program: int = 1,
    cols_per_program: int = 1024,
    num_warps: int = 4,
) -> Pair:
    """Each chunk token's top-k indices followed by its window's, and their count.

    Row ``t`` of ``combined_indices`` is chunk token ``t`` (request ``b``): columns
    ``[0, topk_len)`` hold ``topk_indices[t, j] + M * b``, the next ``swa_len`` columns
    the token's window in the gathered KV (``M * b + N + position - gather_start``),
    every other column of the buffer ``-1``; ``combined_lens[t] = topk_len + swa_len``.
    Rows past the chunk's tokens are ``-1`` and their lengths untouched. With ``out``
    None both are allocated (``combined_topk`` columns, as vLLM does; lengths of rows
    past the chunk's tokens are then uninitialised, as vLLM's are). Invalid arguments
    raise ``ValueError`` before anything is written.
    """
    check_tile(tokens_per_program, cols_per_program, num_warps)
    return _combine(tokens_per_program, cols_per_program, num_warps, topk_indices,
                    query_start_loc, seq_lens, gather_lens, window_size, compress_ratio, topk,
                    M, N, out, left_visible, right_visible, max_image_tokens)


Prepared = Callable[..., Pair]


def prepare(tokens_per_program: int, cols_per_program: int, num_warps: int) -> Prepared:
    """:func:`combine_topk_swa_indices` with the tile checked once, here.

    Returns ``f(topk_indices, query_start_loc, seq_lens, gather_lens, window_size,
    compress_ratio, topk, M, N, out, left_visible, right_visible, max_image_tokens)``
    (all positional): the same checks of the data arguments and the same launch, for a
    caller that keeps one callable per tile. Raises ``ValueError`` on an invalid tile.
    """
    check_tile(tokens_per_program, cols_per_program, num_warps)
    return functools.partial(_combine, tokens_per_program, cols_per_program, num_warps)


def _combine(
    tokens_per_program: int, cols_per_program: int, num_warps: int,
    topk_indices: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
    gather_lens: torch.Tensor, window_size: int, compress_ratio: int, topk: int, M: int, N: int,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    left_visible: torch.Tensor | None = None, right_visible: torch.Tensor | None = None,
    max_image_tokens: int = 0,
) -> Pair:
    """Check the data arguments, allocate if asked, launch: the tile is already checked."""
    checked = check_inputs(topk_indices, query_start_loc, seq_lens, gather_lens, window_size,
                           compress_ratio, topk, M, N, out, left_visible, right_visible,
                           max_image_tokens)
    device = checked.device
    if device.type != "cuda" and not interpreting():
        raise fail("topk_indices", f"device {device}", "a GPU device (or run with "
                   "TRITON_INTERPRET=1 to use Triton's CPU interpreter)")
    if out is None:
        width = combined_width(topk, window_size, max_image_tokens)
        indices = torch.empty((checked.num_tokens, width), dtype=torch.int32, device=device)
        lens = torch.empty(checked.num_tokens, dtype=torch.int32, device=device)
    else:
        indices, lens = out
    rows, cols = indices.shape
    if rows:
        image = checked.image_width > 0
        # Never read when topk == 0 (or without image spans): any aligned pointer will do,
        # and the output's keeps the alignment specialisation fixed.
        topk_src = topk_indices if topk > 0 else indices
        left = left_visible if image else seq_lens
        right = right_visible if image else seq_lens
        tensors = (indices, topk_src, lens, query_start_loc, seq_lens, gather_lens, left, right)
        swa_cap = checked.swa_cap
        scalars = (indices.stride(0), rows, cols, topk_src.stride(0), checked.num_reqs,
                   checked.num_reqs.bit_length(), M, N, topk, compress_ratio, window_size,
                   swa_cap, int(image), max(cols, topk + swa_cap))
        index = device.index if device.type == "cuda" else -1
        _LAUNCHER(-1 if index is None else index, -(-rows // tokens_per_program), 1, tensors,
                  tuple(map(_data_ptr, tensors)), scalars,
                  (tokens_per_program, cols_per_program), num_warps)
    return indices, lens


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile was not seen before on its device adds one; a new width,
    window, ratio, request count, stride or buffer does not. Always 0 under
    ``TRITON_INTERPRET=1``, where nothing is compiled.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binary of every ``(tpp, cpp, num_warps)`` tile on ``device``.

    Each tile is launched once on tiny real buffers (a C4A-like chunk of two requests
    with image visibility), the same specialisation as every later launch. Returns how
    many binaries were new to this process (0 under the interpreter). Raises
    ``ValueError`` on an invalid tile before launching anything.
    """
    tiles = [tuple(config) for config in configs]
    for tile in tiles:
        if len(tile) != 3:
            raise ValueError(f"warmup: configs: got {tile!r}; expected (tokens_per_program, "
                             "cols_per_program, num_warps) tuples")
        check_tile(*tile, fn="warmup")
    device = torch.device(device)
    ints = dict(dtype=torch.int32, device=device)
    before = compile_count()
    for tpp, cpp, warps in dict.fromkeys(tiles):
        combine_topk_swa_indices(
            torch.zeros((3, 4), **ints), torch.tensor([5, 7, 8], **ints),
            torch.tensor([9, 3], **ints), torch.tensor([4, 1], **ints), 4, 4, 4, 16, 4,
            (torch.empty((3, 16), **ints), torch.empty(3, **ints)),
            torch.zeros(3, **ints), torch.zeros(3, **ints), 2,
            tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps,
        )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
