"""The SWA part of the launch report: a table and a plot, vLLM 0.33.0 against the table.

The report calls :func:`gpu_section` on a GPU. It times the SWA anchor calls (decode and
prefill, 512 to 32768 rows) for vLLM 0.33.0's own launch and the launch the shipped SWA
table resolves, in the same run (CUDA-graph replay medians), checks the outputs are
identical, plots both against the empty launch + write floor, and adds the per-step C128A +
SWA totals of the last ``swa-bench`` run when ``bench-swa.json`` is in the artifacts folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dsv4_evals.bench import plots, timing
from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.registry import ReportContext, Section
from dsv4_evals.bench.swa import harness as h
from dsv4_evals.bench.swa import upstream as swa_upstream

ORDER = 10

TOKENS = (1, 512, 2048, 8192, 32768)


def measure(device: torch.device, arch: str) -> list[dict]:
    kernel = swa_upstream.load_kernel()
    bandwidth = timing.copy_bandwidth_bytes_per_s(device)
    empty = timing.empty_launch_graph_us(device)
    rows = []
    for prefill in (False, True):
        for tokens in TOKENS:
            if prefill and tokens == 1:
                continue
            shape = h.SwaShape(tokens, prefill)
            call = h.make_call(shape, device)
            tile = h.resolved_tile(shape, arch)
            up = timing.graph_us(h.runner(call, h.BASELINE, kernel), reps=15)
            ours = up if tile == h.BASELINE else timing.graph_us(h.runner(call, tile, kernel),
                                                                 reps=15)
            rows.append({"shape": shape.name, "phase": "prefill" if prefill else "decode",
                         "tokens": tokens, "tile": str(tile), "upstream_us": up,
                         "table_us": ours, "speedup": up / ours,
                         "ideal_us": empty + h.floor_us(tokens, bandwidth),
                         "identical": h.outputs_equal(call, tile, kernel)})
            del call
    return rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    """vLLM 0.33.0's launch and the table's, with the floor."""
    plots.phases(rows, path, title,
                 [("upstream_us", "o-", "vLLM 0.33.0"), ("table_us", "^-", "table"),
                  ("ideal_us", "k:", "empty launch + write floor")],
                 xlabel="rows (tokens)",
                 panel_title=lambda p: f"SWA {p}, window 128, 64-token blocks")


def cpu_section(ctx: ReportContext) -> Section | None:
    """Nothing without a GPU: the SWA kernel's interpreter checks are the kernels tests."""
    return None


def gpu_section(ctx: ReportContext) -> Section:
    """The SWA table and ``swa.png``, plus the last swa-bench run's per-step totals."""
    markdown, rows = section(ctx.device, str(ctx.arch), ctx.out, str(ctx.gpu), ctx.artifacts)
    return Section(markdown, rows, tuple(r["shape"] for r in rows if not r["identical"]))


def section(device: torch.device, arch: str, out: Path, gpu: str,
            artifacts: Path) -> tuple[str, list[dict]]:
    """Markdown for the report (and the rows), with ``swa.png`` written into ``out``."""
    rows = measure(device, arch)
    plot(rows, out / "swa.png", f"SWA indices and lens on {gpu}")
    parts = ["\n## SWA indices and lens: vLLM 0.33.0 against the table\n",
             md_table(["call", "tile", "vLLM 0.33.0 µs", "table µs", "speed-up", "ideal µs",
                     "identical"],
                    [[r["shape"], r["tile"], f"{r['upstream_us']:.2f}", f"{r['table_us']:.2f}",
                      f"{r['speedup']:.2f}x", f"{r['ideal_us']:.2f}",
                      "yes" if r["identical"] else "NO"] for r in rows]),
             "\n![SWA](swa.png)\n"]
    bench = artifacts / "bench-swa.json"
    steps = json.loads(bench.read_text()).get("per_step", []) if bench.is_file() else []
    if steps:
        parts += ["\n### Per-step metadata, C128A + SWA (last swa-bench run)\n",
                  md_table(["step", "upstream µs", "ours µs", "speed-up"],
                         [[s["shape"], f"{s['total_upstream_us']:.2f}",
                           f"{s['total_ours_us']:.2f}", f"{s['speedup']:.2f}x"]
                          for s in steps])]
    return "\n".join(parts) + "\n", rows
