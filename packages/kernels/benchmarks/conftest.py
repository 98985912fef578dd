"""Bench session plumbing: GPU machine_info, per-GPU stored baselines, and the gates.

Benchmarks only measure. The gates are evaluated once, after every shape has been
timed, from the numbers the benchmarks recorded:

- in-run ratio gate: at every shape where the table resolves to a different launch,
  that launch is at least ``MIN_RATIO`` times as fast as the baseline launch, and the
  large anchor shapes reach ANCHORS.md's speed-ups. Both use CUDA-graph replay medians
  (GPU time): do_bench medians of few-µs launches swing with the host's launch cost
  (seen from 9 to 47 µs for one 2.5 µs launch on one H200 host), so they are
  recorded but never gated on;
- never-slower gate (``test_never_slower.py``): at least 200 seeded random keys inside
  this GPU's table entries, each timed against the baseline launch in the same run; every
  one at ``MIN_RATIO`` or better. The seed is printed, stored with the results, and can
  be given back with ``--keys-seed`` to repeat a run;
- long-prefill floor (``test_prefill_floor.py``): every prefill batch with T >= 8192,
  widths 128 to 8192, within ``FLOOR_LIMIT_PCT`` of (empty launch + write floor), or else
  no slower than torch's own ``fill_`` of the same strided view (rows of 512 B or 1 KiB,
  a capacity apart, are bound by the write pattern: the shapes above the target are
  listed as target misses on every run);
- regression gate: no shape's table launch is slower than the stored baseline for
  this GPU model by more than the threshold. Baselines live in
  ``benchmarks/baselines/<gpu>.json`` at the repository root, one file per GPU
  model, so an A100 is never compared with an H200.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import gate_report
import harness

REPO = Path(__file__).resolve().parents[3]
BASELINES = REPO / "benchmarks" / "baselines"
MIN_RATIO = harness.MIN_RATIO
ANCHOR_SPEEDUPS = {"prefill-T32768-ctx32K": 1.6, "decode-T32768-ctx32K": 2.5}
MIN_KEYS = 200
RESULTS: dict[str, dict] = {}
KEYS: dict[str, object] = {}
FLOOR: dict[str, dict] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsv4 bench")
    group.addoption("--regression-threshold", type=float, default=0.25,
                    help="allowed slowdown against the stored per-GPU baseline (0.25 = 25%%)")
    group.addoption("--update-baseline", action="store_true",
                    help="write this run's medians as the stored baseline for this GPU")
    group.addoption("--results-json", default=None,
                    help="where to write every measured number (default: artifacts dir)")
    group.addoption("--keys", type=int, default=MIN_KEYS,
                    help=f"random keys for the never-slower gate (at least {MIN_KEYS})")
    group.addoption("--keys-seed", type=int, default=None,
                    help="seed of the random keys (default: from the clock; printed and stored)")


def pytest_configure(config: pytest.Config) -> None:
    seed = config.getoption("--keys-seed", default=None)
    config._dsv4_key_seed = int(time.time()) if seed is None else seed  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def key_seed(request: pytest.FixtureRequest) -> int:
    """The never-slower gate's seed: ``--keys-seed``, or the clock (printed and stored)."""
    return request.config._dsv4_key_seed  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def key_count(request: pytest.FixtureRequest) -> int:
    count = request.config.getoption("--keys")
    if count < MIN_KEYS:
        raise pytest.UsageError(f"--keys: got {count}; the gate needs at least {MIN_KEYS}")
    return count


@pytest.fixture(scope="session")
def record_keys():
    def put(seed: int, rows: list[dict]) -> None:
        KEYS["seed"] = seed
        KEYS["rows"] = rows

    return put


@pytest.fixture(scope="session")
def record_floor():
    def put(name: str, data: dict) -> None:
        FLOOR[name] = data

    return put


@pytest.fixture(scope="session")
def device() -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device visible: the bench session measures GPU kernels and cannot "
            "run on this machine"
        )
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def machine(device: torch.device) -> dict:
    info = harness.gpu_info(device)
    info["empty_launch_us"] = harness.empty_launch_us(device)
    info["empty_launch_graph_us"] = harness.empty_launch_graph_us(device)
    info["copy_bandwidth_tb_s"] = harness.copy_bandwidth_bytes_per_s(device) / 1e12
    return info


@pytest.fixture(scope="session")
def record():
    def put(name: str, data: dict) -> None:
        RESULTS[name] = data

    return put


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    if torch.cuda.is_available():
        machine_info.update(harness.gpu_info(torch.device("cuda")))
        machine_info["driver"] = _driver()


def _driver() -> str | None:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except OSError:
        return None


def key_summary() -> dict | None:
    """The random keys' distribution (see ``gate_report.key_summary``), or None."""
    rows = KEYS.get("rows")
    return gate_report.key_summary(rows, KEYS["seed"]) if rows else None  # type: ignore[arg-type]


def floor_markdown() -> str:
    return gate_report.floor_markdown(FLOOR)


