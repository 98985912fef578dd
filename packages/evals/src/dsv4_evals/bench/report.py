"""The main job (``nox -s report``): what the launch policies do here, and how fast.

One section per bench folder that has a ``report.py`` (:mod:`dsv4_evals.bench.registry`),
in their ``ORDER``: on a GPU each times its kernel's launches and writes its plot; without
one each checks its kernel in the Triton interpreter and shows what the policy decides,
and the report says plainly that timings need a GPU. Then the serve manifests. Writes
``report/report.md`` and ``report/report.json`` at the repository root (``--out``).

    python -m dsv4_evals.bench.report [--out DIR] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from dsv4_evals.bench import paths


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


def serve_markdown(manifests: list[dict]) -> str:
    parts = ["\n## Serve manifests\n"]
    for m in manifests:
        rate = (f"expected {m['expected_tok_s']} tok/s aggregate" if m["expected_tok_s"]
                else "control shape, no published rate")
        command = shlex.join(["vllm", "serve", *m["argv"]])
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in m["env"].items())
        parts.append(f"### {m['envelope']} ({m['source']}, {rate})\n\n```bash\n"
                     f"{env} {command}\n```\n")
    return "\n".join(parts)


def gpu_header(machine: dict) -> str:
    return (f"# Launch report\n\n"
            f"{time.strftime('%Y-%m-%d', time.gmtime())} · {machine['gpu']} ({machine['arch']}) · "
            f"torch {machine['torch']} · triton {machine['triton']} · CUDA {machine['cuda']}\n")


CPU_HEADER = ("# Launch report (no GPU)\n\n"
              "**Timings need a GPU**: no CUDA device is visible here, so this report checks "
              "every kernel in the Triton interpreter and shows what the policies decide. Run "
              "`nox -s report` on a GPU machine for the timing tables and plots.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=paths.repo_root() / "report",
                        help="output folder")
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    parser.add_argument("--quick", action="store_true", help="anchor shapes only (GPU)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
    if args.quick:
        os.environ["DSV4_REPORT_QUICK"] = "1"
    from dsv4_evals.bench import registry, timing

    ctx = registry.ReportContext(out=args.out, artifacts=paths.artifacts())
    if gpu:
        device = torch.device("cuda")
        machine = timing.machine(device)
        ctx = registry.ReportContext(out=args.out, artifacts=ctx.artifacts, device=device,
                                     arch=str(machine["arch"]), gpu=str(machine["gpu"]),
                                     machine=machine)
    markdown = [gpu_header(ctx.machine) if gpu else CPU_HEADER]
    data: dict[str, object] = {"machine": ctx.machine or None}
    bad: list[str] = []
    for name, module in registry.report_modules():
        section = (module.gpu_section if gpu else module.cpu_section)(ctx)
        if section is None:
            continue
        markdown.append(section.markdown)
        data[name] = section.data
        bad += [f"{name}: {case}" for case in section.bad]
    if not gpu:
        data["serve"] = serve_manifests()
        markdown.append(serve_markdown(data["serve"]))  # type: ignore[arg-type]
    (args.out / "report.md").write_text("\n".join(markdown))
    (args.out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    print((args.out / "report.md").read_text())
    if args.json:
        print(json.dumps(data, indent=2))
    print(f"wrote {args.out / 'report.md'}")
    if bad:
        print(f"error: outputs differ from the reference/baseline for {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
