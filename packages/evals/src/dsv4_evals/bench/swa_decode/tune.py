"""Time dsv4's SWA decode path against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is the work of ``DeepseekSparseSWAMetadataBuilder.build`` that dsv4 takes
over for a decode-only step
(:func:`~dsv4_evals.bench.swa_decode.harness.vllm_decode_path`: the ``torch.ge`` into
``is_valid_token``, the zero fill of ``decode_swa_lens``, vLLM's rows kernel, the
slices); dsv4's side is the kernel's checks and one launch per tile
(``tokens_per_program``, ``cols_per_program``, ``num_warps``). Each probe is timed on both
clocks, host µs (wall time of back-to-back calls) and GPU µs (CUDA-graph replay), and a
tile's ratio at a probe is the worse of the two; before a tile is timed at a step, its
buffers and views are checked equal to vLLM's there.

The table: boxes of decode tokens (1, 2-64, 65-512, 513-8192) at DeepSeek-V4's row
width (128), each probed over every padding kind (none, a padded tail, padding only).
A box's probes are its corners and seeded random keys
(:func:`dsv4_evals.bench.probes.box_probes`), at least :data:`MIN_PROBES`, each a step of
its own seed: a box with fewer distinct keys (T = 1) has its keys repeated with other
seeds (other contexts, replaying or not). The tile with the best worst ratio is
accepted if an independent second pass confirms it beats vLLM by ``--margin`` at every
probe on both clocks; a box no tile wins is split in two along the tokens once; a box
still lost gets no entry (vLLM's build runs there).

    python -m dsv4_evals.bench.swa_decode.tune [--json OUT.json] [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/swa_decode.toml``
(validated first), keeping every other arch's entries as they are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from pathlib import Path

import torch
import triton
from dsv4_kernels.swa_decode import launch
from dsv4_policy.kernels import swa_decode as policy

from dsv4_evals.bench import paths, probes, tables, timing
from dsv4_evals.bench.swa_decode import harness as h

TABLE = paths.table("swa_decode")
CANDIDATES: list[tuple[int, int, int]] = [
    (1, 128, 1), (2, 128, 1), (4, 128, 1), (4, 128, 2), (8, 128, 2), (8, 128, 4),
    (16, 128, 4), (16, 128, 8), (32, 128, 4), (32, 128, 8), (64, 128, 8), (2, 64, 1),
    (8, 64, 2), (16, 64, 4),
]
TOKEN_BOXES = [(1, 1), (2, 64), (65, 512), (513, 8192)]
PADDING = (min(h.PADDING_KINDS), max(h.PADDING_KINDS))
MIN_PROBES = 12
"""Steps a box is timed at, at least: a box of fewer keys (the one-token box holds three,
one per padding kind) repeats them with other seeds."""
HEADER = ("SWA decode metadata launch table. Entries are written by the tuner "
          "(python -m dsv4_evals.bench.swa_decode.tune --write) from measurements: a "
          "tile is kept only where dsv4's decode-only build (one launch writing "
          "is_valid_token, the tail of decode_swa_lens and the decode rows) beat vLLM "
          "0.33.0's decode-path ops in both host and GPU time at every probe of the "
          "entry's box, twice; a key no entry matches gets vLLM's own build unchanged.")


class Measure:
    """``measure(point, tile) -> (host µs, GPU µs)``, each step made once per point (its
    ``seed`` field is the step's seed) and checked against vLLM's side before a tile is
    timed there."""

    def __init__(self, device: torch.device, rows: h.RowsKernel) -> None:
        self.device = device
        self.rows = rows
        self.calls: dict[tuple, object] = {}
        self.checked: set[tuple] = set()
        self.count = 0

    def call(self, point: dict[str, int]) -> object:
        key = probes.key_of(point)
        if key not in self.calls:
            self.calls[key] = h.call_of(point, self.device, point.get("seed", len(self.calls)))
        return self.calls[key]

    def __call__(self, point: dict[str, int], tile: object) -> tuple[float, float]:
        call = self.call(point)
        key = (probes.key_of(point), tile)
        if tile != h.BASELINE and key not in self.checked:
            found = h.differences(call, tile, self.rows)  # type: ignore[arg-type]
            if found:
                raise SystemExit(f"tile {tile}: differs from vLLM's side at {point}: {found}")
            self.checked.add(key)
        self.count += 1
        run = h.runner(call, tile, self.rows)  # type: ignore[arg-type]
        return (h.host_us(run, self.device, calls=100, rounds=5),
                timing.graph_us(run, 10, reps=11))


def ratio(base: tuple[float, float], ours: tuple[float, float]) -> float:
    """The worse of the host and GPU ratios (vLLM / dsv4)."""
    return min(base[0] / ours[0], base[1] / ours[1])


def choose(points: list[dict[str, int]], measure: Measure, margin: float, keep: int = 3
           ) -> tuple[tuple[int, int, int] | None, float, dict[str, float]]:
    """The tile with the best worst ratio over ``points``, confirmed by a second pass."""
    base = [measure(p, h.BASELINE) for p in points]
    quick = {t: min(ratio(b, measure(p, t)) for p, b in zip(points[:2], base[:2], strict=True))
             for t in CANDIDATES}
    kept = sorted(CANDIDATES, key=lambda t: -quick[t])[:keep]
    worst: dict[tuple[int, int, int], float] = {}
    for tile in kept:
        found = math.inf
        for p, b in zip(points, base, strict=True):
            found = min(found, ratio(b, measure(p, tile)))
            if found <= margin:
                break
        worst[tile] = found
    screened = {"x".join(map(str, t)): r for t, r in worst.items()}
    for tile in sorted((t for t in worst if worst[t] > margin), key=lambda t: -worst[t]):
        again = math.inf
        for p in points:
            again = min(again, ratio(measure(p, h.BASELINE), measure(p, tile)))
            if again <= margin:
                break
        if again > margin:
            return tile, min(worst[tile], again), screened
    return None, max(worst.values(), default=-math.inf), screened


def box_points(box: dict[str, tuple[int, int]], seed: int, random_points: int
               ) -> list[dict[str, int]]:
    """The box's probe points, at least :data:`MIN_PROBES`, each with its own ``seed``:
    corners and seeded random keys, more random keys while the box has them, then the
    keys again with other seeds."""
    found = [p.point for p in probes.box_probes(box, seed=seed, random_points=random_points)]
    extra = seed * 7919
    while len(found) < MIN_PROBES and extra < seed * 7919 + 100:
        extra += 1
        for p in probes.box_probes(box, seed=extra, random_points=MIN_PROBES):
            if p.point not in found and len(found) < MIN_PROBES:
                found.append(p.point)
    keys = list(found)
    while len(found) < MIN_PROBES:
        found.append(keys[len(found) % len(keys)])
    return [{**p, "seed": seed * 1000 + i} for i, p in enumerate(found)]


def tune_box(box: dict[str, tuple[int, int]], measure: Measure, seed: int, random_points: int,
             margin: float, depth: int, log: list[dict]
             ) -> list[tuple[dict[str, tuple[int, int]], tuple[int, int, int], float, int]]:
    points = box_points(box, seed, random_points)
    started = time.perf_counter()
    tile, worst, screened = choose(points, measure, margin)
    print(f"box {box}: {tile} worst {worst:.3f}x over {len(points)} probes "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    log.append({"box": {k: list(v) for k, v in box.items()}, "tile": tile,
                "worst_ratio": worst, "probes": len(points), "screened": screened,
                "points": points})
    if tile is not None:
        return [(box, tile, worst, len(points))]
    if depth <= 0 or box["num_tokens"][0] >= box["num_tokens"][1]:
        return []
    low, high = probes.split_box(box, "num_tokens")
    return (tune_box(low, measure, seed * 2 + 1, random_points, margin, depth - 1, log)
            + tune_box(high, measure, seed * 2 + 2, random_points, margin, depth - 1, log))


def entry(arch: str, box: dict[str, tuple[int, int]], tile: tuple[int, int, int], worst: float,
          probes_count: int, machine: dict[str, str], command: str) -> policy.Entry:
    t0, t1 = box["num_tokens"]
    return policy.Entry(
        f"{arch}-w{h.INDEX_WIDTH}-t{t0}-{t1}",
        {"arch": arch, "index_width": h.INDEX_WIDTH, "num_tokens": policy.Range(t0, t1)},
        policy.Tile(*tile),
        {**machine, "probes": probes_count, "worst_speedup": f"{worst:.3f}x",
         "command": command},
    )


def ladder(measure: Measure, table: policy.Table | None, arch: str) -> list[dict[str, object]]:
    rows = []
    for shape in h.anchor_shapes():
        point = {"num_tokens": shape.num_tokens, "anchor": len(rows)}
        call = h.make_call(shape, measure.device)
        measure.calls[probes.key_of(point)] = call
        base = measure(point, h.BASELINE)
        tile = launch.BASELINE_TILE if table is None else h.resolved_tile(call, arch, table)
        row: dict[str, object] = {"step": shape.label, "vllm_host_us": base[0],
                                  "vllm_gpu_us": base[1], "tile": str(tile)}
        if tile != h.BASELINE:
            ours = measure(point, tile)
            row.update(ours_host_us=ours[0], ours_gpu_us=ours[1],
                       host_speedup=base[0] / ours[0], gpu_speedup=base[1] / ours[1])
        print(f"{shape.label:>24} vLLM host {base[0]:7.2f} GPU {base[1]:6.2f} µs"
              + (f"  {tile}: host {row['host_speedup']:.2f}x GPU {row['gpu_speedup']:.2f}x"
                 if "host_speedup" in row else "  baseline"), flush=True)
        del measure.calls[probes.key_of(point)]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path,
                        default=paths.artifacts() / "tune-swa_decode.json",
                        help="where to write every measurement and the table (default: "
                             "artifacts/tune-swa_decode.json)")
    parser.add_argument("--write", action="store_true",
                        help="replace the shipped swa_decode.toml with the tuned table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-points", type=int, default=8)
    parser.add_argument("--margin", type=float, default=1.02,
                        help="the ratio over vLLM a tile must exceed at every probe, on "
                             "both clocks")
    parser.add_argument("--split-depth", type=int, default=1)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("dsv4_evals.bench.swa_decode.tune needs a CUDA GPU (and "
                         "TRITON_INTERPRET unset)")
    device = torch.device("cuda", torch.cuda.current_device())
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm{major}{minor}"
    machine = {
        "gpu": torch.cuda.get_device_name(device),
        "date": datetime.date.today().isoformat(),
        "versions": f"torch {torch.__version__}, triton {triton.__version__}, "
                    f"CUDA {torch.version.cuda}",
    }
    started = time.perf_counter()
    rows = h.rows_kernel()
    print(f"vLLM's rows kernel: {rows.origin}", flush=True)
    launch.warmup(CANDIDATES, device)
    measure = Measure(device, rows)
    print(f"ladder (host and GPU µs per step, vLLM 0.33.0 against dsv4 at "
          f"{launch.BASELINE_TILE}):", flush=True)
    ladder_rows = ladder(measure, None, arch)
    log: list[dict] = []
    accepted = []
    for i, tokens in enumerate(TOKEN_BOXES):
        box = {"num_tokens": tokens, "padding": PADDING}
        accepted += tune_box(box, measure, args.seed * 100 + i, args.random_points,
                             args.margin, args.split_depth, log)
    command = "python -m dsv4_evals.bench.swa_decode.tune --write"
    kept = tables.other_arch_entries("swa_decode", arch)
    entries = kept + [entry(arch, box, tile, worst, n, machine, command)
                      for box, tile, worst, n in accepted]
    text = policy.render_table(entries, HEADER)
    table = policy.loads_table(text, "<tuned>")
    print("ladder with the tuned table:", flush=True)
    final = ladder(measure, table, arch)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "arch": arch, **machine, "rows_kernel": rows.origin, "seed": args.seed,
        "margin": args.margin, "candidates": [list(t) for t in CANDIDATES],
        "seconds": time.perf_counter() - started, "measurements": measure.count,
        "ladder": ladder_rows, "ladder_with_table": final, "boxes": log, "table": text},
        indent=2, default=str) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries)")
    print(f"done in {time.perf_counter() - started:.1f} s ({measure.count} timings); "
          f"measurements in {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
