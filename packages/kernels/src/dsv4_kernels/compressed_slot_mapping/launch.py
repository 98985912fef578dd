"""Compressed slot mapping on the GPU, launched with a tile chosen by the caller.

Two entry points, both with vLLM 0.33.0's arguments in vLLM's order plus the tile
keywords ``tokens_per_program`` and ``num_warps`` (defaults ``(1024, 4)``: vLLM's own
1024 lanes on 4 warps):

- :func:`get_compressed_slot_mapping` stands in for vLLM's whole
  ``get_compressed_slot_mapping`` (``vllm/v1/attention/backends/mla/compressor_utils.py``):
  the -1 fill of the WHOLE ``out`` buffer and the per-token slot ids are one launch,
  where vLLM runs ``out.fill_(-1)`` and then its kernel. It returns ``out[:num_tokens]``
  (or a new ``num_tokens``-row tensor when ``out`` is None), as vLLM does.
- :func:`compressed_slot_mapping_kernel` stands in for the kernel object's call,
  ``_COMPRESSED_SLOT_MAPPING_KERNEL(compressed_slot_mapping, ...)``: it writes the rows
  of the batch's requests only and leaves every other row as it was (vLLM's caller has
  filled them already).

Which one a plugin should install: the function. The kernel object is looked up at call
time, so replacing it is one assignment, but vLLM's fill stays in front of it: a second
GPU kernel over the whole buffer (``max_num_batched_tokens`` rows) and a host op on
every call, three times per DeepSeek-V4 step. Taking over the function removes both.
The function is from-imported by name into ``vllm.v1.attention.backends.mla.indexer``,
``vllm.models.deepseek_v4.sparse_mla`` and ``vllm.models.deepseek_v41.sparse_mla``, so
the plugin must rebind ``get_compressed_slot_mapping`` in those modules as well as in
``compressor_utils``; a call the checks refuse (``ValueError``, raised before anything
is written) should go to vLLM's own function with the same arguments.

The launch depends only on what the host knows without reading device memory:
``num_tokens``, the buffer's length, ``num_reqs = block_table.shape[0]``, block size,
compress ratio and strides. Only the tile selects a binary (:func:`warmup` over a
table's tiles covers every call); after a tile's first launch on a device, later
launches call the compiled binary's launcher directly (:mod:`dsv4_kernels._direct_launch`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.compressed_slot_mapping import kernel as _k
from dsv4_kernels.compressed_slot_mapping.checks import (
    FN,
    KERNEL_FN,
    SLOT_DTYPES,
    check_inputs,
    check_tile,
)

CompileKey = tuple[int, int]
"""(tokens_per_program, num_warps): what selects a tile's binaries (two: one per
``slot_mapping`` dtype, both built by :func:`warmup`)."""
BASELINE_TILE: CompileKey = (1024, 4)
"""vLLM 0.33.0's launch shape: 1024 lanes per program, 4 warps."""

