"""Time dsv4's compressed slot mapping against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is its whole ``get_compressed_slot_mapping``: the ``fill_(-1)`` of the whole
output buffer and the extracted kernel on its one-program-per-request grid
(:mod:`dsv4_evals.bench.compressed_slot_mapping.upstream`). dsv4's side is one launch per tile
(``tokens_per_program``, ``num_warps``). Every timing is GPU time per call under
CUDA-graph replay (a graph of back-to-back calls, median over replays), as a model step
under CUDA graphs sees it; before a tile is timed at a step, its whole output buffer is
checked equal to vLLM's there.

Two parts:

- the ladder the targets quote, at both DeepSeek-V4 ratios (C4A/indexer: ratio 4, 64
  entries per block; C128A: ratio 128, 2 per block): decode of 1..512 requests, one
  prefill of 512/2K/8K/32K tokens, 2-4 uneven requests, mixed; every tile timed;
- the table: boxes of (``num_rows``, ``num_tokens``) with 1..1024 requests, block sizes
  2..256, both ratios, no DCP. A box's probes are its corners (tokens, requests, rows,
  ratio at both ends) and seeded random keys; each key becomes a step (decode requests
  first, then up to 4 uneven prefills; requests past the tokens are zero-token graph
  padding; the buffer has ``num_rows`` rows). The tile whose worst vLLM/dsv4 ratio over
  the probes is best is accepted if an independent second pass confirms it beats vLLM
  by ``--margin`` at every probe; a box no tile wins is split in two along the tokens
  once; a box still lost gets no entry (vLLM's function runs there).

    python -m dsv4_evals.bench.compressed_slot_mapping.tune [--json OUT.json] [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/compressed_slot_mapping.toml``
(validated first). Needs vLLM's kernel: ``.upstream/compressed_slot_mapping/`` or the
vLLM sources (see :mod:`dsv4_evals.bench.compressed_slot_mapping.upstream`). To stay
fast, each box first times every candidate at two of its probes and keeps the best
``--keep`` tiles for the full pass.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from dsv4_kernels.compressed_slot_mapping import launch
from dsv4_kernels.compressed_slot_mapping.testing import (
    POISON,
    SlotMappingCall,
    make_step,
)
from dsv4_policy.kernels import compressed_slot_mapping as policy

from dsv4_evals.bench import paths, timing, tuning
from dsv4_evals.bench.compressed_slot_mapping import upstream as upstream_source

TABLE = paths.table("compressed_slot_mapping")
UPSTREAM = "upstream"
RATIOS = {4: 64, 128: 2}
"""DeepSeek-V4's compress ratios and their compressed entries per 256-token block."""
BUFFER = 8192
"""The ladder's output buffer: max_num_batched_tokens rows (more when a step needs it)."""
CANDIDATES: list[tuple[int, int]] = [
    (64, 1), (128, 1), (128, 2), (256, 2), (256, 4), (512, 4), (512, 8), (1024, 4),
    (1024, 8), (2048, 8), (4096, 16), (8192, 16),
]
ROW_BOXES = [(1, 8192), (8193, 65536)]
TOKEN_BOXES = [(1, 1), (2, 64), (65, 512), (513, 2048), (2049, 8192), (8193, 32768),
               (32769, 65536)]
REQS = (1, 1024)
BLOCK_SIZES = (2, 256)
MIN_PROBES = 12
"""Keys a box is timed at, at least: what ``tests/test_provenance.py`` asks of every
shipped entry."""
TARGETS = {"prefill-T8192": 2.0, "prefill-T32768": 2.5, "decode-R512": 1.3}
"""Speed-ups over vLLM's function the targets ask for, at ratio 4 and 128 alike."""
HEADER = ("Compressed slot mapping launch table. Entries are written by the tuner "
          "(python -m dsv4_evals.bench.compressed_slot_mapping.tune --write) from "
          "measurements: a tile is kept only where dsv4's one-launch kernel beat vLLM "
          "0.33.0's get_compressed_slot_mapping (fill + kernel) at every probe of the "
          "entry's box, twice, by CUDA-graph replay; a key no entry matches gets vLLM's "
          "own launch unchanged.")


