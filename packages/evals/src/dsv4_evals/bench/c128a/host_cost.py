"""Host µs per C128A metadata call: vLLM 0.33.0's own path against the plugin's hit path.

An eager model step pays the host time of this call (its GPU time is 2-20 µs), so the
plugin's hit path must be cheap on the host too. For a few realistic batches this times,
interleaved in rounds so that a noisy host affects all alike (median over rounds of
the mean over ``--calls`` back-to-back calls, no sync inside a round):

- ``upstream``: vLLM 0.33.0's ``build_c128a_topk_metadata`` as vLLM calls it, through its
  ``kernel_launcher`` / ``VllmTritonJitKernel`` path (extracted from the wheel by
  :mod:`dsv4_evals.bench.c128a.upstream`; pass the folder with ``--upstream``);
- ``plugin hit``: ``dsv4_vllm``'s ``C128ADispatch.__call__`` on a table hit, called
  exactly as vLLM calls the function it replaces (argument binding, decision cache,
  checks, views, launch);
- ``kernels``: ``dsv4_kernels.c128a.build_c128a_topk_metadata`` with the same tile;
- ``kernels (Triton launch)``: the same with the direct launcher off (Triton's binder);
- ``bare Triton``: ``kernel[grid](...)`` of upstream's own kernel, no checks, no views.

    PYTHONPATH=packages/policy/src:packages/kernels/src:packages/vllm_integration/src \\
      python -m dsv4_evals.bench.c128a.host_cost --upstream .upstream/c128a --json out.json

Exit status 1 when the plugin's hit path costs more than ``--max-ratio`` (0.5) of
upstream's at any batch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from dsv4_policy.kernels import c128a as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.c128a import harness

STAND_IN_TILE = (1, 512, 4, True)
"""The tile timed where the table has no entry for a batch (the host path is the same)."""

SHAPES = (
    harness.Shape("decode-T1-ctx1M", 1, 0, harness.MILLION, num_reqs=1),
    harness.Shape("decode-T64-ctx128K", 64, 0, 131072),
    harness.Shape("mixed-D8-P1024-ctx200K", 8, 1024, 200_000),
    harness.Shape("prefill-T512-ctx32K", 0, 512, 32768, num_reqs=1),
)


def _args(inputs: harness.Inputs) -> tuple:
    return (inputs.positions, harness.COMPRESS_RATIO, inputs.num_decode, inputs.token_to_req,
            inputs.block_table, harness.BLOCK_SIZE, inputs.slot_mapping, inputs.decode_buf,
            inputs.lens_buf, inputs.prefill_buf)


def variants(shape: harness.Shape, device: torch.device, arch: str,
             sparse_mla: object) -> dict[str, Callable[[], object]]:
    from dsv4_kernels import c128a
    from dsv4_vllm.kernels.c128a import C128ADispatch

    inputs = harness.make_inputs(shape, device)
    args = _args(inputs)
    specs = harness.launches(shape, arch)
    width, table = specs["baseline"].width, specs["table"]
    original = sparse_mla.build_c128a_topk_metadata  # type: ignore[attr-defined]
    resolve = None
    if table.source == "baseline":  # no entry here: time the hit path with a stand-in tile
        tpp, cpp, warps, split = STAND_IN_TILE
        table = dataclasses.replace(table, tokens_per_program=tpp, cols_per_program=cpp,
                                    num_warps=warps, split_width=split, source="stand-in")

        def resolve(key: object) -> object:
            return dataclasses.replace(policy.baseline(key), tokens_per_program=tpp,
                                       cols_per_program=cpp, num_warps=warps,
                                       split_width=split, source="table:host-cost")
    dispatch = C128ADispatch(original, arch_of=lambda _d: arch, warm=lambda *a, **k: 0,
                             lazy_warmup=False, resolve=resolve)
    tile = dict(tokens_per_program=table.tokens_per_program,
                cols_per_program=table.cols_per_program, num_warps=table.num_warps,
                split_width=table.split_width)
    print(f"{shape.name}: width {width}, tile {tuple(tile.values())} ({table.source})",
          flush=True)
    upstream_kernel = sparse_mla.BuildC128ATopkMetadataKernel.kernel  # type: ignore[attr-defined]
    d, p = inputs.decode_buf, inputs.prefill_buf

    def bare() -> None:
        upstream_kernel[(shape.num_tokens,)](
            d, d.stride(0), inputs.lens_buf, p, p.stride(0), inputs.positions,
            harness.COMPRESS_RATIO, width, inputs.num_decode, inputs.token_to_req,
            inputs.block_table, inputs.block_table.stride(0), harness.BLOCK_SIZE,
            inputs.slot_mapping, BLOCK_SIZE=1024)

    runs = {
        "upstream": lambda: original(*args, max_compressed_tokens=width),
        "plugin hit": lambda: dispatch(*args, max_compressed_tokens=width),
        "kernels": lambda: c128a.build_c128a_topk_metadata(*args, width=width, **tile),
        "kernels (Triton launch)": lambda: c128a.build_c128a_topk_metadata(*args, width=width,
                                                                           **tile),
        "bare Triton": bare,
    }
    for run in runs.values():  # compile, load and check once
        run()
    torch.cuda.synchronize(device)
    hits = dispatch.hits
    dispatch(*args, max_compressed_tokens=width)
    if dispatch.hits != hits + 1:
        raise SystemExit(f"error: the plugin did not take its hit path for {shape.name}")
    return runs


def time_round(run: Callable[[], object], calls: int) -> float:
    """Mean host µs per call over ``calls`` back-to-back calls (GPU allowed to lag)."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e6


