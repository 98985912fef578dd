"""The SWA decode bench gates, asserted in ``test_bench_swa_decode.py``.

Host time (wall time of back-to-back calls, the device synchronised around each round)
and GPU time (CUDA-graph replay) of dsv4's decode path against vLLM 0.33.0's, in the
same run: every anchor step the table covers and every seeded random key inside every
table entry (CUDA-graph padded steps and steps of padding only among them) at
:data:`~dsv4_evals.bench.timing.MIN_RATIO` or better on both clocks; and at every anchor,
every random key and :data:`EQUALITY_STEPS` generated steps, dsv4's side leaves exactly
vLLM's three buffers and hands out the same views.
"""

from __future__ import annotations

from dsv4_evals.bench.timing import MIN_RATIO

EQUALITY_STEPS = 200
"""Seeded steps (every padding kind, replaying or not, 1..8192 tokens) on which each
entry's tile and the baseline tile are compared with vLLM's side, bit for bit."""
MAX_TIMED_KEYS = 60
"""Random keys timed on both clocks, at most (each costs two sides x two clocks x two
rounds)."""

__all__ = ["EQUALITY_STEPS", "MAX_TIMED_KEYS", "MIN_RATIO"]
