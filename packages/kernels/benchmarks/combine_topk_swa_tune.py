"""Time dsv4's combine_topk_swa kernel against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is its whole ``combine_topk_swa_indices``: the ``fill_(-1)`` of the output
and the extracted kernel on its ``(num_reqs, 256)`` grid
(:mod:`combine_topk_swa_upstream`). dsv4's side is one launch per tile. Every timing is
GPU time per call under CUDA-graph replay (a graph of back-to-back calls, median over
replays), as a model step under CUDA graphs sees it; before any timing, each tile's
output is checked equal to vLLM's on the whole buffers.

Probes: for each layer kind (C128A: ``compress_ratio`` 128, ``topk`` its active width
128..1024; C4A: ratio 4, ``topk`` 512; SWA-only: ratio 1, ``topk`` 0), window 128, no
image tokens, and each box of chunk rows (1-1024, 1025-4096, 4097-16384, 16385-65536
tokens; 1 to 8 requests), the box's corners and seeded random chunks (uneven requests
behind random prefixes); plus the ladder the targets quote (one fresh request of
512/2K/8K/32K tokens, and 2-4 uneven requests). A box's entry takes the tile whose worst
vLLM/dsv4 ratio over the box's probes is best, if a second, independent pass over them
confirms it beats vLLM by ``--margin`` at every probe; a box no tile wins is split in
two along the rows once; a box still lost gets no entry (vLLM's function runs there).

    python3 packages/kernels/benchmarks/combine_topk_swa_tune.py --json OUT.json [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/combine_topk_swa.toml``
(validated first). Needs vLLM's kernel: ``.upstream/combine_topk_swa/`` (made by
``combine_topk_swa_upstream.py``) or ``.vllm-sources/`` at the repository root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import random
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
for _src in (REPO / "packages" / "kernels" / "src", REPO / "packages" / "policy" / "src", HERE):
    if str(_src) not in sys.path:
        sys.path.insert(0, str(_src))

import combine_topk_swa_upstream as upstream  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from dsv4_kernels.combine_topk_swa import launch  # noqa: E402
from dsv4_kernels.combine_topk_swa.testing import Chunk, make_chunk, random_queries  # noqa: E402
from dsv4_policy.kernels import combine_topk_swa as policy  # noqa: E402

TABLE = REPO / "packages" / "policy" / "src" / "dsv4_policy" / "tables" / "combine_topk_swa.toml"
UPSTREAM = "upstream"
WINDOW = 128
INDEX_TOPK = 512
MAX_MODEL_LEN = 1 << 17
"""C128A capacity 1024: the widths probed go up to it."""
KINDS = {"c128a": 128, "c4a": 4, "swa": 1}
TOKEN_BOXES = [(1, 1024), (1025, 4096), (4097, 16384), (16385, 65536)]
MAX_REQS = 8
CANDIDATES: list[tuple[int, int, int]] = [
    (1, 1024, 4), (1, 512, 4), (1, 256, 2), (1, 128, 1), (2, 512, 4), (2, 256, 2),
    (2, 128, 1), (4, 256, 4), (4, 128, 2), (4, 512, 8), (8, 128, 4), (8, 256, 8),
    (16, 128, 8), (2, 1024, 8), (4, 64, 1), (8, 64, 2),
]
LADDER = [(1, 512), (1, 2048), (1, 8192), (1, 32768), (2, 3000), (3, 12000), (4, 32768)]
HEADER = ("CombineTopkSwaIndices launch table. Entries are written by the tuner "
          "(packages/kernels/benchmarks/combine_topk_swa_tune.py --write) from measurements: a "
          "tile is kept only where it beat vLLM 0.33.0's combine_topk_swa_indices (its fill "
          "included) at every probe of the entry's box, twice; a key no entry matches gets "
          "vLLM's own function unchanged.")


def graph_us(fn: Callable[[], object], launches: int, reps: int = 15) -> float:
    """Median µs per call over replays of a CUDA graph of ``launches`` back-to-back calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            fn()
    graph.replay()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / launches)
    del graph
    return statistics.median(times)