@contextlib.contextmanager
def triton_launch_only() -> Iterator[None]:
    """The kernels wrapper with its direct launcher off: Triton's own launch path."""
    from dsv4_kernels import c128a

    c128a._LAUNCHER.enabled = False
    c128a._LAUNCHER.forget()
    try:
        yield
    finally:
        c128a._LAUNCHER.enabled = True
        c128a._LAUNCHER.forget()


def measure(runs: dict[str, Callable[[], object]], calls: int, rounds: int,
            device: torch.device) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            mode = triton_launch_only() if name == "kernels (Triton launch)" else (
                contextlib.nullcontext())
            with mode:
                run()
                samples[name].append(time_round(run, calls))
            torch.cuda.synchronize(device)
    return {name: statistics.median(v) for name, v in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True,
                        help="folder written by upstream.py (vLLM 0.33.0's extracted path)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--max-ratio", type=float, default=0.5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.upstream.resolve()))
    import vllm.models.deepseek_v4.sparse_mla as sparse_mla

    device = torch.device("cuda")
    info = timing.gpu_info(device)
    arch = str(info["arch"])
    rows = {}
    for shape in SHAPES:
        runs = variants(shape, device, arch, sparse_mla)
        rows[shape.name] = measure(runs, args.calls, args.rounds, device)
        print(f"{shape.name}: " + ", ".join(f"{k} {v:.1f} µs" for k, v in rows[shape.name].items()),
              flush=True)
    worst = max(r["plugin hit"] / r["upstream"] for r in rows.values())
    print(f"\n{'batch':<26}" + "".join(f"{k:>26}" for k in next(iter(rows.values()))))
    for name, r in rows.items():
        print(f"{name:<26}" + "".join(f"{v:>24.1f}µs" for v in r.values()))
    print(f"plugin hit / upstream, worst batch: {worst:.2f}x (target <= {args.max_ratio}x)")
    if args.json:
        timing.write_json(args.json, {"machine": info, "calls": args.calls,
                                       "rounds": args.rounds, "host_us": rows,
                                       "worst_plugin_over_upstream": worst})
    return 0 if worst <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
