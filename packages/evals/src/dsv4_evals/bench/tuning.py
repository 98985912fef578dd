"""What the launch-table tuners share: this GPU's facts, and the whole run of a tuner
that times every tile on two clocks.

:func:`this_gpu` is the arch and the machine facts (GPU name, date, versions) every
tuner writes into its entries' provenance.

The rest is a tuner whose baseline and tiles are each timed on two clocks, host µs (wall
time of back-to-back calls) and GPU µs (CUDA-graph replay), a tile's ratio at a probe
being the worse of the two (:func:`ratio`). A :class:`Tuner` says what is timed (its
candidates, boxes, probe points, anchor steps, entries and table format); this module
knows no kernel:

- :class:`Measure` makes each probe's step once, checks a tile against the baseline
  there before timing it, and times it on both clocks;
- :func:`choose` screens every candidate at a box's first two probes, times the best
  ``keep`` at every probe and confirms the best of those by an independent second pass;
- :func:`tune_box` chooses a box's tile and splits a box no tile wins (``--split-depth``);
- :func:`ladder` times the tuner's anchor steps, with the reference tile or a table;
- :func:`main` is the command line: the ladder, every box, the table (every other arch's
  shipped entries kept), the ladder again with it, the JSON file, ``--write``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton

from dsv4_evals.bench import paths, probes, tables, timing

Box = dict[str, tuple[int, int]]
Point = dict[str, int]
Clocks = tuple[float, float]
"""(host µs, GPU µs) of one call."""
Accepted = tuple[Box, Any, float, int]
"""An accepted box: (box, tile, worst ratio, probes)."""


def this_gpu(device: torch.device) -> tuple[str, dict[str, str]]:
    """``(arch, machine)``: ``sm<major><minor>`` and the facts an entry records (GPU name,
    today's date, the torch, Triton and CUDA versions)."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}", {
        "gpu": torch.cuda.get_device_name(device),
        "date": datetime.date.today().isoformat(),
        "versions": f"torch {torch.__version__}, triton {triton.__version__}, "
                    f"CUDA {torch.version.cuda}",
    }


# --------------------------------------------------------------------------- two clocks
def ratio(base: Clocks, ours: Clocks) -> float:
    """The worse of the host and GPU ratios (baseline / tile)."""
    return min(base[0] / ours[0], base[1] / ours[1])


class Measure:
    """``measure(point, tile) -> (host µs, GPU µs)``, each step made once per point and
    checked against the baseline before a tile is timed there.

    A point's step is ``make(point, device, seed)``, ``seed`` being the point's ``seed``
    field, else how many steps were made before it. A kernel's subclass says how a call
    runs (:meth:`runner`) and what makes a tile's result wrong (:meth:`problem`);
    ``host_us(run, device, calls=..., rounds=...)`` is the host clock."""

    def __init__(self, device: torch.device, baseline: Hashable,
                 make: Callable[[Point, torch.device, int], object],
                 host_us: Callable[..., float]) -> None:
        self.device = device
        self.baseline = baseline
        self.make = make
        self.host_us = host_us
        self.calls: dict[tuple, object] = {}
        self.checked: set[tuple] = set()
        self.count = 0

    def runner(self, call: object, tile: object) -> Callable[[], object]:
        """One call: the baseline's side (``tile == baseline``) or dsv4's with ``tile``."""
        raise NotImplementedError

    def problem(self, point: Point, call: object, tile: object) -> str | None:
        """Why ``tile`` is wrong at this step (the message the run stops with), or None."""
        raise NotImplementedError

    def call(self, point: Point) -> object:
        key = probes.key_of(point)
        if key not in self.calls:
            self.calls[key] = self.make(point, self.device, point.get("seed", len(self.calls)))
        return self.calls[key]

    def __call__(self, point: Point, tile: object) -> Clocks:
        call = self.call(point)
        key = (probes.key_of(point), tile)
        if tile != self.baseline and key not in self.checked:
            found = self.problem(point, call, tile)
            if found:
                raise SystemExit(found)
            self.checked.add(key)
        self.count += 1
        run = self.runner(call, tile)
        return (self.host_us(run, self.device, calls=100, rounds=5),
                timing.graph_us(run, 10, reps=11))


def tile_label(tile: Iterable[object]) -> str:
    return "x".join(map(str, tile))


