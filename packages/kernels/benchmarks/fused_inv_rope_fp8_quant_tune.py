"""Time dsv4's FusedInvRopeFP8Quant kernel against vLLM 0.33.0's on this GPU; tune its table.

vLLM's side is its whole ``fused_inv_rope_fp8_quant`` as vLLM runs it (the wrapper's
arithmetic, the op implementation's two ``torch.empty`` and the kernel object's launch
with PDL as ``is_arch_support_pdl()`` says), extracted by
``fused_inv_rope_fp8_quant_upstream.py``; dsv4's side is the same function with a tile.
The allocations are inside the timed op on both sides, as in vLLM, where the custom op
allocates its outputs; under CUDA-graph replay they cost nothing (the graph keeps the
addresses), so the times are the kernels'. Every timing is GPU time per call under
CUDA-graph replay (a graph of back-to-back calls, median over replays), as the FULL
decode graph sees it; before any tile is timed at a point its outputs (FP8 bytes, the
whole scale buffer) are checked equal to vLLM's.

The grid: T = 1, 2, 3, 4, 8, ..., 8192 x local heads 8, 16, 32, 64, 128 (8 heads per
group, DeepSeek-V4-Flash's), head_dim 512, quantize on, sm90 FP32 scales; plus a few
quantize-off and packed-scale points (reported, no entries). Each point is reported
against its byte floor (bytes moved / 4.2 TB/s) plus an empty Triton launch measured in
the same run.

Entries: for each head count and each box of T (``BOXES``), the tile that was fastest
at the box's lower grid point is probed at the box's corners and two seeded random T
inside it, twice (two independent passes); the entry is kept only if it beats vLLM by
``--margin`` at every probe of both passes, and records its worst ratio and probe count.

    python3 packages/kernels/benchmarks/fused_inv_rope_fp8_quant_tune.py --json OUT.json [--write]

``--write`` replaces ``packages/policy/src/dsv4_policy/tables/fused_inv_rope_fp8_quant.toml``
(validated first). Progress goes to stderr; a tile that fails or differs is recorded
and skipped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
for _src in (REPO / "packages" / "kernels" / "src", REPO / "packages" / "policy" / "src", HERE):
    if str(_src) not in sys.path:
        sys.path.insert(0, str(_src))

import fused_inv_rope_fp8_quant_upstream as upstream  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from dsv4_kernels.fused_inv_rope_fp8_quant import launch, testing  # noqa: E402
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy  # noqa: E402

TABLE = REPO / "packages" / "policy" / "src" / "dsv4_policy" / "tables" / (
    "fused_inv_rope_fp8_quant.toml")
UPSTREAM = "upstream"
HPG = 8
TOKENS = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192]
HEADS = [8, 16, 32, 64, 128]
BOXES = [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 127), (128, 255),
         (256, 511), (512, 1023), (1024, 2047), (2048, 4095), (4096, 8192)]
EXTRA = [  # (T, heads, tma_aligned_scales, quantize): reported only
    (64, 8, False, False), (512, 64, False, False), (64, 64, True, True),
    (512, 64, True, True), (512, 8, True, True)]
CANDIDATES: list[tuple[int, int, int]] = [
    (1, 2, 1), (1, 4, 1), (2, 1, 1), (2, 2, 1), (4, 1, 1), (1, 1, 1), (2, 2, 2), (1, 4, 2),
    (4, 2, 2), (2, 4, 2), (1, 8, 2), (4, 4, 4), (1, 8, 4), (8, 2, 4)]
HBM_BYTES_PER_S = 4.2e12
HEADER = ("FusedInvRopeFP8Quant launch table. Entries are written by the tuner "
          "(packages/kernels/benchmarks/fused_inv_rope_fp8_quant_tune.py --write) from CUDA-graph "
          "replay measurements: a tile is kept only where it beat vLLM 0.33.0's "
          "fused_inv_rope_fp8_quant kernel at every probe of the entry's box, twice; a key no "
          "entry matches gets vLLM's own kernel and launch unchanged.")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def graph_us(fn: Callable[[], object], launches: int, reps: int = 7) -> float:
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
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / launches)
    del graph
    return statistics.median(times)


@triton.jit
def _empty_kernel(x_ptr, n: tl.constexpr):
    pass


def empty_launch_us() -> float:
    """One empty Triton launch under graph replay: the launch part of the floor."""
    x = torch.empty(1, device="cuda")
    return graph_us(lambda: _empty_kernel[(1,)](x, 1), 200)


def bytes_moved(t: int, heads: int, tma: bool, quantize: bool, head_dim: int = 512) -> int:
    """Bytes a call must move: o in (bf16), one cos/sin row and position per token, the
    output (FP8 or bf16) and the scale buffer (pad rows included)."""
    aligned = -(-t // 4) * 4 if quantize else t
    scales = aligned * heads * (head_dim // 128) * (1 if tma else 4) if quantize else 0
    return t * heads * head_dim * 2 + t * (64 * 4 + 8) + t * heads * head_dim * (
        1 if quantize else 2) + scales


class Bench:
    """Inputs per point (cached), the launches, equality and timing."""

    def __init__(self, up: upstream.Upstream, table: torch.Tensor, seed: int) -> None:
        self.up = up
        self.table = table
        self.seed = seed
        self._inputs: dict[tuple, tuple] = {}
        self.checked: dict[tuple, bool] = {}
        self.errors: list[dict] = []

    def inputs(self, point: tuple) -> tuple:
        found = self._inputs.get(point)
        if found is None:
            if len(self._inputs) >= 8:
                self._inputs.clear()
            t, heads, tma, quantize = point
            case = testing.Case(t, heads // HPG, HPG, tma, quantize,
                                seed=self.seed * 100003 + t * 131 + heads)
            found = self._inputs[point] = (case, case.tensors("cuda", self.table))
        return found

    def runner(self, point: tuple, tile: object) -> Callable[[], object]:
        case, tensors = self.inputs(point)
        if tile == UPSTREAM:
            return lambda: self.up.fused_inv_rope_fp8_quant(*tensors, *case.args())
        tpp, hpp, warps = tile  # type: ignore[misc]
        return lambda: launch.fused_inv_rope_fp8_quant(
            *tensors, *case.args(), tokens_per_program=tpp, heads_per_program=hpp,
            num_warps=warps)

    def equal(self, point: tuple, tile: tuple[int, int, int]) -> bool:
        key = (point, tile)
        if key not in self.checked:
            want = self.runner(point, UPSTREAM)()
            got = self.runner(point, tile)()
            torch.cuda.synchronize()
            try:
                testing.assert_same(got, want, f"{point} {tile}")
                self.checked[key] = True
            except AssertionError as exc:
                self.checked[key] = False
                self.errors.append({"point": list(point), "tile": list(tile),
                                    "error": str(exc)[:500]})
                log(f"  MISMATCH {point} {tile}: {str(exc)[:200]}")
        return self.checked[key]

    def time(self, point: tuple, tile: object) -> float | None:
        """µs per call, or None when the tile failed or differs (recorded, skipped)."""
        try:
            if tile != UPSTREAM and not self.equal(point, tile):  # type: ignore[arg-type]
                return None
            fn = self.runner(point, tile)
            one = graph_us(fn, 2, reps=2)
            return graph_us(fn, max(4, min(100, int(400.0 / max(one, 0.5)))))
        except Exception as exc:  # one bad tile must not stop the run
            self.errors.append({"point": list(point), "tile": str(tile),
                                "error": "".join(traceback.format_exception_only(exc))[:500]})
            log(f"  ERROR {point} {tile}: {exc!r}"[:300])
            return None


def probe_box(bench: Bench, heads: int, lo: int, hi: int, tile: tuple[int, int, int],
              rng: random.Random, margin: float, measurements: list[dict]) -> dict:
    """Corners and two random T of the box, two passes: the worst vLLM/tile ratio."""
    ts = sorted({lo, hi, *(rng.randint(lo, hi) for _ in range(2))})
    ratios = []
    for pass_no in (1, 2):
        for t in ts:
            point = (t, heads, False, True)
            base, ours = bench.time(point, UPSTREAM), bench.time(point, tile)
            ratio = base / ours if base and ours else 0.0
            ratios.append(ratio)
            measurements.append({"pass": pass_no, "point": list(point), "tile": list(tile),
                                 "upstream_us": base, "us": ours, "ratio": ratio})
    worst = min(ratios)
    return {"heads": heads, "num_tokens": [lo, hi], "tile": list(tile), "probes": len(ts),
            "probe_tokens": ts, "worst_ratio": worst, "accepted": worst >= margin}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="every measurement, as JSON")
    parser.add_argument("--write", action="store_true", help="replace the shipped table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--margin", type=float, default=1.03,
                        help="the smallest vLLM/dsv4 ratio an entry's probes may show")
    parser.add_argument("--tokens", type=int, nargs="*", default=TOKENS,
                        help="grid token counts (default: the full grid)")
    parser.add_argument("--heads", type=int, nargs="*", default=HEADS,
                        help="grid local head counts (default: 8 16 32 64 128)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("fused_inv_rope_fp8_quant_tune.py needs a CUDA GPU "
                         "(and TRITON_INTERPRET unset)")
    started = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device())
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm{major}{minor}"
    machine = {"gpu": torch.cuda.get_device_name(device),
               "date": datetime.date.today().isoformat(),
               "versions": f"torch {torch.__version__}, triton {triton.__version__}, "
                           f"CUDA {torch.version.cuda}"}
    bench = Bench(upstream.load(), testing.rope_table("compress", "cuda"), args.seed)
    pdl = launch.default_launch_pdl(device)
    keys = [launch.CompileKey(*tile, HPG, 448, 64, 128, tma, q, pdl)
            for tile in CANDIDATES for tma, q in ((False, True), (True, True), (False, False))]
    try:
        built = launch.warmup(keys, device)
    except Exception as exc:
        built = -1
        log(f"warm-up failed: {exc!r}")
    empty = empty_launch_us()
    log(f"warm-up: {built} binaries; empty launch {empty:.2f} µs; "
        f"{time.perf_counter() - started:.1f} s")
    grid: list[dict] = []
    points = [(t, h, False, True) for h in args.heads for t in args.tokens] + [
        e for e in EXTRA if e[1] in args.heads]
    for point in points:
        t, heads, tma, quantize = point
        base = bench.time(point, UPSTREAM)
        tiles = {}
        for tile in CANDIDATES:
            us = bench.time(point, tile)
            if us is not None:
                tiles[str(list(tile))] = us
        floor = bytes_moved(t, heads, tma, quantize) / HBM_BYTES_PER_S * 1e6
        best = min(tiles, key=tiles.get) if tiles else None
        row = {"point": {"num_tokens": t, "num_heads": heads, "tma_aligned_scales": tma,
                         "quantize": quantize},
               "upstream_us": base, "tiles": tiles, "best": best,
               "best_us": tiles.get(best) if best else None, "byte_floor_us": floor,
               "floor_us": floor + empty}
        if base and best:
            row["speedup"] = base / tiles[best]
            row["best_vs_floor"] = tiles[best] / (floor + empty)
            row["upstream_vs_floor"] = base / (floor + empty)
        grid.append(row)
        log(f"T={t:5d} heads={heads:3d} tma={int(tma)} q={int(quantize)}: vLLM "
            f"{base if base is None else round(base, 2)} µs, best {best} "
            f"{row['best_us'] if row['best_us'] is None else round(row['best_us'], 2)} µs, "
            f"floor {floor + empty:.2f} µs"
            + (f" ({row['speedup']:.2f}x, {row['best_vs_floor']:.2f}x floor)"
               if "speedup" in row else ""))
    rng = random.Random(args.seed)
    boxes: list[dict] = []
    measurements: list[dict] = []
    entries = []
    by_point = {(r["point"]["num_tokens"], r["point"]["num_heads"]): r for r in grid
                if not r["point"]["tma_aligned_scales"] and r["point"]["quantize"]}
    for heads in args.heads:
        for lo, hi in BOXES:
            below = [t for t in args.tokens if t <= lo]
            row = by_point.get((max(below), heads)) if below else None
            if not row or "speedup" not in row or row["speedup"] < args.margin:
                boxes.append({"heads": heads, "num_tokens": [lo, hi], "accepted": False,
                              "reason": "no tile beat vLLM at the box's grid point"})
                continue
            tile = tuple(json.loads(row["best"]))
            verdict = probe_box(bench, heads, lo, hi, tile, rng, args.margin, measurements)
            boxes.append(verdict)
            log(f"heads {heads} T {lo}-{hi}: {tile} worst {verdict['worst_ratio']:.3f}x over "
                f"{verdict['probes']} probes x2: {'kept' if verdict['accepted'] else 'no entry'}")
            if verdict["accepted"]:
                entries.append(policy.Entry(
                    f"{arch}-h{heads}-t{lo}-{hi}",
                    {"arch": arch, "num_tokens": policy.Range(lo, hi), "num_heads": heads,
                     "head_dim": 512, "quant_group_size": 128, "tma_aligned_scales": 0,
                     "quantize": 1},
                    policy.Tile(*tile),
                    {**machine, "probes": verdict["probes"], "passes": 2,
                     "worst_speedup": f"{verdict['worst_ratio']:.3f}x",
                     "command": "python3 packages/kernels/benchmarks/"
                                "fused_inv_rope_fp8_quant_tune.py --json OUT.json --write"}))
    text = policy.render_table(entries, HEADER)
    policy.loads_table(text)
    seconds = time.perf_counter() - started
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "arch": arch, **machine, "seed": args.seed, "margin": args.margin, "seconds": seconds,
        "empty_launch_us": empty, "hbm_bytes_per_s": HBM_BYTES_PER_S,
        "candidates": [list(t) for t in CANDIDATES], "grid": grid, "boxes": boxes,
        "probe_measurements": measurements, "errors": bench.errors, "table": text},
        indent=1) + "\n")
    print(text)
    if args.write:
        TABLE.write_text(text)
        log(f"wrote {TABLE} ({len(entries)} entries)")
    log(f"tuned in {seconds:.1f} s; measurements in {args.json}; {len(bench.errors)} errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
