"""The CombineTopkSwaIndices part of the launch report.

Without a GPU (:func:`cpu_section`, Triton's interpreter): small seeded chunks of each
layer kind (uneven requests, padding, image widening) run through dsv4's kernel at
vLLM's launch shape and at every tile of the shipped table, each compared with the
plain-torch reference on the whole poisoned buffers, and the launch each sample
deployment's calls resolve to on sm90. On a GPU (:func:`gpu_section`): the anchors (one
fresh request of 512 to 32768 tokens per layer kind), vLLM 0.33.0's function against
the table's launch in the same run (CUDA-graph replay medians), outputs checked
identical, plotted against the empty launch + bytes-moved floor.
"""

from __future__ import annotations

from pathlib import Path

from dsv4_evals.bench import plots
from dsv4_evals.bench.floors import md_table
from dsv4_evals.bench.registry import ReportContext, Section

ORDER = 20
SAMPLE_ARCH = "sm90"
PANELS = {"c4a": "prefill", "c128a": "decode"}
"""The plot's two panels (``plots.phases`` draws ``prefill`` and ``decode``): C4A and
C128A layers, both prefill calls; the SWA-only rows are in the table only."""
TITLES = {"prefill": "C4A layers", "decode": "C128A layers"}


def _samples() -> list[tuple[str, dict]]:
    return [("c128a-3req", dict(kind="c128a", queries=[(300, 20), (0, 13), (9000, 7)],
                                window_size=16, max_model_len=16384, pad_rows=3)),
            ("c4a-2req-image", dict(kind="c4a", queries=[(40, 15), (0, 9)], window_size=16,
                                    index_topk=32, max_image_tokens=12, replay=True)),
            ("swa-4req", dict(kind="swa", queries=[(0, 5), (7, 3), (100, 6), (2, 1)],
                              window_size=16, extra_rows=2, row_pad=3))]


def cpu_section(ctx: ReportContext) -> Section:
    """Interpreter correctness of every shipped tile, and the sample launches."""
    from dsv4_kernels.combine_topk_swa import launch, reference
    from dsv4_kernels.combine_topk_swa.testing import make_chunk
    from dsv4_policy.kernels import combine_topk_swa as policy

    from dsv4_evals.bench.combine_topk_swa import harness as h

    tiles = sorted({launch.BASELINE_TILE, *(
        (e.config.tokens_per_program, e.config.cols_per_program, e.config.num_warps)
        for e in policy.shipped_table().entries)})
    rows, bad = [], []
    for seed, (name, shape) in enumerate(_samples()):
        chunk = make_chunk(seed, **shape)  # type: ignore[arg-type]
        want = chunk.run(reference.combine_topk_swa_indices)
        for tile in tiles:
            got = chunk.run(launch.combine_topk_swa_indices, tokens_per_program=tile[0],
                            cols_per_program=tile[1], num_warps=tile[2])
            same = bool((got.indices_storage == want.indices_storage).all()
                        and (got.lens_storage == want.lens_storage).all())
            rows.append({"sample": name, "tile": list(tile), "identical": same})
            if not same:
                bad.append(f"{name} {tile}")
    launches = []
    for anchor in h.anchors():
        found = policy.resolve(h.key_of(anchor.point(), SAMPLE_ARCH))
        launches.append({"call": anchor.name, "source": found.source,
                         "tile": list(found.compile_key())})
    markdown = "\n".join([
        "\n## CombineTopkSwaIndices: interpreter check and sample launches\n",
        md_table(["sample", "tile", "identical to the reference"],
                 [[r["sample"], str(tuple(r["tile"])), "yes" if r["identical"] else "NO"]
                  for r in rows]),
        f"\nLaunches the shipped table resolves on {SAMPLE_ARCH} (one fresh request, "
        "window 128; `baseline` runs vLLM's own function):\n",
        md_table(["call", "source", "tile"],
                 [[r["call"], r["source"], str(tuple(r["tile"]))] for r in launches]),
    ]) + "\n"
    return Section(markdown, {"interpreter": rows, "launches": launches}, tuple(bad))


def measure(device: object, arch: str, bandwidth: float, empty_us: float) -> list[dict]:
    from dsv4_evals.bench import timing
    from dsv4_evals.bench.combine_topk_swa import harness as h
    from dsv4_evals.bench.combine_topk_swa import upstream

    up = upstream.load_kernel()
    rows = []
    for anchor in h.anchors():
        point = anchor.point()
        call = h.make_call(point, device)  # type: ignore[arg-type]
        tile = h.resolved_tile(point, arch)
        base = timing.graph_us(h.runner(call, h.BASELINE, up), reps=15)
        ours = base if tile == h.BASELINE else timing.graph_us(h.runner(call, tile, up),
                                                               reps=15)
        rows.append({"shape": anchor.name, "phase": PANELS.get(anchor.kind, anchor.kind),
                     "kind": anchor.kind, "tokens": anchor.tokens,
                     "tile": str(tile), "upstream_us": base, "table_us": ours,
                     "speedup": base / ours, "ideal_us": empty_us + h.floor_us(call, bandwidth),
                     "identical": h.outputs_equal(call, tile, up)})
        del call
    return rows


def gpu_section(ctx: ReportContext) -> Section:
    """The timing table and ``combine_topk_swa.png``."""
    machine = ctx.machine
    rows = measure(ctx.device, str(ctx.arch), float(machine["copy_bandwidth_tb_s"]) * 1e12,
                   float(machine["empty_launch_graph_us"]))
    path = Path(ctx.out) / "combine_topk_swa.png"
    plots.phases(rows, path, f"CombineTopkSwaIndices on {ctx.gpu}",
                 [("upstream_us", "o-", "vLLM 0.33.0 (fill + kernel)"),
                  ("table_us", "^-", "table"),
                  ("ideal_us", "k:", "empty launch + bytes-moved floor")],
                 xlabel="chunk tokens (one request)",
                 panel_title=lambda p: f"{TITLES[p]}, window 128")
    markdown = "\n".join([
        "\n## CombineTopkSwaIndices: vLLM 0.33.0 against the table\n",
        md_table(["call", "tile", "vLLM 0.33.0 µs", "table µs", "speed-up", "ideal µs",
                  "identical"],
                 [[r["shape"], r["tile"], f"{r['upstream_us']:.2f}", f"{r['table_us']:.2f}",
                   f"{r['speedup']:.2f}x", f"{r['ideal_us']:.2f}",
                   "yes" if r["identical"] else "NO"] for r in rows]),
        "\n![CombineTopkSwaIndices](combine_topk_swa.png)\n"]) + "\n"
    return Section(markdown, rows, tuple(r["shape"] for r in rows if not r["identical"]))