class Bench:
    """Chunks per probe point (cached), the two launches, equality and timing."""

    def __init__(self, device: torch.device, up: upstream.Upstream, seed: int) -> None:
        self.device = device
        self.up = up
        self.run_up = upstream.runner(up)
        self.seed = seed
        self._chunks: dict[tuple, Chunk] = {}
        self._scale: dict[tuple, int] = {}
        self.checked: set[tuple] = set()

    def chunk(self, point: dict[str, int]) -> Chunk:
        key = tuple(sorted(point.items()))
        found = self._chunks.get(key)
        if found is None:
            if len(self._chunks) >= 16:
                self._chunks.clear()
            g = torch.Generator().manual_seed(self.seed * 7919 + zlib.crc32(repr(key).encode()))
            kind = next(k for k, r in KINDS.items() if r == point["compress_ratio"])
            total, reqs = point["num_tokens"], point["num_reqs"]
            if point.get("fresh"):
                queries = [(0, total)] if reqs == 1 else random_queries(g, total, reqs, 0)
            else:
                queries = random_queries(g, total, reqs)
            found = make_chunk(
                self.seed + len(self._chunks), kind=kind, queries=queries, window_size=WINDOW,
                index_topk=INDEX_TOPK, max_model_len=MAX_MODEL_LEN,
                c128a_width=point.get("top_k") if kind == "c128a" else None,
                device=self.device, label=label(point))
            self._chunks[key] = found
        return found

    def runner(self, chunk: Chunk, tile: object) -> Callable[[], object]:
        args = chunk.args()
        if tile == UPSTREAM:
            return lambda: self.run_up(*args)
        tpp, cpp, warps = tile  # type: ignore[misc]
        prepared = launch.prepare(tpp, cpp, warps)
        return lambda: prepared(*args)

    def equal(self, point: dict[str, int], tile: tuple[int, int, int]) -> bool:
        """dsv4's ``tile`` leaves exactly vLLM's whole buffers (checked once per pair)."""
        chunk = self.chunk(point)
        want, got = chunk.fresh(), chunk.fresh()
        self.runner(want, UPSTREAM)()
        self.runner(got, tile)()
        return bool(torch.equal(want.indices_storage, got.indices_storage)
                    and torch.equal(want.lens_storage, got.lens_storage))

    def __call__(self, point: dict[str, int], tile: object) -> float:
        chunk = self.chunk(point)
        key = tuple(sorted(point.items()))
        if tile != UPSTREAM and (key, tile) not in self.checked:
            if not self.equal(point, tile):  # type: ignore[arg-type]
                raise SystemExit(f"tile {tile}: outputs differ from vLLM's at {label(point)}")
            self.checked.add((key, tile))
        n = self._scale.get(key)
        if n is None:
            one = graph_us(self.runner(chunk, UPSTREAM), 3, reps=3)
            n = self._scale[key] = max(5, min(50, int(300.0 / max(one, 1.0))))
        return graph_us(self.runner(chunk, tile), n)


def label(point: dict[str, int]) -> str:
    kind = next(k for k, r in KINDS.items() if r == point["compress_ratio"])
    extra = f"-k{point['top_k']}" if kind == "c128a" else ""
    fresh = "-fresh" if point.get("fresh") else ""
    return f"{kind}{extra}-r{point['num_reqs']}-t{point['num_tokens']}{fresh}"


