"""SWA indices and lens on the GPU, launched with a tile chosen by the caller.

:func:`compute_swa_indices_and_lens` takes exactly the arguments of vLLM 0.33.0's
``ComputeSWAIndicesAndLensKernel.__call__``, in the same order, and writes exactly
what :func:`dsv4_kernels.swa.reference.compute_swa_indices_and_lens` specifies (vLLM
0.33.0's semantics), bit for bit, for every valid tile. The tile keywords' defaults
``(1, 1024, 4)`` are vLLM's own launch. Only the tile and ``has_image`` select a
compiled binary, so :func:`warmup` over a table's compile keys covers every call.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dsv4_kernels._direct_launch import DirectLauncher
from dsv4_kernels.swa import kernel as _k
from dsv4_kernels.swa.checks import FN, check_inputs, check_tile

CompileKey = tuple[int, int, int, int]
"""(tokens_per_program, cols_per_program, num_warps, has_image)."""
BASELINE_TILE = (1, 1024, 4)
"""vLLM 0.33.0's launch: one program per token, 1024 lanes, 4 warps."""

_LAUNCHER = DirectLauncher(_k.swa_indices_and_lens_kernel,
                           ("HAS_IMAGE", "TOKENS_PER_PROGRAM", "COLS_PER_PROGRAM"))
"""Launches the kernel's binaries; after a tile's first launch on a device, directly.

vLLM calls this twice per step in eager mode, so Triton's per-call binder (about as
long as the kernel itself runs) would be paid on every step; see ``_direct_launch``."""
_data_ptr = torch.Tensor.data_ptr


def direct_launches() -> int:
    """Launches in this process that skipped Triton's per-call binder (see ``_direct_launch``)."""
    return _LAUNCHER.direct_launches


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return not hasattr(_k.swa_indices_and_lens_kernel, "device_caches")


def compute_swa_indices_and_lens(
    swa_indices: torch.Tensor,
    swa_lens: torch.Tensor,
    window_size: int,
    index_width: int,
    left_visible: torch.Tensor,
    right_visible: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    token_to_req_indices: torch.Tensor,
    is_valid_token: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    replay_start: torch.Tensor,
    *,
    num_tokens: int,
    token_offset: int,
    has_image: bool = False,
    tokens_per_program: int = 1,
    cols_per_program: int = 1024,
    num_warps: int = 4,
) -> None:
    """Write each token's window slot ids and length, as vLLM 0.33.0 does.

    Row ``t`` (for ``t < num_tokens``) describes token ``token_offset + t``: its
    ``index_width`` columns at ``swa_indices``' own row stride (a ``(tokens, 1,
    columns)`` buffer is read as ``(tokens, columns)``) and ``swa_lens[t]``. Columns
    past ``index_width`` and rows past ``num_tokens`` are not touched. Returns None,
    as vLLM's launcher does. Invalid arguments raise ``ValueError`` before any launch.
    """
    check_tile(tokens_per_program, cols_per_program, num_warps)
    checked = check_inputs(
        swa_indices, swa_lens, window_size, index_width, left_visible, right_visible,
        query_start_loc, seq_lens, token_to_req_indices, is_valid_token, block_table,
        block_size, replay_start, num_tokens=num_tokens, token_offset=token_offset,
        has_image=has_image,
    )
    device = checked.device
    if device.type == "cpu" and not interpreting():
        raise ValueError(f"{FN}: swa_indices: got device cpu; expected a GPU device (or run "
                         "with TRITON_INTERPRET=1 to use Triton's CPU interpreter)")
    if num_tokens == 0:
        return None
    rows = checked.rows
    image = bool(has_image)
    index = device.index if device.type == "cuda" and device.index is not None else -1
    if index < 0 and device.type == "cuda":
        index = torch.cuda.current_device()
    tensors = (rows, swa_lens, left_visible if image else swa_lens,
               right_visible if image else swa_lens, query_start_loc, seq_lens,
               token_to_req_indices, is_valid_token, block_table, replay_start)
    scalars = (rows.stride(0), block_table.stride(0), window_size, index_width, block_size,
               num_tokens, token_offset)
    _LAUNCHER(index, -(-num_tokens // tokens_per_program), 1, tensors,
              tuple(map(_data_ptr, tensors)) if index >= 0 else (), scalars,
              (image, tokens_per_program, cols_per_program), num_warps)
    return None


def compile_count() -> int:
    """Binaries of this kernel the Triton JIT has built or loaded in this process.

    A launch whose ``(tile, has_image)`` was not seen before on its device adds one; a
    new window, width, block size, token count or buffer does not. 0 under the
    interpreter, where nothing is compiled.
    """
    return _k.compiled_binaries()


def warmup(configs: Iterable[CompileKey], device: torch.device | str) -> int:
    """Build the binary of every ``(tpp, cpp, num_warps, has_image)`` on ``device``.

    Each is launched once on tiny real buffers (one prefill token of one request),
    the same specialisation as every later launch. Returns how many binaries were new
    to this process (0 under the interpreter). Raises ``ValueError`` on an invalid
    config before launching anything.
    """
    keys = [tuple(config) for config in configs]
    for key in keys:
        if len(key) != 4 or key[3] not in (0, 1, False, True):
            raise ValueError(f"warmup: configs: got {key!r}; expected (tokens_per_program, "
                             "cols_per_program, num_warps, has_image) tuples")
        check_tile(*key[:3])
    device = torch.device(device)
    ints = dict(dtype=torch.int32, device=device)
    before = compile_count()
    for tpp, cpp, warps, image in dict.fromkeys(keys):
        compute_swa_indices_and_lens(
            torch.empty((1, 1, 16), **ints), torch.empty(1, **ints), 4, 16,
            torch.zeros(1, **ints), torch.zeros(1, **ints),
            torch.tensor([0, 1], **ints), torch.tensor([3], **ints), torch.zeros(1, **ints),
            torch.ones(1, dtype=torch.bool, device=device),
            torch.arange(2, **ints).reshape(1, 2), 2, torch.zeros(1, **ints),
            num_tokens=1, token_offset=0, has_image=bool(image),
            tokens_per_program=tpp, cols_per_program=cpp, num_warps=warps,
        )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return compile_count() - before