# --------------------------------------------------------------------------- timing
# --------------------------------------------------------------------------- steps
def step_of(point: dict[str, int], device: torch.device, seed: int) -> SlotMappingCall:
    """The step a probe key stands for: ``num_reqs`` requests (zero-token padding past
    the tokens), decodes first, then up to 4 uneven prefills; ``num_rows`` buffer rows."""
    rng = random.Random(seed)
    tokens, reqs = point["num_tokens"], point["num_reqs"]
    ratio = point["compress_ratio"]
    real = min(reqs, tokens)
    if real == tokens:
        decodes, prefill_tokens, prefills = real, 0, 0
    else:
        prefills = min(real, 1 + rng.randrange(4))
        decodes = real - prefills
        prefill_tokens = tokens - decodes
    weights = [rng.random() + 0.05 for _ in range(prefills)]
    sizes = [max(1, int(prefill_tokens * w / sum(weights))) for w in weights]
    if sizes:
        sizes[-1] += prefill_tokens - sum(sizes)
        while sizes[-1] < 1:  # the rounding gave the others one too many
            i = max(range(len(sizes) - 1), key=lambda k: sizes[k])
            sizes[i] -= 1
            sizes[-1] += 1
    return make_step(
        seed,
        decode_contexts=[rng.randrange(1, 32768) for _ in range(decodes)],
        prefill_queries=[(rng.randrange(0, 16384) if rng.random() < 0.6 else 0, q)
                         for q in sizes],
        compress_ratio=ratio, block_size=point["block_size"],
        extra_rows=max(point["num_rows"] - tokens, 0), pad_requests=reqs - real,
        device=device)


def key_of(call: SlotMappingCall, arch: str) -> policy.Key:
    assert call.out is not None
    return policy.Key(arch, call.compress_ratio, call.block_size, call.dcp_world_size,
                      call.block_table.shape[0], call.num_tokens, call.out.shape[0])


def runner(call: SlotMappingCall, tile: object, upstream: upstream_source.Upstream
           ) -> Callable[[], object]:
    """One call: vLLM's function (``tile == UPSTREAM``) or dsv4's launch with ``tile``."""
    args, kwargs = call.args(), call.kwargs()
    if tile == UPSTREAM:
        return lambda: upstream.get_compressed_slot_mapping(*args, **kwargs)
    tpp, warps = tile  # type: ignore[misc]
    return lambda: launch.get_compressed_slot_mapping(*args, **kwargs, tokens_per_program=tpp,
                                                      num_warps=warps)


class Measure:
    """``measure(call_id, tile) -> µs``; checks each tile's output against vLLM's at a step
    before timing it there, and scales the launches per graph to about ``target_us``."""

    def __init__(self, upstream: upstream_source.Upstream, target_us: float) -> None:
        self.upstream = upstream
        self.target_us = target_us
        self.checked: set[tuple[int, object]] = set()
        self.scale: dict[int, int] = {}
        self.count = 0
        self._next = 0

    def ident(self, call: SlotMappingCall) -> int:
        """A number of this call's own (``id`` values are reused once a step is freed)."""
        found = call.__dict__.get("_measure_id")
        if found is None:
            found = call.__dict__["_measure_id"] = self._next
            self._next += 1
        return found  # type: ignore[no-any-return]

    def check(self, call: SlotMappingCall, tile: object) -> None:
        if (self.ident(call), tile) in self.checked or tile == UPSTREAM:
            return
        want, got = call.fresh(), call.fresh()
        runner(want, UPSTREAM, self.upstream)()
        runner(got, tile, self.upstream)()
        assert want.out is not None and got.out is not None
        if not torch.equal(want.out, got.out) or bool((got.out == POISON).any()):
            raise SystemExit(f"tile {tile}: output differs from vLLM's at {call.label}")
        self.checked.add((self.ident(call), tile))

    def __call__(self, call: SlotMappingCall, tile: object) -> float:
        self.check(call, tile)
        n = self.scale.get(self.ident(call))
        if n is None:
            one = timing.graph_us(runner(call, UPSTREAM, self.upstream), 4, reps=3)
            n = self.scale[self.ident(call)] = max(4, min(100, int(self.target_us
                                                                   / max(one, 0.5))))
        self.count += 1
        return timing.graph_us(runner(call, tile, self.upstream), n, reps=15)


