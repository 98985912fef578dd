"""Tune the CombineTopkSwaIndices launch table on this GPU with the probe rules; write it.

vLLM's side is its whole ``combine_topk_swa_indices``: the ``fill_(-1)`` of the output
and its kernel on the ``(num_reqs, 256)`` grid (:mod:`.upstream`); dsv4's side is one
launch per tile. Every timing is GPU time per call under CUDA-graph replay, and every
tile's output is checked equal to vLLM's on the whole buffers before it is timed
(:class:`.harness.Measure`).

Boxes: each layer kind (C128A: ``compress_ratio`` 128, ``top_k`` its active width
128..1024; C4A: ratio 4, ``top_k`` 512; SWA-only: ratio 1, ``top_k`` 0), DeepSeek-V4's
128-token window, no image tokens, 1 to 8 requests, and chunk rows 1-1024, 1025-4096,
4097-16384, 16385-65536. A tile is accepted for a box only if it beats vLLM at EVERY
probe (each corner and at least 8 seeded random points, so 12 or more probes) in a
screening pass and again in an independent confirmation pass
(:func:`dsv4_evals.bench.probes.choose_tile`); a box no tile wins is split along the rows
(up to ``--split-depth`` times); a box still lost gets no entry, so vLLM's function runs
there. Each entry records ``probes`` and ``worst_speedup``.

    python -m dsv4_evals.bench.combine_topk_swa.tune [--seed 0] [--write] [--out JSON]

``--write`` replaces ``dsv4_policy/tables/combine_topk_swa.toml`` (validated first).
Needs vLLM's kernel: ``.upstream/combine_topk_swa/`` (``python -m
dsv4_evals.bench.combine_topk_swa.upstream``) or ``.vllm-sources/`` at the root.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from dsv4_kernels.combine_topk_swa import launch
from dsv4_policy.kernels import combine_topk_swa as policy

from dsv4_evals.bench import paths, probes, tables, tuning
from dsv4_evals.bench.combine_topk_swa import harness as h
from dsv4_evals.bench.combine_topk_swa import upstream

TOKEN_BOXES = [(1, 1024), (1025, 4096), (4097, 16384), (16385, 65536)]
CANDIDATES: list[tuple[int, int, int]] = [
    (1, 1024, 4), (1, 512, 4), (1, 256, 2), (1, 128, 1), (2, 512, 4), (2, 256, 2),
    (2, 128, 1), (4, 256, 4), (4, 128, 2), (4, 512, 8), (8, 128, 4), (8, 256, 8),
    (16, 128, 8), (2, 1024, 8), (4, 64, 1), (8, 64, 2),
]
TABLE = paths.table("combine_topk_swa")
COMMAND = "python -m dsv4_evals.bench.combine_topk_swa.tune --write"
HEADER = ("CombineTopkSwaIndices launch table. Entries are written by the tuner "
          f"({COMMAND}) from measurements: a tile is kept only where it beat vLLM 0.33.0's "
          "combine_topk_swa_indices (its fill included) at every probe of the entry's box, "
          "twice; a key no entry matches gets vLLM's own function unchanged.")


def kind_box(kind: str, lo: int, hi: int) -> dict[str, tuple[int, int]]:
    ratio = h.KINDS[kind]
    k = (128, 1024) if kind == "c128a" else (h.top_k(kind, 0),) * 2
    return {"compress_ratio": (ratio, ratio), "top_k": k, "num_reqs": (1, h.MAX_REQS),
            "num_tokens": (lo, hi)}


class ValidMeasure:
    """The measure over points made calls vLLM makes (:func:`.harness.valid_point`)."""

    def __init__(self, measure: h.Measure) -> None:
        self.measure = measure

    def __call__(self, point: dict[str, int], tile: object) -> float:
        return self.measure(h.valid_point(point), tile)


def tune_box(box: dict[str, tuple[int, int]], measure: ValidMeasure, seed: int, depth: int,
             random_points: int, log: list[dict]) -> list[tuple[dict, probes.Verdict]]:
    """Accepted ``(box, verdict)`` pairs covering parts of ``box``."""
    found = probes.box_probes(box, seed=seed, random_points=random_points)
    started = time.perf_counter()
    verdict = probes.choose_tile(found, CANDIDATES, h.BASELINE, measure, log=print)
    print(f"box {box}: {verdict.tile} worst {verdict.worst_ratio:.3f}x over "
          f"{verdict.probes} probes ({time.perf_counter() - started:.1f} s)", flush=True)
    log.append({"box": {k: list(v) for k, v in box.items()}, "tile": verdict.tile,
                "worst_ratio": verdict.worst_ratio, "probes": verdict.probes,
                "screened": {str(k): v for k, v in verdict.screened.items()},
                "losing_probes": [p.label() for p in verdict.losing_probes]})
    measure.measure.forget()
    if verdict.tile is not None:
        return [(box, verdict)]
    lo, hi = box["num_tokens"]
    if depth <= 0 or hi - lo < 2:
        return []
    low, high = probes.split_box(box, "num_tokens")
    return (tune_box(low, measure, seed * 2 + 1, depth - 1, random_points, log)
            + tune_box(high, measure, seed * 2 + 2, depth - 1, random_points, log))


def entry(arch: str, box: dict[str, tuple[int, int]], verdict: probes.Verdict,
          machine: dict[str, str]) -> policy.Entry:
    """The table entry for an accepted box."""
    ratio = box["compress_ratio"][0]
    kind = h.kind_of(ratio)
    lo, hi = box["num_tokens"]
    k0, k1 = box["top_k"]
    tpp, cpp, warps = verdict.tile  # type: ignore[misc]
    return policy.Entry(
        f"{arch}-{kind}-t{lo}-{hi}",
        {"arch": arch, "compress_ratio": ratio,
         "top_k": policy.Range(k0, k1) if k0 != k1 else k0, "window_size": h.WINDOW,
         "max_image_tokens": 0, "has_image": 0, "num_reqs": policy.Range(1, h.MAX_REQS),
         "num_tokens": policy.Range(lo, hi)},
        policy.Tile(tpp, cpp, warps),
        {**machine, "probes": verdict.probes, "worst_speedup": f"{verdict.worst_ratio:.3f}x",
         "command": COMMAND},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-points", type=int, default=8)
    parser.add_argument("--split-depth", type=int, default=1)
    parser.add_argument("--write", action="store_true",
                        help="replace the shipped combine_topk_swa.toml")
    parser.add_argument("--out", type=Path,
                        default=paths.artifacts() / "tune_combine_topk_swa.json",
                        help="every box's verdict and the table, as JSON")
    args = parser.parse_args(argv)
    if args.random_points < 8:
        parser.error("--random-points: the probe rules need at least 8 random keys per box")
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("dsv4_evals.bench.combine_topk_swa.tune needs a CUDA GPU (and "
                         "TRITON_INTERPRET unset)")
    device = torch.device("cuda", torch.cuda.current_device())
    arch, machine = tuning.this_gpu(device)
    started = time.perf_counter()
    built = launch.warmup(CANDIDATES, device)
    print(f"warm-up: {built} binaries in {time.perf_counter() - started:.1f} s", flush=True)
    measure = ValidMeasure(h.Measure(device, upstream.load_kernel(), seed=args.seed))
    log: list[dict] = []
    accepted = []
    for i, kind in enumerate(h.KINDS):
        for j, (lo, hi) in enumerate(TOKEN_BOXES):
            accepted += tune_box(kind_box(kind, lo, hi), measure, args.seed * 100 + 10 * i + j,
                                 args.split_depth, args.random_points, log)
    entries = [entry(arch, box, verdict, machine) for box, verdict in accepted]
    # Only this GPU was measured: every other arch's entries stay as they are.
    text = policy.render_table(tables.other_arch_entries("combine_topk_swa", arch) + entries,
                               HEADER)
    table = policy.loads_table(text)
    ladder = []
    for anchor in h.anchors():
        point = anchor.point()
        tile = h.resolved_tile(point, arch, table)
        base = measure.measure(point, h.BASELINE)
        ours = base if tile == h.BASELINE else measure.measure(point, tile)
        ladder.append({"shape": anchor.name, "tile": str(tile), "upstream_us": base,
                       "table_us": ours, "speedup": base / ours})
        print(f"table at {anchor.name:>12}: {tile!s:>14} {base:7.2f} -> {ours:7.2f} µs "
              f"({base / ours:.2f}x)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"arch": arch, **machine, "seed": args.seed,
                                    "seconds": time.perf_counter() - started, "boxes": log,
                                    "ladder": ladder, "table": text}, indent=1) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries)")
    print(f"tuned in {time.perf_counter() - started:.1f} s; measurements in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
