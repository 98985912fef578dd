"""SWA bench gates: the shipped SWA table against vLLM 0.33.0's own launch, in one run.

GPU time (CUDA-graph replay medians) of the launch the policy resolves against
upstream's launch of upstream's kernel (extracted by :mod:`dsv4_evals.bench.swa.upstream`),
at the same inputs, in the same process:

- at every anchor shape the table's launch writes exactly what upstream writes, and is
  never below ``MIN_RATIO``; on a GPU the table is tuned for, prefill T=32768 reaches
  4x and T=8192 3x;
- at least 200 seeded random keys inside the table's entries (seed printed and
  stored) are each at ``MIN_RATIO`` or better;
- for ANCHORS.md's C128A shapes, the per-step metadata total (C128A + SWA) of ours is
  not above upstream's.

Every number is written to ``bench-swa.json`` in the artifacts folder
(``DSV4_SWA_RESULTS`` overrides) for the report and ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
import torch
from dsv4_policy.kernels import swa as policy

from dsv4_evals.bench import paths, probes, timing
from dsv4_evals.bench.c128a import harness
from dsv4_evals.bench.swa import gates
from dsv4_evals.bench.swa import harness as h
from dsv4_evals.bench.swa import upstream as swa_upstream

ARTIFACTS = paths.artifacts()
OUT = Path(os.environ.get("DSV4_SWA_RESULTS", ARTIFACTS / "bench-swa.json"))
RESULTS: dict[str, object] = {}


@pytest.fixture(scope="module")
def upstream() -> object:
    return swa_upstream.load_kernel()


@pytest.fixture(scope="module")
def arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


@pytest.fixture(scope="module", autouse=True)
def _write_results(device: torch.device):
    yield
    RESULTS["gpu"] = torch.cuda.get_device_name(device)
    RESULTS["versions"] = {"torch": torch.__version__, "triton": __import__("triton").__version__,
                           "cuda": torch.version.cuda}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(RESULTS, indent=2) + "\n")
    print(f"\nSWA results: {OUT}")


def _entries_for(arch: str) -> list[policy.Entry]:
    return [e for e in policy.shipped_table().entries
            if "arch" not in e.match or arch in e.match["arch"]]


def _time(call, tile, upstream) -> tuple[float, float]:
    """(upstream µs, tile µs), both graph-replay medians of the same inputs, interleaved."""
    n = max(4, min(50, int(300.0 / max(h.graph_us(h.runner(call, h.BASELINE, upstream), 4, 3),
                                       1.0))))
    base = h.graph_us(h.runner(call, h.BASELINE, upstream), n)
    ours = h.graph_us(h.runner(call, tile, upstream), n)
    base = min(base, h.graph_us(h.runner(call, h.BASELINE, upstream), n))
    ours = min(ours, h.graph_us(h.runner(call, tile, upstream), n))
    return base, ours


def test_anchor_shapes_are_identical_and_faster(device, arch, upstream) -> None:
    rows = []
    tuned = bool(_entries_for(arch))
    for shape in h.anchor_shapes():
        call = h.make_call(shape, device)
        tile = h.resolved_tile(shape, arch)
        assert h.outputs_equal(call, tile, upstream), f"{shape.name}: outputs differ"
        base, ours = _time(call, tile, upstream) if tile != h.BASELINE else (None, None)
        if base is None:
            base = ours = h.graph_us(h.runner(call, h.BASELINE, upstream))
        rows.append({"shape": shape.name, "tokens": shape.num_tokens, "tile": str(tile),
                     "upstream_us": base, "ours_us": ours, "speedup": base / ours})
        print(f"{shape.name:>16} {tile!s:>14} upstream {base:8.2f} µs  ours {ours:8.2f} µs "
              f" {base / ours:5.2f}x")
    RESULTS["anchors"] = rows
    for row in rows:
        assert row["speedup"] >= gates.MIN_RATIO, row
    if tuned:
        for name, gate in gates.SPEEDUP_GATES.items():
            row = next(r for r in rows if r["shape"] == name)
            assert row["speedup"] >= gate, f"{name}: {row['speedup']:.2f}x < {gate}x"
    else:
        assert all(r["tile"] == h.BASELINE for r in rows), "an untuned GPU must fall back"


def _box(entry: policy.Entry) -> dict[str, tuple[int, int]]:
    def span(name: str, default: tuple[int, int]) -> tuple[int, int]:
        cond = entry.match.get(name)
        if cond is None:
            return default
        if isinstance(cond, policy.Range):
            return (cond.min, cond.top)
        return (min(cond), max(cond))  # type: ignore[type-var]

    return {"num_tokens": span("num_tokens", (1, 65536)), "prefill": (0, 1),
            "block_size": span("block_size", (h.BLOCK_SIZE, h.BLOCK_SIZE)),
            "padding": (min(h.PADDING_KINDS), max(h.PADDING_KINDS))}


def test_random_keys_inside_entries_are_never_slower(device, arch, upstream, key_seed,
                                                     key_count) -> None:
    entries = _entries_for(arch)
    if not entries:
        RESULTS["keys"] = {"seed": key_seed, "rows": [], "note": f"no SWA entries for {arch}"}
        assert h.resolved_tile(h.SwaShape(8192, True), arch) == h.BASELINE
        return
    boxes = [_box(e) for e in entries]
    print(f"\nSWA never-slower keys: seed {key_seed}, {key_count} keys")
    rows = []
    # Besides the random keys, every entry's smallest call with every token padding (a
    # padded decode batch; vLLM's kernel returns early on such rows).
    points = probes.keys_in_boxes(boxes, key_count, key_seed) + [
        (i, {"num_tokens": box["num_tokens"][0], "prefill": 0,
             "block_size": box["block_size"][0], "padding": 2})
        for i, box in enumerate(boxes)]
    for index, point in points:
        shape = h.shape_of(point)
        tile = h.resolved_tile(shape, arch)
        assert tile != h.BASELINE, f"{point} inside {entries[index].id} did not hit"
        base, ours = _time(h.make_call(shape, device, seed=key_seed), tile, upstream)
        rows.append({"entry": entries[index].id, **point, "tile": str(tile),
                     "upstream_us": base, "ours_us": ours, "ratio": base / ours})
    ratios = sorted(r["ratio"] for r in rows)
    worst = sorted(rows, key=lambda r: r["ratio"])[:5]
    RESULTS["keys"] = {"seed": key_seed, "count": len(rows), "min": ratios[0],
                       "p5": ratios[max(0, len(ratios) * 5 // 100 - 1)],
                       "median": statistics.median(ratios), "worst": worst, "rows": rows}
    print(f"SWA keys: min {ratios[0]:.3f}x, median {statistics.median(ratios):.3f}x; worst:")
    for r in worst:
        print(f"  {r['entry']} T={r['num_tokens']} prefill={r['prefill']} "
              f"bs={r['block_size']} padding={r['padding']}: {r['ratio']:.3f}x")
    assert ratios[0] >= gates.MIN_RATIO, worst[0]


def test_per_step_metadata_total_c128a_plus_swa(device, arch, upstream) -> None:
    """ANCHORS.md's C128A shapes; the SWA call of the same step has the same rows."""
    rows = []
    for shape in harness.anchor_shapes():
        inputs = harness.make_inputs(shape, device)
        specs = harness.launches(shape, arch)
        c_up = timing.graph_us(harness.runner(inputs, specs["baseline"]))
        c_ours = (timing.graph_us(harness.runner(inputs, specs["table"]))
                  if specs["table"].source != "baseline" else c_up)
        swa_shape = h.SwaShape(shape.num_tokens, shape.phase == "prefill")
        tile = h.resolved_tile(swa_shape, arch)
        call = h.make_call(swa_shape, device)
        s_up, s_ours = _time(call, tile, upstream) if tile != h.BASELINE else (None, None)
        if s_up is None:
            s_up = s_ours = h.graph_us(h.runner(call, h.BASELINE, upstream))
        rows.append({"shape": shape.name, "c128a_upstream_us": c_up, "c128a_ours_us": c_ours,
                     "c128a_source": specs["table"].source, "swa_upstream_us": s_up,
                     "swa_ours_us": s_ours, "swa_tile": str(tile),
                     "total_upstream_us": c_up + s_up, "total_ours_us": c_ours + s_ours,
                     "speedup": (c_up + s_up) / (c_ours + s_ours)})
        print(f"{shape.name:>24} upstream {c_up + s_up:8.2f} µs  ours {c_ours + s_ours:8.2f} µs"
              f"  {(c_up + s_up) / (c_ours + s_ours):5.2f}x")
        del inputs, call
    RESULTS["per_step"] = rows
    for row in rows:
        assert row["speedup"] >= gates.MIN_RATIO, row
