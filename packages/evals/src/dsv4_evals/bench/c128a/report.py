"""C128A's section of the launch report.

On a GPU: the capacity, baseline and table launches over the bench shapes (GPU time and
do_bench), the write floor, the cold warm-up cost, ``c128a.png`` and the last
``c128a-bench`` run's gates. Without one: the kernel against the reference in the Triton
interpreter at small sizes, and the launch each sample deployment resolves to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from dsv4_evals.bench import floors, plots, timing
from dsv4_evals.bench.floors import md_table, progress
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 0
SAMPLE_ARCHES = ("sm80", "sm86", "sm90", "sm100", "sm120")
SAMPLE_MODEL_LENS = (65536, 262144, 1 << 20)
SAMPLE_BATCHES = ((1, 0), (64, 0), (0, 2048), (32, 4096), (8192, 0))


def policy_width(shape: object) -> int:
    """The upstream active width for a shape; it does not depend on the GPU."""
    from dsv4_policy.kernels import c128a

    return c128a.active_width(shape.key("sm80"))  # type: ignore[attr-defined]


def interpreter_check(cases: int = 6, seed: int = 0) -> list[dict]:
    """Kernel against the reference under TRITON_INTERPRET=1 at small sizes."""
    from dsv4_kernels.c128a import reference

    from dsv4_evals.bench.c128a import harness

    gen = torch.Generator().manual_seed(seed)
    tiles = [(1, 1024, 4, False), (8, 128, 4, True), (4, 256, 2, True), (2, 512, 4, False)]
    rows = []
    for i in range(cases):
        ctx = int(torch.randint(256, 300_000, (1,), generator=gen))
        num_decode = int(torch.randint(0, 6, (1,), generator=gen))
        num_prefill = int(torch.randint(0 if num_decode else 1, 6, (1,), generator=gen))
        shape = harness.Shape(f"case{i}", num_decode, num_prefill, ctx,
                              max_model_len=1 << 19, num_reqs=3)
        width = policy_width(shape)
        tile = tiles[i % len(tiles)]
        spec = harness.LaunchSpec("check", width, *tile, source="interpreter")
        got = harness.make_inputs(shape, torch.device("cpu"), seed=seed + i)
        want = harness.make_inputs(shape, torch.device("cpu"), seed=seed + i)
        harness.runner(got, spec)()
        reference.build_c128a_topk_metadata(
            want.positions, harness.COMPRESS_RATIO, want.num_decode, want.token_to_req,
            want.block_table, harness.BLOCK_SIZE, want.slot_mapping, want.decode_buf,
            want.lens_buf, want.prefill_buf, width=width,
        )
        same = all(torch.equal(a, b) for a, b in (
            (got.decode_buf, want.decode_buf), (got.lens_buf, want.lens_buf),
            (got.prefill_buf, want.prefill_buf)))
        rows.append({"case": shape.name, "decode": num_decode, "prefill": num_prefill,
                     "context": ctx, "width": width, "tile": list(tile), "identical": same})
        progress(i + 1, cases, f"interpreter check {shape.name}")
    return rows


def resolved_launches(arch_filter: str | None = None) -> list[dict]:
    """What ``resolve`` returns for sample deployments, from the shipped table."""
    from dsv4_policy.kernels import c128a

    rows = []
    for arch in SAMPLE_ARCHES if arch_filter is None else (arch_filter,):
        for model_len in SAMPLE_MODEL_LENS:
            for num_decode, num_prefill in SAMPLE_BATCHES:
                key = c128a.Key(arch=arch, compress_ratio=128, max_model_len=model_len,
                                max_seq_len=model_len // 2, num_decode_tokens=num_decode,
                                num_prefill_tokens=num_prefill, block_size=2)
                launch = c128a.resolve(key)
                rows.append({"arch": arch, "max_model_len": model_len, "decode": num_decode,
                             "prefill": num_prefill, "width": launch.width,
                             "row_stride": launch.row_stride,
                             "decode_view_width": launch.decode_view_width,
                             "tile": [launch.tokens_per_program, launch.cols_per_program,
                                      launch.num_warps, launch.split_width],
                             "source": launch.source})
    return rows


def warmup_cost(arch: str, max_model_len: int = 1 << 20) -> dict:
    """Seconds to compile every compile key of the shipped table, cold (fresh cache)."""
    import tempfile

    code = textwrap.dedent(f"""
        import json, time, torch
        from dsv4_policy.kernels import c128a
        from dsv4_kernels.c128a import warmup
        keys = sorted(c128a.compile_keys(None, {arch!r}, {max_model_len}))
        t0 = time.perf_counter()
        n = warmup(keys, torch.device("cuda"))
        torch.cuda.synchronize()
        print(json.dumps({{"keys": [list(k) for k in keys], "compiled": n,
                           "seconds": time.perf_counter() - t0}}))
    """)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(shapes: list, device: torch.device, arch: str, machine: dict) -> list[dict]:
    """The three launches of every shape, timed both ways, with the write floor."""
    from dsv4_evals.bench.c128a import harness

    bandwidth = float(machine["copy_bandwidth_tb_s"]) * 1e12
    rows = []
    for i, shape in enumerate(shapes):
        specs = harness.launches(shape, arch)
        inputs = harness.make_inputs(shape, device)
        row = {"shape": shape.name, "phase": shape.phase, "tokens": shape.num_tokens,
               "num_decode": shape.num_decode, "num_prefill": shape.num_prefill,
               "context": shape.context, "width": specs["table"].width,
               "capacity": shape.capacity, "source": specs["table"].source,
               "tile": list(specs["table"].tile)}
        for label, spec in specs.items():
            run = harness.runner(inputs, spec)
            row[f"{label}_us"] = timing.do_bench_us(run)
            row[f"{label}_graph_us"] = timing.graph_us(run)
        row["identical"] = harness.outputs_equal(shape, device, specs["baseline"],
                                                 specs["table"])
        floor = harness.floor_us(shape, row["width"], bandwidth)
        row["floor_us"] = floor
        row["ideal_us"] = machine["empty_launch_us"] + floor
        row["graph_ideal_us"] = machine["empty_launch_graph_us"] + floor
        rows.append(row)
        progress(i + 1, len(shapes), shape.name)
    return rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    """The capacity, baseline and table launches at context 32768 (capacity 8192)."""
    plots.phases(rows, path, title,
                 [("capacity_graph_us", "s--", "capacity"), ("baseline_graph_us", "o-", "baseline"),
                  ("table_graph_us", "^-", "table"),
                  ("graph_ideal_us", "k:", "empty launch + write floor")],
                 xlabel="tokens", panel_title=lambda p: f"{p}, context 32768, capacity 8192",
                 keep=lambda r: r["context"] == 32768)


# ----------------------------------------------------------------------------- output
def gpu_markdown(machine: dict, rows: list[dict], warm: dict) -> str:
    head = ("\n## C128A top-k metadata\n\n"
            f"Times are medians in µs per launch. The main columns are GPU time, from "
            f"CUDA-graph replay (as a captured model step runs); the do_bench column adds the "
            f"host's launch cost, which varies from run to run on a shared host. Empty launch "
            f"{machine['empty_launch_graph_us']:.2f} µs in a graph "
            f"({machine['empty_launch_us']:.1f} µs under do_bench); copy bandwidth "
            f"{machine['copy_bandwidth_tb_s']:.2f} TB/s. '% of ideal' is ours against "
            f"(empty launch + write floor), where the write floor is T × width × 4 bytes "
            f"plus the lengths over the copy bandwidth.\n\n")
    table = md_table(
        ["shape", "tokens", "width", "capacity", "baseline", "ours", "vs capacity",
         "vs baseline", "write floor", "% of ideal", "do_bench base / ours", "identical",
         "launch"],
        [[r["shape"], str(r["tokens"]), str(r["width"]), f"{r['capacity_graph_us']:.2f}",
          f"{r['baseline_graph_us']:.2f}", f"{r['table_graph_us']:.2f}",
          f"{r['capacity_graph_us'] / r['table_graph_us']:.2f}x",
          f"{r['baseline_graph_us'] / r['table_graph_us']:.2f}x", f"{r['floor_us']:.2f}",
          f"{100 * r['table_graph_us'] / r['graph_ideal_us']:.0f}%",
          f"{r['baseline_us']:.1f} / {r['table_us']:.1f}",
          "yes" if r["identical"] else "NO", r["source"]] for r in rows])
    warm_line = (f"\n\nStart-up warm-up: {len(warm['keys'])} compile keys for a 1M-context "
                 f"deployment ({', '.join(str(tuple(k)) for k in warm['keys'])}) compiled cold "
                 f"in {warm['seconds']:.1f} s.\n")
    return head + table + warm_line


def bench_gates_markdown(artifacts: Path, gpu: str) -> str:
    """The never-slower and long-prefill results of the last ``c128a-bench`` run
    (``bench-c128a.json`` in the artifacts folder) on this GPU model, or a line saying
    there is none."""
    path = artifacts / "bench-c128a.json"
    data = json.loads(path.read_text()) if path.exists() else None
    if data is not None and data.get("machine", {}).get("gpu") != gpu:
        data = None
    if data is None:
        return (f"\n### C128A bench gates\n\nNo c128a-bench results for {gpu} at {path}: run "
                "`nox -s c128a-bench` first for the random-key distribution and the "
                "long-prefill floor table.\n")
    parts = [f"\n### C128A bench gates (from {path.name})\n"]
    keys = (data.get("random_keys") or {}).get("keys")
    if keys:
        parts.append(floors.key_markdown(
            floors.key_summary(keys, data["random_keys"]["seed"])))
    if data.get("prefill_floor"):
        parts.append(floors.floor_markdown(data["prefill_floor"]))
    failures = data.get("failures") or []
    listed = "\n".join(f"- {f}" for f in failures)
    parts.append("Gates: all passed." if not failures
                 else f"Gates: {len(failures)} failed:\n\n{listed}")
    return "\n".join(parts) + "\n"




def cpu_markdown(check: list[dict], launches: list[dict]) -> str:
    return "\n".join([
        "\n## C128A: interpreter check, kernel against the reference\n",
        md_table(["case", "decode", "prefill", "context", "width", "tile", "identical"],
                 [[c["case"], str(c["decode"]), str(c["prefill"]), str(c["context"]),
                   str(c["width"]), str(c["tile"]), "yes" if c["identical"] else "NO"]
                  for c in check]),
        "\n## C128A: resolved launches for sample deployments (shipped table)\n",
        md_table(["arch", "max_model_len", "decode", "prefill", "width", "row stride",
                  "decode view", "tile (tpp, cpp, warps, split)", "source"],
                 [[r["arch"], str(r["max_model_len"]), str(r["decode"]),
                   str(r["prefill"]), str(r["width"]), str(r["row_stride"]),
                   str(r["decode_view_width"]), str(r["tile"]), r["source"]]
                  for r in launches]),
    ]) + "\n"


def cpu_section(ctx: ReportContext) -> Section:
    """The interpreter check and the sample deployments' launches."""
    check = interpreter_check()
    launches = resolved_launches()
    return Section(cpu_markdown(check, launches),
                   {"interpreter_check": check, "launches": launches},
                   tuple(c["case"] for c in check if not c["identical"]))


def gpu_section(ctx: ReportContext) -> Section:
    """The timing table, the warm-up cost, ``c128a.png`` and the last bench run's gates."""
    from dsv4_evals.bench.c128a import harness

    quick = os.environ.get("DSV4_REPORT_QUICK") == "1"
    shapes = harness.anchor_shapes() if quick else harness.all_shapes()
    rows = measure(shapes, ctx.device, str(ctx.arch), ctx.machine)
    warm = warmup_cost(str(ctx.arch))
    plot(rows, ctx.out / "c128a.png", f"C128A top-k metadata on {ctx.gpu}")
    markdown = (gpu_markdown(ctx.machine, rows, warm) + "\n![C128A](c128a.png)\n"
                + bench_gates_markdown(ctx.artifacts, str(ctx.gpu)))
    return Section(markdown, {"rows": rows, "warmup": warm},
                   tuple(r["shape"] for r in rows if not r["identical"]))
