"""pytest-benchmark: the C128A metadata launches over prefill, decode and mixed batches.

Each shape times three launches in one run on one GPU: the capacity launch (upstream
tiles writing every column), the baseline launch (upstream's adaptive width) and the
launch the policy table resolves for this GPU. pytest-benchmark's own statistics are
taken over replays of a CUDA graph of ``LAUNCHES`` table launches (so each round is GPU
time, host launch cost amortised); the do_bench and per-launch graph medians of all
three launches go into ``extra_info`` and feed the gates in ``conftest.py``.
"""

from __future__ import annotations

import pytest
import torch

from dsv4_evals.bench import timing
from dsv4_evals.bench.c128a import harness

LAUNCHES = 50


@pytest.mark.parametrize("shape", harness.all_shapes(), ids=lambda s: s.name)
def test_c128a(benchmark, shape: harness.Shape, device, machine, record) -> None:
    arch = str(machine["arch"])
    specs = harness.launches(shape, arch)
    inputs = harness.make_inputs(shape, device)
    do_bench = {label: timing.do_bench_us(harness.runner(inputs, spec))
                for label, spec in specs.items()}
    graph = {label: timing.graph_us(harness.runner(inputs, spec))
             for label, spec in specs.items()}

    table = specs["table"]
    table_run = harness.runner(inputs, table)
    graph_obj = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        table_run()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph_obj):
        for _ in range(LAUNCHES):
            table_run()

    def replay() -> None:
        graph_obj.replay()
        torch.cuda.synchronize(device)

    benchmark.pedantic(replay, rounds=30, iterations=1, warmup_rounds=3)

    bandwidth = float(machine["copy_bandwidth_tb_s"]) * 1e12
    floor = harness.floor_us(shape, table.width, bandwidth)
    ideal = float(machine["empty_launch_us"]) + floor
    result = {
        "phase": shape.phase,
        "num_decode": shape.num_decode,
        "num_prefill": shape.num_prefill,
        "context": shape.context,
        "width": table.width,
        "capacity": shape.capacity,
        "table_source": table.source,
        "table_tile": list(table.tile),
        **{f"{k}_do_bench_us": v for k, v in do_bench.items()},
        **{f"{k}_graph_us": v for k, v in graph.items()},
        "do_bench_ratio": do_bench["baseline"] / do_bench["table"],
        "graph_ratio": graph["baseline"] / graph["table"],
        "capacity_ratio": do_bench["capacity"] / do_bench["table"],
        "write_floor_us": floor,
        "ideal_us": ideal,
        "pct_of_floor": 100.0 * do_bench["table"] / ideal,
        "graph_ideal_us": float(machine["empty_launch_graph_us"]) + floor,
        "graph_pct_of_ideal": 100.0 * graph["table"]
        / (float(machine["empty_launch_graph_us"]) + floor),
        "achieved_tb_s": harness.bytes_written(shape, table.width) / (graph["table"] * 1e-6)
        / 1e12,
    }
    benchmark.extra_info.update(result)
    record(shape.name, result)
    # Every launch measured here must also be right: the table launch leaves exactly
    # the buffers the baseline launch leaves.
    assert harness.outputs_equal(shape, device, specs["baseline"], table)
