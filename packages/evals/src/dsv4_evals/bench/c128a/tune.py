"""Tile sweep (``nox -s tune``): find, per box of keys, a tile that beats the baseline
launch at every probe of the box, and write those boxes into the C128A launch table.

A box is (phase, active width, token ranges): its ``max_seq_len`` range is the width's
whole class, and its token ranges are buckets (mixed boxes bound both the decode and
the prefill count). For each box the probes of :mod:`dsv4_evals.bench.probes` are timed (CUDA-graph
replay medians, GPU time, as a captured model step sees it): every corner (min and max
of ``max_seq_len`` and of each token count, at a 1M deployment), for mixed boxes the
extreme mixes, and ``--random-probes`` seeded random keys (``max_model_len`` drawn too).
The baseline is timed once per probe; candidate tiles are screened on the corners and
extremes first, the best survivors on the random keys, and the best of those is
confirmed by a second pass over every probe. A tile is accepted only when it is faster
than the baseline by ``--margin`` at every probe in both passes, and leaves buffers
bit-identical to the baseline's at the box's first and last corner (its smallest and
largest batch).

Where no tile wins everywhere, the box is split in two along its widest token range and
each half is tried again (``--max-splits`` deep); a box that still has no winner gets no
entry, so its keys keep the upstream launch. Adjacent boxes with the same tile merge.
Each entry records ``probes`` (how many keys were timed) and ``worst_speedup`` (the
smallest baseline/tile ratio over all of them and both passes). Entries for other GPUs
are kept as they are; this GPU's entries are replaced.
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from dsv4_policy.kernels import c128a as policy

from dsv4_evals.bench import paths, probes, timing
from dsv4_evals.bench.c128a import harness

TABLE = paths.table("c128a")
WIDTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
TOKEN_BUCKETS = ((1, 8), (9, 128), (129, 1024), (1025, 8191), (8192, harness.MAX_PROBE_TOKENS))
"""The last bucket starts at 8192: the long-prefill floor target covers T >= 8192."""
MIXED_DECODE_BUCKETS = ((1, 64), (65, 1024))
BASELINE = (1, 1024, 4, False)
# (tokens_per_program, cols_per_program, num_warps, split_width)
CANDIDATES = (
    (1, 256, 2, True),
    (1, 512, 4, True),
    (1, 1024, 4, True),
    (1, 2048, 8, True),
    (2, 512, 4, True),
    (4, 256, 4, True),
    (4, 256, 4, False),
    (4, 512, 8, True),
    (8, 128, 4, True),
    (8, 256, 4, False),
    (8, 256, 8, True),
    (16, 128, 4, True),
    (16, 128, 4, False),
    (16, 256, 8, False),
    (32, 128, 8, False),
    (32, 128, 8, True),
    (16, 256, 8, True),
    (64, 128, 8, False),
    (64, 128, 16, False),
    (32, 256, 16, False),
    # Long prefill of narrow rows (widths 128 and 256): many rows per program, few warps.
    (16, 128, 2, False),
    (16, 128, 2, True),
    (32, 128, 1, False),
    (32, 128, 1, True),
    (64, 128, 2, False),
    (64, 128, 2, True),
)


@dataclass
class Box:
    """Keys of one phase and width, with token ranges; ``bounds`` is the probe box."""

    phase: str
    width: int
    bounds: dict[str, tuple[int, int]]
    depth: int = 0

    @property
    def label(self) -> str:
        d, p = self.bounds["num_decode_tokens"], self.bounds["num_prefill_tokens"]
        if self.phase == "decode":
            return f"decode-w{self.width}-t{d[0]}-{d[1]}"
        if self.phase == "prefill":
            return f"prefill-w{self.width}-t{p[0]}-{p[1]}"
        return f"mixed-w{self.width}-d{d[0]}-{d[1]}-p{p[0]}-{p[1]}"

    def token_fields(self) -> list[str]:
        return [f for f in ("num_decode_tokens", "num_prefill_tokens")
                if self.bounds[f][0] < self.bounds[f][1]]


@dataclass
class Outcome:
    box: Box
    tile: tuple | None
    worst: float
    probes: int
    seconds: float
    notes: list[str] = field(default_factory=list)


def boxes(phases: set[str]) -> list[Box]:
    """Every box, in the order a time budget should spend itself: prefill (the long
    prefill floor rests on it), then decode and mixed, widest (longest context) first."""
    found = []
    if "prefill" in phases:
        found += [Box("prefill", w, {"max_seq_len": harness.seq_len_class(w),
                                     "num_decode_tokens": (0, 0), "num_prefill_tokens": t})
                  for t in reversed(TOKEN_BUCKETS) for w in WIDTHS]
    if "decode" in phases:
        found += [Box("decode", w, {"max_seq_len": harness.seq_len_class(w),
                                    "num_decode_tokens": t, "num_prefill_tokens": (0, 0)})
                  for w in reversed(WIDTHS) for t in TOKEN_BUCKETS]
    if "mixed" in phases:
        found += [Box("mixed", w, {"max_seq_len": harness.seq_len_class(w),
                                   "num_decode_tokens": d, "num_prefill_tokens": t})
                  for w in reversed(WIDTHS) for t in TOKEN_BUCKETS for d in MIXED_DECODE_BUCKETS]
    return found


def probe_box(box: Box) -> dict[str, tuple[int, int]]:
    b = dict(box.bounds)
    b["max_model_len"] = (max(b["max_seq_len"][1], 1),
                          max(b["max_seq_len"][1], harness.MAX_PROBE_MODEL_LEN))
    return b


def identical_at(point: dict[str, int], tile: tuple, device: torch.device) -> bool:
    shape = harness.shape_of(point)
    width = policy.active_width(shape.key("sm90"))
    return harness.outputs_equal(shape, device, harness.LaunchSpec("b", width, *BASELINE, "b"),
                                 harness.LaunchSpec("c", width, *tile, "c"))


def tune_box(box: Box, timer: harness.Timer, device: torch.device, seed: int,
             random_probes: int, margin: float) -> Outcome:
    t0 = time.perf_counter()
    found = probes.box_probes(probe_box(box), seed=seed, random_points=random_probes,
                              extremes=harness.mixed_extremes if box.phase == "mixed" else None,
                              corner_fields=harness.CORNER_FIELDS)
    verdict = probes.choose_tile(found, CANDIDATES, BASELINE, timer, margin=margin,
                                 log=lambda m: print(m, flush=True))
    notes = []
    tile = verdict.tile
    if tile is not None:
        corners = [p.point for p in found if p.kind == "corner"]
        if not all(identical_at(p, tile, device) for p in (corners[0], corners[-1])):
            notes.append(f"{tile} changed the outputs")
            tile = None
    timer.forget()
    return Outcome(box, tile, verdict.worst_ratio, verdict.probes, time.perf_counter() - t0,
                   notes)


def tune(todo: list[Box], timer: harness.Timer, device: torch.device, *, seed: int,
         random_probes: int, margin: float, max_splits: int, budget_s: float) -> list[Outcome]:
    results: list[Outcome] = []
    queue = list(todo)
    start = time.perf_counter()
    done = 0
    while queue:
        box = queue.pop(0)
        if time.perf_counter() - start > budget_s:
            print(f"[budget] {box.label}: not tuned (over --budget-s {budget_s:.0f}); keys keep "
                  "the baseline", flush=True)
            results.append(Outcome(box, None, math.nan, 0, 0.0, ["over budget"]))
            continue
        out = tune_box(box, timer, device, seed + done, random_probes, margin)
        done += 1
        tile = "baseline (no winner)" if out.tile is None else str(out.tile)
        print(f"[{done:3d}, {len(queue):3d} left, {time.perf_counter() - start:5.0f} s] "
              f"{box.label:<34} {tile:<22} worst {out.worst:.3f}x over {out.probes} probes "
              f"({out.seconds:.1f} s){' ' + '; '.join(out.notes) if out.notes else ''}",
              flush=True)
        fields = box.token_fields()
        if out.tile is None and box.depth < max_splits and fields and not out.notes:
            name = max(fields, key=lambda f: math.log(box.bounds[f][1] + 1)
                       - math.log(box.bounds[f][0] + 1))
            low, high = probes.split_box(box.bounds, name)
            queue[0:0] = [Box(box.phase, box.width, low, box.depth + 1),
                          Box(box.phase, box.width, high, box.depth + 1)]
            continue
        results.append(out)
    return results


def merge(won: list[Outcome]) -> list[Outcome]:
    """Join boxes of one phase and width that chose the same tile and touch along one
    token range (the union is a box again)."""
    won = sorted(won, key=lambda o: (o.box.phase, o.box.width,
                                     o.box.bounds["num_decode_tokens"],
                                     o.box.bounds["num_prefill_tokens"]))
    merged: list[Outcome] = []
    for o in won:
        prev = merged[-1] if merged else None
        if prev and prev.box.phase == o.box.phase and prev.box.width == o.box.width \
                and prev.tile == o.tile:
            a, b = prev.box.bounds, o.box.bounds
            for f, other in (("num_decode_tokens", "num_prefill_tokens"),
                             ("num_prefill_tokens", "num_decode_tokens")):
                if a[other] == b[other] and a[f][1] + 1 == b[f][0]:
                    bounds = {**a, f: (a[f][0], b[f][1])}
                    merged[-1] = Outcome(Box(o.box.phase, o.box.width, bounds), o.tile,
                                         min(prev.worst, o.worst), prev.probes + o.probes,
                                         prev.seconds + o.seconds)
                    break
            else:
                merged.append(o)
        else:
            merged.append(o)
    return merged


def to_entries(outcomes: list[Outcome], arch: str, gpu: str, versions: str,
               seed: int) -> list[policy.Entry]:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    entries = []
    for o in outcomes:
        b = o.box.bounds
        tpp, cpp, warps, split = o.tile  # type: ignore[misc]
        entries.append(policy.Entry(
            id=f"{arch}-{o.box.label}",
            match={"arch": [arch], "compress_ratio": [harness.COMPRESS_RATIO],
                   **{f: policy.Range(*b[f]) for f in harness.CORNER_FIELDS}},
            config=policy.Tile(tpp, cpp, warps, split),
            provenance={"gpu": gpu, "date": today, "versions": versions,
                        "probes": o.probes, "worst_speedup": f"{o.worst:.2f}x",
                        "probe_seed": seed, "command": "nox -s tune"},
        ))
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, default=1.02,
                        help="speed-up over the baseline needed at every probe, both passes")
    parser.add_argument("--table", type=Path, default=TABLE, help="table file to update")
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("--write", action="store_true",
                        help="write the table (the default; every kernel's tuner takes it)")
    parser.add_argument("--phases", default="decode,prefill,mixed")
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--seed", type=int, default=20261201, help="seed of the random probes")
    parser.add_argument("--random-probes", type=int, default=8)
    parser.add_argument("--max-splits", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=3000.0,
                        help="stop tuning new boxes after this many seconds (they get no entry)")
    args = parser.parse_args(argv)
    if args.random_probes < 8:
        parser.error("--random-probes: at least 8 random keys per box")
    if not torch.cuda.is_available():
        print("error: no CUDA device visible; the tuning sweep measures on a GPU",
              file=sys.stderr)
        return 2
    device = torch.device("cuda")
    info = timing.gpu_info(device)
    arch, gpu = str(info["arch"]), str(info["gpu"])
    versions = f"torch {info['torch']}, triton {info['triton']}, CUDA {info['cuda']}"
    widths = {int(w) for w in args.widths.split(",")}
    todo = [b for b in boxes(set(args.phases.split(","))) if b.width in widths]
    t0 = time.perf_counter()
    from dsv4_kernels.c128a import warmup

    warmup([BASELINE[:3], *(c[:3] for c in CANDIDATES)], device)
    print(f"compiled {len(CANDIDATES) + 1} tiles in {time.perf_counter() - t0:.1f} s; "
          f"{len(todo)} boxes, seed {args.seed}", flush=True)
    timer = harness.Timer(device, seed=args.seed)
    results = tune(todo, timer, device, seed=args.seed, random_probes=args.random_probes,
                   margin=args.margin, max_splits=args.max_splits, budget_s=args.budget_s)
    won = merge([r for r in results if r.tile is not None])
    old_text = args.table.read_text() if args.table.exists() else ""
    old = policy.load_table(args.table) if old_text else None
    kept = [e for e in (old.entries if old else []) if arch not in e.match.get("arch", {arch})]
    entries = kept + to_entries(won, arch, gpu, versions, args.seed)
    header = ("C128A launch table. Entries are written by `nox -s tune` from measurements "
              "at every probe of their box; a key no entry matches gets the upstream launch "
              "unchanged.")
    new_text = policy.render_table(entries, header)
    diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                        str(args.table), str(args.table) + " (new)"))
    print(diff or "table unchanged")
    print(f"{len(results)} boxes in {time.perf_counter() - t0:.0f} s, "
          f"{timer.measurements} timings; {len(won)} entries for {arch}; "
          f"{sum(1 for r in results if r.tile is None)} boxes keep the baseline")
    if any(r.notes and "changed the outputs" in n for r in results for n in r.notes):
        print("error: a candidate tile changed the outputs; table not written", file=sys.stderr)
        return 1
    if not args.dry_run:
        policy.loads_table(new_text, source=str(args.table))  # validate before writing
        args.table.write_text(new_text)
        print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
