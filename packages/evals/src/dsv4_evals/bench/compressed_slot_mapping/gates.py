"""The compressed slot mapping's bench gates, asserted in ``test_bench_compressed_slot_mapping.py``.

GPU time by CUDA-graph replay against vLLM 0.33.0's own ``get_compressed_slot_mapping``
(fill and kernel) in the same run: the speed-ups of issue 20 at the anchor steps, and
every seeded random key inside every table entry at
:data:`~dsv4_evals.bench.timing.MIN_RATIO` or better.
"""

from __future__ import annotations

from dsv4_evals.bench.timing import MIN_RATIO

SPEEDUP_GATES = {"prefill-T8192": 2.0, "prefill-T32768": 2.5, "decode-R512": 1.3}
"""Speed-ups over vLLM 0.33.0's function the table must reach on a tuned GPU (both ratios)."""

__all__ = ["MIN_RATIO", "SPEEDUP_GATES"]
