"""The DeepSeek-V4 per-step metadata benchmark through vLLM 0.33.0's own builders.

Run the whole ladder once, without pytest, and print a table::

    python -m dsv4_evals.bench.step.bench --json artifacts/bench-step.json
    python -m dsv4_evals.bench.step.bench --quick          # ~2 minutes

For every ladder point (:func:`dsv4_evals.bench.step.harness.ladder`) it builds the
step's metadata with all 8 builders of the deployment's 5 KV-cache groups, with the
plugin off (vLLM as shipped) and on (``dsv4_vllm.plugin.register()``), compares every
tensor the builders return bit for bit, and measures host µs, GPU µs, ATen ops, launches
and each builder's and kernel's share (:mod:`dsv4_evals.bench.step.measure`).
``--cpu-check`` runs the tiny CPU ladder in the Triton interpreter instead: builders run
and outputs match, nothing is timed.

Needs vLLM 0.33.0 importable (its Python sources are enough), ``dsv4_policy``,
``dsv4_kernels`` and ``dsv4_vllm``. Progress goes to stderr; ``--json`` gets every number.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MIN_RATIO = 0.97
"""The gate: with the plugin on, off/on must be at least this at every point (host, GPU)."""


def ladder_name() -> str:
    """``DSV4_STEP_LADDER``: ``full`` (default) or ``quick``, for the bench target."""
    name = os.environ.get("DSV4_STEP_LADDER", "full").strip().lower() or "full"
    if name not in ("full", "quick"):
        raise ValueError(f"DSV4_STEP_LADDER={name!r}: expected 'full' or 'quick'")
    return name


def log(message: str) -> None:
    sys.stderr.write(f"[step-bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


class HarnessError(RuntimeError):
    """The harness cannot run here; the message says why and what to do."""


def _fail(message: str) -> None:
    raise HarnessError(message)


def _imports() -> tuple[Any, Any]:
    try:
        import torch
    except ImportError as exc:
        _fail(f"torch cannot be imported ({exc})")
    try:
        import vllm
    except ImportError as exc:
        _fail(f"vLLM cannot be imported ({exc}); put vLLM 0.33.0 (its Python sources are "
              "enough, e.g. DSV4_VLLM_SOURCES) on PYTHONPATH")
    if not str(vllm.__version__).startswith("0.33."):
        _fail(f"vLLM {vllm.__version__} found; the harness is written for vLLM 0.33.x")
    try:
        import dsv4_kernels  # noqa: F401
        import dsv4_policy  # noqa: F401
        import dsv4_vllm  # noqa: F401
    except ImportError as exc:
        _fail(f"{exc}; install or put packages/{{policy,kernels,vllm_integration}}/src on "
              "PYTHONPATH")
    return torch, vllm


def environment(torch: Any, vllm: Any, device: Any) -> dict[str, Any]:
    import triton
    from vllm.platforms import current_platform

    info: dict[str, Any] = {
        "torch": torch.__version__, "triton": triton.__version__,
        "vllm": str(vllm.__version__), "vllm_path": str(Path(vllm.__file__).parent),
        "vllm_platform": type(current_platform).__name__,
        "python": platform.python_version(), "device": str(device),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }
    try:
        import vllm._C
        info["vllm_compiled_extensions"] = True
    except Exception:
        info["vllm_compiled_extensions"] = False
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, arch=f"sm{props.major}{props.minor}", cuda=torch.version.cuda,
                    sms=props.multi_processor_count)
    return info


# ----------------------------------------------------------------------------- one point
def measure_point(sides: Any, point: Any, gen: Any, *, rounds: int, profile_steps: int,
                  timed: bool, profiled: bool = True) -> dict[str, Any]:
    """Compare both sides on fresh inputs, then (``timed``) time them and profile them."""
    import torch

    from dsv4_evals.bench.step import harness as h
    from dsv4_evals.bench.step import measure as m

    h.check_point(point, sides.deployment)
    before = sides.switch.counters()
    diffs, info = h.compare_point(sides, point, gen)
    after = sides.switch.counters()
    row: dict[str, Any] = {
        "point": point.name, "kind": point.kind, "batch": point.batch,
        "num_reqs": info["num_reqs"], "num_tokens": info["num_tokens"],
        "real_tokens": info["real_tokens"], "context": point.context,
        "max_seq_len": info["max_seq_len"], "decode_reqs": point.decode_reqs,
        "prefills": [list(p) for p in point.prefills], "padded_reqs": point.padded_reqs,
        "identical": not diffs, "differences": diffs[:20],
        "builders": info["builders"], "tensors_compared": info["tensors"],
        "inputs": info["inputs"],
        "plugin": {k: after[k] - before[k] for k in after},
    }
    if not (timed or profiled):
        return row
    base = h.make_inputs(point, sides.off, gen)
    inputs = {"off": base.clone(), "on": base.clone()}
    del base
    if not timed:
        row["profile"] = {s: m.profile_step(sides, s, inputs[s], steps=1) for s in ("off", "on")}
        return row
    host = m.host_us(sides, inputs, rounds=rounds, warmup=max(3, rounds // 10))
    row["host_us"] = {s: m.median(v) for s, v in host.items()}
    row["host_us_iqr"] = {s: _iqr(v) for s, v in host.items()}
    row["host_rounds"] = rounds
    row["builder_host_us"] = {s: m.builder_host_us(sides, s, inputs[s], rounds=max(5, rounds // 2))
                              for s in ("off", "on")}
    if sides.off.device.type == "cuda":
        row["gpu"] = {s: m.gpu_us(sides, s, inputs[s]) for s in ("off", "on")}
        row["gpu_us"] = {s: row["gpu"][s]["us"] for s in ("off", "on")}
    row["profile"] = {s: m.profile_step(sides, s, inputs[s], steps=profile_steps)
                      for s in ("off", "on")}
    row["host_speedup"] = row["host_us"]["off"] / row["host_us"]["on"]
    if "gpu_us" in row:
        row["gpu_speedup"] = row["gpu_us"]["off"] / row["gpu_us"]["on"]
    del inputs
    if sides.off.device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _iqr(values: list[float]) -> float:
    import statistics

    if len(values) < 4:
        return 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def gate_failures(rows: list[dict[str, Any]], min_ratio: float = MIN_RATIO) -> list[str]:
    """Every point where the plugin is worse than vLLM as shipped, or outputs differ."""
    out = []
    for r in rows:
        if "error" in r:
            out.append(f"{r['point']}: {r['error']}")
            continue
        if not r["identical"]:
            out.append(f"{r['point']}: outputs differ with the plugin on: "
                       + "; ".join(r["differences"][:3]))
        for key, what in (("host_speedup", "host"), ("gpu_speedup", "GPU")):
            if key in r and r[key] < min_ratio:
                unit = "host_us" if what == "host" else "gpu_us"
                out.append(f"{r['point']}: {what} {r[unit]['on']:.1f} µs with the plugin on "
                           f"against {r[unit]['off']:.1f} µs off ({r[key]:.3f}x, below "
                           f"{min_ratio})")
    return out


# ----------------------------------------------------------------------------- table
def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'point':<34}{'tok':>6}{'host off':>10}{'host on':>9}{'x':>6}"
            f"{'GPU off':>9}{'GPU on':>8}{'x':>6}{'aten off/on':>13}{'launch off/on':>15}"
            f"  same")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['point']:<34}  ERROR {r['error'][:80]}")
            continue
        host = r.get("host_us")
        gpu = r.get("gpu_us")
        prof = r.get("profile", {})
        aten = (f"{prof['off']['aten_ops']:.0f}/{prof['on']['aten_ops']:.0f}" if prof else "-")
        launch = (f"{prof['off']['device_kernels']:.0f}/{prof['on']['device_kernels']:.0f}"
                  if prof and r.get("gpu_us") else
                  f"{prof['off']['launch_calls']:.0f}/{prof['on']['launch_calls']:.0f}"
                  if prof else "-")
        lines.append(
            f"{r['point']:<34}{r['batch']:>6}"
            + (f"{host['off']:>10.1f}{host['on']:>9.1f}{r['host_speedup']:>6.2f}" if host
               else f"{'-':>10}{'-':>9}{'-':>6}")
            + (f"{gpu['off']:>9.1f}{gpu['on']:>8.1f}{r['gpu_speedup']:>6.2f}" if gpu
               else f"{'-':>9}{'-':>8}{'-':>6}")
            + f"{aten:>13}{launch:>15}  {'yes' if r['identical'] else 'NO'}")
    return "\n".join(lines)


def builder_table(rows: list[dict[str, Any]], side: str = "off") -> str:
    """Each builder's host µs (and profiled GPU µs) per point, for one side."""
    labels: list[str] = []
    for r in rows:
        for label in r.get("builder_host_us", {}).get(side, {}):
            if label not in labels:
                labels.append(label)
    if not labels:
        return ""
    short = [label.split(":", 1)[1].replace("DeepseekSparseSWAFlashMLA", "SWA")
             .replace("DeepseekV4FlashMLA", "MLA").replace("DeepseekV32Indexer", "Idx")
             .replace("Compressor", "Cmp") for label in labels]
    head = f"{'point (' + side + ', host µs)':<34}" + "".join(f"{s[:14]:>15}" for s in short)
    lines = [head, "-" * len(head)]
    for r in rows:
        values = r.get("builder_host_us", {}).get(side)
        if not values:
            continue
        lines.append(f"{r['point']:<34}" + "".join(f"{values.get(k, float('nan')):>15.1f}"
                                                   for k in labels))
    return "\n".join(lines)


