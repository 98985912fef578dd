"""FusedInvRopeFP8Quant bench gates: the shipped table against vLLM 0.33.0's kernel, in one run.

GPU time (CUDA-graph replay medians, as the FULL decode graph runs the call once per
attention layer) of the launch the policy resolves against vLLM's own
``fused_inv_rope_fp8_quant`` with its own kernel (extracted by :mod:`.upstream`), on
the same inputs in the same process (real DeepSeek-V4 ``cos_sin_cache``, bf16 ``o``):

- pytest-benchmark over the anchors (T = 1 to 8192 with 64 and 8 local heads), the
  statistics taken over replays of a graph of the table's launch; each anchor's gates
  (:mod:`.gates`): a key with no entry gets vLLM's launch unchanged; one with an entry
  reaches 1.5x (64 heads) or 1.2x (8 heads) at T = 64..512, stays within 1.3x of (empty
  launch + byte floor) at T >= 64, and is never below ``MIN_RATIO``;
- the never-slower gate: at least 200 seeded random keys inside the table's entries
  (seed printed and stored), plus each entry's smallest and largest T (T=1 where an
  entry holds it), each at ``MIN_RATIO`` or better (a key below it is timed twice more
  and keeps the median of its three ratios);
- bitwise equality: every launch timed here, and 520 generated calls over every
  argument (T 1..8192, 8..128 heads, both scale layouts, quantize on and off, both rope
  tables), through vLLM's function and through the kernel object on poisoned buffers;
- the floor table and the per-step estimate (x43 layers) from the anchors, each anchor
  also against its copy floor (:mod:`.copy_floor`: the same bytes read after the PDL
  wait and written, by the fastest of a few copy tiles), which says how much of a small
  call's distance from (empty launch + byte floor) is latency no body removes.

On a GPU without FP8 e4m3 in Triton (below sm89: the A100) every call is unquantized,
as vLLM makes it there (it quantizes only when ``wo_a``'s weights are FP8), and the
table, tuned on sm90, has no entry for it: the gates check that every key keeps vLLM's
launch and that the bytes are equal.

Every number goes to ``bench-fused_inv_rope_fp8_quant.json`` (and the tables to ``.md``)
in the artifacts folder, with the verdict of :func:`.gates.failures` over the whole run.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest
import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import launch, testing

from dsv4_evals.bench import floors, paths, probes, timing
from dsv4_evals.bench.fused_inv_rope_fp8_quant import copy_floor, gates, report
from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
from dsv4_evals.bench.fused_inv_rope_fp8_quant import upstream as fir_upstream

OUT = paths.artifacts() / f"bench-{h.NAME}.json"
RESULTS: dict[str, object] = {"anchors": [], "keys": {}, "equality": None}
ANCHOR_TOKENS = (1, 2, 3, 16, 64, 100, 256, 512, 513, 2048, 8192)
ANCHOR_HEADS = (64, 8)
ANCHORS = [h.Shape(t, heads) for heads in ANCHOR_HEADS for t in ANCHOR_TOKENS]
EQUAL_CALLS = 520
MAX_LANES = 8192 * 64
"""T x heads bound of the bitwise sweep's calls (memory)."""


@pytest.fixture(scope="module")
def upstream() -> fir_upstream.Upstream:
    return fir_upstream.load_kernel()


@pytest.fixture(scope="module")
def arch(machine: dict) -> str:
    return str(machine["arch"])


@pytest.fixture(scope="module")
def fp8(device) -> bool:
    """Whether this GPU builds the FP8 output; without it every call is unquantized."""
    RESULTS["fp8_output"] = launch.quantize_supported(device)
    return bool(RESULTS["fp8_output"])


@pytest.fixture(scope="module")
def empty_us(device) -> float:
    return h.empty_launch_us(device)


@pytest.fixture(scope="module", autouse=True)
def _write_results(machine: dict):
    yield
    anchors = RESULTS["anchors"]
    keys = RESULTS["keys"].get("rows", [])  # type: ignore[attr-defined]
    RESULTS["machine"] = machine
    RESULTS["per_step"] = report.per_step(anchors)  # type: ignore[arg-type]
    RESULTS["failures"] = gates.failures(anchors, keys, RESULTS["equality"])  # type: ignore[arg-type]
    RESULTS["targets_missed"] = [line for row in anchors  # type: ignore[attr-defined]
                                 for line in gates.target_misses(row)]
    timing.write_json(Path(OUT), RESULTS)
    Path(OUT).with_suffix(".md").write_text(report.results_markdown(RESULTS))
    print(f"\nFusedInvRopeFP8Quant results: {OUT}")
    for line in RESULTS["failures"]:  # type: ignore[attr-defined]
        print(f"  FAILED {line}")
    for line in RESULTS["targets_missed"]:  # type: ignore[attr-defined]
        print(f"  target missed (not gated): {line}")


