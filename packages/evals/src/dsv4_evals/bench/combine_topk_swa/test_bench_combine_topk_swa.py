"""CombineTopkSwaIndices bench gates: the shipped table against vLLM 0.33.0, in one run.

GPU time (CUDA-graph replay medians) of the launch the policy resolves against vLLM's
whole ``combine_topk_swa_indices`` (its ``fill_(-1)`` and its kernel, extracted by
:mod:`dsv4_evals.bench.combine_topk_swa.upstream`), at the same inputs, in the same
process; every launch measured is first checked to leave vLLM's whole buffers:

- pytest-benchmark over the anchors (one fresh request of 512 to 32768 tokens in each
  layer kind), the statistics taken over replays of a graph of the table's launch;
- :mod:`.gates`: the 32K targets (C128A ≤ 25 µs, C4A ≤ 40 µs), 1.5x at 8K, and every
  anchor at ``MIN_RATIO`` or better;
- the never-slower gate: at least 200 seeded random keys inside the table's entries
  (seed printed and stored), each at ``MIN_RATIO`` or better (a key below it is timed
  twice more and keeps the median of its three ratios);
- the floor table: each anchor's bytes moved over the copy bandwidth, and the table's
  launch against (empty launch + that floor).

Every number goes to ``bench-combine_topk_swa.json`` in the artifacts folder.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from dsv4_policy.kernels import combine_topk_swa as policy

from dsv4_evals.bench import floors, paths, probes, timing
from dsv4_evals.bench.combine_topk_swa import gates
from dsv4_evals.bench.combine_topk_swa import harness as h
from dsv4_evals.bench.combine_topk_swa import upstream as cts_upstream

OUT = paths.artifacts() / "bench-combine_topk_swa.json"
RESULTS: dict[str, object] = {"anchors": [], "keys": {}, "floor": []}
LAUNCHES = 20


@pytest.fixture(scope="module")
def upstream() -> cts_upstream.Upstream:
    return cts_upstream.load_kernel()


@pytest.fixture(scope="module")
def arch(machine: dict) -> str:
    return str(machine["arch"])


def _entries(arch: str) -> list[policy.Entry]:
    return [e for e in policy.shipped_table().entries
            if "arch" not in e.match or arch in e.match["arch"]]


@pytest.fixture(scope="module", autouse=True)
def _write_results(machine: dict):
    yield
    anchors = RESULTS["anchors"]
    keys = RESULTS["keys"].get("rows", [])  # type: ignore[attr-defined]
    RESULTS["machine"] = machine
    RESULTS["failures"] = gates.failures(anchors, keys, bool(_entries(str(machine["arch"]))))  # type: ignore[arg-type]
    timing.write_json(Path(OUT), RESULTS)
    floor = RESULTS["floor"]
    Path(OUT).with_suffix(".md").write_text(floors.md_table(
        ["call", "tile", "vLLM µs", "table µs", "floor µs", "% of empty + floor"],
        [[r["shape"], r["tile"], f"{r['upstream_us']:.2f}", f"{r['table_us']:.2f}",
          f"{r['floor_us']:.2f}", f"{r['pct_of_ideal']:.0f}%"] for r in floor]) + "\n")  # type: ignore[union-attr]
    print(f"\nCombineTopkSwaIndices results: {OUT}")


def _time(call, tile, upstream, launches: int = LAUNCHES) -> tuple[float, float]:
    """(vLLM µs, tile µs), graph-replay medians of the same inputs, each the better of two
    interleaved readings."""
    base = timing.graph_us(h.runner(call, h.BASELINE, upstream), launches, reps=15)
    ours = timing.graph_us(h.runner(call, tile, upstream), launches, reps=15)
    base = min(base, timing.graph_us(h.runner(call, h.BASELINE, upstream), launches, reps=15))
    ours = min(ours, timing.graph_us(h.runner(call, tile, upstream), launches, reps=15))
    return base, ours


@pytest.mark.parametrize("anchor", h.anchors(), ids=lambda a: a.name)
def test_anchor(benchmark, anchor: h.Anchor, device, machine, arch, upstream) -> None:
    point = anchor.point()
    call = h.make_call(point, device)
    tile = h.resolved_tile(point, arch)
    assert h.outputs_equal(call, tile, upstream), f"{anchor.name}: outputs differ from vLLM's"
    if tile == h.BASELINE:
        base = ours = timing.graph_us(h.runner(call, h.BASELINE, upstream), LAUNCHES)
    else:
        base, ours = _time(call, tile, upstream)
    run = h.runner(call, tile, upstream)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            run()

    def replay() -> None:
        graph.replay()
        torch.cuda.synchronize(device)

    benchmark.pedantic(replay, rounds=30, iterations=1, warmup_rounds=3)
    floor = h.floor_us(call, float(machine["copy_bandwidth_tb_s"]) * 1e12)
    ideal = float(machine["empty_launch_graph_us"]) + floor
    row = {"shape": anchor.name, "tile": str(tile), "upstream_us": base, "table_us": ours,
           "speedup": base / ours, "floor_us": floor, "ideal_us": ideal,
           "bytes_moved": h.bytes_moved(call), "pct_of_ideal": 100.0 * ours / ideal}
    benchmark.extra_info.update(row)
    RESULTS["anchors"].append(row)  # type: ignore[attr-defined]
    RESULTS["floor"].append(row)  # type: ignore[attr-defined]
    print(f"{anchor.name:>14} {tile!s:>14} vLLM {base:8.2f} µs  table {ours:8.2f} µs "
          f"{base / ours:5.2f}x  {row['pct_of_ideal']:.0f}% of empty launch + floor")
    problems = gates.failures([row], [], bool(_entries(arch)))
    assert not problems, problems


def test_random_keys_inside_entries_are_never_slower(device, arch, upstream, key_seed,
                                                     key_count) -> None:
    entries = _entries(arch)
    print(f"\nnever-slower gate: seed {key_seed}, {key_count} keys, {len(entries)} entries "
          f"for {arch}", flush=True)
    if not entries:
        RESULTS["keys"] = {"seed": key_seed, "rows": [], "note": f"no entries for {arch}"}
        assert h.resolved_tile(h.Anchor("c4a", 8192).point(), arch) == h.BASELINE
        return
    boxes = [h.entry_box(e) for e in entries]
    measure = h.Measure(device, upstream, seed=key_seed)
    rows = []
    for n, (index, drawn) in enumerate(probes.keys_in_boxes(boxes, key_count, key_seed), 1):
        point = h.valid_point(drawn)
        found = policy.resolve(h.key_of(point, arch))
        assert found.source == f"table:{entries[index].id}", (point, found.source)
        tile = found.compile_key()
        ratios = [measure(point, h.BASELINE) / measure(point, tile)]
        if ratios[0] < timing.MIN_RATIO:
            ratios += [measure(point, h.BASELINE) / measure(point, tile) for _ in range(2)]
        rows.append({"entry": entries[index].id, "key": point, "tile": list(tile),
                     "ratio": statistics.median(ratios), "readings": ratios})
        measure.forget()
        if n % 50 == 0:
            print(f"  {n}/{key_count} keys timed", flush=True)
    summary = floors.key_summary(rows, key_seed)
    RESULTS["keys"] = {**summary, "rows": rows}
    print(f"keys: min {summary['min']:.3f}x, p5 {summary['p5']:.3f}x, median "
          f"{summary['median']:.3f}x")
    problems = gates.failures([], rows, True)
    assert not problems, problems[:5]