ANCHORS = ("decode-T1-ctx128K", "decode-T64-ctx128K", "decode-T512-ctx128K", "decode-T512-ctx1M",
           "prefill-c8192-ctx8K", "mixed-d64-ctx128K-p2048")


def breakdown(rows: list[dict[str, Any]], names: tuple[str, ...] = ANCHORS, top: int = 12
              ) -> str:
    """Per anchor point and side: each builder's profile line and the costliest kernels."""
    lines: list[str] = []
    for r in rows:
        if r["point"] not in names or "profile" not in r:
            continue
        for side in ("off", "on"):
            prof = r["profile"][side]
            host = r.get("builder_host_us", {}).get(side, {})
            lines.append(f"{r['point']} plugin {side}: {prof['aten_ops']:.0f} ATen ops "
                         f"({prof['aten_ops_top_level_outside_kernel_calls']:.0f} top-level "
                         f"outside kernel calls), {prof['device_ops']:.0f} GPU ops, "
                         f"{prof['gpu_us_profiled']:.1f} GPU µs profiled")
            lines.append(f"  {'builder':<40}{'host µs':>9}{'ATen top':>9}{'calls':>7}"
                         f"{'GPU ops':>8}{'GPU µs':>9}")
            for label, b in prof["builders"].items():
                gpu_ops = b.get("kernels", 0) + b.get("memsets", 0) + b.get("memcpys", 0)
                lines.append(f"  {label:<40}{host.get(label, float('nan')):>9.1f}"
                             f"{b.get('aten_top_outside_kernel_calls', 0):>9.0f}"
                             f"{b.get('kernel_calls', 0):>7.0f}{gpu_ops:>8.0f}"
                             f"{b.get('gpu_us', 0):>9.2f}")
            if prof["kernels"]:
                lines.append(f"  {'kernel (call site)':<44}{'builder':<34}{'n':>4}{'GPU µs':>9}")
                for k in prof["kernels"][:top]:
                    lines.append(f"  {k['site'][:43]:<44}{k['builder'][:33]:<34}"
                                 f"{k['count']:>4.0f}{k['gpu_us']:>9.2f}")
            lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main
