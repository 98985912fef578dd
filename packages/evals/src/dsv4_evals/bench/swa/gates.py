"""SWA's bench gates: the thresholds ``test_bench_swa.py`` asserts in the same run.

Every anchor call and every random key inside the table's entries at
:data:`~dsv4_evals.bench.timing.MIN_RATIO` of vLLM 0.33.0's launch or better (GPU time),
and, on a GPU the table is tuned for, the prefill speed-ups below.
"""

from __future__ import annotations

from dsv4_evals.bench.timing import MIN_RATIO

SPEEDUP_GATES = {"prefill-T32768": 4.0, "prefill-T8192": 3.0}
"""Speed-ups over vLLM 0.33.0's launch the table must reach (GPU time, one run)."""

__all__ = ["MIN_RATIO", "SPEEDUP_GATES"]