def box_points(kind: str, lo: int, hi: int, rng: random.Random, randoms: int) -> list[dict]:
    """The corners of a box (rows, requests, and C128A widths) and seeded random points."""
    ratio = KINDS[kind]
    widths = (128, 1024) if kind == "c128a" else (INDEX_TOPK if kind == "c4a" else 0,)
    points = []
    for t in (lo, hi):
        for r in (1, MAX_REQS):
            for k in widths:
                points.append({"compress_ratio": ratio, "top_k": k, "num_reqs": min(r, t),
                               "num_tokens": t})
    for _ in range(randoms):
        t = round(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        t = min(max(t, lo), hi)
        k = rng.choice((128, 256, 512, 1024)) if kind == "c128a" else widths[0]
        points.append({"compress_ratio": ratio, "top_k": k,
                       "num_reqs": min(rng.randint(1, MAX_REQS), t), "num_tokens": t})
    unique = []
    for p in points:
        if p not in unique:
            unique.append(p)
    return unique


def ladder_points(kind: str) -> list[dict]:
    """The targets' chunks: fresh requests (C128A at the width its length gives)."""
    out = []
    for reqs, total in LADDER:
        k = min(max(1 << max((total // 128) - 1, 0).bit_length(), 128), 1024)
        out.append({"compress_ratio": KINDS[kind],
                    "top_k": k if kind == "c128a" else (INDEX_TOPK if kind == "c4a" else 0),
                    "num_reqs": reqs, "num_tokens": total, "fresh": 1})
    return out


def choose(points: list[dict], bench: Bench, margin: float, log: list[dict]) -> dict:
    """Screen every candidate at every point, confirm the best in a second pass."""
    base = {i: bench(p, UPSTREAM) for i, p in enumerate(points)}
    screened: dict[tuple, list[float]] = {}
    for tile in CANDIDATES:
        ratios = []
        for i, p in enumerate(points):
            us = bench(p, tile)
            ratios.append(base[i] / us)
            log.append({"probe": label(p), "point": p, "tile": list(tile), "us": us,
                        "upstream_us": base[i], "pass": 1})
        screened[tile] = ratios
    best = max(CANDIDATES, key=lambda t: (min(screened[t]), statistics.mean(screened[t])))
    worst = min(screened[best])
    verdict = {"tile": list(best), "screen_worst": worst, "probes": len(points),
               "screened": {str(list(t)): round(min(r), 4) for t, r in screened.items()}}
    if worst < margin:
        verdict["accepted"] = False
        return verdict
    confirm = []
    for p in points:
        b, us = bench(p, UPSTREAM), bench(p, best)
        confirm.append(b / us)
        log.append({"probe": label(p), "point": p, "tile": list(best), "us": us,
                    "upstream_us": b, "pass": 2})
    worst = min(worst, min(confirm))
    verdict.update(worst_ratio=worst, accepted=worst >= margin,
                   losing=[label(p) for p, r in zip(points, confirm, strict=True) if r < margin])
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="every measurement, as JSON")
    parser.add_argument("--write", action="store_true", help="replace the shipped table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-points", type=int, default=3)
    parser.add_argument("--margin", type=float, default=1.03,
                        help="the smallest vLLM/dsv4 ratio an entry's probes may show")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("combine_topk_swa_tune.py needs a CUDA GPU (and TRITON_INTERPRET unset)")
    started = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device())
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm{major}{minor}"
    machine = {"gpu": torch.cuda.get_device_name(device),
               "date": datetime.date.today().isoformat(),
               "versions": f"torch {torch.__version__}, triton {triton.__version__}, "
                           f"CUDA {torch.version.cuda}"}
    bench = Bench(device, upstream.load(), args.seed)
    built = launch.warmup(CANDIDATES, device)
    print(f"warm-up: {built} binaries in {time.perf_counter() - started:.1f} s", flush=True)
    log: list[dict] = []
    ladder: list[dict] = []
    for kind in KINDS:
        for p in ladder_points(kind):
            b = bench(p, UPSTREAM)
            row = {"probe": label(p), "point": p, "upstream_us": b, "tiles": {}}
            for tile in CANDIDATES:
                row["tiles"][str(list(tile))] = bench(p, tile)
            best = min(row["tiles"], key=row["tiles"].get)
            row["best"] = best
            row["best_us"] = row["tiles"][best]
            ladder.append(row)
            print(f"{row['probe']:>28}: vLLM {b:7.2f} µs, best {best} {row['best_us']:7.2f} µs "
                  f"({b / row['best_us']:.2f}x)", flush=True)
    boxes: list[dict] = []
    entries = []
    rng = random.Random(args.seed)
    for kind in KINDS:
        pending = [(lo, hi, 1) for lo, hi in TOKEN_BOXES]
        while pending:
            lo, hi, depth = pending.pop(0)
            points = box_points(kind, lo, hi, rng, args.random_points)
            verdict = choose(points, bench, args.margin, log)
            verdict.update(kind=kind, num_tokens=[lo, hi])
            boxes.append(verdict)
            print(f"{kind} rows {lo}-{hi}: {verdict['tile']} worst "
                  f"{verdict.get('worst_ratio', verdict['screen_worst']):.3f}x over "
                  f"{verdict['probes']} probes: {'kept' if verdict['accepted'] else 'no entry'}",
                  flush=True)
            if verdict["accepted"]:
                entries.append(entry(arch, kind, lo, hi, verdict, machine))
            elif depth > 0 and hi - lo >= 2:
                mid = int(math.sqrt(lo * hi)) if lo > 0 else (lo + hi) // 2
                mid = min(max(mid, lo), hi - 1)
                pending[:0] = [(lo, mid, depth - 1), (mid + 1, hi, depth - 1)]
    text = policy.render_table(entries, HEADER)
    table = policy.loads_table(text)
    resolved = []
    for row in ladder:
        p = row["point"]
        key = policy.Key(arch, p["compress_ratio"], p["top_k"], WINDOW, 0, 0, p["num_reqs"],
                         p["num_tokens"])
        got = policy.resolve(key, table)
        us = (row["upstream_us"] if got.source == "baseline"
              else row["tiles"][str(list(got.compile_key()))])
        resolved.append({"probe": row["probe"], "source": got.source,
                         "tile": list(got.compile_key()), "upstream_us": row["upstream_us"],
                         "table_us": us, "speedup": row["upstream_us"] / us})
        print(f"table at {row['probe']:>28}: {got.source:>24} {row['upstream_us']:7.2f} -> "
              f"{us:7.2f} µs ({row['upstream_us'] / us:.2f}x)")
    seconds = time.perf_counter() - started
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "arch": arch, **machine, "seed": args.seed, "margin": args.margin, "seconds": seconds,
        "candidates": [list(t) for t in CANDIDATES], "ladder": ladder, "table_at_ladder":
        resolved, "boxes": boxes, "measurements": log, "table": text}, indent=1) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries)")
    print(f"tuned in {seconds:.1f} s; measurements in {args.json}")
    return 0


def entry(arch: str, kind: str, lo: int, hi: int, verdict: dict,
          machine: dict[str, str]) -> policy.Entry:
    """The table entry for an accepted box."""
    match: dict[str, object] = {
        "arch": arch, "compress_ratio": KINDS[kind], "window_size": WINDOW,
        "max_image_tokens": 0, "has_image": 0, "num_reqs": policy.Range(1, MAX_REQS),
        "num_tokens": policy.Range(lo, hi)}
    match["top_k"] = policy.Range(128, 1024) if kind == "c128a" else (
        INDEX_TOPK if kind == "c4a" else 0)
    tpp, cpp, warps = verdict["tile"]
    return policy.Entry(
        f"{arch}-{kind}-t{lo}-{hi}", match, policy.Tile(tpp, cpp, warps),
        {**machine, "probes": verdict["probes"],
         "worst_speedup": f"{verdict['worst_ratio']:.3f}x",
         "command": "python3 packages/kernels/benchmarks/combine_topk_swa_tune.py --write"})


if __name__ == "__main__":
    raise SystemExit(main())
