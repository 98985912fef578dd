"""Indexer decode gates: the shipped table against vLLM 0.33.0's decode path.

Host µs and GPU µs (CUDA-graph replay) of the launch the policy resolves against vLLM's
decode-path ops (:func:`~dsv4_evals.bench.indexer_decode.harness.vllm_decode_path`), at
the same inputs, in the same run:

- every anchor step (decode T = 1..512, CUDA-graph padded ones) writes exactly what
  vLLM writes and is never below ``MIN_RATIO`` on either clock; the host targets of
  :data:`~dsv4_evals.bench.indexer_decode.gates.HOST_TARGETS` are reported;
- seeded random keys inside every entry (seed printed and stored) are each at
  ``MIN_RATIO`` or better on both clocks and hit.

Every number goes to ``bench-indexer_decode.json`` in the artifacts folder. On a GPU the
table has no entry for, every step falls back to vLLM's build and nothing is timed
against it but the anchors' equality.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest
import torch
from dsv4_policy.kernels import indexer_decode as policy

from dsv4_evals.bench import floors, paths, probes, timing
from dsv4_evals.bench.indexer_decode import gates
from dsv4_evals.bench.indexer_decode import harness as h

OUT = paths.artifacts() / "bench-indexer_decode.json"
RESULTS: dict[str, object] = {}


@pytest.fixture(scope="module")
def arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


@pytest.fixture(scope="module", autouse=True)
def _write_results(device: torch.device, machine: dict) -> Any:
    yield
    RESULTS["machine"] = machine
    timing.write_json(OUT, RESULTS)
    print(f"\nindexer decode results: {OUT}")


def _entries_for(arch: str) -> list[policy.Entry]:
    return [e for e in policy.shipped_table().entries
            if "arch" not in e.match or arch in e.match["arch"]]


def _time(call: Any, tile: object, device: torch.device) -> dict[str, float]:
    """Host and GPU µs of both sides at the same inputs, best of two interleaved runs."""
    out: dict[str, float] = {}
    for _ in range(2):
        for side, t in (("upstream", h.BASELINE), ("ours", tile)):
            host = h.host_us(h.runner(call, t), device, calls=100)
            gpu = timing.graph_us(h.runner(call, t), 10, reps=15)
            out[f"{side}_host_us"] = min(out.get(f"{side}_host_us", host), host)
            out[f"{side}_gpu_us"] = min(out.get(f"{side}_gpu_us", gpu), gpu)
    out["host_speedup"] = out["upstream_host_us"] / out["ours_host_us"]
    out["gpu_speedup"] = out["upstream_gpu_us"] / out["ours_gpu_us"]
    return out


def test_anchor_steps_are_identical_and_never_slower(device, arch, benchmark) -> None:
    rows = []
    tuned = bool(_entries_for(arch))
    for shape in h.anchor_shapes():
        call = h.make_call(shape, device)
        tile = h.resolved_tile(call, arch)
        check = (1024, 4) if tile == h.BASELINE else tile
        assert h.outputs_equal(call, check), f"{shape.label}: outputs differ"
        row: dict[str, Any] = {"shape": shape.label, "name": shape.name, "tile": str(tile)}
        if tile != h.BASELINE:
            row.update(_time(call, tile, device))
            print(f"{shape.label:>24} {tile!s:>10} host {row['upstream_host_us']:7.2f} -> "
                  f"{row['ours_host_us']:6.2f} µs ({row['host_speedup']:.2f}x), GPU "
                  f"{row['upstream_gpu_us']:6.2f} -> {row['ours_gpu_us']:6.2f} µs "
                  f"({row['gpu_speedup']:.2f}x)")
        rows.append(row)
    RESULTS["anchors"] = rows
    call = h.make_call(h.Shape(64), device)
    tile = h.resolved_tile(call, arch)
    benchmark(h.runner(call, tile if tile != h.BASELINE else h.BASELINE))
    timed = [r for r in rows if "host_speedup" in r]
    for row in timed:
        assert row["host_speedup"] >= gates.MIN_RATIO, row
        assert row["gpu_speedup"] >= gates.MIN_RATIO, row
    RESULTS["host_targets"] = {
        r["name"]: {"goal": gates.HOST_TARGETS[r["name"]], "speedup": r["host_speedup"],
                    "met": r["host_speedup"] >= gates.HOST_TARGETS[r["name"]]}
        for r in timed if r["name"] in gates.HOST_TARGETS and r["shape"].endswith("128K")}
    for name, found in RESULTS["host_targets"].items():  # type: ignore[union-attr]
        print(f"host target {name}: {found['speedup']:.2f}x (goal {found['goal']}x) "
              f"{'met' if found['met'] else 'MISSED'}")
    if not tuned:
        assert not timed, "an untuned GPU must fall back"


def _box(entry: policy.Entry) -> dict[str, tuple[int, int]]:
    def span(name: str, default: tuple[int, int]) -> tuple[int, int]:
        cond = entry.match.get(name)
        if cond is None:
            return default
        if isinstance(cond, policy.Range):
            return (cond.min, cond.top)
        return (min(cond), max(cond))  # type: ignore[type-var]

    tokens = span("num_tokens", (1, h.BUFFER))
    reqs = span("num_reqs", (1, h.BUFFER))
    return {"num_tokens": (max(tokens[0], 1), min(tokens[1], h.BUFFER)),
            "num_reqs": (max(reqs[0], 1), min(reqs[1], h.BUFFER))}


def test_random_keys_inside_entries_are_never_slower(device, arch, key_seed,
                                                     key_count) -> None:
    entries = _entries_for(arch)
    if not entries:
        RESULTS["keys"] = {"seed": key_seed, "rows": [], "note": f"no entries for {arch}"}
        assert h.resolved_tile(h.make_call(h.Shape(64), device), arch) == h.BASELINE
        return
    boxes = [_box(e) for e in entries]
    count = min(key_count, 60)
    print(f"\nindexer decode never-slower keys: seed {key_seed}, {count} keys")
    rows = []
    for index, point in probes.keys_in_boxes(boxes, count, key_seed):
        call = h.call_of(point, device, key_seed + len(rows))
        tile = h.resolved_tile(call, arch)
        if tile == h.BASELINE:
            continue  # another field of the entry's match (its ratio) excludes the step
        assert h.outputs_equal(call, tile), point
        found = _time(call, tile, device)
        rows.append({"entry": entries[index].id, **point, "tile": str(tile), **found,
                     "ratio": min(found["host_speedup"], found["gpu_speedup"])})
        del call
    assert len(rows) >= len(entries), "too few keys hit their entry"
    ratios = sorted(r["ratio"] for r in rows)
    RESULTS["keys"] = {**floors.key_summary(rows, key_seed), "rows": rows}
    print(f"keys: min {ratios[0]:.3f}x, median {statistics.median(ratios):.3f}x")
    assert ratios[0] >= gates.MIN_RATIO, sorted(rows, key=lambda r: r["ratio"])[0]
