"""The SWA builder's decode step on the GPU, in one launch with a tile chosen by the caller.

:func:`build_swa_decode` writes what vLLM 0.33.0's ``DeepseekSparseSWAMetadataBuilder.build``
writes into its buffers for the decode tokens of a causal step: ``T = num_tokens`` decode
tokens first, then, in a mixed step, the prefill tokens (``S - T`` of them)
(``vllm/v1/attention/backends/mla/sparse_swa.py``), where it runs three device
operations before it turns to any prefill row:

- ``is_valid_token[:S] = slot_mapping >= 0`` with ``S = slot_mapping.shape[0]``;
- ``swa_lens[T:] = 0``, to the end of the buffer;
- rows ``t < T`` of ``swa_indices`` (its ``W = swa_indices.shape[-1]`` columns, at its
  row stride) and ``swa_lens[t]``, as vLLM's SWA rows kernel writes them with the plain
  window (``index_width = W``, no image spans, ``token_offset = 0``) and the validity
  ``slot_mapping[t] >= 0``;

and nothing else: rows of ``swa_indices`` past ``T`` and ``is_valid_token`` past ``S``
keep what they held. Returns None. The views vLLM hands on (``decode_swa_indices[:T]``,
``is_valid_token[:S]``, ...) are the caller's to make.

For a caller that must check before anything else happens, :func:`check` returns the
checked facts and :func:`launch_checked` launches with them; :func:`build_swa_decode` is
the two in a row. Only the tile selects a binary (and the dtype of ``slot_mapping``:
:func:`warmup` builds both); after a tile's first launch on a device, later launches
call the compiled binary's launcher directly (:mod:`dsv4_kernels._direct_launch`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.swa_decode import kernel as _k
from dsv4_kernels.swa_decode.checks import FN, SLOT_DTYPES, Checked, check_inputs, check_tile
from dsv4_kernels.swa_decode.kernel import FILL_ELEMENTS

CompileKey = tuple[int, int, int]
"""(tokens_per_program, cols_per_program, num_warps): what selects a tile's binaries."""
BASELINE_TILE: CompileKey = (8, 128, 4)
"""The tile of the policy's baseline launch: 8 rows of 128 columns per program, 4 warps."""

_LAUNCHER = DirectLauncher(_k.swa_decode_kernel, _k.CONSTEXPRS)
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""
_data_ptr = torch.Tensor.data_ptr
check = check_inputs
"""``check(swa_indices, swa_lens, is_valid_token, slot_mapping, query_start_loc, seq_lens,
token_to_req_indices, block_table, replay_start, window_size, block_size, num_tokens)
-> Checked``; ``ValueError`` on a bad argument. Reads attributes only (no device sync)."""


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.swa_decode_kernel, "device_caches")


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder."""
    return _LAUNCHER.direct_launches


def launch_checked(checked: Checked, swa_indices: torch.Tensor, swa_lens: torch.Tensor,
                   is_valid_token: torch.Tensor, slot_mapping: torch.Tensor,
                   query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                   token_to_req_indices: torch.Tensor, block_table: torch.Tensor,
                   replay_start: torch.Tensor, window_size: int, block_size: int,
                   num_tokens: int, tokens_per_program: int, cols_per_program: int,
                   num_warps: int) -> None:
    """Launch with what :func:`check` returned for these very arguments and a checked tile.

    Raises ``ValueError`` (before launching) only for a CPU tensor outside the
    interpreter."""
    index = checked.cuda_index
    if index < 0 and not interpreting():
        raise ValueError(f"{FN}: swa_indices: got device cpu; expected a GPU device (or run "
                         "with TRITON_INTERPRET=1 to use Triton's CPU interpreter)")
    tensors = (swa_indices, swa_lens, is_valid_token, slot_mapping, query_start_loc, seq_lens,
               token_to_req_indices, block_table, replay_start)
    programs = max(-(-num_tokens // tokens_per_program), -(-checked.num_slots // FILL_ELEMENTS))
    _LAUNCHER(index, programs, 1, tensors,
              tuple(map(_data_ptr, tensors)),
              (checked.row_stride, checked.table_stride, window_size, checked.index_width,
               block_size, num_tokens, checked.num_slots, checked.num_lens),
              (tokens_per_program, cols_per_program), num_warps)


def build_swa_decode(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    is_valid_token: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    block_table: torch.Tensor,
    replay_start: torch.Tensor,
    *,
    window_size: int,
    block_size: int,
    num_tokens: int,
    tokens_per_program: int = BASELINE_TILE[0],
    cols_per_program: int = BASELINE_TILE[1],
    num_warps: int = BASELINE_TILE[2],
) -> None:
    """Write a decode-only SWA step's buffers in one launch (see the module docstring).

    Invalid arguments raise ``ValueError`` before anything is written."""
    check_tile(tokens_per_program, cols_per_program, num_warps)
    checked = check_inputs(swa_indices, swa_lens, is_valid_token, slot_mapping,
                           query_start_loc, seq_lens, token_to_req_indices, block_table,
                           replay_start, window_size, block_size, num_tokens)
    launch_checked(checked, swa_indices, swa_lens, is_valid_token, slot_mapping,
                   query_start_loc, seq_lens, token_to_req_indices, block_table, replay_start,
                   window_size, block_size, num_tokens, tokens_per_program, cols_per_program,
                   num_warps)


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile (or ``slot_mapping`` dtype) was not seen before on its device
    adds one; a new batch, window, block size, stride or buffer does not. 0 under the
    interpreter.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binaries of every ``(tokens_per_program, cols_per_program, num_warps)``
    tile on ``device``.

    A tile has two binaries, one per ``slot_mapping`` dtype (int64, as vLLM's step hands
    it; int32): Triton keys a binary by its pointers' element types. Each is launched
    once on tiny real buffers (a real token, a padding token): the same specialisation as
    every later launch. Returns how many binaries were new to this process (0 under the
    interpreter). Raises ``ValueError`` on an invalid tile before launching anything.
    """
    tiles = [tuple(config) for config in configs]
    for tile in tiles:
        if len(tile) != 3:
            raise ValueError(f"warmup: configs: got {tile!r}; expected (tokens_per_program, "
                             "cols_per_program, num_warps) tuples")
        check_tile(*tile)
    device = torch.device(device)
    ints = dict(dtype=torch.int32, device=device)
    before = compile_count()
    qsl = torch.tensor([0, 1, 1], **ints)
    seq = torch.tensor([3, 0], **ints)
    t2r = torch.zeros(2, **ints)
    table = torch.arange(4, **ints).reshape(2, 2)
    replay = torch.zeros(3, **ints)
    for tpp, cpp, warps in dict.fromkeys(tiles):
        for dtype in SLOT_DTYPES:
            build_swa_decode(torch.empty((4, 1, 16), **ints), torch.empty(4, **ints),
                             torch.empty(4, dtype=torch.bool, device=device),
                             torch.tensor([2, -1], dtype=dtype, device=device), qsl, seq, t2r,
                             table, replay, window_size=16, block_size=2, num_tokens=2,
                             tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
