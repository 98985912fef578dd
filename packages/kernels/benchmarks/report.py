"""The main job (``nox -s report``): what the launch policy does here, and how fast.

On a GPU it times the capacity, baseline and table launches over the benchmark
shapes and writes ``report/report.md`` (a table in the seed's style), ``report.json``
and ``c128a.png`` (µs against tokens, log-log, one line per launch plus the ideal).
Without a GPU it checks the kernel against the reference in the Triton interpreter at
small sizes, prints the launch each sample deployment resolves to and the serve
manifests, and says plainly that timings need a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch
from gate_report import md_table

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEFAULT_OUT = REPO / "report"
SAMPLE_ARCHES = ("sm80", "sm86", "sm90", "sm100", "sm120")
SAMPLE_MODEL_LENS = (65536, 262144, 1 << 20)
SAMPLE_BATCHES = ((1, 0), (64, 0), (0, 2048), (32, 4096), (8192, 0))


def _progress(i: int, n: int, what: str) -> None:
    width = 30
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {what:<40}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")


# ----------------------------------------------------------------------------- CPU part
def policy_width(shape: object) -> int:
    """The upstream active width for a shape; it does not depend on the GPU."""
    from dsv4_policy import c128a

    return c128a.active_width(shape.key("sm80"))  # type: ignore[attr-defined]


def interpreter_check(cases: int = 6, seed: int = 0) -> list[dict]:
    """Kernel against the reference under TRITON_INTERPRET=1 at small sizes."""
    import harness
    from dsv4_kernels import reference

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
        _progress(i + 1, cases, f"interpreter check {shape.name}")
    return rows


def resolved_launches(arch_filter: str | None = None) -> list[dict]:
    """What ``resolve`` returns for sample deployments, from the shipped table."""
    from dsv4_policy import c128a

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


def serve_manifests() -> list[dict]:
    from dsv4_policy import serve

    rows = []
    for env in serve.envelopes():
        key = serve.ServeKey(gpu=env.gpu, tp=env.tp, context=env.context, seqs=env.seqs)
        manifest = serve.plan(key, ["deepseek-ai/DeepSeek-V4-Flash"], {})
        rows.append({"envelope": env.id, "source": manifest.source,
                     "expected_tok_s": manifest.expected_tok_s,
                     "argv": list(manifest.argv), "env": dict(manifest.env)})
    return rows


# ----------------------------------------------------------------------------- GPU part
def warmup_cost(arch: str, max_model_len: int = 1 << 20) -> dict:
    """Seconds to compile every compile key of the shipped table, cold (fresh cache)."""
    import tempfile

    code = textwrap.dedent(f"""
        import json, time, torch
        from dsv4_policy import c128a
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


