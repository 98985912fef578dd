"""The copy floor of a FusedInvRopeFP8Quant call: its bytes moved by a body that only copies.

The issue's floor, (empty launch + byte floor), prices the bytes at streaming bandwidth
and the launch at an empty kernel's cost. A small call is neither: after the PDL wait
it is one dependent round trip (read ``o``, then write the FP8 bytes and scales), and
the byte floor holds no latency for it. To tell how much of a small call's distance from
that floor any body could close, each anchor is also timed against a launch that does
the least this call could do and stay valid: under the same PDL order as vLLM's kernel
and ours (release the dependents, wait for the predecessor, then read ``o``), read every
``o`` row once, clamp it to FP8's range, cast it and write it, plus one FP32 per 128
lanes (the scale bytes). No rotation, no block amax, no rounding of the scale: not a
candidate, and not a proof either (it is the fastest of a few tiles), but a measured
estimate of what moving these bytes after the wait costs on this GPU.

The bound is the best of :data:`TILES` (rows per program, warps), timed with
:func:`dsv4_evals.bench.timing.graph_us` like the launches it is compared with. Its
output is contiguous rows of ``head_dim`` bytes (vLLM's output is the same rows, 512
bytes each, grouped by ``o_groups``), so its stores are at least as well aligned as the
real ones.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from dsv4_kernels.fused_inv_rope_fp8_quant.checks import FP8_MAX

from dsv4_evals.bench import timing

TILES: tuple[tuple[int, int], ...] = ((1, 1), (2, 1), (4, 1), (2, 2), (4, 2), (8, 4))
"""(rows per program, num_warps) the bound is the best of."""


@triton.jit
def _copy_rows_kernel(o_ptr, out_ptr, scale_ptr, num_rows, HEAD_DIM: tl.constexpr,
                      GROUP: tl.constexpr, ROWS: tl.constexpr, FP8_MAX: tl.constexpr,
                      launch_pdl: tl.constexpr):
    if launch_pdl:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    live = (rows < num_rows)[:, None]
    lanes = tl.arange(0, HEAD_DIM)[None, :]
    x = tl.load(o_ptr + rows[:, None] * HEAD_DIM + lanes, mask=live, other=0.0)
    q = tl.clamp(x.to(tl.float32), -FP8_MAX, FP8_MAX).to(tl.float8e4nv)
    tl.store(out_ptr + rows[:, None] * HEAD_DIM + lanes, q, mask=live)
    chunks = tl.arange(0, HEAD_DIM // GROUP)[None, :]
    first = tl.load(o_ptr + rows[:, None] * HEAD_DIM + chunks * GROUP, mask=live, other=0.0)
    tl.store(scale_ptr + rows[:, None] * (HEAD_DIM // GROUP) + chunks,
             first.to(tl.float32), mask=live)


class CopyLaunch:
    """One copy launch over a contiguous ``(T, heads, head_dim)`` bf16 ``o``, into
    buffers of the FP8 output's and FP32 scales' sizes allocated once here (``out``,
    ``scales``), so a graph replays the launch alone."""

    def __init__(self, o: torch.Tensor, tile: tuple[int, int], group: int,
                 launch_pdl: bool) -> None:
        if o.dim() != 3 or not o.is_contiguous() or o.dtype != torch.bfloat16:
            raise ValueError(f"copy floor: o must be a contiguous bf16 (T, heads, head_dim) "
                             f"tensor, got {o.dtype} shape {tuple(o.shape)} strides "
                             f"{o.stride()}")
        head_dim = o.shape[2]
        if group <= 0 or head_dim % group:
            raise ValueError(f"copy floor: head_dim {head_dim} is not a multiple of the "
                             f"quantisation group {group}")
        self.o, self.tile, self.launch_pdl = o, tile, launch_pdl
        self.num_rows, self.head_dim, self.group = o.shape[0] * o.shape[1], head_dim, group
        self.out = torch.empty((self.num_rows, head_dim), dtype=torch.float8_e4m3fn,
                               device=o.device)
        self.scales = torch.empty((self.num_rows, head_dim // group), dtype=torch.float32,
                                  device=o.device)

    def __call__(self) -> None:
        rows, warps = self.tile
        _copy_rows_kernel[(triton.cdiv(self.num_rows, rows),)](
            self.o, self.out, self.scales, self.num_rows, HEAD_DIM=self.head_dim,
            GROUP=self.group, ROWS=rows, FP8_MAX=float(FP8_MAX), num_warps=warps,
            launch_pdl=self.launch_pdl)


def copy_floor_us(o: torch.Tensor, group: int, launches: int, launch_pdl: bool,
                  reps: int = 15) -> tuple[float, tuple[int, int]]:
    """(µs, tile): the fastest copy of ``o``'s bytes over :data:`TILES`, by CUDA-graph
    replay of ``launches`` back-to-back launches."""
    best: tuple[float, tuple[int, int]] | None = None
    for tile in TILES:
        us = timing.graph_us(CopyLaunch(o, tile, group, launch_pdl), launches, reps)
        if best is None or us < best[0]:
            best = (us, tile)
    assert best is not None
    return best


__all__ = ["TILES", "CopyLaunch", "copy_floor_us"]
