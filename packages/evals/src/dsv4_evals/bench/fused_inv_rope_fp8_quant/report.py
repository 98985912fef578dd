"""The FusedInvRopeFP8Quant part of the launch report: floors and the per-step estimate.

The call runs once per attention layer inside the FULL decode graph, so a microsecond
saved on it is saved 43 times a step (DeepSeek-V4-Flash's 43 layers): the section
multiplies the GPU time per call by :data:`LAYERS`.

Without a GPU (:func:`cpu_section`, Triton's interpreter): small seeded calls through
dsv4's kernel at vLLM's launch shape and at every tile of the shipped table, each
compared bit for bit with the interpreter's form of the reference (and with vLLM's own
kernel, run in the interpreter too, when its extraction is at hand); the launch the
shipped table resolves for sample keys on sm90; the bytes each sample call must move and
its floor at the nominal 4.2 TB/s; and the per-step estimate of the last bench run, when
its results are in the artifacts folder. On a GPU (:func:`gpu_section`): vLLM 0.33.0's
kernel against the table's launch in the same run (CUDA-graph replay medians) at T = 1
to 8192 with 64 and 8 local heads, outputs checked identical, against (empty launch +
byte floor), plotted, and the per-step estimate at decode T = 1, 64 and 512.

The markdown helpers here also write the bench run's ``bench-fused_inv_rope_fp8_quant.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dsv4_evals.bench import plots
from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 40
NAME = "fused_inv_rope_fp8_quant"
LAYERS = 43
"""DeepSeek-V4-Flash's attention layers: one call each per step, inside the decode graph."""
SAMPLE_ARCH = "sm90"
STEP_TOKENS = (1, 64, 512)
"""Decode steps of the per-step estimate: T = batch size (one token per request)."""
STEP_HEADS = (64, 8)
REPORT_TOKENS = (1, 64, 512, 2048, 8192)
PANELS = {64: "prefill", 8: "decode"}
"""The plot's two panels (``plots.phases`` draws ``prefill`` and ``decode``): 64 local
heads (TP1) and 8 (TP8)."""
TITLES = {"prefill": "64 local heads (TP1)", "decode": "8 local heads (TP8)"}
INTERPRETER_SHAPES = ((1, 8, False, True), (3, 8, True, True), (5, 8, False, True),
                      (2, 8, False, False), (1, 16, False, True))
"""(T, local heads, packed UE8M0 scales, quantize) of the interpreter check."""


# --------------------------------------------------------------------------- pure summaries
def per_step(rows: Sequence[Mapping]) -> list[dict[str, Any]]:
    """GPU time per decode step (x :data:`LAYERS`) at :data:`STEP_TOKENS` x
    :data:`STEP_HEADS`, from rows with ``tokens``, ``heads``, ``upstream_us``, ``table_us``."""
    by = {(r["tokens"], r["heads"]): r for r in rows}
    found = []
    for heads in STEP_HEADS:
        for t in STEP_TOKENS:
            r = by.get((t, heads))
            if r is None:
                continue
            found.append({"tokens": t, "heads": heads, "source": r.get("source", r["tile"]),
                          "upstream_us": r["upstream_us"], "table_us": r["table_us"],
                          "upstream_step_us": LAYERS * r["upstream_us"],
                          "table_step_us": LAYERS * r["table_us"],
                          "saved_step_us": LAYERS * (r["upstream_us"] - r["table_us"])})
    return found


def per_step_markdown(rows: Sequence[Mapping], gpu: str | None = None) -> str:
    where = f" on {gpu}" if gpu else ""
    return (f"Per decode step{where} (x{LAYERS} attention layers, one call each inside the "
            "FULL decode graph; GPU time by CUDA-graph replay):\n\n" + md_table(
                ["T (decode)", "local heads", "launch", "vLLM µs/call", "table µs/call",
                 "vLLM µs/step", "table µs/step", "saved µs/step"],
                [[str(r["tokens"]), str(r["heads"]), str(r["source"]),
                  f"{r['upstream_us']:.2f}", f"{r['table_us']:.2f}",
                  f"{r['upstream_step_us']:.1f}", f"{r['table_step_us']:.1f}",
                  f"{r['saved_step_us']:.1f}"] for r in rows]) + "\n")


