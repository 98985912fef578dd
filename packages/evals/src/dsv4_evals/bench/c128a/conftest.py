"""C128A's bench session: its results file, the per-GPU stored baselines, and the gates.

Benchmarks only measure. The gates are evaluated once, after every shape has been
timed, from the numbers the benchmarks recorded (:mod:`.gates`):

- in-run ratio gate: at every shape where the table resolves to a different launch,
  that launch is at least ``MIN_RATIO`` times as fast as the baseline launch, and the
  large anchor shapes reach ANCHORS.md's speed-ups. Both use CUDA-graph replay medians
  (GPU time): do_bench medians of few-µs launches swing with the host's launch cost
  (seen from 9 to 47 µs for one 2.5 µs launch on one H200 host), so they are
  recorded but never gated on;
- never-slower gate (``test_c128a_never_slower.py``): at least 200 seeded random keys inside
  this GPU's table entries, each timed against the baseline launch in the same run; every
  one at ``MIN_RATIO`` or better. The seed is printed, stored with the results, and can
  be given back with ``--keys-seed`` to repeat a run;
- long-prefill floor (``test_c128a_prefill_floor.py``): every prefill batch with T >= 8192,
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
from pathlib import Path

import pytest
import torch

from dsv4_evals.bench import floors, paths, timing
from dsv4_evals.bench.c128a import gates

BASELINES = paths.baselines()
RESULTS: dict[str, dict] = {}
KEYS: dict[str, object] = {}
FLOOR: dict[str, dict] = {}


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
def record():
    def put(name: str, data: dict) -> None:
        RESULTS[name] = data

    return put


def key_summary() -> dict | None:
    """The random keys' distribution (see ``floors.key_summary``), or None."""
    rows = KEYS.get("rows")
    return floors.key_summary(rows, KEYS["seed"]) if rows else None  # type: ignore[arg-type]


def floor_markdown() -> str:
    return floors.floor_markdown(FLOOR)


def floor_target_misses() -> list[str]:
    return floors.floor_verdicts(FLOOR, gates.FLOOR_LIMIT_PCT)[1]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not (RESULTS or KEYS or FLOOR) or not torch.cuda.is_available():
        return
    config = session.config
    info = timing.gpu_info(torch.device("cuda"))
    slug = timing.gpu_slug(str(info["gpu"]))
    stored_path = BASELINES / f"{slug}.json"
    stored = json.loads(stored_path.read_text())["shapes"] if stored_path.exists() else None
    failures = gates.failures(RESULTS, KEYS, FLOOR,
                              config.getoption("--regression-threshold"), stored)
    out = config.getoption("--results-json") or str(paths.artifacts() / "bench-c128a.json")
    summary = key_summary()
    timing.write_json(Path(out), {"machine": info, "shapes": RESULTS, "failures": failures,
                                   "random_keys": {"seed": KEYS.get("seed"),
                                                   "summary": summary,
                                                   "keys": KEYS.get("rows")},
                                   "prefill_floor": FLOOR})
    markdown = Path(out).with_suffix(".md")
    parts = [floors.key_markdown(summary)] if summary else []
    if FLOOR:
        parts.append(floor_markdown())
    if parts:
        markdown.write_text("\n".join(parts))
    if config.getoption("--update-baseline") and RESULTS:
        timing.write_json(stored_path, {"machine": info, "shapes": {
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
            for line in floors.key_markdown(summary).splitlines():
                tr.write_line(line)
        else:
            tr.write_line(f"no table entries for this GPU (seed {KEYS.get('seed')}): every key "
                          "keeps the baseline launch")
    if FLOOR:
        tr.section("long prefill against the floor")
        for line in floor_markdown().splitlines():
            tr.write_line(line)
        misses = floor_target_misses()
        tr.write_line(f"floor target ({gates.FLOOR_LIMIT_PCT:.0f}%) missed at {len(misses)} "
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