def choose(points: Sequence[Point], measure: Callable[[Point, Any], Clocks],
           candidates: Sequence[Any], baseline: Hashable, margin: float, keep: int = 3
           ) -> tuple[Any | None, float, dict[str, float]]:
    """``(tile, worst ratio, screened)``: the tile with the best worst ratio over
    ``points``, confirmed by a second pass, or None (and the best worst ratio seen).

    Every candidate is timed at the first two points; the ``keep`` best at every point
    (each stopping at its first ratio not above ``margin``); those left are confirmed in
    that order by timing the baseline and the tile again at every point. ``screened``
    is the worst ratio of each kept tile in the first pass."""
    base = [measure(p, baseline) for p in points]
    quick = {t: min(ratio(b, measure(p, t)) for p, b in zip(points[:2], base[:2], strict=True))
             for t in candidates}
    kept = sorted(candidates, key=lambda t: -quick[t])[:keep]
    worst: dict[Any, float] = {}
    for tile in kept:
        found = math.inf
        for p, b in zip(points, base, strict=True):
            found = min(found, ratio(b, measure(p, tile)))
            if found <= margin:
                break
        worst[tile] = found
    screened = {tile_label(t): r for t, r in worst.items()}
    for tile in sorted((t for t in worst if worst[t] > margin), key=lambda t: -worst[t]):
        again = math.inf
        for p in points:
            again = min(again, ratio(measure(p, baseline), measure(p, tile)))
            if again <= margin:
                break
        if again > margin:
            return tile, min(worst[tile], again), screened
    return None, max(worst.values(), default=-math.inf), screened


def topped_up(box: Box, seed: int, random_points: int, min_probes: int) -> list[Point]:
    """The box's corners and ``random_points`` seeded random keys
    (:func:`probes.box_probes`), then keys drawn with other seeds, while the box holds
    more, up to ``min_probes`` keys (fewer where the box holds fewer)."""
    found = [p.point for p in probes.box_probes(box, seed=seed, random_points=random_points)]
    extra = seed * 7919
    while len(found) < min_probes and extra < seed * 7919 + 100:
        extra += 1
        for p in probes.box_probes(box, seed=extra, random_points=min_probes):
            if p.point not in found and len(found) < min_probes:
                found.append(p.point)
    return found


# --------------------------------------------------------------------------- the tuner
@dataclass(frozen=True)
class Tuner:
    """What a two-clock tuner times, and how it writes its table."""

    kernel: str
    """The bench folder's (and the table's) name: ``dsv4_evals.bench.<kernel>.tune``."""
    description: str
    """The command line's description."""
    candidates: Sequence[Any]
    baseline: Hashable
    """The tile standing for the baseline's own side."""
    boxes: Sequence[Box]
    """The boxes tuned, in order; box ``i`` is tuned with seed ``--seed * 100 + i``."""
    box_points: Callable[[Box, int, int], list[Point]]
    """``(box, seed, random_points) -> points``."""
    prepare: Callable[[torch.device], tuple[Measure, dict[str, object]]]
    """Warms the candidates up and makes the measure; also what the JSON file records of
    it (after the machine facts)."""
    anchors: Callable[[torch.device], Iterable[tuple[str, Point, object]]]
    """The ladder's steps: ``(label, point, call)``."""
    reference: Any
    """The tile the first ladder times against the baseline."""
    reference_label: str
    """How the first ladder's heading names :attr:`reference`."""
    resolve: Callable[[Any, str, Any], Any]
    """``(call, arch, table) -> tile`` (the baseline where no entry matches)."""
    entry: Callable[[str, Box, Any, float, int, dict[str, str], str], Any]
    """``(arch, box, tile, worst, probes, machine, command) -> entry``."""
    render: Callable[[list[Any], str], str]
    """``(entries, header) -> table text``."""
    load: Callable[[str, str], Any]
    """``(text, source) -> table``, validating it."""
    header: str
    interpreting: Callable[[], bool]
    """Whether Triton runs in its interpreter (the tuner then refuses to run)."""
    split_along: str = "num_tokens"
    """The field a box no tile wins is split along."""
    tied: tuple[str, ...] = field(default=())
    """Fields whose range each half of a split takes from :attr:`split_along`'s."""

    @property
    def module(self) -> str:
        return f"dsv4_evals.bench.{self.kernel}.tune"


def split(tuner: Tuner, box: Box) -> tuple[Box, Box]:
    """Two halves of ``box`` along :attr:`Tuner.split_along`, its tied fields following."""
    low, high = probes.split_box(box, tuner.split_along)
    for half in (low, high):
        for name in tuner.tied:
            half[name] = half[tuner.split_along]
    return low, high


