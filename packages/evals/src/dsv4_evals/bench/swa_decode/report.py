"""The SWA decode part of the report.

Without a GPU (``TRITON_INTERPRET=1``): dsv4's kernel against the plain-torch reference
(vLLM's own ops) over seeded decode steps in the interpreter, whole poisoned buffers, and
dsv4's decode path against vLLM's (:mod:`.harness`, with vLLM's extracted rows kernel in
the interpreter where a copy or an installed vLLM is at hand; the section says when it
is not) on the same steps; then the launch each sample key resolves to from the shipped
table. On a GPU: vLLM 0.33.0's decode path against the table's at the anchor steps, host
µs and GPU µs (CUDA-graph replay), in the same run, and whether both left the same
buffers.
"""

from __future__ import annotations

from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 46
SAMPLES = [("sm90", 128, 1), ("sm90", 128, 8), ("sm90", 128, 64), ("sm90", 128, 512),
           ("sm90", 128, 8192), ("sm80", 128, 64)]
"""Sample keys: (arch, index_width, num_tokens)."""
POINTS = [{"num_tokens": 1, "padding": 0}, {"num_tokens": 37, "padding": 1},
          {"num_tokens": 8, "padding": 2}, {"num_tokens": 150, "padding": 0}]
"""The interpreter's steps (each with its own seed)."""
TILES = ((8, 128, 4), (1, 128, 1), (32, 64, 4))


def cpu_section(ctx: ReportContext) -> Section:
    """Interpreter correctness at three tiles, and the launch each sample key resolves to."""
    import torch
    from dsv4_kernels.swa_decode import launch, reference
    from dsv4_policy.kernels import swa_decode as policy

    from dsv4_evals.bench.floors import md_table
    from dsv4_evals.bench.swa_decode import harness as h

    try:
        rows_kernel: h.RowsKernel | None = h.rows_kernel("extracted", download=False)
        origin = rows_kernel.origin  # type: ignore[union-attr]
    except FileNotFoundError as exc:
        rows_kernel, origin = None, f"not compared: {exc}"
    bad = []
    rows = []
    for seed, point in enumerate(POINTS):
        call = h.call_of(point, torch.device("cpu"), 100 + seed)
        label = f"T{point['num_tokens']}-padding{point['padding']}"
        want = call.fresh()
        reference.build_swa_decode(*want.args(), **want.kwargs())
        for tile in TILES:
            got = call.fresh()
            launch.build_swa_decode(*got.args(), **got.kwargs(), tokens_per_program=tile[0],
                                    cols_per_program=tile[1], num_warps=tile[2])
            same = all(torch.equal(getattr(got, n), getattr(want, n)) for n in h.BUFFERS)
            if same and rows_kernel is not None:
                same = h.outputs_equal(call, tile, rows_kernel)
            rows.append({"step": label, "tile": "x".join(map(str, tile)), "identical": same})
            if not same:
                bad.append(f"{label} {tile}")
    launches = []
    for sample in SAMPLES:
        found = policy.resolve(policy.Key(*sample))
        launches.append({"key": list(sample), "launch": "x".join(map(str, found.compile_key())),
                         "source": found.source})
    markdown = "\n".join([
        "\n## SWA decode metadata: interpreter check and resolved launches\n",
        f"vLLM's decode path with its rows kernel: {origin}.\n",
        md_table(["step", "tile", "identical to the reference and vLLM's decode path"],
                 [[r["step"], r["tile"], "yes" if r["identical"] else "NO"] for r in rows]),
        "",
        md_table(["arch, index width, tokens", "launch", "source"],
                 [[", ".join(map(str, s["key"])), s["launch"],
                   "vLLM's build" if s["source"] == "baseline" else s["source"]]
                  for s in launches]),
    ]) + "\n"
    return Section(markdown, {"rows_kernel": origin, "interpreter": rows,
                              "launches": launches}, tuple(bad))


def gpu_section(ctx: ReportContext) -> Section:
    """vLLM 0.33.0's decode path against the table's at the anchor steps."""
    from dsv4_kernels.swa_decode import launch

    from dsv4_evals.bench import timing
    from dsv4_evals.bench.floors import md_table
    from dsv4_evals.bench.swa_decode import harness as h

    assert ctx.device is not None
    rows_kernel = h.rows_kernel()
    launch.warmup([launch.BASELINE_TILE], ctx.device)
    rows = []
    for shape in h.anchor_shapes():
        call = h.make_call(shape, ctx.device)
        tile = h.resolved_tile(call, str(ctx.arch))
        timed = launch.BASELINE_TILE if tile == h.BASELINE else tile
        up, ours = h.runner(call, h.BASELINE, rows_kernel), h.runner(call, timed, rows_kernel)
        rows.append({"shape": shape.label, "tile": str(tile),
                     "upstream_host_us": h.host_us(up, ctx.device, calls=100),
                     "ours_host_us": h.host_us(ours, ctx.device, calls=100),
                     "upstream_gpu_us": timing.graph_us(up, 10, reps=15),
                     "ours_gpu_us": timing.graph_us(ours, 10, reps=15),
                     "identical": h.outputs_equal(call, timed, rows_kernel)})
        del call, up, ours
    markdown = "\n".join([
        "\n## SWA decode metadata: vLLM 0.33.0's decode path against dsv4's\n",
        "Host µs (back-to-back calls) and GPU µs (CUDA-graph replay) per step, same run; "
        f"dsv4's side at the table's tile, or at {'x'.join(map(str, launch.BASELINE_TILE))} "
        f"where the table leaves vLLM's build (tile `vllm`). vLLM's rows kernel: "
        f"{rows_kernel.origin}.\n",
        md_table(["step", "tile", "vLLM host µs", "dsv4 host µs", "host speed-up",
                  "vLLM GPU µs", "dsv4 GPU µs", "GPU speed-up", "identical"],
                 [[r["shape"], r["tile"], f"{r['upstream_host_us']:.2f}",
                   f"{r['ours_host_us']:.2f}",
                   f"{r['upstream_host_us'] / r['ours_host_us']:.2f}x",
                   f"{r['upstream_gpu_us']:.2f}", f"{r['ours_gpu_us']:.2f}",
                   f"{r['upstream_gpu_us'] / r['ours_gpu_us']:.2f}x",
                   "yes" if r["identical"] else "NO"] for r in rows]),
    ]) + "\n"
    return Section(markdown, {"rows_kernel": rows_kernel.origin, "anchors": rows},
                   tuple(r["shape"] for r in rows if not r["identical"]))
