"""C128A's bench gates: the thresholds and the verdict over one run's recorded numbers.

Benchmarks only measure; ``conftest.py`` hands what they recorded here once every shape
is timed, so a gate is one function of plain numbers, checked the same way on every GPU:

- in-run ratio: at every shape where the table resolves to another launch, that launch
  is at least :data:`~dsv4_evals.bench.timing.MIN_RATIO` as fast as the baseline (GPU
  time), and the large anchor shapes reach ANCHORS.md's speed-ups;
- never-slower: every random key inside the table's entries at ``MIN_RATIO`` or better;
- long-prefill floor: see :func:`dsv4_evals.bench.floors.floor_verdicts`;
- regression: no shape slower than the stored per-GPU baseline by more than the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsv4_evals.bench import floors
from dsv4_evals.bench.timing import MIN_RATIO

ANCHOR_SPEEDUPS = {"prefill-T32768-ctx32K": 1.6, "decode-T32768-ctx32K": 2.5}
"""ANCHORS.md's speed-ups over the baseline launch, on a GPU the table is tuned for."""
FLOOR_LIMIT_PCT = 150.0
"""Prefill with T >= 8192 must stay within this % of (empty launch + write floor)."""


def failures(results: Mapping[str, Mapping], keys: Mapping[str, object],
             floor: Mapping[str, Mapping], threshold: float,
             stored: Mapping[str, Mapping] | None) -> list[str]:
    """Every failed gate of one run, one line each; empty when all pass."""
    # ANCHORS.md's speed-ups are targets for a GPU the table has been tuned for. On an
    # arch with no entries every shape falls back to the baseline launch unchanged —
    # the design — and the in-run gates have nothing to compare.
    tuned = any(r["table_source"] != "baseline" for r in results.values())
    found = []
    for name, r in results.items():
        if r["table_source"] != "baseline" and r["graph_ratio"] < MIN_RATIO:
            found.append(f"{name}: table launch is {r['graph_ratio']:.3f}x the baseline "
                         f"(GPU time), below {MIN_RATIO}")
        need = ANCHOR_SPEEDUPS.get(name)
        if tuned and need is not None and r["graph_ratio"] < need:
            found.append(f"{name}: {r['graph_ratio']:.2f}x over the baseline launch, "
                         f"ANCHORS.md asks for {need}x")
        if stored and name in stored:
            before = stored[name]["table_graph_us"]
            allowed = before * (1 + threshold) + 0.5
            if r["table_graph_us"] > allowed:
                found.append(f"{name}: {r['table_graph_us']:.2f} µs against the stored "
                             f"{before:.2f} µs (+{threshold:.0%} allowed)")
    for row in keys.get("rows") or []:  # type: ignore[attr-defined]
        if row["ratio"] < MIN_RATIO:
            readings = ", ".join(f"{x:.3f}" for x in row["readings"])
            found.append(f"random key {floors.key_label(row)}: table launch "
                         f"{row['ratio']:.3f}x the baseline (readings {readings}), "
                         f"below {MIN_RATIO} (seed {keys['seed']})")
    found += floors.floor_verdicts(floor, FLOOR_LIMIT_PCT)[0]
    return found
