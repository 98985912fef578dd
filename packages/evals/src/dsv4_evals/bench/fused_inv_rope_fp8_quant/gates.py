"""FusedInvRopeFP8Quant's bench gates: the thresholds, and the verdict over one run's numbers.

``test_bench_fused_inv_rope_fp8_quant.py`` only measures and records; each of its tests
hands what it recorded to :func:`failures`, and the session's results file stores the
verdict over everything, so a gate is one function of plain numbers (tested on the
CPU). Every figure is GPU time by CUDA-graph replay, vLLM 0.33.0's own kernel and the
table's launch timed on the same inputs in the same run (medians):

- a key the table has no entry for must get vLLM's launch unchanged (the policy's
  baseline, vLLM's kernel object); there is nothing to compare, so no speed-up is asked;
- never slower: every anchor and every seeded random key inside every entry (T=1
  included where an entry holds it) at :data:`~dsv4_evals.bench.timing.MIN_RATIO` of
  vLLM's speed or better;
- bitwise equality: every launch timed, and at least :data:`MIN_EQUAL_CALLS` generated
  calls over every argument, write exactly vLLM's bytes (output, the whole scale buffer
  with its pad rows, shapes, strides).

The speed targets (at least :data:`SPEEDUP_TARGETS` over vLLM at T = 64..512, 1.5x with
64 local heads and 1.2x with 8; at T >= 64 at most :data:`FLOOR_RATIO` times (empty
launch + byte floor)) are judged by :func:`target_misses` and reported with every run,
in the results file, the markdown and the report, but they do not fail the gate: the
gate protects what the table ships (bytes equal, never slower), while the targets
measure how far the body is from its goal, which depends on the card as much as on the
code (all met on an H100 on 2026-12-05; see ``benchmarks/RESULTS.md``). A gate that
fails on every run of a slower card would hide a real regression.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsv4_evals.bench.fused_inv_rope_fp8_quant.harness import BASELINE
from dsv4_evals.bench.timing import MIN_RATIO

SPEEDUP_TARGETS = {64: 1.5, 8: 1.2}
"""Local heads -> the speed-up over vLLM 0.33.0 the issue asks of the table's launch."""
SPEEDUP_TOKENS = (64, 512)
"""The T range (inclusive) the speed-up targets apply to."""
FLOOR_RATIO = 1.3
"""At T >= :data:`FLOOR_MIN_TOKENS` the table's launch stays within this x (empty launch
+ byte floor)."""
FLOOR_MIN_TOKENS = 64
MIN_EQUAL_CALLS = 500
"""Generated calls the bitwise sweep compares with vLLM's kernel, at least."""


def anchor_failures(row: Mapping) -> list[str]:
    """The failed gates of one anchor row (keys: ``shape``, ``tokens``, ``heads``,
    ``tile``, ``identical``, ``baseline_unchanged``, ``speedup``, ``table_us``,
    ``ideal_us``)."""
    name = row["shape"]
    found = []
    if not row["identical"]:
        found.append(f"{name}: outputs differ from vLLM's kernel ({row.get('mismatch')})")
    if row["tile"] == BASELINE:
        if not row["baseline_unchanged"]:
            found.append(f"{name}: no table entry, but the launch is not vLLM's unchanged")
        return found
    if row["speedup"] < MIN_RATIO:
        found.append(f"{name}: {row['speedup']:.3f}x vLLM's kernel, below {MIN_RATIO}")
    return found


def target_misses(row: Mapping) -> list[str]:
    """The speed targets one anchor row misses (reported, not gated); none for a key the
    table leaves to vLLM, which asks nothing of dsv4's body. A floor miss also names the
    row's copy floor (``copy_floor_us``, :mod:`.copy_floor`) where the bench measured it,
    so the line says how much of the distance any body could close."""
    name = row["shape"]
    found: list[str] = []
    if row["tile"] == BASELINE:
        return found
    need = SPEEDUP_TARGETS.get(row["heads"])
    lo, hi = SPEEDUP_TOKENS
    if need is not None and lo <= row["tokens"] <= hi and row["speedup"] < need:
        found.append(f"{name}: {row['speedup']:.2f}x over vLLM's kernel, below the {need}x "
                     f"target (T {lo}..{hi}, {row['heads']} heads)")
    if row["tokens"] >= FLOOR_MIN_TOKENS and row["table_us"] > FLOOR_RATIO * row["ideal_us"]:
        ratio = row["table_us"] / row["ideal_us"]
        copy = row.get("copy_floor_us")
        beside = (f"; the copy floor of these bytes is {copy:.2f} µs "
                  f"({copy / row['ideal_us']:.2f}x the same), the table "
                  f"{row['table_us'] / copy:.2f}x of it" if copy else "")
        found.append(f"{name}: {row['table_us']:.2f} µs is {ratio:.2f}x (empty launch + byte "
                     f"floor) = {row['ideal_us']:.2f} µs, above {FLOOR_RATIO}x{beside}")
    return found


def key_failures(row: Mapping) -> list[str]:
    """A random key's failed gates (keys: ``entry``, ``key``, ``ratio``, ``readings``,
    ``identical``)."""
    found = []
    if not row["identical"]:
        found.append(f"random key {row['entry']} {row['key']}: outputs differ from vLLM's")
    if row["ratio"] < MIN_RATIO:
        readings = ", ".join(f"{x:.3f}" for x in row["readings"])
        found.append(f"random key {row['entry']} {row['key']}: {row['ratio']:.3f}x vLLM's "
                     f"kernel (readings {readings}), below {MIN_RATIO}")
    return found


def equality_failures(equality: Mapping | None) -> list[str]:
    """The bitwise sweep's failures (keys: ``calls``, ``mismatches``); None: not run."""
    if equality is None:
        return []
    found = [f"bitwise sweep: {m}" for m in equality["mismatches"]]
    if equality["calls"] < MIN_EQUAL_CALLS:
        found.append(f"bitwise sweep: {equality['calls']} calls compared, fewer than "
                     f"{MIN_EQUAL_CALLS}")
    return found


def failures(anchors: Sequence[Mapping], keys: Sequence[Mapping],
             equality: Mapping | None = None) -> list[str]:
    """Every failed gate of one run, one line each; empty when all pass."""
    found = [line for row in anchors for line in anchor_failures(row)]
    found += [line for row in keys for line in key_failures(row)]
    return found + equality_failures(equality)


__all__ = ["FLOOR_MIN_TOKENS", "FLOOR_RATIO", "MIN_EQUAL_CALLS", "MIN_RATIO", "SPEEDUP_TARGETS",
           "SPEEDUP_TOKENS", "anchor_failures", "equality_failures", "failures",
           "key_failures", "target_misses"]