def tune_box(tuner: Tuner, box: Box, measure: Measure, seed: int, random_points: int,
             margin: float, depth: int, log: list[dict]) -> list[Accepted]:
    """Accepted ``(box, tile, worst, probes)`` covering parts of ``box``: its own tile,
    else (``depth`` splits left) its halves', else nothing."""
    points = tuner.box_points(box, seed, random_points)
    started = time.perf_counter()
    tile, worst, screened = choose(points, measure, tuner.candidates, tuner.baseline, margin)
    print(f"box {box}: {tile} worst {worst:.3f}x over {len(points)} probes "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    log.append({"box": {k: list(v) for k, v in box.items()}, "tile": tile,
                "worst_ratio": worst, "probes": len(points), "screened": screened,
                "points": points})
    if tile is not None:
        return [(box, tile, worst, len(points))]
    lo, hi = box[tuner.split_along]
    if depth <= 0 or lo >= hi:
        return []
    low, high = split(tuner, box)
    return (tune_box(tuner, low, measure, seed * 2 + 1, random_points, margin, depth - 1, log)
            + tune_box(tuner, high, measure, seed * 2 + 2, random_points, margin, depth - 1,
                       log))


def ladder(tuner: Tuner, measure: Measure, table: object | None, arch: str
           ) -> list[dict[str, object]]:
    """The anchor steps: the baseline, and :attr:`Tuner.reference` (or, with ``table``,
    the tile it resolves), on both clocks; each step made for this row and dropped after."""
    rows = []
    for label, point, call in tuner.anchors(measure.device):
        measure.calls[probes.key_of(point)] = call
        base = measure(point, tuner.baseline)
        tile = tuner.reference if table is None else tuner.resolve(call, arch, table)
        row: dict[str, object] = {"step": label, "vllm_host_us": base[0],
                                  "vllm_gpu_us": base[1], "tile": str(tile)}
        if tile != tuner.baseline:
            ours = measure(point, tile)
            row.update(ours_host_us=ours[0], ours_gpu_us=ours[1],
                       host_speedup=base[0] / ours[0], gpu_speedup=base[1] / ours[1])
        print(f"{label:>24} vLLM host {base[0]:7.2f} GPU {base[1]:6.2f} µs"
              + (f"  {tile}: host {row['host_speedup']:.2f}x GPU {row['gpu_speedup']:.2f}x"
                 if "host_speedup" in row else "  baseline"), flush=True)
        del measure.calls[probes.key_of(point)]
        rows.append(row)
    return rows


def parser(tuner: Tuner) -> argparse.ArgumentParser:
    name = tuner.kernel
    found = argparse.ArgumentParser(description=tuner.description)
    found.add_argument("--json", type=Path, default=paths.artifacts() / f"tune-{name}.json",
                       help="where to write every measurement and the table (default: "
                            f"artifacts/tune-{name}.json)")
    found.add_argument("--write", action="store_true",
                       help=f"replace the shipped {name}.toml with the tuned table")
    found.add_argument("--seed", type=int, default=0)
    found.add_argument("--random-points", type=int, default=8)
    found.add_argument("--margin", type=float, default=1.02,
                       help="the ratio over vLLM a tile must exceed at every probe, on "
                            "both clocks")
    found.add_argument("--split-depth", type=int, default=1)
    return found


def main(tuner: Tuner, argv: list[str] | None = None) -> int:
    args = parser(tuner).parse_args(argv)
    if not torch.cuda.is_available() or tuner.interpreting():
        raise SystemExit(f"{tuner.module} needs a CUDA GPU (and TRITON_INTERPRET unset)")
    device = torch.device("cuda", torch.cuda.current_device())
    arch, machine = this_gpu(device)
    started = time.perf_counter()
    measure, facts = tuner.prepare(device)
    print(f"ladder (host and GPU µs per step, vLLM 0.33.0 against dsv4 at "
          f"{tuner.reference_label}):", flush=True)
    ladder_rows = ladder(tuner, measure, None, arch)
    log: list[dict] = []
    accepted: list[Accepted] = []
    for i, box in enumerate(tuner.boxes):
        accepted += tune_box(tuner, dict(box), measure, args.seed * 100 + i,
                             args.random_points, args.margin, args.split_depth, log)
    command = f"python -m {tuner.module} --write"
    kept = tables.other_arch_entries(tuner.kernel, arch)
    entries = kept + [tuner.entry(arch, box, tile, worst, n, machine, command)
                      for box, tile, worst, n in accepted]
    text = tuner.render(entries, tuner.header)
    table = tuner.load(text, "<tuned>")
    print("ladder with the tuned table:", flush=True)
    final = ladder(tuner, measure, table, arch)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "arch": arch, **machine, **facts, "seed": args.seed, "margin": args.margin,
        "candidates": [list(t) for t in tuner.candidates],
        "seconds": time.perf_counter() - started, "measurements": measure.count,
        "ladder": ladder_rows, "ladder_with_table": final, "boxes": log, "table": text},
        indent=2, default=str) + "\n")
    print(text)
    if args.write:
        written = paths.table(tuner.kernel)
        written.write_text(text)
        print(f"wrote {written} ({len(entries)} entries)")
    print(f"done in {time.perf_counter() - started:.1f} s ({measure.count} timings); "
          f"measurements in {args.json}")
    return 0
