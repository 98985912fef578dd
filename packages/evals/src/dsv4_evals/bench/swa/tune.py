"""Tune the SWA launch table on this GPU with the probe rules, and write it.

For each box of SWA calls (a range of ``num_tokens``, decode and prefill rows, SWA block
sizes 32..256, no, some or only padding tokens; DeepSeek-V4's 128-token window, text-only
rows), a tile is accepted only
if it beats vLLM 0.33.0's own launch at EVERY probe of the box (each corner, at least 8
seeded random points) in a screening pass and again in an independent confirmation
pass (:func:`probes.choose_tile`). Where no tile wins a whole box, the box is split in
two along ``num_tokens`` (up to ``--split-depth`` times); a box no tile wins gets no
entry, so those calls keep vLLM's launch. Each entry records ``probes`` and
``worst_speedup`` (the smallest baseline/tile ratio over its probes and both passes).

    python -m dsv4_evals.bench.swa.tune [--seed 0] [--write] [--out artifacts/tune_swa.json]

``--write`` replaces ``dsv4_policy/tables/swa.toml`` (after validation). Run from
``packages/evals`` on the GPU, after ``python -m dsv4_evals.bench.swa.upstream``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from dsv4_policy.kernels import swa as policy

from dsv4_evals.bench import paths, probes, tables, tuning
from dsv4_evals.bench.swa import harness as h
from dsv4_evals.bench.swa import upstream as swa_upstream

BOXES = [(1, 1), (2, 16), (17, 128), (129, 1024), (1025, 4096), (4097, 16384),
         (16385, 65536)]
BLOCK_SIZES = (32, 256)
CANDIDATES = [
    (1, 128, 1), (1, 128, 2), (2, 128, 1), (2, 128, 2), (4, 128, 2), (4, 128, 4),
    (8, 128, 2), (8, 128, 4), (8, 128, 8), (16, 128, 4), (16, 128, 8), (32, 128, 4),
    (32, 128, 8), (64, 128, 8), (16, 64, 2), (32, 64, 4),
]
TABLE = paths.table("swa")
HEADER = ("SWA indices-and-lens launch table. Entries are written by the SWA tuner "
          "(dsv4_evals.bench.swa.tune) from measurements: a tile is kept only "
          "where it beat vLLM 0.33.0's launch at every probe of the entry's box, twice; a "
          "key no entry matches gets the upstream launch unchanged.")


def tune_box(box: dict[str, tuple[int, int]], measure: h.Measure, seed: int, depth: int,
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
    lo, hi = box["num_tokens"]
    b0, b1 = box["block_size"]
    tpp, cpp, warps = verdict.tile  # type: ignore[misc]
    return policy.Entry(
        f"{arch}-w{h.WINDOW}-t{lo}-{hi}",
        {"arch": arch, "window_size": h.WINDOW, "index_width": h.INDEX_WIDTH, "has_image": 0,
         "block_size": policy.Range(b0, b1), "num_tokens": policy.Range(lo, hi)},
        policy.Tile(tpp, cpp, warps),
        {**machine, "probes": verdict.probes, "worst_speedup": f"{verdict.worst_ratio:.3f}x",
         "command": "python -m dsv4_evals.bench.swa.tune --write"},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-points", type=int, default=8)
    parser.add_argument("--split-depth", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="replace the shipped swa.toml")
    parser.add_argument("--out", type=Path, default=paths.artifacts() / "tune_swa.json",
                        help="every box's verdict and the table, as JSON")
    args = parser.parse_args(argv)
    if args.random_points < 8:
        parser.error("--random-points: the probe rules need at least 8 random keys per box")
    if not torch.cuda.is_available():
        raise SystemExit("dsv4_evals.bench.swa.tune needs a CUDA GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    arch, machine = tuning.this_gpu(device)
    measure = h.Measure(device, swa_upstream.load_kernel(), seed=args.seed)
    started = time.perf_counter()
    log: list[dict] = []
    accepted = []
    for i, (lo, hi) in enumerate(BOXES):
        box = {"num_tokens": (lo, hi), "prefill": (0, 1), "block_size": BLOCK_SIZES,
               "padding": (min(h.PADDING_KINDS), max(h.PADDING_KINDS))}
        accepted += tune_box(box, measure, args.seed * 100 + i, args.split_depth,
                             args.random_points, log)
    entries = [entry(arch, box, verdict, machine) for box, verdict in accepted]
    # Every accepted tile writes exactly what vLLM's launch writes, at its box's corners.
    for box, verdict in accepted:
        for point in probes.corners(box):
            if not h.outputs_equal(measure.call(point), verdict.tile, measure.upstream):
                raise SystemExit(f"tile {verdict.tile}: outputs differ from vLLM's at {point}")
    # Only this GPU was measured: every other arch's entries stay as they are.
    text = policy.render_table(tables.other_arch_entries("swa", arch) + entries, HEADER)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"arch": arch, **machine, "seed": args.seed,
                                    "seconds": time.perf_counter() - started, "boxes": log,
                                    "table": text}, indent=2) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries)")
    print(f"tuned in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