def floor_markdown(rows: Sequence[Mapping]) -> str:
    """One line per call: bytes moved, the floor, both launches against it and, where the
    bench measured it, the copy floor (:mod:`.copy_floor`)."""
    copies = any("copy_floor_us" in r for r in rows)
    head = ["call", "tile", "MB moved", "byte floor µs", "empty + floor µs", "vLLM µs",
            "table µs", "speed-up", "vLLM / ideal", "table / ideal"]
    head += ["copy floor µs", "table / copy"] if copies else []

    def line(r: Mapping) -> list[str]:
        cells = [r["shape"], r["tile"], f"{r['bytes_total'] / 1e6:.2f}",
                 f"{r['floor_us']:.2f}", f"{r['ideal_us']:.2f}", f"{r['upstream_us']:.2f}",
                 f"{r['table_us']:.2f}", f"{r['speedup']:.2f}x",
                 f"{r['upstream_vs_ideal']:.2f}x", f"{r['table_vs_ideal']:.2f}x"]
        if copies:
            found = r.get("copy_floor_us")
            cells += ([f"{found:.2f}", f"{r['table_us'] / found:.2f}x"] if found
                      else ["–", "–"])
        return [*cells, "yes" if r["identical"] else "NO"]

    note = (" The copy floor is the same bytes read after the PDL wait and written by a body "
            "that only copies (no rotation, no amax), the fastest of a few tiles: what "
            "moving these bytes after the wait costs on this GPU." if copies else "")
    return ("Each call against (empty launch + byte floor): bytes read and written at the "
            "copy bandwidth measured in the same run, plus an empty Triton launch timed in "
            "graphs as large as a small call's (`harness.empty_launch_us`), both under "
            f"CUDA-graph replay.{note}\n\n" + md_table([*head, "identical"],
                                                          [line(r) for r in rows]) + "\n")


def keys_markdown(keys: Mapping) -> str:
    """The never-slower gate's distribution and its five worst keys."""
    if not keys.get("rows"):
        return (f"Random keys: none timed ({keys.get('note', 'no table entries')}; every key "
                "keeps vLLM's launch).\n")
    lines = [f"Random keys inside the table's entries: {keys['count']} keys, seed "
             f"{keys['seed']}; vLLM's kernel over the table's launch (GPU time, same run): min "
             f"**{keys['min']:.3f}x**, p5 {keys['p5']:.3f}x, median {keys['median']:.3f}x.",
             "", md_table(["worst keys", "tile", "ratio"],
                          [[f"{r['entry']} {r['key']}", str(tuple(r["tile"])),
                            f"{r['ratio']:.3f}x"] for r in keys["worst"]])]
    return "\n".join(lines) + "\n"


