"""pytest-benchmark: one DeepSeek-V4 step's metadata build per ladder point, plugin off and on.

Each point runs both sides in this process on fresh seeded inputs (``step_bench.
measure_point``): every tensor the 8 builders return is compared bit for bit, then host
µs (interleaved rounds, medians), GPU µs (CUDA-graph replay) and a profile of each side
are taken. pytest-benchmark's own statistics are of the plugin-on step (host wall time
with the GPU synchronised after it); every number goes into ``extra_info`` and, at the
end, into ``bench-step.json`` (see ``conftest.py``).

The gate, per point: outputs identical, and with the plugin on the median host and GPU
times per step at least ``MIN_RATIO`` of the plugin-off times' speed (ratios within one
run).
"""

from __future__ import annotations

from typing import Any

import pytest

from dsv4_evals.bench.step import bench as step_bench
from dsv4_evals.bench.step import harness as h

POINTS = h.quick_ladder() if step_bench.ladder_name() == "quick" else h.ladder()
ROUNDS = 20 if step_bench.ladder_name() == "quick" else 60


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_step(benchmark, point: h.Point, sides: Any, gen: Any, record) -> None:
    import torch

    row = step_bench.measure_point(sides, point, gen, rounds=ROUNDS, profile_steps=3,
                                   timed=True)
    record(row)
    inputs = h.make_inputs(point, sides.on, gen)
    device = sides.on.device

    def step() -> None:
        h.build_step(sides.on, inputs)
        torch.cuda.synchronize(device)

    sides.switch.on()
    with h.vllm_shims():
        benchmark.pedantic(step, rounds=max(10, ROUNDS // 2), iterations=1, warmup_rounds=3)
    benchmark.extra_info.update({k: row[k] for k in (
        "host_us", "gpu_us", "host_speedup", "gpu_speedup", "identical", "batch", "context",
        "plugin") if k in row})

    assert row["identical"], f"{point.name}: outputs differ with the plugin on: " + "; ".join(
        row["differences"][:5])
    for key, unit in (("host_speedup", "host_us"), ("gpu_speedup", "gpu_us")):
        assert row[key] >= step_bench.MIN_RATIO, (
            f"{point.name}: {unit} {row[unit]['on']:.1f} with the plugin on against "
            f"{row[unit]['off']:.1f} off ({row[key]:.3f}x < {step_bench.MIN_RATIO})")
