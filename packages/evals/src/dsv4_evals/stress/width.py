"""Which C128A width a stress run exercised, from its longest sequence.

The seed's acceptance run ends by saying which logical C128A width its longest
sequence produced and which capacity row stride was kept: a run whose sequences all
stay short never exercises a wider launch. Given the server's max_model_len, the
same statement follows from the policy package's formulas (vLLM 0.33.0's).
"""

from __future__ import annotations

from typing import Any

from dsv4_policy.kernels.c128a import Key, active_width, capacity

COMPRESS_RATIO = 128  # C128A


def c128a_widths(max_model_len: int, longest_sequence: int | None) -> dict[str, Any] | None:
    """Capacity, and the active width of a decode step at the longest sequence."""
    if longest_sequence is None:
        return None
    key = Key(
        arch="sm90",  # the width does not depend on the architecture
        compress_ratio=COMPRESS_RATIO,
        max_model_len=max_model_len,
        max_seq_len=longest_sequence,
        num_decode_tokens=1,
        num_prefill_tokens=0,
        block_size=1,
    )
    return {
        "max_model_len": max_model_len,
        "longest_sequence": longest_sequence,
        "capacity": capacity(max_model_len, COMPRESS_RATIO),
        "width": active_width(key),
    }