def _graph_of(run, launches: int) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            run()
    return graph


@pytest.mark.parametrize("shape", ANCHORS, ids=lambda s: s.name)
def test_anchor(benchmark, shape: h.Shape, device, machine, arch, upstream,
                empty_us: float, fp8: bool) -> None:
    shape = dataclasses.replace(shape, quantize=shape.quantize and fp8)
    call = h.make_call(shape, device)
    tile = h.resolved_tile(shape, arch)
    found = h.resolved(shape, arch)
    problem = None if tile == h.BASELINE else h.mismatch(call, tile, upstream)
    launches = h.launches_for(call, upstream)
    if tile == h.BASELINE:
        base = ours = timing.graph_us(h.runner(call, h.BASELINE, upstream), launches)
    else:
        base, ours = h.paired_us(call, tile, upstream, launches)
    graph = _graph_of(h.runner(call, tile, upstream), launches)

    def replay() -> None:
        graph.replay()
        torch.cuda.synchronize(device)

    benchmark.pedantic(replay, rounds=30, iterations=1, warmup_rounds=3)
    moved = h.shape_bytes(shape)
    floor = h.floor_us(moved.total, float(machine["copy_bandwidth_tb_s"]) * 1e12)
    empty = empty_us
    copy_us, copy_tile = copy_floor.copy_floor_us(call.tensors[0], h.GROUP, launches,
                                                  launch.default_launch_pdl(device))
    row = {"shape": shape.name, "tokens": shape.num_tokens, "heads": shape.num_heads,
           "tile": str(tile), "source": found.source, "upstream_us": base, "table_us": ours,
           "speedup": base / ours, "bytes": moved._asdict(), "bytes_total": moved.total,
           "floor_us": floor, "nominal_floor_us": h.floor_us(moved.total,
                                                             h.NOMINAL_BYTES_PER_S),
           "empty_us": empty, "empty_launches_per_graph": h.MAX_LAUNCHES,
           "ideal_us": empty + floor,
           "table_vs_ideal": ours / (empty + floor), "upstream_vs_ideal": base / (empty + floor),
           "copy_floor_us": copy_us, "copy_floor_tile": list(copy_tile),
           "table_vs_copy": ours / copy_us,
           "identical": problem is None, "mismatch": problem,
           "baseline_unchanged": h.baseline_unchanged(shape, arch),
           "launches_per_graph": launches}
    benchmark.extra_info.update(row)
    RESULTS["anchors"].append(row)  # type: ignore[attr-defined]
    print(f"{shape.name:>10} {tile!s:>10} vLLM {base:8.2f} µs  table {ours:8.2f} µs "
          f"{base / ours:5.2f}x  {row['table_vs_ideal']:.2f}x (empty launch + floor "
          f"{empty + floor:.2f} µs), {ours / copy_us:.2f}x the copy floor {copy_us:.2f} µs")
    del call
    problems = gates.anchor_failures(row)
    assert not problems, problems


def _ratio(call: h.Call, tile: object, upstream: fir_upstream.Upstream) -> list[float]:
    launches = h.launches_for(call, upstream)
    base, ours = h.paired_us(call, tile, upstream, launches)
    readings = [base / ours]
    if readings[0] < gates.MIN_RATIO:
        for _ in range(2):
            base, ours = h.paired_us(call, tile, upstream, launches)
            readings.append(base / ours)
    return readings


