"""The per-step section of the launch report: the last ``vllm-step`` run, if any.

``vllm-step`` (``dsv4_evals.bench.step``) runs vLLM's own DeepSeek-V4 metadata builders
over a whole step, plugin off and on, and leaves ``bench-step.json`` in the artifacts
folder; this section reads it as plain JSON, so the report never imports vLLM, and is
empty without it, on a GPU or not.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 100


STEP_RESULTS = "bench-step.json"


def step_results(artifacts: Path) -> dict | None:
    """The last ``vllm-step`` run (``bench-step.json`` in the artifacts folder), or None.

    Written by ``dsv4_evals.bench.step`` (vLLM's own DeepSeek-V4 metadata
    builders, a whole step, plugin off and on); read here as plain JSON, so the report
    never imports vLLM.
    """
    path = artifacts / STEP_RESULTS
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


def gpu_section(ctx: ReportContext) -> Section | None:
    """Markdown (and the data) of the last vllm-step run, ``step.png`` written to ``out``."""
    data = step_results(ctx.artifacts)
    if data is None:
        return None
    drawn = step_plot(data, ctx.out / "step.png")
    return Section(step_markdown(data, "step.png" if drawn else None), data)


cpu_section = gpu_section


