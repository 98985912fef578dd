"""SWA decode gates: the shipped table against vLLM 0.33.0's decode path.

Host µs and GPU µs (CUDA-graph replay) of the launch the policy resolves against vLLM's
decode-path work (:func:`~dsv4_evals.bench.swa_decode.harness.vllm_decode_path`, with
vLLM's own rows kernel where vLLM imports, else the extracted copy; the results say
which), at the same inputs, in the same run:

- every anchor step (decode T = 1..512 at 128K, T = 64 at 4K and 1M, CUDA-graph padded
  ones, a step of padding only) writes exactly what vLLM writes, and where the table has
  an entry for it is never below ``MIN_RATIO`` on either clock;
- seeded random keys inside every entry (seed printed and stored; every padding kind)
  are each at ``MIN_RATIO`` or better on both clocks, and hit;
- :data:`~dsv4_evals.bench.swa_decode.gates.EQUALITY_STEPS` generated steps are
  bitwise equal on both sides, at every entry's tile and the baseline tile.

Every number goes to ``bench-swa_decode.json`` in the artifacts folder. On a GPU the
table has no entry for, every step falls back to vLLM's build and nothing is timed but
the anchors' and the generated steps' equality.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
import torch
from dsv4_kernels.swa_decode import launch
from dsv4_policy.kernels import swa_decode as policy

from dsv4_evals.bench import floors, paths, probes, timing
from dsv4_evals.bench.swa_decode import gates
from dsv4_evals.bench.swa_decode import harness as h

OUT = paths.artifacts() / "bench-swa_decode.json"
RESULTS: dict[str, object] = {}


@pytest.fixture(scope="module")
def arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


@pytest.fixture(scope="module")
def rows(device: torch.device) -> h.RowsKernel:
    found = h.rows_kernel()
    RESULTS["rows_kernel"] = found.origin
    print(f"\nvLLM's rows kernel: {found.origin}")
    return found


@pytest.fixture(scope="module", autouse=True)
def _write_results(device: torch.device, machine: dict) -> Any:
    yield
    RESULTS["machine"] = machine
    timing.write_json(OUT, RESULTS)
    print(f"\nSWA decode results: {OUT}")


def _entries_for(arch: str) -> list[policy.Entry]:
    return [e for e in policy.shipped_table().entries
            if "arch" not in e.match or arch in e.match["arch"]]


def _time(call: Any, tile: object, rows: h.RowsKernel, device: torch.device
          ) -> dict[str, float]:
    """Host and GPU µs of both sides at the same inputs, best of two interleaved runs."""
    out: dict[str, float] = {}
    for _ in range(2):
        for side, t in (("upstream", h.BASELINE), ("ours", tile)):
            host = h.host_us(h.runner(call, t, rows), device, calls=100)
            gpu = timing.graph_us(h.runner(call, t, rows), 10, reps=15)
            out[f"{side}_host_us"] = min(out.get(f"{side}_host_us", host), host)
            out[f"{side}_gpu_us"] = min(out.get(f"{side}_gpu_us", gpu), gpu)
    out["host_speedup"] = out["upstream_host_us"] / out["ours_host_us"]
    out["gpu_speedup"] = out["upstream_gpu_us"] / out["ours_gpu_us"]
    return out


def test_anchor_steps_are_identical_and_never_slower(device, arch, rows, benchmark) -> None:
    launch.warmup([launch.BASELINE_TILE], device)
    result_rows = []
    tuned = bool(_entries_for(arch))
    for shape in h.anchor_shapes():
        call = h.make_call(shape, device)
        tile = h.resolved_tile(call, arch)
        check = launch.BASELINE_TILE if tile == h.BASELINE else tile
        found = h.differences(call, check, rows)
        assert not found, f"{shape.label}: {found}"
        row: dict[str, Any] = {"shape": shape.label, "name": shape.name, "tile": str(tile)}
        if tile != h.BASELINE:
            row.update(_time(call, tile, rows, device))
            print(f"{shape.label:>24} {tile!s:>14} host {row['upstream_host_us']:7.2f} -> "
                  f"{row['ours_host_us']:6.2f} µs ({row['host_speedup']:.2f}x), GPU "
                  f"{row['upstream_gpu_us']:6.2f} -> {row['ours_gpu_us']:6.2f} µs "
                  f"({row['gpu_speedup']:.2f}x)")
        result_rows.append(row)
    RESULTS["anchors"] = result_rows
    call = h.make_call(h.Shape(64), device)
    tile = h.resolved_tile(call, arch)
    benchmark(h.runner(call, tile, rows))
    timed = [r for r in result_rows if "host_speedup" in r]
    for row in timed:
        assert row["host_speedup"] >= gates.MIN_RATIO, row
        assert row["gpu_speedup"] >= gates.MIN_RATIO, row
    if not tuned:
        assert not timed, "an untuned GPU must fall back"


def _box(entry: policy.Entry) -> dict[str, tuple[int, int]]:
    cond = entry.match.get("num_tokens")
    if cond is None:
        tokens = (1, h.BUFFER)
    elif isinstance(cond, policy.Range):
        tokens = (cond.min, cond.top)
    else:
        tokens = (min(cond), max(cond))  # type: ignore[type-var]
    return {"num_tokens": (max(tokens[0], 1), min(tokens[1], h.BUFFER)),
            "padding": (min(h.PADDING_KINDS), max(h.PADDING_KINDS)), "mixed": (0, 1)}


def test_random_keys_inside_entries_are_never_slower(device, arch, rows, key_seed,
                                                     key_count) -> None:
    entries = _entries_for(arch)
    if not entries:
        RESULTS["keys"] = {"seed": key_seed, "rows": [], "note": f"no entries for {arch}"}
        assert h.resolved_tile(h.make_call(h.Shape(64), device), arch) == h.BASELINE
        return
    boxes = [_box(e) for e in entries]
    count = min(key_count, gates.MAX_TIMED_KEYS)
    print(f"\nSWA decode never-slower keys: seed {key_seed}, {count} keys")
    found_rows = []
    for index, point in probes.keys_in_boxes(boxes, count, key_seed):
        call = h.call_of(point, device, key_seed + len(found_rows))
        tile = h.resolved_tile(call, arch)
        if tile == h.BASELINE:
            continue  # another field of the entry's match (its row width) excludes the step
        found = h.differences(call, tile, rows)
        assert not found, (point, found)
        timed = _time(call, tile, rows, device)
        found_rows.append({"entry": entries[index].id, **point, "tile": str(tile), **timed,
                           "ratio": min(timed["host_speedup"], timed["gpu_speedup"])})
        del call
    assert len(found_rows) >= len(entries), "too few keys hit their entry"
    ratios = sorted(r["ratio"] for r in found_rows)
    RESULTS["keys"] = {**floors.key_summary(found_rows, key_seed), "rows": found_rows}
    print(f"keys: min {ratios[0]:.3f}x, median {statistics.median(ratios):.3f}x")
    assert ratios[0] >= gates.MIN_RATIO, sorted(found_rows, key=lambda r: r["ratio"])[0]


def test_generated_steps_are_identical(device, arch, rows, key_seed) -> None:
    tiles = sorted({launch.BASELINE_TILE} | {
        (e.config.tokens_per_program, e.config.cols_per_program, e.config.num_warps)
        for e in _entries_for(arch)})
    rng = random.Random(key_seed)
    checked = []
    for i in range(gates.EQUALITY_STEPS):
        point = {"num_tokens": probes.draw(1, h.BUFFER, rng),
                 "padding": rng.choice(h.PADDING_KINDS), "mixed": int(rng.random() < 0.25)}
        call = h.call_of(point, device, key_seed * 1000 + i)
        for tile in tiles:
            found = h.differences(call, tile, rows)
            assert not found, (point, key_seed * 1000 + i, tile, found)
        checked.append(point)
        del call
    RESULTS["equality"] = {"seed": key_seed, "steps": len(checked),
                           "tiles": [list(t) for t in tiles]}
