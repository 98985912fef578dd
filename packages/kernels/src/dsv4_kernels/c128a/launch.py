"""C128A top-k metadata on the GPU, launched with a tile chosen by the caller.

``build_c128a_topk_metadata`` writes exactly what :mod:`dsv4_kernels.c128a.reference`
specifies (vLLM 0.33.0's semantics), bit for bit, for every valid tile. The tile is
``(tokens_per_program, cols_per_program, num_warps)`` plus ``split_width``; the
defaults ``(1, 1024, 4, False)`` are vLLM's own launch. Only the tile (and whether the
batch has decode tokens: two binaries per tile) selects a compiled binary: widths,
block sizes and batch sizes are run-time values, so
:func:`warmup` over a launch table's tiles covers every step that table can produce.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.c128a import kernel as _k
from dsv4_kernels.c128a.checks import FN, check_inputs, check_tile

CompileKey = tuple[int, int, int]
BASELINE_TILE: CompileKey = (1, 1024, 4)
"""vLLM 0.33.0's launch: one program per token, 1024 lanes, 4 warps, no split."""


_LAUNCHER = DirectLauncher(_k.c128a_topk_metadata_kernel,
                           ("TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM", "HAS_DECODE"))
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""
_data_ptr = torch.Tensor.data_ptr


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder (see ``_direct_launch``)."""
    return _LAUNCHER.direct_launches


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.c128a_topk_metadata_kernel, "device_caches")


def build_c128a_topk_metadata(
    positions: torch.Tensor,
    compress_ratio: int,
    num_decode_tokens: int,
    token_to_req_indices: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    slot_mapping: torch.Tensor,
    global_decode_buffer: torch.Tensor,
    decode_lens_buffer: torch.Tensor,
    prefill_buffer: torch.Tensor,
    *,
    width: int,
    tokens_per_program: int = 1,
    cols_per_program: int = 1024,
    num_warps: int = 4,
    split_width: bool = False,
    decode_view_width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Write the first ``width`` columns of the C128A metadata; return the views.

    Arguments and results are those of :func:`dsv4_kernels.c128a.reference.
    build_c128a_topk_metadata`; the tile arguments only choose how the work is
    split. Invalid arguments raise ``ValueError`` before any launch.

    ``token_to_req_indices`` and ``slot_mapping`` are read for the decode tokens
    only, so they need ``num_decode_tokens`` entries (longer is fine).
    """
    check_tile(tokens_per_program, cols_per_program, num_warps, split_width)
    return _build(
        tokens_per_program, cols_per_program, num_warps, split_width, positions,
        compress_ratio, num_decode_tokens, token_to_req_indices, block_table, block_size,
        slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer, width,
        decode_view_width,
    )


Prepared = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def prepare(tokens_per_program: int, cols_per_program: int, num_warps: int,
            split_width: bool) -> Prepared:
    """:func:`build_c128a_topk_metadata` with the tile checked once, here.

    Returns ``f(positions, compress_ratio, num_decode_tokens, token_to_req_indices,
    block_table, block_size, slot_mapping, global_decode_buffer, decode_lens_buffer,
    prefill_buffer, width, decode_view_width)``: the same checks of the data arguments,
    the same launch and views, without re-checking the tile or parsing keywords on every
    call (a caller that launches one tile per step, like the vLLM plugin, keeps ``f``).
    Raises ``ValueError`` on an invalid tile.
    """
    check_tile(tokens_per_program, cols_per_program, num_warps, split_width)
    return functools.partial(_build, tokens_per_program, cols_per_program, num_warps,
                             split_width)


def _build(
    tokens_per_program: int, cols_per_program: int, num_warps: int, split_width: bool,
    positions: torch.Tensor, compress_ratio: int, num_decode_tokens: int,
    token_to_req_indices: torch.Tensor, block_table: torch.Tensor, block_size: int,
    slot_mapping: torch.Tensor, global_decode_buffer: torch.Tensor,
    decode_lens_buffer: torch.Tensor, prefill_buffer: torch.Tensor, width: int,
    decode_view_width: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check the data arguments, take the views, launch: the tile is already checked.

    This is the host path of every model step (the plugin's table hits end here), so
    it reads each tensor attribute once: the checks return the counts, device and
    strides. The views are made with ``as_strided`` from those strides: the same
    sizes, strides and offset as slicing, at about half of its host time (two slices
    per 2-D view; measured on an H200 host, 5.5-8 µs against 11-15 µs for the three).
    """
    checked = check_inputs(
        positions, compress_ratio, num_decode_tokens, token_to_req_indices, block_table,
        block_size, slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer,
        width=width, decode_view_width=decode_view_width,
    )
    index = checked.cuda_index
    if index < 0 and not interpreting():
        raise ValueError(
            f"{FN}: positions: got device {positions.device}; expected a GPU device (or "
            "run with TRITON_INTERPRET=1 to use Triton's CPU interpreter)"
        )
    num_decode = checked.num_decode
    decode_stride, prefill_stride = checked.decode_row_stride, checked.prefill_row_stride
    views = (
        global_decode_buffer.as_strided((num_decode, checked.decode_view_width),
                                        (decode_stride, 1)),
        decode_lens_buffer.as_strided((num_decode,), (checked.lens_stride,)),
        prefill_buffer.as_strided((checked.num_prefill, width), (prefill_stride, 1)),
    )
    num_tokens = checked.num_tokens
    if num_tokens:
        tensors = (global_decode_buffer, prefill_buffer, decode_lens_buffer, positions,
                   token_to_req_indices, block_table, slot_mapping)
        scalars = (decode_stride, prefill_stride, checked.table_row_stride, compress_ratio,
                   width, block_size, num_decode, num_tokens)
        _LAUNCHER(index, -(-num_tokens // tokens_per_program),
                  -(-width // cols_per_program) if split_width else 1, tensors,
                  tuple(map(_data_ptr, tensors)), scalars,
                  (tokens_per_program, cols_per_program, num_decode > 0), num_warps)
    return views


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile was not seen before on its device adds one; a new width,
    block size, compress ratio or token count does not. Always 0 under
    ``TRITON_INTERPRET=1``, where nothing is compiled.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binaries of every ``(tpp, cpp, num_warps)`` tile on ``device``.

    Each tile is launched twice on tiny real buffers (width 128): one decode and one
    prefill token, then two prefill tokens. That is the same specialisation as every
    later launch with and without decode tokens, the two binaries a tile has. Returns
    how many binaries were new to this process (0 under the interpreter). Raises
    ``ValueError`` on an invalid tile before launching anything.
    """
    tiles = [tuple(config) for config in configs]
    for tile in tiles:
        if len(tile) != 3:
            raise ValueError(
                f"warmup: configs: got {tile!r}; expected (tokens_per_program, "
                "cols_per_program, num_warps) tuples"
            )
        check_tile(*tile, False)
    device = torch.device(device)
    ints = dict(dtype=torch.int32, device=device)
    before = compile_count()
    for tpp, cpp, warps in dict.fromkeys(tiles):
        for num_decode in (1, 0):
            build_c128a_topk_metadata(
                torch.tensor([300, 200], dtype=torch.int64, device=device),
                128,
                num_decode,
                torch.zeros(1, **ints),
                torch.arange(4, **ints).reshape(1, 4),
                2,
                torch.zeros(1, dtype=torch.int64, device=device),
                torch.empty((1, 128), **ints),
                torch.empty(1, **ints),
                torch.empty((2, 128), **ints),
                width=128,
                tokens_per_program=tpp,
                cols_per_program=cpp,
                num_warps=warps,
            )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