# --------------------------------------------------------------------------- the ladder
def ladder(device: torch.device) -> list[tuple[str, SlotMappingCall]]:
    """The named steps the targets quote, at both ratios."""
    found: list[tuple[str, SlotMappingCall]] = []
    for ratio, block in RATIOS.items():
        def step(name: str, seed: int, ratio: int = ratio, block: int = block,
                 **kw: object) -> None:
            found.append((name, make_step(seed, compress_ratio=ratio, block_size=block,
                                          device=device, **kw)))  # type: ignore[arg-type]

        rng = random.Random(ratio)
        for reqs in (1, 8, 64, 256, 512):
            step(f"decode-R{reqs}", reqs, decode_contexts=[rng.randrange(1, 32768)
                                                           for _ in range(reqs)],
                 extra_rows=BUFFER - reqs)
        for tokens in (512, 2048, 8192, 32768):
            step(f"prefill-T{tokens}", tokens, prefill_queries=[(0, tokens)],
                 extra_rows=max(BUFFER - tokens, 0))
        step("uneven-R2-T8192", 3, prefill_queries=[(1000, 5000), (0, 3192)], extra_rows=0)
        step("uneven-R4-T31503", 4, prefill_queries=[(100, 9000), (0, 3), (5000, 20000),
                                                     (7, 2500)], extra_rows=1265)
        step("mixed-D256-T4156", 5, decode_contexts=[rng.randrange(1, 32768)
                                                     for _ in range(256)],
             prefill_queries=[(1000, 3000), (0, 900)], extra_rows=BUFFER - 4156)
    return found


def time_ladder(steps: list[tuple[str, SlotMappingCall]], measure: Measure, arch: str,
                table: object | None) -> list[dict[str, object]]:
    rows = []
    for name, call in steps:
        base = measure(call, UPSTREAM)
        tiles = {f"{t[0]}x{t[1]}": measure(call, t) for t in CANDIDATES}
        best = min(tiles, key=tiles.__getitem__)
        row: dict[str, object] = {
            "step": name, "compress_ratio": call.compress_ratio, "block_size": call.block_size,
            "num_reqs": call.block_table.shape[0], "num_tokens": call.num_tokens,
            "num_rows": call.out.shape[0] if call.out is not None else call.num_tokens,
            "upstream_us": base, "tiles_us": tiles, "best_tile": best,
            "best_speedup": base / tiles[best]}
        if table is not None:
            chosen = policy.resolve(key_of(call, arch), table)  # type: ignore[arg-type]
            if chosen.source == "baseline":
                row.update(table_source="baseline", table_speedup=1.0)
            else:
                tile = (chosen.tokens_per_program, chosen.num_warps)
                row.update(table_source=chosen.source, table_tile=f"{tile[0]}x{tile[1]}",
                           table_speedup=base / measure(call, tile))
        rows.append(row)
        print(f"{name:>18} cr{call.compress_ratio:<3} vLLM {base:7.2f} µs  best {best:>8} "
              f"{tiles[best]:7.2f} µs  {base / tiles[best]:5.2f}x"
              + (f"  table {row['table_speedup']:.2f}x" if "table_speedup" in row else ""),
              flush=True)
    return rows