def measure(shapes: list, device: torch.device, arch: str) -> tuple[dict, list[dict]]:
    import harness

    machine = harness.gpu_info(device)
    machine["empty_launch_us"] = harness.empty_launch_us(device)
    machine["empty_launch_graph_us"] = harness.empty_launch_graph_us(device)
    bandwidth = harness.copy_bandwidth_bytes_per_s(device)
    machine["copy_bandwidth_tb_s"] = bandwidth / 1e12
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
            row[f"{label}_us"] = harness.do_bench_us(run)
            row[f"{label}_graph_us"] = harness.graph_us(run)
        row["identical"] = harness.outputs_equal(shape, device, specs["baseline"],
                                                 specs["table"])
        floor = harness.floor_us(shape, row["width"], bandwidth)
        row["floor_us"] = floor
        row["ideal_us"] = machine["empty_launch_us"] + floor
        row["graph_ideal_us"] = machine["empty_launch_graph_us"] + floor
        rows.append(row)
        _progress(i + 1, len(shapes), shape.name)
    return machine, rows


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, phase in zip(axes, ("prefill", "decode"), strict=True):
        sel = sorted((r for r in rows if r["phase"] == phase and r["context"] == 32768),
                     key=lambda r: r["tokens"])
        if not sel:
            continue
        tokens = [r["tokens"] for r in sel]
        for label, style in (("capacity", "s--"), ("baseline", "o-"), ("table", "^-")):
            ax.plot(tokens, [r[f"{label}_graph_us"] for r in sel], style, label=label)
        ax.plot(tokens, [r["graph_ideal_us"] for r in sel], "k:",
                label="empty launch + write floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel("µs per launch (CUDA-graph replay median)")
        ax.set_title(f"{phase}, context 32768, capacity 8192")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- output
def gpu_markdown(machine: dict, rows: list[dict], warm: dict) -> str:
    head = (f"# C128A top-k metadata: launch report\n\n"
            f"{time.strftime('%Y-%m-%d', time.gmtime())} · {machine['gpu']} ({machine['arch']}) · "
            f"torch {machine['torch']} · triton {machine['triton']} · CUDA {machine['cuda']}\n\n"
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


def bench_gates_markdown(slug: str) -> str:
    """The never-slower and long-prefill results of the last ``nox -s bench`` on this GPU
    model (``bench-<gpu>.json`` in the artifacts folder), or a line saying there is none."""
    import gate_report

    path = Path(os.environ.get("DSV4_ARTIFACTS_DIR", REPO / "artifacts")) / f"bench-{slug}.json"
    if not path.exists():
        return (f"\n## Bench gates\n\nNo bench results at {path}: run `nox -s bench` first "
                "for the random-key distribution and the long-prefill floor table.\n")
    data = json.loads(path.read_text())
    parts = [f"\n## Bench gates (from {path.name})\n"]
    keys = (data.get("random_keys") or {}).get("keys")
    if keys:
        parts.append(gate_report.key_markdown(
            gate_report.key_summary(keys, data["random_keys"]["seed"])))
    if data.get("prefill_floor"):
        parts.append(gate_report.floor_markdown(data["prefill_floor"]))
    failures = data.get("failures") or []
    listed = "\n".join(f"- {f}" for f in failures)
    parts.append("Gates: all passed." if not failures
                 else f"Gates: {len(failures)} failed:\n\n{listed}")
    return "\n".join(parts) + "\n"


def cpu_markdown(check: list[dict], launches: list[dict], manifests: list[dict]) -> str:
    parts = ["# C128A launch report (no GPU)\n",
             "**Timings need a GPU**: no CUDA device is visible here, so this report "
             "checks correctness in the Triton interpreter and shows what the policy "
             "decides. Run `nox -s report` on a GPU machine for the timing table and plot.\n",
             "## Interpreter check: kernel against the reference\n",
             md_table(["case", "decode", "prefill", "context", "width", "tile", "identical"],
                       [[c["case"], str(c["decode"]), str(c["prefill"]), str(c["context"]),
                         str(c["width"]), str(c["tile"]), "yes" if c["identical"] else "NO"]
                        for c in check]),
             "\n## Resolved launches for sample deployments (shipped table)\n",
             md_table(["arch", "max_model_len", "decode", "prefill", "width", "row stride",
                        "decode view", "tile (tpp, cpp, warps, split)", "source"],
                       [[r["arch"], str(r["max_model_len"]), str(r["decode"]),
                         str(r["prefill"]), str(r["width"]), str(r["row_stride"]),
                         str(r["decode_view_width"]), str(r["tile"]), r["source"]]
                        for r in launches]),
             "\n## Serve manifests\n"]
    for m in manifests:
        rate = (f"expected {m['expected_tok_s']} tok/s aggregate" if m["expected_tok_s"]
                else "control shape, no published rate")
        command = shlex.join(["vllm", "serve", *m["argv"]])
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in m["env"].items())
        parts.append(f"### {m['envelope']} ({m['source']}, {rate})\n\n```bash\n"
                     f"{env} {command}\n```\n")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- step table
STEP_RESULTS = "bench-step.json"


def step_results(artifacts: Path | None = None) -> dict | None:
    """The last ``vllm-step`` run (``bench-step.json`` in the artifacts folder), or None.

    Written by ``packages/vllm_integration/benchmarks`` (vLLM's own DeepSeek-V4 metadata
    builders, a whole step, plugin off and on); read here as plain JSON, so the report
    never imports vLLM.
    """
    folder = artifacts or Path(os.environ.get("DSV4_ARTIFACTS_DIR", REPO / "artifacts"))
    path = folder / STEP_RESULTS
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if data.get("points") else None


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def step_markdown(data: dict, plot_name: str | None) -> str:
    """The per-step table (and the plot's link) for the report."""
    env = data.get("environment", {})
    dep = data.get("deployment", {})
    head = (f"\n## DeepSeek-V4 per-step metadata through vLLM's own builders (last "
            f"vllm-step run)\n\n{env.get('date', '?')} · {env.get('gpu', 'no GPU')} · "
            f"torch {env.get('torch', '?')} · triton {env.get('triton', '?')} · vLLM "
            f"{env.get('vllm', '?')} ({env.get('vllm_platform', '?')}) · max_model_len "
            f"{dep.get('max_model_len', '?')}\n\n"
            "Every builder of every KV-cache group (8 builders, 5 groups), one step, "
            "plugin off (vLLM as shipped) and on, in the same run. Host: wall time of the "
            "build calls with the GPU synchronised before and after (median); GPU: "
            "CUDA-graph replay of the step's launches (median). ATen ops and GPU ops per "
            "step from torch.profiler.\n\n")
    rows = []
    for r in data["points"]:
        if "error" in r:
            rows.append([r["point"], r.get("kind", "?"), str(r.get("batch", "?")), "-",
                         "error", "-", "-", "-", "-", "-", "-", "-", r["error"][:60]])
            continue
        host, gpu = r.get("host_us", {}), r.get("gpu_us", {})
        prof = r.get("profile", {})
        rows.append([
            r["point"], r["kind"], str(r["batch"]), str(r["context"]),
            _us(host.get("off")), _us(host.get("on")),
            f"{r['host_speedup']:.2f}x" if "host_speedup" in r else "-",
            _us(gpu.get("off")), _us(gpu.get("on")),
            f"{r['gpu_speedup']:.2f}x" if "gpu_speedup" in r else "-",
            (f"{prof['off']['aten_ops']:.0f} / {prof['on']['aten_ops']:.0f}" if prof else "-"),
            (f"{prof['off']['device_ops']:.0f} / {prof['on']['device_ops']:.0f}" if prof else "-"),
            "yes" if r["identical"] else "NO"])
    table = md_table(["point", "kind", "tokens", "context", "host off µs", "host on µs",
                      "host x", "GPU off µs", "GPU on µs", "GPU x", "ATen ops off / on",
                      "GPU ops off / on", "identical"], rows)
    failures = data.get("failures") or []
    listed = "\n".join(f"- {f}" for f in failures)
    tail = ("\n\nGate (plugin on at least "
            f"{data.get('min_ratio', 0.97)}x of off, host and GPU; outputs identical): "
            + ("all points passed." if not failures else f"{len(failures)} failed:\n\n{listed}"))
    plot = f"\n\n![per-step metadata]({plot_name})\n" if plot_name else "\n"
    return head + table + tail + plot


def step_plot(data: dict, path: Path) -> bool:
    """µs per step against tokens in the step, plugin off and on; False if nothing to draw."""
    points = [r for r in data["points"] if "error" not in r and "host_us" in r]
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("host_us", "host µs per step (wall, GPU synchronised)")]
    if any("gpu_us" in r for r in points):
        panels.append(("gpu_us", "GPU µs per step (CUDA-graph replay)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    contexts = sorted({r["context"] for r in points if r["kind"] == "decode"})
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        for i, ctx in enumerate(contexts):
            sel = sorted((r for r in points if r["kind"] == "decode" and r["context"] == ctx
                          and key in r), key=lambda r: r["batch"])
            if not sel:
                continue
            color = f"C{i}"
            name = f"{ctx // 1024}K" if ctx < 1 << 20 else f"{ctx >> 20}M"
            batch = [r["batch"] for r in sel]
            ax.plot(batch, [r[key]["off"] for r in sel], "o--", color=color,
                    label=f"decode ctx {name}, off")
            ax.plot(batch, [r[key]["on"] for r in sel], "^-", color=color,
                    label=f"decode ctx {name}, on")
        for j, kind in enumerate(("prefill", "mixed", "padded")):
            sel = [r for r in points if r["kind"] == kind and key in r]
            if not sel:
                continue
            color = f"C{len(contexts) + j}"
            ax.scatter([r["batch"] for r in sel], [r[key]["off"] for r in sel], marker="s",
                       facecolors="none", edgecolors=color, label=f"{kind}, off")
            ax.scatter([r["batch"] for r in sel], [r[key]["on"] for r in sel], marker="s",
                       color=color, label=f"{kind}, on")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens in the step (padding included)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    env = data.get("environment", {})
    fig.suptitle(f"DeepSeek-V4 per-step metadata, vLLM {env.get('vllm', '?')} builders, "
                 f"plugin off / on, {env.get('gpu', '')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def step_section(out: Path) -> tuple[str, dict] | None:
    """Markdown (and the data) of the last vllm-step run, ``step.png`` written to ``out``."""
    data = step_results()
    if data is None:
        return None
    drawn = step_plot(data, out / "step.png")
    return step_markdown(data, "step.png" if drawn else None), data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    parser.add_argument("--quick", action="store_true", help="anchor shapes only (GPU)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernel module is imported
    sys.path.insert(0, str(HERE))

    if gpu:
        import harness

        device = torch.device("cuda")
        arch = harness.gpu_info(device)["arch"]
        shapes = harness.anchor_shapes() if args.quick else harness.all_shapes()
        machine, rows = measure(shapes, device, str(arch))
        warm = warmup_cost(str(arch))
        data = {"machine": machine, "rows": rows, "warmup": warm}
        gates = bench_gates_markdown(harness.gpu_slug(str(machine["gpu"])))
        (args.out / "report.md").write_text(gpu_markdown(machine, rows, warm) + gates)
        plot(rows, args.out / "c128a.png", f"C128A top-k metadata on {machine['gpu']}")
        bad = [r["shape"] for r in rows if not r["identical"]]
        import swa_report  # the SWA table and plot (swa.png), same run

        swa_md, data["swa"] = swa_report.section(device, str(arch), args.out,
                                                 str(machine["gpu"]))
        with (args.out / "report.md").open("a") as md:
            md.write(swa_md)
        bad += [r["shape"] for r in data["swa"] if not r["identical"]]
    else:
        check = interpreter_check()
        data = {"gpu": None, "interpreter_check": check, "launches": resolved_launches(),
                "serve": serve_manifests()}
        (args.out / "report.md").write_text(
            cpu_markdown(check, data["launches"], data["serve"]))
        bad = [c["case"] for c in check if not c["identical"]]
    step = step_section(args.out)  # only when a vllm-step run left its results
    if step is not None:
        with (args.out / "report.md").open("a") as md:
            md.write(step[0])
        data["step"] = step[1]
    (args.out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    print((args.out / "report.md").read_text())
    if args.json:
        print(json.dumps(data, indent=2))
    print(f"wrote {args.out / 'report.md'}" + ("" if not gpu else f" and {args.out / 'c128a.png'}"))
    if bad:
        print(f"error: outputs differ from the reference/baseline for {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
