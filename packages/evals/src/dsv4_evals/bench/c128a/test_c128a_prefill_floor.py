"""Long prefill at the floor: every prefill batch with T >= 8192, widths 128 to 8192.

ANCHORS.md's target: within 1.5x of (empty launch + write floor), where the write floor
is the bytes any correct launch must write over the copy bandwidth. Timed as GPU time
(CUDA-graph replay medians, with the empty launch timed the same way), with the launch
the table resolves for this GPU; ``conftest.py`` gates and prints the table. Each batch
also records torch's ``fill_`` of the same strided view: the same bytes in the same
pattern written by the GPU vendor library's path, and a Triton launch that writes the same
bytes and reads nothing (the lower bound of any launch for that pattern, which a correct
launch, reading each row's position first, cannot reach).
"""

from __future__ import annotations

import pytest

from dsv4_evals.bench import timing
from dsv4_evals.bench.c128a import harness

WIDTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
TOKENS = (8192, 16384, 32768, 65536)


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("width", WIDTHS)
def test_prefill_floor(device, machine, record_floor, width: int, tokens: int) -> None:
    shape = harness.Shape(f"prefill-T{tokens}-w{width}", 0, tokens, width * 128, num_reqs=1)
    specs = harness.launches(shape, str(machine["arch"]))
    table = specs["table"]
    assert table.width == width
    inputs = harness.make_inputs(shape, device)
    ours = timing.graph_us(harness.runner(inputs, table), launches_per_graph=10, reps=15)
    base = timing.graph_us(harness.runner(inputs, specs["baseline"]), launches_per_graph=10,
                            reps=15)
    # The same bytes written by torch's own fill kernel, through the same strided view: what
    # the GPU reaches for this write pattern (rows of width * 4 bytes, capacity apart).
    view = inputs.prefill_buf[:tokens, :width]
    fill = timing.graph_us(lambda: view.fill_(-1), launches_per_graph=10, reps=15)
    # And by a launch that reads nothing: the lower bound of any launch writing them.
    store = timing.graph_us(timing.store_only_runner(view), launches_per_graph=10, reps=15)
    floor = harness.floor_us(shape, width, float(machine["copy_bandwidth_tb_s"]) * 1e12)
    ideal = float(machine["empty_launch_graph_us"]) + floor
    record_floor(shape.name, {"width": width, "tokens": tokens, "table_us": ours,
                              "baseline_us": base, "fill_us": fill, "store_only_us": store,
                              "floor_us": floor,
                              "ideal_us": ideal,
                              "pct_of_ideal": 100.0 * ours / ideal, "source": table.source,
                              "tile": list(table.tile)})
