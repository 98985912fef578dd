"""The never-slower gate: seeded random keys inside the table's entries, each timed
against the baseline launch in the same run.

An entry promises to beat the baseline at every key it matches, not at one tuned shape.
This draws ``--keys`` (at least 200) random keys inside this GPU's entries (every entry
gets one first; token counts log-uniform, ``max_model_len`` drawn too), checks that the
table really resolves each to its entry, and times the baseline and the table launch at
each (CUDA-graph replay medians, GPU time). A key measured below ``MIN_RATIO`` is timed
twice more and keeps the median of its three ratios, so one noisy reading cannot fail
the gate and a real loss cannot pass it. ``conftest.py`` gates on the results and
prints the distribution; the seed is printed and stored with them.
"""

from __future__ import annotations

import statistics

import torch
from dsv4_policy.kernels import c128a as policy

from dsv4_evals.bench import probes, timing
from dsv4_evals.bench.c128a import harness

BASELINE = (1, 1024, 4, False)


def _entries(arch: str) -> list:
    return [e for e in policy.shipped_table().entries if arch in e.match.get("arch", {arch})]


def test_random_keys_inside_entries_are_never_slower(device, machine, key_seed, key_count,
                                                     record_keys) -> None:
    arch = str(machine["arch"])
    entries = _entries(arch)
    print(f"\nnever-slower gate: seed {key_seed}, {key_count} keys, {len(entries)} entries "
          f"for {arch}", flush=True)
    if not entries:
        record_keys(key_seed, [])
        return
    boxes = [harness.c128a_box(e.match) for e in entries]
    keys = probes.keys_in_boxes(boxes, key_count, key_seed)
    timer = harness.Timer(device, seed=key_seed)
    rows = []
    for n, (i, point) in enumerate(keys, 1):
        shape = harness.shape_of(point)
        launch = policy.resolve(shape.key(arch))
        assert launch.source == f"table:{entries[i].id}", (point, launch.source)
        tile = (launch.tokens_per_program, launch.cols_per_program, launch.num_warps,
                launch.split_width)
        ratios = [timer(point, BASELINE) / timer(point, tile)]
        if ratios[0] < timing.MIN_RATIO:
            ratios += [timer(point, BASELINE) / timer(point, tile) for _ in range(2)]
        rows.append({"entry": entries[i].id, "key": point, "tile": list(tile),
                     "ratio": statistics.median(ratios), "readings": ratios})
        timer.forget()
        if n % 50 == 0:
            print(f"  {n}/{len(keys)} keys timed", flush=True)
    torch.cuda.synchronize(device)
    record_keys(key_seed, rows)
