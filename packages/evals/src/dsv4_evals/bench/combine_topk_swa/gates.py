"""CombineTopkSwaIndices' bench gates: the thresholds ``test_bench_combine_topk_swa.py``
asserts in the same run, against vLLM 0.33.0's own function (its ``fill_(-1)`` included).

GPU time by CUDA-graph replay medians, on a GPU the table is tuned for (an arch with no
entries runs vLLM's function everywhere, which the gates check instead):

- one fresh 32K-token request: C128A at most 25 µs and C4A at most 40 µs;
- one fresh 8K-token request: at least 1.5x over vLLM, C128A and C4A;
- every anchor and every seeded random key inside the table's entries at
  :data:`~dsv4_evals.bench.timing.MIN_RATIO` of vLLM's speed or better.
"""

from __future__ import annotations

from dsv4_evals.bench.timing import MIN_RATIO

MAX_US = {"c128a-T32768": 25.0, "c4a-T32768": 40.0}
"""GPU time per call the table's launch must stay within (fill included)."""
SPEEDUP_GATES = {"c128a-T8192": 1.5, "c4a-T8192": 1.5}
"""Speed-ups over vLLM 0.33.0's function the table must reach (GPU time, one run)."""


def failures(anchors: list[dict], keys: list[dict], tuned: bool) -> list[str]:
    """Every failed gate of one run, one line each; empty when all pass."""
    found = []
    for row in anchors:
        if row["speedup"] < MIN_RATIO:
            found.append(f"{row['shape']}: {row['speedup']:.3f}x vLLM's function, below "
                         f"{MIN_RATIO}")
        if tuned and row["shape"] in MAX_US and row["table_us"] > MAX_US[row["shape"]]:
            found.append(f"{row['shape']}: {row['table_us']:.2f} µs, above the "
                         f"{MAX_US[row['shape']]:.0f} µs target")
        if tuned and row["shape"] in SPEEDUP_GATES and row["speedup"] < SPEEDUP_GATES[
                row["shape"]]:
            found.append(f"{row['shape']}: {row['speedup']:.2f}x, below the "
                         f"{SPEEDUP_GATES[row['shape']]}x target")
    found += [f"random key {r['entry']} {r['key']}: {r['ratio']:.3f}x (readings "
              f"{', '.join(f'{x:.3f}' for x in r['readings'])}), below {MIN_RATIO}"
              for r in keys if r["ratio"] < MIN_RATIO]
    return found


__all__ = ["MAX_US", "MIN_RATIO", "SPEEDUP_GATES", "failures"]
