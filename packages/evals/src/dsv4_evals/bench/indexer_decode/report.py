"""The indexer decode part of the report.

Without a GPU (``TRITON_INTERPRET=1``): dsv4's kernel against the plain-torch reference
(vLLM's own ops) over seeded decode steps in the interpreter, whole poisoned buffers, and
dsv4's decode path against vLLM's (:mod:`.harness`) on the same steps; then the launch
each sample key resolves to from the shipped table. On a GPU: vLLM 0.33.0's decode path
against the table's at the anchor steps, host µs and GPU µs (CUDA-graph replay), in the
same run, and whether both left the same buffers.
"""

from __future__ import annotations

from dsv4_kernels.indexer_decode import launch, reference
from dsv4_kernels.indexer_decode.testing import assert_same_buffers, random_step
from dsv4_policy.kernels import indexer_decode as policy

from dsv4_evals.bench import timing
from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.indexer_decode import harness as h
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 45
SAMPLES = [("sm90", 4, 0, 1, 1), ("sm90", 4, 1, 64, 64), ("sm90", 4, 0, 512, 512),
           ("sm90", 4, 0, 64, 60), ("sm80", 4, 0, 64, 64)]
"""Sample keys: (arch, compress_ratio, deep_gemm, num_reqs, num_tokens)."""


def cpu_section(ctx: ReportContext) -> Section:
    """Interpreter correctness at three tiles, and the launch each sample key resolves to."""
    bad = []
    rows = []
    for seed in range(4):
        call = random_step(seed, max_reqs=120)
        want = call.run(reference.indexer_decode_metadata)
        for tile in ((1024, 4), (16, 1), (128, 4)):
            got = call.run(launch.indexer_decode_metadata, tokens_per_program=tile[0],
                           num_warps=tile[1])
            try:
                assert_same_buffers(got, want)
                same = call.num_reqs == 0 or h.outputs_equal(call, tile)
            except AssertionError:
                same = False
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
        "\n## Indexer decode metadata: interpreter check and resolved launches\n",
        md_table(["step", "tile", "identical to the reference and vLLM's decode path"],
                 [[r["step"], r["tile"], "yes" if r["identical"] else "NO"] for r in rows]),
        "",
        md_table(["arch, ratio, deep_gemm, reqs, tokens", "launch", "source"],
                 [[", ".join(map(str, s["key"])), s["launch"],
                   "vLLM's build" if s["source"] == "baseline" else s["source"]]
                  for s in launches]),
    ]) + "\n"
    return Section(markdown, {"interpreter": rows, "launches": launches}, tuple(bad))


def gpu_section(ctx: ReportContext) -> Section:
    """vLLM 0.33.0's decode path against the table's at the anchor steps."""
    assert ctx.device is not None
    rows = []
    for shape in h.anchor_shapes():
        call = h.make_call(shape, ctx.device)
        tile = h.resolved_tile(call, str(ctx.arch))
        timed = (1024, 4) if tile == h.BASELINE else tile
        up_host = h.host_us(h.runner(call, h.BASELINE), ctx.device, calls=100)
        up_gpu = timing.graph_us(h.runner(call, h.BASELINE), 10, reps=15)
        ours_host = h.host_us(h.runner(call, timed), ctx.device, calls=100)
        ours_gpu = timing.graph_us(h.runner(call, timed), 10, reps=15)
        rows.append({"shape": shape.label, "tile": str(tile), "upstream_host_us": up_host,
                     "ours_host_us": ours_host, "upstream_gpu_us": up_gpu,
                     "ours_gpu_us": ours_gpu, "identical": h.outputs_equal(call, timed)})
        del call
    markdown = "\n".join([
        "\n## Indexer decode metadata: vLLM 0.33.0's decode path against dsv4's\n",
        "Host µs (back-to-back calls) and GPU µs (CUDA-graph replay) per step, same run; "
        "dsv4's side at the table's tile, or at 1024x4 where the table leaves vLLM's "
        "build (tile `vllm`).\n",
        md_table(["step", "tile", "vLLM host µs", "dsv4 host µs", "host speed-up",
                  "vLLM GPU µs", "dsv4 GPU µs", "identical"],
                 [[r["shape"], r["tile"], f"{r['upstream_host_us']:.2f}",
                   f"{r['ours_host_us']:.2f}",
                   f"{r['upstream_host_us'] / r['ours_host_us']:.2f}x",
                   f"{r['upstream_gpu_us']:.2f}", f"{r['ours_gpu_us']:.2f}",
                   "yes" if r["identical"] else "NO"] for r in rows]),
    ]) + "\n"
    return Section(markdown, rows, tuple(r["shape"] for r in rows if not r["identical"]))