_LAUNCHER = DirectLauncher(_k.compressed_slot_mapping_kernel, _k.CONSTEXPRS)
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""
_data_ptr = torch.Tensor.data_ptr
_INT64 = torch.int64
_empty = torch.empty


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.compressed_slot_mapping_kernel, "device_caches")


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder."""
    return _LAUNCHER.direct_launches


def _launch(index: int, rows_buffer: torch.Tensor, num_rows: int, fill: bool,
            slot_mapping: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
            block_table: torch.Tensor, num_slots: int, num_reqs: int, table_stride: int,
            block_size: int, compress_ratio: int, dcp_world_size: int, cp_interleave: int,
            tokens_per_program: int, num_warps: int) -> None:
    """One launch over ``num_rows`` rows of ``rows_buffer`` (a device already checked)."""
    if index < 0 and not interpreting():
        raise ValueError(f"{FN}: query_start_loc: got device cpu; expected a GPU device (or "
                         "run with TRITON_INTERPRET=1 to use Triton's CPU interpreter)")
    if num_rows == 0:
        return
    # Rows outside every request are written (-1) only when the launch is the fill too;
    # otherwise the row count passed is the batch's own end, read in the kernel.
    tensors = (rows_buffer, slot_mapping, query_start_loc, seq_lens, block_table)
    scalars = (num_rows, num_slots, num_reqs, num_reqs.bit_length(), table_stride,
               block_size, compress_ratio, dcp_world_size, cp_interleave, int(fill))
    _LAUNCHER(index, -(-num_rows // tokens_per_program), 1, tensors,
              tuple(map(_data_ptr, tensors)), scalars, (tokens_per_program,), num_warps)


def get_compressed_slot_mapping(
    num_tokens: int,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    compress_ratio: int,
    out: torch.Tensor | None = None,
    dcp_world_size: int = 1,
    cp_interleave: int = 1,
    *,
    tokens_per_program: int = BASELINE_TILE[0],
    num_warps: int = BASELINE_TILE[1],
) -> torch.Tensor:
    """vLLM 0.33.0's ``get_compressed_slot_mapping``, fill included, in one launch.

    Every row of ``out`` (all of it, past ``num_tokens`` too) ends up as vLLM leaves it:
    -1, except the rows of the batch's requests, which hold their token's compressed
    slot id or -1 (see :mod:`dsv4_kernels.compressed_slot_mapping.reference`). Returns
    ``out[:num_tokens]``, or a new int64 tensor of ``num_tokens`` rows when ``out`` is
    None. Invalid arguments raise ``ValueError`` before anything is written.
    """
    check_tile(tokens_per_program, num_warps)
    return _get(tokens_per_program, num_warps, num_tokens, slot_mapping, query_start_loc,
                seq_lens, block_table, block_size, compress_ratio, out, dcp_world_size,
                cp_interleave)


Prepared = Callable[..., torch.Tensor]


def prepare(tokens_per_program: int, num_warps: int) -> Prepared:
    """:func:`get_compressed_slot_mapping` with the tile checked once, here.

    Returns ``f(num_tokens, slot_mapping, query_start_loc, seq_lens, block_table,
    block_size, compress_ratio, out=None, dcp_world_size=1, cp_interleave=1)``, vLLM's
    own signature: the same checks of the data arguments and the same launch, without
    re-checking the tile or parsing keywords on every call (a plugin that resolves a
    tile per step keeps one ``f`` per tile). Raises ``ValueError`` on an invalid tile.
    """
    check_tile(tokens_per_program, num_warps)
    return functools.partial(_get, tokens_per_program, num_warps)


def _get(tokens_per_program: int, num_warps: int, num_tokens: int, slot_mapping: torch.Tensor,
         query_start_loc: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
         block_size: int, compress_ratio: int, out: torch.Tensor | None = None,
         dcp_world_size: int = 1, cp_interleave: int = 1) -> torch.Tensor:
    """Check the data arguments and launch; the tile is already checked."""
    checked = check_inputs(num_tokens, slot_mapping, query_start_loc, seq_lens, block_table,
                           block_size, compress_ratio, out, dcp_world_size, cp_interleave)
    if out is None:
        out = _empty(num_tokens, dtype=_INT64, device=query_start_loc.device)
        result = out
    else:
        # out[:num_tokens], made from the checked stride (1): the same size, stride and
        # offset at about half of slicing's host time.
        result = out.as_strided((num_tokens,), (1,))
    _launch(checked.cuda_index, out, checked.num_rows, True, slot_mapping, query_start_loc,
            seq_lens, block_table, checked.num_slots, checked.num_reqs,
            checked.table_row_stride, block_size, compress_ratio, dcp_world_size,
            cp_interleave, tokens_per_program, num_warps)
    return result


def compressed_slot_mapping_kernel(
    compressed_slot_mapping: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    compress_ratio: int,
    dcp_world_size: int,
    cp_interleave: int,
    *,
    tokens_per_program: int = BASELINE_TILE[0],
    num_warps: int = BASELINE_TILE[1],
) -> None:
    """vLLM 0.33.0's ``_COMPRESSED_SLOT_MAPPING_KERNEL(...)`` call: no fill.

    Writes the rows of ``compressed_slot_mapping`` that belong to a request (a row is
    never written past the tensor's length) and leaves every other row untouched.
    Returns None. Invalid arguments raise ``ValueError`` before anything is written.
    """
    check_tile(tokens_per_program, num_warps)
    checked = check_inputs(0, slot_mapping, query_start_loc, seq_lens, block_table,
                           block_size, compress_ratio, compressed_slot_mapping, dcp_world_size,
                           cp_interleave, fn=KERNEL_FN)
    _launch(checked.cuda_index, compressed_slot_mapping, checked.num_rows, False,
            slot_mapping, query_start_loc, seq_lens, block_table, checked.num_slots,
            checked.num_reqs, checked.table_row_stride, block_size, compress_ratio,
            dcp_world_size, cp_interleave, tokens_per_program, num_warps)


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile (or ``slot_mapping`` dtype) was not seen before on its device
    adds one; a new batch, block size, compress ratio, DCP layout or buffer does not.
    0 under the interpreter.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binaries of every ``(tokens_per_program, num_warps)`` tile on ``device``.

    A tile has two binaries, one per ``slot_mapping`` dtype (int64, as the builders pass
    the step's slots; int32, as the indexer's draft-decode update passes its arange):
    Triton keys a binary by its pointers' element types. Each tile is launched once
    with each, on tiny real buffers (two requests, one of them needing the search): the
    same specialisation as every later launch. Returns how many binaries were new to
    this process (0 under the interpreter). Raises ``ValueError`` on an invalid tile
    before launching anything.
    """
    tiles = [tuple(config) for config in configs]
    for tile in tiles:
        if len(tile) != 2:
            raise ValueError(f"warmup: configs: got {tile!r}; expected (tokens_per_program, "
                             "num_warps) tuples")
        check_tile(*tile)
    device = torch.device(device)
    ints = dict(dtype=torch.int32, device=device)
    before = compile_count()
    qsl = torch.tensor([0, 3, 5], **ints)
    seq = torch.tensor([7, 9], **ints)
    table = torch.arange(8, **ints).reshape(2, 4)
    for tpp, warps in dict.fromkeys(tiles):
        for dtype in SLOT_DTYPES:
            out = torch.empty(8, dtype=torch.int64, device=device)
            get_compressed_slot_mapping(5, torch.arange(5, dtype=dtype, device=device), qsl,
                                        seq, table, 2, 4, out, tokens_per_program=tpp,
                                        num_warps=warps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
