"""The compressed slot mapping's section of the report.

Without a GPU (``TRITON_INTERPRET=1``): dsv4's kernel against the plain-torch reference
over seeded steps in the interpreter (whole poisoned buffers), and the launch each
sample deployment's steps resolve to from the shipped table. On a GPU: vLLM 0.33.0's
function against the table's launch at the anchor steps (CUDA-graph replay medians, the
same run), with the write floor, and whether both wrote the same buffer.
"""

from __future__ import annotations

import torch
from dsv4_kernels.compressed_slot_mapping import launch, reference
from dsv4_kernels.compressed_slot_mapping.testing import POISON, random_step
from dsv4_policy.kernels import compressed_slot_mapping as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.compressed_slot_mapping import harness as h
from dsv4_evals.bench.compressed_slot_mapping import upstream as csm_upstream
from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 30
SAMPLES = [("sm90", 4, 64, 1, 512, 512, 8192), ("sm90", 4, 64, 1, 1, 8192, 8192),
           ("sm90", 128, 2, 1, 1, 32768, 32768), ("sm80", 4, 64, 1, 64, 64, 8192),
           ("sm90", 4, 64, 2, 16, 4000, 8192)]
"""Sample keys: (arch, compress_ratio, block_size, dcp, num_reqs, num_tokens, num_rows)."""


def cpu_section(ctx: ReportContext) -> Section:
    """Interpreter correctness at three tiles, and the launch each sample key resolves to."""
    bad = []
    rows = []
    for seed in range(4):
        call = random_step(seed, max_tokens=200)
        want, want_result = call.run(reference.get_compressed_slot_mapping)
        for tile in ((1024, 4), (32, 1), (128, 4)):
            got, result = call.run(launch.get_compressed_slot_mapping,
                                   tokens_per_program=tile[0], num_warps=tile[1])
            same = bool(torch.equal(result, want_result)) and (
                want.out is None or (bool(torch.equal(got.out, want.out))
                                     and not bool((got.out == POISON).any())))
            rows.append({"step": call.label, "tile": f"{tile[0]}x{tile[1]}", "identical": same})
            if not same:
                bad.append(f"{call.label} {tile}")
    launches = []
    for sample in SAMPLES:
        found = policy.resolve(policy.Key(*sample))
        launches.append({"key": list(sample), "launch": f"{found.tokens_per_program}x"
                                                         f"{found.num_warps}",
                         "source": found.source})
    markdown = "\n".join([
        "\n## Compressed slot mapping: interpreter check and resolved launches\n",
        md_table(["step", "tile", "identical to the reference"],
                 [[r["step"], r["tile"], "yes" if r["identical"] else "NO"] for r in rows]),
        "",
        md_table(["arch, ratio, block, dcp, reqs, tokens, rows", "launch", "source"],
                 [[", ".join(map(str, s["key"])), s["launch"], s["source"]] for s in launches]),
    ]) + "\n"
    return Section(markdown, {"interpreter": rows, "launches": launches}, tuple(bad))


def gpu_section(ctx: ReportContext) -> Section:
    """vLLM 0.33.0 against the table at the anchor steps, with the write floor."""
    assert ctx.device is not None
    upstream = csm_upstream.load_kernel()
    bandwidth = timing.copy_bandwidth_bytes_per_s(ctx.device)
    empty = timing.empty_launch_graph_us(ctx.device)
    rows = []
    for shape in h.anchor_shapes():
        call = h.make_call(shape, ctx.device)
        tile = h.resolved_tile(call, str(ctx.arch))
        up = timing.graph_us(h.runner(call, h.BASELINE, upstream), reps=15)
        ours = up if tile == h.BASELINE else timing.graph_us(h.runner(call, tile, upstream),
                                                             reps=15)
        rows.append({"shape": shape.label, "tile": str(tile), "upstream_us": up,
                     "table_us": ours, "speedup": up / ours,
                     "floor_us": empty + h.floor_us(call.out.shape[0], bandwidth),
                     "identical": h.outputs_equal(call, tile, upstream)})
        del call
    markdown = "\n".join([
        "\n## Compressed slot mapping: vLLM 0.33.0 against the table\n",
        md_table(["step", "tile", "vLLM 0.33.0 µs", "table µs", "speed-up", "floor µs",
                  "identical"],
                 [[r["shape"], r["tile"], f"{r['upstream_us']:.2f}", f"{r['table_us']:.2f}",
                   f"{r['speedup']:.2f}x", f"{r['floor_us']:.2f}",
                   "yes" if r["identical"] else "NO"] for r in rows]),
    ]) + "\n"
    return Section(markdown, rows, tuple(r["shape"] for r in rows if not r["identical"]))