# --------------------------------------------------------------------------- boxes
def box_points(box: dict[str, tuple[int, int]], seed: int, random_points: int
               ) -> list[dict[str, int]]:
    """Corners (tokens, requests, rows, ratio at both ends; block size at its top), then
    seeded random keys (log-uniform on wide ranges), ``random_points`` of them and at
    least :data:`MIN_PROBES` keys in all; rows never below tokens."""
    rng = random.Random(seed)

    def draw(lo: int, hi: int) -> int:
        if hi / max(lo, 1) <= 64:
            return rng.randint(lo, hi)
        return min(max(round(math.exp(rng.uniform(math.log(max(lo, 1)),
                                                  math.log(hi + 1)))), lo), hi)

    points, seen = [], set()

    def add(p: dict[str, int]) -> None:
        p["num_rows"] = max(p["num_rows"], p["num_tokens"])
        k = tuple(sorted(p.items()))
        if k not in seen:
            seen.add(k)
            points.append(p)

    for tokens in sorted(set(box["num_tokens"])):
        for reqs in sorted(set(box["num_reqs"])):
            for rows in sorted(set(box["num_rows"])):
                for ratio in RATIOS:
                    add({"num_tokens": tokens, "num_reqs": reqs, "num_rows": rows,
                         "compress_ratio": ratio, "block_size": box["block_size"][1]})
    # At least MIN_PROBES in all (the project's rule for a shipped entry's evidence).
    wanted = max(MIN_PROBES, len(points) + random_points)
    for _ in range(50 * wanted):
        if len(points) >= wanted:
            break
        add({"num_tokens": draw(*box["num_tokens"]), "num_reqs": draw(*box["num_reqs"]),
             "num_rows": draw(*box["num_rows"]), "compress_ratio": rng.choice(list(RATIOS)),
             "block_size": draw(*box["block_size"])})
    return points


def choose(calls: list[SlotMappingCall], measure: Measure, margin: float, keep: int = 4
           ) -> tuple[tuple[int, int] | None, float, dict[str, float]]:
    """The tile with the best worst ratio over ``calls``, confirmed by a second pass.

    A quick screen first (every candidate at the box's first two probes, its smallest
    and largest corner) keeps the ``keep`` best tiles; only those are timed at every
    probe, which is where the tuner spends its time."""
    base = [measure(c, UPSTREAM) for c in calls]
    quick = {tile: min(b / measure(c, tile) for c, b in zip(calls[:2], base[:2], strict=True))
             for tile in CANDIDATES}
    kept = sorted(CANDIDATES, key=lambda t: -quick[t])[:keep]
    worst: dict[tuple[int, int], float] = {}
    for tile in kept:
        ratio = math.inf
        for c, b in zip(calls, base, strict=True):
            ratio = min(ratio, b / measure(c, tile))
            if ratio <= margin:
                break
        worst[tile] = ratio
    screened = {f"{t[0]}x{t[1]}": r for t, r in worst.items()}
    for tile in sorted((t for t in worst if worst[t] > margin), key=lambda t: -worst[t])[:3]:
        again = math.inf
        for c in calls:
            again = min(again, measure(c, UPSTREAM) / measure(c, tile))
            if again <= margin:
                break
        if again > margin:
            return tile, min(worst[tile], again), screened
    return None, max(worst.values(), default=-math.inf), screened


