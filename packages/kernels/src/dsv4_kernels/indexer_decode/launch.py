"""The indexer's decode tensors on the GPU, launched with a tile chosen by the caller.

:func:`indexer_decode_metadata` writes, in one launch, what vLLM 0.33.0's
``DeepseekV32IndexerMetadataBuilder.build`` writes for a decode-only step before it
plans the paged MQA logits (``vllm/v1/attention/backends/mla/indexer.py``, native
decode path, compress ratio > 1):

- ``decode_lens[:num_reqs]``: ``torch.diff(query_start_loc[:num_reqs + 1])``;
- ``per_req_decode_lens[:num_reqs]``: the same values (vLLM copies ``decode_lens``);
- ``expanded_seq_lens[:num_reqs]``: ``seq_lens[:num_reqs] // compress_ratio``;
- ``expanded_seq_lens[num_reqs:num_tokens]``: 0;

and nothing else: every other element of every buffer keeps what it held. Returns None.
The views vLLM hands on (``decode_lens[:num_reqs]``, ``expanded_seq_lens[:num_tokens]``
unsqueezed, ...) are the caller's to make.

For a caller that must check before anything else happens (vLLM's builder writes its
compressed slot mapping in between), :func:`check` returns the checked facts and
:func:`launch_checked` launches with them; :func:`indexer_decode_metadata` is the two in
a row. Only the tile selects a binary (:func:`warmup` over a table's tiles covers every
call); after a tile's first launch on a device, later launches call the compiled
binary's launcher directly (:mod:`dsv4_kernels._direct_launch`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.indexer_decode import kernel as _k
from dsv4_kernels.indexer_decode.checks import Checked, check_inputs, check_tile

CompileKey = tuple[int, int]
"""(tokens_per_program, num_warps): what selects a tile's binary."""
BASELINE_TILE: CompileKey = (1024, 4)
"""The tile of the policy's baseline launch (1024 rows per program, 4 warps)."""

_LAUNCHER = DirectLauncher(_k.indexer_decode_kernel, _k.CONSTEXPRS)
"""Launches the kernel's binaries; after a tile's first launch on a device, directly."""
_data_ptr = torch.Tensor.data_ptr
check = check_inputs
"""``check(query_start_loc, seq_lens, decode_lens, per_req_decode_lens, expanded_seq_lens,
num_reqs, num_tokens, compress_ratio) -> Checked``; ``ValueError`` on a bad argument."""


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.indexer_decode_kernel, "device_caches")


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder."""
    return _LAUNCHER.direct_launches


def launch_checked(checked: Checked, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                   decode_lens: torch.Tensor, per_req_decode_lens: torch.Tensor,
                   expanded_seq_lens: torch.Tensor, num_reqs: int, num_tokens: int,
                   compress_ratio: int, tokens_per_program: int, num_warps: int) -> None:
    """Launch with what :func:`check` returned for these very arguments and a checked tile.

    Raises ``ValueError`` (before launching) only for a CPU tensor outside the
    interpreter."""
    index = checked.cuda_index
    if index < 0 and not interpreting():
        raise ValueError("indexer_decode_metadata: query_start_loc: got device cpu; "
                         "expected a GPU device (or run with TRITON_INTERPRET=1 to use "
                         "Triton's CPU interpreter)")
    rows = checked.num_rows
    if rows == 0:
        return
    tensors = (query_start_loc, seq_lens, decode_lens, per_req_decode_lens, expanded_seq_lens)
    _LAUNCHER(index, -(-rows // tokens_per_program), 1, tensors,
              tuple(map(_data_ptr, tensors)), (num_reqs, num_tokens, compress_ratio),
              (tokens_per_program,), num_warps)


def indexer_decode_metadata(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    decode_lens: torch.Tensor,
    per_req_decode_lens: torch.Tensor,
    expanded_seq_lens: torch.Tensor,
    num_reqs: int,
    num_tokens: int,
    compress_ratio: int,
    *,
    tokens_per_program: int = BASELINE_TILE[0],
    num_warps: int = BASELINE_TILE[1],
) -> None:
    """Write a decode-only step's indexer tensors in one launch (see the module docstring).

    Invalid arguments raise ``ValueError`` before anything is written."""
    check_tile(tokens_per_program, num_warps)
    checked = check_inputs(query_start_loc, seq_lens, decode_lens, per_req_decode_lens,
                           expanded_seq_lens, num_reqs, num_tokens, compress_ratio)
    launch_checked(checked, query_start_loc, seq_lens, decode_lens, per_req_decode_lens,
                   expanded_seq_lens, num_reqs, num_tokens, compress_ratio,
                   tokens_per_program, num_warps)


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose tile was not seen before on its device adds one; a new batch, compress
    ratio or buffer does not. 0 under the interpreter.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binary of every ``(tokens_per_program, num_warps)`` tile on ``device``.

    Each tile is launched once on tiny real buffers (two requests, a padding token):
    the same specialisation as every later launch. Returns how many binaries were new to
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
    qsl = torch.tensor([0, 1, 2], **ints)
    seq = torch.tensor([7, 9], **ints)
    for tpp, warps in dict.fromkeys(tiles):
        indexer_decode_metadata(qsl, seq, torch.empty(2, **ints), torch.empty(2, **ints),
                                torch.empty(3, **ints), 2, 3, 4, tokens_per_program=tpp,
                                num_warps=warps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