def results_markdown(results: Mapping) -> str:
    """The bench run's markdown: floor table, per-step estimate, random keys, equality."""
    machine = results.get("machine") or {}
    parts = [f"# FusedInvRopeFP8Quant bench · {machine.get('gpu', '?')}\n",
             floor_markdown(results.get("anchors") or []),
             per_step_markdown(results.get("per_step") or [], machine.get("gpu")),
             keys_markdown(results.get("keys") or {})]
    equality = results.get("equality")
    if equality:
        parts.append(f"Bitwise sweep: {equality['calls']} generated calls (seed "
                     f"{equality['seed']}), {equality['table_hits']} table hits, "
                     f"{len(equality['mismatches'])} differing from vLLM's kernel.\n")
    failed = results.get("failures") or []
    parts.append("Gates: all passed.\n" if not failed else
                 "Gates FAILED:\n\n" + "\n".join(f"- {line}" for line in failed) + "\n")
    missed = results.get("targets_missed") or []
    parts.append("Speed targets: all met where the table has entries.\n" if not missed else
                 "Speed targets missed (reported, not gated):\n\n"
                 + "\n".join(f"- {line}" for line in missed) + "\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- without a GPU
def _interpreter_rows() -> tuple[list[dict], list[str]]:
    import torch
    from dsv4_kernels.fused_inv_rope_fp8_quant import launch, testing
    from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy

    from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
    from dsv4_evals.bench.fused_inv_rope_fp8_quant import upstream

    try:
        up: upstream.Upstream | None = upstream.load_kernel()
    except (upstream.UpstreamError, OSError, KeyError):
        up = None
    tiles = sorted({launch.BASELINE_TILE, (1, 4, 1, "head_rows"), (2, 2, 2, "head_rows"),
                    (2, 1, 4, "block_rows"), (4, 2, 8, "block_rows"), *(
        (e.config.tokens_per_program, e.config.heads_per_program, e.config.num_warps,
         e.config.body) for e in policy.shipped_table().entries)})
    rows, bad = [], []
    for seed, (t, heads, tma, quantize) in enumerate(INTERPRETER_SHAPES):
        call = h.make_call(h.Shape(t, heads, tma, quantize), "cpu", seed)
        o, pos, cache = call.tensors
        want_bits, want_scales = testing.interpreter_expected(call.case, o, pos, cache)
        for tile in tiles:
            out, scales = h.runner(call, tile, up)()  # type: ignore[arg-type, misc]
            same = bool(torch.equal(testing.bits(out), want_bits)) and (
                not quantize or testing.mismatches(testing.scale_storage(scales),
                                                   testing.scale_storage(want_scales)) == 0)
            vllm = None if up is None else h.mismatch(call, tile, up) is None
            rows.append({"call": call.shape.name, "tile": list(tile), "reference": same,
                         "vllm": vllm})
            if not same or vllm is False:
                bad.append(f"{call.shape.name} {tile}")
    return rows, bad


def _last_bench(artifacts: Path) -> dict | None:
    path = Path(artifacts) / f"bench-{NAME}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def cpu_section(ctx: ReportContext) -> Section:
    """Interpreter correctness, the sample launches, the byte floors, the last bench's
    per-step estimate."""
    from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h

    rows, bad = _interpreter_rows()
    launches, floors = [], []
    for heads in STEP_HEADS:
        for t in REPORT_TOKENS:
            shape = h.Shape(t, heads)
            found = h.resolved(shape, SAMPLE_ARCH)
            launches.append({"call": shape.name, "source": found.source,
                             "tile": list(found.compile_key())})
            moved = h.shape_bytes(shape)
            floors.append({"call": shape.name, "bytes": moved._asdict(),
                           "bytes_total": moved.total,
                           "nominal_floor_us": h.floor_us(moved.total, h.NOMINAL_BYTES_PER_S)})
    last = _last_bench(ctx.artifacts)
    parts = [
        "\n## FusedInvRopeFP8Quant: interpreter check, launches and floors\n",
        md_table(["call", "tile", "identical to the reference",
                  "identical to vLLM's kernel (interpreter)"],
                 [[r["call"], str(tuple(r["tile"])), "yes" if r["reference"] else "NO",
                   {None: "not at hand", True: "yes", False: "NO"}[r["vllm"]]]
                  for r in rows]),
        f"\nLaunches the shipped table resolves on {SAMPLE_ARCH} (FP32 scales, quantize on; "
        "`baseline` runs vLLM's own kernel):\n",
        md_table(["call", "source", "tile"],
                 [[r["call"], r["source"], str(tuple(r["tile"]))] for r in launches]),
        "\nBytes each call must move (o read in bf16, positions, the cos/sin rows, the FP8 "
        "output and the FP32 scales with their pad rows) and that floor at the nominal "
        "4.2 TB/s:\n",
        md_table(["call", "MB moved", "nominal floor µs"],
                 [[r["call"], f"{r['bytes_total'] / 1e6:.3f}", f"{r['nominal_floor_us']:.2f}"]
                  for r in floors]),
    ]
    if last and last.get("per_step"):
        parts += ["\nFrom the last bench run:\n",
                  per_step_markdown(last["per_step"], (last.get("machine") or {}).get("gpu"))]
    data = {"interpreter": rows, "launches": launches, "floors": floors,
            "per_step": last.get("per_step") if last else None}
    return Section("\n".join(parts) + "\n", data, tuple(bad))


# --------------------------------------------------------------------------- on a GPU
def measure(device: object, arch: str, bandwidth: float, empty_us: float) -> list[dict]:
    from dsv4_evals.bench import timing
    from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
    from dsv4_evals.bench.fused_inv_rope_fp8_quant import upstream

    up = upstream.load_kernel()
    rows = []
    for heads in STEP_HEADS:
        for t in REPORT_TOKENS:
            shape = h.Shape(t, heads)
            call = h.make_call(shape, device)  # type: ignore[arg-type]
            tile = h.resolved_tile(shape, arch)
            if tile == h.BASELINE:
                base = ours = timing.graph_us(h.runner(call, h.BASELINE, up),
                                              h.launches_for(call, up), reps=15)
                problem = None
            else:
                base, ours = h.paired_us(call, tile, up)
                problem = h.mismatch(call, tile, up)
            moved = h.shape_bytes(shape)
            ideal = empty_us + h.floor_us(moved.total, bandwidth)
            rows.append({"shape": shape.name, "phase": PANELS[heads], "tokens": t,
                         "heads": heads, "tile": str(tile),
                         "source": h.resolved(shape, arch).source, "upstream_us": base,
                         "table_us": ours, "speedup": base / ours,
                         "bytes_total": moved.total,
                         "floor_us": h.floor_us(moved.total, bandwidth), "ideal_us": ideal,
                         "upstream_vs_ideal": base / ideal, "table_vs_ideal": ours / ideal,
                         "identical": problem is None, "mismatch": problem})
            del call
    return rows


def gpu_section(ctx: ReportContext) -> Section:
    """The floor table, the per-step estimate and ``fused_inv_rope_fp8_quant.png``."""
    from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h

    machine = ctx.machine
    rows = measure(ctx.device, str(ctx.arch), float(machine["copy_bandwidth_tb_s"]) * 1e12,
                   h.empty_launch_us(ctx.device))
    path = Path(ctx.out) / f"{NAME}.png"
    plots.phases(rows, path, f"FusedInvRopeFP8Quant on {ctx.gpu}",
                 [("upstream_us", "o-", "vLLM 0.33.0"), ("table_us", "^-", "table"),
                  ("ideal_us", "k:", "empty launch + byte floor")],
                 xlabel="tokens per call (T)", panel_title=lambda p: TITLES[p])
    steps = per_step(rows)
    markdown = "\n".join([
        "\n## FusedInvRopeFP8Quant: vLLM 0.33.0 against the table\n",
        floor_markdown(rows), per_step_markdown(steps, ctx.gpu),
        f"\n![FusedInvRopeFP8Quant]({NAME}.png)\n"]) + "\n"
    return Section(markdown, {"calls": rows, "per_step": steps},
                   tuple(r["shape"] for r in rows if not r["identical"]))