def run(args: argparse.Namespace) -> int:
    torch, vllm = _imports()
    from dsv4_evals.bench.step import harness as h

    cpu = args.cpu_check or args.device == "cpu"
    if cpu:
        if os.environ.get("TRITON_INTERPRET") != "1":
            _fail("the CPU check runs vLLM's and dsv4's kernels in Triton's interpreter: "
                  "set TRITON_INTERPRET=1 (and CUDA_VISIBLE_DEVICES= on a machine without a "
                  "GPU, so vLLM keeps its Triton)")
        import vllm.triton_utils as tu

        if not tu.HAS_TRITON:
            _fail("vLLM turned its Triton off (no active GPU driver); run with "
                  "CUDA_VISIBLE_DEVICES= (empty) so vLLM keeps Triton for the interpreter")
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            _fail("no CUDA device is visible; the benchmark times GPU launches (use "
                  "--cpu-check for the interpreter check)")
        device = torch.device("cuda", torch.cuda.current_device())
    dep = h.TINY if cpu else h.Deployment(
        max_model_len=args.max_model_len, max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs, tensor_parallel_size=args.tp)
    points = h.tiny_ladder() if cpu else h.quick_ladder() if args.quick else h.ladder()
    if args.points:
        wanted = args.points.split(",")
        pool = {p.name: p for p in (h.tiny_ladder() if cpu else h.ladder())}
        unknown = [n for n in wanted if n not in pool]
        if unknown:
            _fail(f"unknown --points {unknown}; known: {', '.join(pool)}")
        points = [pool[n] for n in wanted]
    for p in points:
        h.check_point(p, dep)

    env = environment(torch, vllm, device)
    log(f"vLLM {env['vllm']} ({env['vllm_platform']}, compiled extensions: "
        f"{env['vllm_compiled_extensions']}), torch {env['torch']}, triton {env['triton']}, "
        f"{env.get('gpu', 'CPU')}")
    started = time.perf_counter()
    arch_of = (lambda _device: args.cpu_arch) if cpu else None
    sides = h.make_sides(dep, device, arch_of=arch_of)
    log(f"built 2 x {len(sides.off.labelled())} builders in {len(sides.off.groups)} KV-cache "
        f"groups (max_model_len={dep.max_model_len}) in {time.perf_counter() - started:.1f} s")
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    rounds = args.rounds or (20 if args.quick else 60)
    control = None
    try:
        for i, point in enumerate(points):
            t0 = time.perf_counter()
            try:
                row = measure_point(sides, point, gen, rounds=rounds,
                                    profile_steps=args.profile_steps, timed=not cpu,
                                    profiled=not cpu or args.cpu_profile)
            except Exception as exc:
                if args.stop_on_error:
                    raise
                row = {"point": point.name, "kind": point.kind, "batch": point.batch,
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()[-4000:]}
            rows.append(row)
            status = ("ERROR " + row["error"][:100] if "error" in row else
                      "identical" if row["identical"] else "OUTPUTS DIFFER")
            timing = (f"host {row['host_us']['off']:.1f}/{row['host_us']['on']:.1f} µs"
                      if "host_us" in row else "")
            if "gpu_us" in row:
                timing += f", GPU {row['gpu_us']['off']:.1f}/{row['gpu_us']['on']:.1f} µs"
            log(f"[{i + 1}/{len(points)}] {point.name}: {status} {timing} "
                f"({time.perf_counter() - t0:.1f} s)")
        if cpu:
            control = h.negative_control(sides, points[0], gen)
            log("negative control: a flipped element in the plugin's C128A and SWA outputs "
                f"{'was' if control['detected'] else 'was NOT'} detected")
    finally:
        sides.switch.close()
    failures = gate_failures(rows) if not cpu else [
        f"{r['point']}: " + (r.get("error") or "outputs differ")
        for r in rows if "error" in r or not r["identical"]]
    result = {
        "kind": "cpu-check" if cpu else "gpu",
        "environment": env,
        "deployment": {**vars(dep), "workspace_factor": dep.workspace_factor},
        "layout": {"num_layers": h.NUM_LAYERS, "compress_ratios": h.compress_ratios(),
                   "sliding_window": h.SLIDING_WINDOW, "index_topk": h.INDEX_TOPK,
                   "kv_block_size": h.KV_BLOCK_SIZE, "swa_block_size": h.SWA_BLOCK_SIZE,
                   "kv_cache_dtype": h.KV_CACHE_DTYPE, "kv_cache_layout": h.KV_LAYOUT},
        "groups": h.describe(sides.off),
        "config_fields": h.config_fields(sides.off.config),
        "shims": dict(h.SHIMS),
        "arch_override": args.cpu_arch if cpu else None,
        "min_ratio": MIN_RATIO, "rounds": rounds, "seed": args.seed,
        "seconds": round(time.perf_counter() - started, 1),
        "points": rows, "failures": failures,
    }
    if control is not None:
        result["negative_control"] = control
        if not control["detected"] or control.get("clean_differences"):
            failures.append(f"negative control failed: {control}")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        log(f"wrote {out}")
    print(table(rows))
    if not cpu:
        for side in ("off", "on"):
            print()
            print(builder_table(rows, side))
    detail = breakdown(rows, ANCHORS if not cpu else tuple(r["point"] for r in rows[:2]))
    if detail:
        print()
        print(detail)
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print(f"  {f}")
    else:
        print("\nall points: outputs identical" + ("" if cpu else
              f", plugin on never below {MIN_RATIO}x of off (host and GPU)"))
    return 1 if failures else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write every number here")
    p.add_argument("--quick", action="store_true",
                   help="the anchor points only, 20 rounds")
    p.add_argument("--points", help="comma-separated point names")
    p.add_argument("--rounds", type=int, default=0, help="host-timing rounds per side")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--cpu-check", action="store_true",
                   help="tiny ladder on the CPU in Triton's interpreter: run and compare only")
    p.add_argument("--cpu-profile", action="store_true",
                   help="on the CPU check, also profile one step per side (ATen ops, launches)")
    p.add_argument("--cpu-arch", default="sm90",
                   help="arch the plugin's dispatchers assume on the CPU check (so the table "
                        "hits and dsv4's kernels run)")
    p.add_argument("--max-model-len", type=int, default=1 << 20)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-num-seqs", type=int, default=512)
    p.add_argument("--tp", type=int, default=1, help="tensor_parallel_size in the config")
    p.add_argument("--stop-on-error", action="store_true", help="raise instead of recording")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parser().parse_args(argv))
    except HarnessError as exc:
        sys.stderr.write(f"step-bench: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
