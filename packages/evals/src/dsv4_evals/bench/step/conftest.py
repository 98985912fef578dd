"""The ``vllm-step`` bench target: the per-step metadata build through vLLM's own builders.

One deployment's builders (both sides, plugin off and on) are made once per session.
Each ladder point is a test (``test_bench_step.py``) that measures both sides in the same
run and fails when the outputs differ or when, with the plugin on, the point's median
host or GPU time per step is below ``MIN_RATIO`` of the plugin-off time. At the end every
number goes to ``bench-step.json`` in the artifacts folder (``DSV4_ARTIFACTS_DIR``;
``DSV4_STEP_RESULTS`` overrides the path), with the gate failures, and the tables are
printed.

``DSV4_STEP_LADDER=quick`` runs the anchor points with fewer rounds (about 2 minutes).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from dsv4_evals.bench import paths
from dsv4_evals.bench.step import bench as step_bench

RESULTS: list[dict[str, Any]] = []
STATE: dict[str, Any] = {}


def results_path() -> Path:
    explicit = os.environ.get("DSV4_STEP_RESULTS")
    if explicit:
        return Path(explicit)
    return paths.artifacts() / "bench-step.json"


@pytest.fixture(scope="session")
def sides() -> Any:
    """Both builder sets on the GPU, the plugin registered (and restored at the end)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible: the vllm-step bench times the per-step "
                           "metadata build on a GPU (the CPU check is tests/test_step_builders.py)")
    torch, vllm = step_bench._imports()
    from dsv4_evals.bench.step import harness as h

    device = torch.device("cuda", torch.cuda.current_device())
    started = time.perf_counter()
    made = h.make_sides(h.FLASH, device)
    STATE["environment"] = step_bench.environment(torch, vllm, device)
    STATE["deployment"] = {**vars(h.FLASH), "workspace_factor": h.FLASH.workspace_factor}
    STATE["groups"] = h.describe(made.off)
    STATE["config_fields"] = h.config_fields(made.off.config)
    STATE["build_seconds"] = round(time.perf_counter() - started, 1)
    yield made
    made.switch.close()


@pytest.fixture(scope="session")
def gen() -> Any:
    import torch

    return torch.Generator().manual_seed(20261201)


@pytest.fixture(scope="session")
def record():
    return RESULTS.append


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not RESULTS:
        return
    from dsv4_evals.bench.step import harness as h

    failures = step_bench.gate_failures(RESULTS)
    out = results_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "kind": "gpu", "ladder": step_bench.ladder_name(), **STATE,
        "layout": {"num_layers": h.NUM_LAYERS, "compress_ratios": h.compress_ratios(),
                   "sliding_window": h.SLIDING_WINDOW, "index_topk": h.INDEX_TOPK,
                   "kv_block_size": h.KV_BLOCK_SIZE, "swa_block_size": h.SWA_BLOCK_SIZE,
                   "kv_cache_dtype": h.KV_CACHE_DTYPE, "kv_cache_layout": h.KV_LAYOUT},
        "shims": dict(h.SHIMS),
        "min_ratio": step_bench.MIN_RATIO, "points": RESULTS, "failures": failures,
    }
    out.write_text(json.dumps(data, indent=2, default=str) + "\n")
    session.config._dsv4_step = (out, failures)  # type: ignore[attr-defined]
    if failures and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section("DeepSeek-V4 per-step metadata, plugin off / on (medians, µs per step)")
    tr.write_line("host: wall time of the build calls, GPU synchronised before and after; "
                  "GPU: CUDA-graph replay of the step's launches")
    for line in step_bench.table(RESULTS).splitlines():
        tr.write_line(line)
    for side in ("off", "on"):
        tr.write_line("")
        for line in step_bench.builder_table(RESULTS, side).splitlines():
            tr.write_line(line)
    detail = step_bench.breakdown(RESULTS)
    if detail:
        tr.section("per builder and per kernel at the anchor points")
        for line in detail.splitlines():
            tr.write_line(line)
    out, failures = getattr(config, "_dsv4_step", (None, []))
    tr.write_line(f"results: {out}")
    if failures:
        tr.section("vllm-step gate FAILED", red=True)
        for line in failures:
            tr.write_line(f"  {line}")
    else:
        tr.write_line(f"vllm-step gate: plugin on never below {step_bench.MIN_RATIO}x of off "
                      "(host and GPU) and outputs identical at every point")