def test_random_keys_inside_entries_are_never_slower(device, arch, upstream, key_seed,
                                                     key_count) -> None:
    entries = h.entries_for(arch)
    print(f"\nnever-slower gate: seed {key_seed}, {key_count} keys, {len(entries)} entries "
          f"for {arch}", flush=True)
    if not entries:
        RESULTS["keys"] = {"seed": key_seed, "rows": [], "note": f"no entries for {arch}"}
        for heads in h.HEADS:
            for t in (1, 64, 512, 8192):
                assert h.baseline_unchanged(h.Shape(t, heads), arch), (t, heads)
        return
    boxes = [h.entry_box(e) for e in entries]
    points = probes.keys_in_boxes(boxes, key_count, key_seed) + [
        (i, p) for i, box in enumerate(boxes) for p in h.entry_ends(box)]
    rows = []
    for n, (index, point) in enumerate(points, 1):
        shape = h.shape_of({**point, "variant": n})
        found = h.resolved(shape, arch)
        assert found.source == f"table:{entries[index].id}", (point, found.source)
        tile = found.compile_key()
        call = h.make_call(shape, device, seed=key_seed)
        problem = h.mismatch(call, tile, upstream)
        readings = _ratio(call, tile, upstream)
        rows.append({"entry": entries[index].id, "key": dict(point), "tile": list(tile),
                     "ratio": statistics.median(readings), "readings": readings,
                     "identical": problem is None, "mismatch": problem})
        del call
        if n % 50 == 0:
            print(f"  {n}/{len(points)} keys timed", flush=True)
    summary = floors.key_summary(rows, key_seed)
    RESULTS["keys"] = {**summary, "rows": rows}
    print(f"keys: min {summary['min']:.3f}x, p5 {summary['p5']:.3f}x, median "
          f"{summary['median']:.3f}x")
    problems = [line for row in rows for line in gates.key_failures(row)]
    assert not problems, problems[:5]


def test_bitwise_equal_to_vllm_over_generated_calls(device, arch, upstream, key_seed,
                                                    fp8: bool) -> None:
    """Every argument vLLM's function takes, seeded; the table's tile where it has an
    entry, else one of :data:`harness.CHECK_TILES` (never vLLM against itself). Without
    FP8 output on this GPU the drawn calls are made unquantized."""
    mismatches, tiles, hits = [], {}, 0
    for i, drawn in enumerate(testing.random_cases(EQUAL_CALLS, seed=key_seed,
                                                    max_tokens=8192)):
        t = max(1, min(drawn.num_tokens, MAX_LANES // drawn.num_heads))
        case = testing.Case(t, drawn.n_groups, drawn.heads_per_group, drawn.tma_aligned_scales,
                            drawn.quantize and fp8, drawn.seed, rope_kind=drawn.rope_kind)
        call = h.call_of(case, device)
        tile = h.resolved_tile(call.shape, arch)
        hits += tile != h.BASELINE
        if tile == h.BASELINE:
            tile = h.CHECK_TILES[i % len(h.CHECK_TILES)]
        tiles[str(tile)] = tiles.get(str(tile), 0) + 1
        problem = h.mismatch(call, tile, upstream)
        if problem:
            mismatches.append(problem)
        del call
    special = _special_value_calls(device, arch, upstream, mismatches, fp8)
    RESULTS["equality"] = {"seed": key_seed, "calls": EQUAL_CALLS, "table_hits": hits,
                           "tiles": tiles, "special_value_calls": special,
                           "mismatches": mismatches}
    print(f"\nbitwise sweep: {EQUAL_CALLS} calls (seed {key_seed}), {hits} table hits, "
          f"{special} calls with infinities, NaN, subnormals and extremes, "
          f"{len(mismatches)} mismatches")
    problems = gates.equality_failures(RESULTS["equality"])  # type: ignore[arg-type]
    assert not problems, problems[:5]


def _special_value_calls(device, arch: str, upstream, mismatches: list, fp8: bool) -> int:
    """Calls whose ``o`` holds +-inf, NaN, subnormals, bf16's extremes and signed zeros
    (:func:`testing.add_special_values`), 8 and 64 heads, both scale layouts, at the
    table's tile and every check tile: vLLM's kernel is the oracle here, since what a
    NaN becomes is Triton's clamp and cast, the same in both kernels. Appends what
    differs to ``mismatches``; returns how many calls were compared."""
    count = 0
    for t, groups, tma in ((8, 1, False), (67, 1, True), (64, 8, False), (130, 8, True)):
        case = testing.Case(t, groups, 8, tma, fp8, seed=7 * t + groups)
        call = h.call_of(case, device)
        testing.add_special_values(call.tensors[0], non_finite=True)
        table_tile = h.resolved_tile(call.shape, arch)
        for tile in dict.fromkeys((*h.CHECK_TILES, table_tile)):
            if tile == h.BASELINE:
                continue
            problem = h.mismatch(call, tile, upstream)
            if problem:
                mismatches.append(f"special values: {problem}")
            count += 1
    return count
