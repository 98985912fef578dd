"""Host-side cost of one call's argument checks, on CUDA tensors (``python host_cost.py``).

The GPU work of a small C128A launch is 2-3 µs; the host's share (checks, views,
Triton's launcher) decides what an eager step pays. This prints the single-pass
acceptance against the detailed checks for a T=512 batch at capacity 8192.
"""

from __future__ import annotations

import timeit

import torch
from dsv4_kernels import _validation as checks


def main() -> None:
    tokens, capacity = 512, 8192
    cuda = {"device": "cuda"}
    args = (
        torch.arange(tokens, **cuda), 128, 0,
        torch.zeros(tokens, dtype=torch.int32, **cuda),
        torch.zeros((64, 4096), dtype=torch.int32, **cuda), 2,
        torch.zeros(tokens, dtype=torch.int64, **cuda),
        torch.empty((tokens, capacity), dtype=torch.int32, **cuda),
        torch.empty(tokens, dtype=torch.int32, **cuda),
        torch.empty((tokens, capacity), dtype=torch.int32, **cuda),
    )
    calls = 50_000
    for check in (checks.check_inputs, checks.explain_inputs):
        seconds = timeit.timeit(lambda c=check: c(*args, width=256, decode_view_width=None),
                                number=calls)
        print(f"{check.__name__}: {seconds / calls * 1e6:.2f} µs per call")


if __name__ == "__main__":
    main()