def _gate_failures(threshold: float, stored: dict | None) -> list[str]:
    # ANCHORS.md's speed-ups are targets for a GPU the table has been tuned for. On an
    # arch with no entries every shape falls back to the baseline launch unchanged —
    # the design — and the in-run gates have nothing to compare.
    tuned = any(r["table_source"] != "baseline" for r in RESULTS.values())
    failures = []
    for name, r in RESULTS.items():
        if r["table_source"] != "baseline" and r["graph_ratio"] < MIN_RATIO:
            failures.append(f"{name}: table launch is {r['graph_ratio']:.3f}x the baseline "
                            f"(GPU time), below {MIN_RATIO}")
        need = ANCHOR_SPEEDUPS.get(name)
        if tuned and need is not None and r["graph_ratio"] < need:
            failures.append(f"{name}: {r['graph_ratio']:.2f}x over the baseline launch, "
                            f"ANCHORS.md asks for {need}x")
        if stored and name in stored:
            before = stored[name]["table_graph_us"]
            allowed = before * (1 + threshold) + 0.5
            if r["table_graph_us"] > allowed:
                failures.append(f"{name}: {r['table_graph_us']:.2f} µs against the stored "
                                f"{before:.2f} µs (+{threshold:.0%} allowed)")
    for row in KEYS.get("rows") or []:  # type: ignore[union-attr]
        if row["ratio"] < MIN_RATIO:
            readings = ", ".join(f"{x:.3f}" for x in row["readings"])
            failures.append(f"random key {gate_report.key_label(row)}: table launch "
                            f"{row['ratio']:.3f}x the baseline (readings {readings}), "
                            f"below {MIN_RATIO} (seed {KEYS['seed']})")
    failures += gate_report.floor_verdicts(FLOOR, harness.FLOOR_LIMIT_PCT)[0]
    return failures


def floor_target_misses() -> list[str]:
    return gate_report.floor_verdicts(FLOOR, harness.FLOOR_LIMIT_PCT)[1]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not (RESULTS or KEYS or FLOOR) or not torch.cuda.is_available():
        return
    config = session.config
    info = harness.gpu_info(torch.device("cuda"))
    slug = harness.gpu_slug(str(info["gpu"]))
    stored_path = BASELINES / f"{slug}.json"
    stored = json.loads(stored_path.read_text())["shapes"] if stored_path.exists() else None
    failures = _gate_failures(config.getoption("--regression-threshold"), stored)
    out = config.getoption("--results-json") or os.path.join(
        os.environ.get("DSV4_ARTIFACTS_DIR", str(REPO / "artifacts")), f"bench-{slug}.json")
    summary = key_summary()
    harness.write_json(Path(out), {"machine": info, "shapes": RESULTS, "failures": failures,
                                   "random_keys": {"seed": KEYS.get("seed"),
                                                   "summary": summary,
                                                   "keys": KEYS.get("rows")},
                                   "prefill_floor": FLOOR})
    markdown = Path(out).with_suffix(".md")
    parts = [gate_report.key_markdown(summary)] if summary else []
    if FLOOR:
        parts.append(floor_markdown())
    if parts:
        markdown.write_text("\n".join(parts))
    if config.getoption("--update-baseline") and RESULTS:
        harness.write_json(stored_path, {"machine": info, "shapes": {
            k: {"table_graph_us": v["table_graph_us"], "table_do_bench_us": v["table_do_bench_us"]}
            for k, v in RESULTS.items()}})
    config._dsv4_gate = (failures, stored_path if stored else None, out)  # type: ignore[attr-defined]
    if failures and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not (RESULTS or KEYS or FLOOR):
        return
    tr = terminalreporter
    summary = key_summary()
    if KEYS:
        tr.section("never-slower gate: random keys inside the table's entries")
        if summary:
            for line in gate_report.key_markdown(summary).splitlines():
                tr.write_line(line)
        else:
            tr.write_line(f"no table entries for this GPU (seed {KEYS.get('seed')}): every key "
                          "keeps the baseline launch")
    if FLOOR:
        tr.section("long prefill against the floor")
        for line in floor_markdown().splitlines():
            tr.write_line(line)
        misses = floor_target_misses()
        tr.write_line(f"floor target ({harness.FLOOR_LIMIT_PCT:.0f}%) missed at {len(misses)} "
                      "shapes, each faster than torch's own fill_ of the same view"
                      + (":" if misses else ""))
        for line in misses:
            tr.write_line(f"  {line}")
    tr.section("C128A launches (medians, µs)")
    tr.write_line("GPU time (CUDA-graph replay, per launch) and do_bench (host launch cost "
                  "included)")
    tr.write_line(f"{'shape':<26}{'capacity':>9}{'baseline':>9}{'table':>8}{'x base':>8}"
                  f"{'% ideal':>8}{'do_bench b/t':>14}  table source")
    for name, r in RESULTS.items():
        tr.write_line(f"{name:<26}{r['capacity_graph_us']:>9.2f}"
                      f"{r['baseline_graph_us']:>9.2f}{r['table_graph_us']:>8.2f}"
                      f"{r['graph_ratio']:>8.2f}{r['graph_pct_of_ideal']:>7.0f}%"
                      f"{r['baseline_do_bench_us']:>7.1f}/{r['table_do_bench_us']:<6.1f}"
                      f"  {r['table_source']}")
    failures, stored, out = getattr(config, "_dsv4_gate", ([], None, None))
    tr.write_line(f"results: {out}")
    if RESULTS and all(r["table_source"] == "baseline" for r in RESULTS.values()):
        tr.write_line("no table entries for this GPU: every shape used the baseline launch "
                      "unchanged, so ANCHORS.md's speed-up targets do not apply (run "
                      "`nox -s tune` on this GPU to add entries)")
    tr.write_line(f"stored baseline: {stored or 'none for this GPU (gate skipped; '}"
                  + ("" if stored else "run with --update-baseline to record one)"))
    if failures:
        tr.section("bench gates FAILED", red=True)
        for line in failures:
            tr.write_line(f"  {line}")
    else:
        tr.write_line("bench gates: all passed")
