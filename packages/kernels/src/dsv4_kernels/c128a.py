"""C128A top-k metadata on the GPU, launched with a tile chosen by the caller.

``build_c128a_topk_metadata`` writes exactly what :mod:`dsv4_kernels.reference`
specifies (vLLM 0.33.0's semantics), bit for bit, for every valid tile. The tile is
``(tokens_per_program, cols_per_program, num_warps)`` plus ``split_width``; the
defaults ``(1, 1024, 4, False)`` are vLLM's own launch. Only the tile selects a
compiled binary: widths, block sizes and batch sizes are run-time values, so
:func:`warmup` over a launch table's tiles covers every step that table can produce.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch

from dsv4_kernels import _c128a_kernel as _k
from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels._validation import FN, check_inputs, check_tile

CompileKey = tuple[int, int, int]
BASELINE_TILE: CompileKey = (1, 1024, 4)
"""vLLM 0.33.0's launch: one program per token, 1024 lanes, 4 warps, no split."""


_LAUNCHER = DirectLauncher(_k.c128a_topk_metadata_kernel,
                           ("TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM"), pointer_args=7)
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""


def _launch(device: torch.device, grid0: int, grid1: int, args: tuple, tpp: int, cpp: int,
            num_warps: int) -> None:
    _LAUNCHER(device, grid0, grid1, args, (tpp, cpp), num_warps)


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

    Arguments and results are those of :func:`dsv4_kernels.reference.
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
    """Check the data arguments, take the views, launch: the tile is already checked."""
    checked = check_inputs(
        positions, compress_ratio, num_decode_tokens, token_to_req_indices, block_table,
        block_size, slot_mapping, global_decode_buffer, decode_lens_buffer, prefill_buffer,
        width=width, decode_view_width=decode_view_width,
    )
    if checked.device.type == "cpu" and not interpreting():
        raise ValueError(
            f"{FN}: positions: got device cpu; expected a GPU device (or run with "
            "TRITON_INTERPRET=1 to use Triton's CPU interpreter)"
        )
    num_decode, num_tokens = checked.num_decode, checked.num_tokens
    views = (
        global_decode_buffer[:num_decode, : checked.decode_view_width],
        decode_lens_buffer[:num_decode],
        prefill_buffer[:checked.num_prefill, :width],
    )
    if num_tokens == 0:
        return views

    col_programs = -(-width // cols_per_program) if split_width else 1
    launch_args = (
        global_decode_buffer, prefill_buffer, decode_lens_buffer, positions,
        token_to_req_indices, block_table, slot_mapping,
        global_decode_buffer.stride(0), prefill_buffer.stride(0), block_table.stride(0),
        compress_ratio, width, block_size, num_decode, num_tokens,
    )
    _launch(checked.device, -(-num_tokens // tokens_per_program), col_programs, launch_args,
            tokens_per_program, cols_per_program, num_warps)
    return views


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile was not seen before on its device adds one; a new width,
    block size, compress ratio or token count does not. Always 0 under
    ``TRITON_INTERPRET=1``, where nothing is compiled.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binary of every ``(tpp, cpp, num_warps)`` tile on ``device``.

    Each tile is launched once on tiny real buffers (one decode and one prefill
    token, width 128), which is the same specialisation as every later launch.
    Returns how many binaries were new to this process (0 under the interpreter).
    Raises ``ValueError`` on an invalid tile before launching anything.
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
        build_c128a_topk_metadata(
            torch.tensor([300, 200], dtype=torch.int64, device=device),
            128,
            1,
            torch.zeros(1, **ints),
            torch.arange(4, **ints).reshape(1, 4),
            2,
            torch.zeros(1, dtype=torch.int64, device=device),
            torch.empty((1, 128), **ints),
            torch.empty(1, **ints),
            torch.empty((1, 128), **ints),
            width=128,
            tokens_per_program=tpp,
            cols_per_program=cpp,
            num_warps=warps,
        )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