def tune_box(box: dict[str, tuple[int, int]], measure: Measure, device: torch.device, seed: int,
             random_points: int, margin: float, depth: int, log: list[dict], keep: int = 4
             ) -> list[tuple[dict[str, tuple[int, int]], tuple[int, int], float, int]]:
    points = box_points(box, seed, random_points)
    calls = [step_of(p, device, seed * 1000 + i) for i, p in enumerate(points)]
    started = time.perf_counter()
    tile, ratio, screened = choose(calls, measure, margin, keep)
    print(f"box {box}: {tile} worst {ratio:.3f}x over {len(calls)} probes "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    log.append({"box": {k: list(v) for k, v in box.items()}, "tile": tile,
                "worst_ratio": ratio, "probes": len(calls), "screened": screened,
                "points": points})
    del calls
    if tile is not None:
        return [(box, tile, ratio, len(points))]
    lo, hi = box["num_tokens"]
    if depth <= 0 or hi - lo < 2:
        return []
    mid = int(math.sqrt(max(lo, 1) * hi)) if hi / max(lo, 1) > 4 else (lo + hi) // 2
    mid = min(max(mid, lo), hi - 1)
    low, high = dict(box), dict(box)
    low["num_tokens"], high["num_tokens"] = (lo, mid), (mid + 1, hi)
    return (tune_box(low, measure, device, seed * 2 + 1, random_points, margin, depth - 1, log,
                     keep)
            + tune_box(high, measure, device, seed * 2 + 2, random_points, margin, depth - 1,
                       log, keep))


def entry(arch: str, box: dict[str, tuple[int, int]], tile: tuple[int, int], ratio: float,
          probes: int, machine: dict[str, str], command: str) -> policy.Entry:
    (w0, w1), (t0, t1) = box["num_rows"], box["num_tokens"]
    return policy.Entry(
        f"{arch}-rows{w0}-{w1}-t{t0}-{t1}",
        {"arch": arch, "compress_ratio": sorted(RATIOS), "dcp_world_size": 1,
         "block_size": policy.Range(*box["block_size"]),
         "num_reqs": policy.Range(*box["num_reqs"]), "num_tokens": policy.Range(t0, t1),
         "num_rows": policy.Range(w0, w1)},
        policy.Tile(*tile),
        {**machine, "probes": probes, "worst_speedup": f"{ratio:.3f}x", "command": command},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path,
                        default=paths.artifacts() / "tune-compressed_slot_mapping.json",
                        help="where to write every measurement and the table (default: "
                             "artifacts/tune-compressed_slot_mapping.json)")
    parser.add_argument("--keep", type=int, default=4,
                        help="tiles kept after each box's quick screen (default: 4)")
    parser.add_argument("--write", action="store_true",
                        help="replace the shipped compressed_slot_mapping.toml with the "
                             "tuned table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-points", type=int, default=6)
    parser.add_argument("--margin", type=float, default=1.02,
                        help="the ratio over vLLM a tile must exceed at every probe")
    parser.add_argument("--split-depth", type=int, default=1)
    parser.add_argument("--target-us", type=float, default=100.0,
                        help="GPU time per captured graph (launches scaled to it)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("dsv4_evals.bench.compressed_slot_mapping.tune needs a CUDA GPU (and "
                         "TRITON_INTERPRET unset)")
    device = torch.device("cuda", torch.cuda.current_device())
    arch, machine = tuning.this_gpu(device)
    started = time.perf_counter()
    upstream = upstream_source.load()
    print(f"vLLM's kernel from {upstream.record['origin']}; warming "
          f"{len(CANDIDATES)} tiles", flush=True)
    launch.warmup(CANDIDATES, device)
    measure = Measure(upstream, args.target_us)

    steps = ladder(device)
    print("ladder (GPU µs per call, CUDA-graph replay):", flush=True)
    ladder_rows = time_ladder(steps, measure, arch, None)

    log: list[dict] = []
    accepted = []
    i = 0
    for rows in ROW_BOXES:
        for tokens in TOKEN_BOXES:
            if tokens[0] > rows[1]:
                continue
            box = {"num_tokens": tokens, "num_reqs": REQS, "num_rows": rows,
                   "block_size": BLOCK_SIZES}
            accepted += tune_box(box, measure, device, args.seed * 100 + i,
                                 args.random_points, args.margin, args.split_depth, log,
                                 args.keep)
            i += 1
    command = "python -m dsv4_evals.bench.compressed_slot_mapping.tune --write"
    entries = [entry(arch, box, tile, ratio, probes, machine, command)
               for box, tile, ratio, probes in accepted]
    text = policy.render_table(entries, HEADER)
    table = policy.loads_table(text, "<tuned>")
    print("ladder with the tuned table:", flush=True)
    final = time_ladder(steps, measure, arch, table)
    targets = {}
    for row in final:
        goal = TARGETS.get(str(row["step"]))
        if goal is not None:
            key = f"{row['step']}-cr{row['compress_ratio']}"
            targets[key] = {"goal": goal, "speedup": row["table_speedup"],
                            "met": row["table_speedup"] >= goal}
    for key, found in targets.items():
        print(f"target {key}: {found['speedup']:.2f}x (goal {found['goal']}x) "
              f"{'met' if found['met'] else 'MISSED'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "arch": arch, **machine, "seed": args.seed, "margin": args.margin,
        "upstream": upstream.record, "candidates": [list(t) for t in CANDIDATES],
        "seconds": time.perf_counter() - started, "measurements": measure.count,
        "ladder": ladder_rows, "ladder_with_table": final, "targets": targets,
        "boxes": log, "table": text}, indent=2, default=str) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries)")
    print(f"done in {time.perf_counter() - started:.1f} s ({measure.count} timings); "
          f"measurements in {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
