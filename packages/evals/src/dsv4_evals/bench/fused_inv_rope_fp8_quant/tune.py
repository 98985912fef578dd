"""Tune FusedInvRopeFP8Quant's launch table on this GPU with the probe rules, and write it.

vLLM's side is its whole ``fused_inv_rope_fp8_quant`` with its own kernel, as vLLM runs
it (:mod:`.upstream`); dsv4's side is the same function with dsv4's kernel and a tile
(``tokens_per_program``, ``heads_per_program``, ``num_warps`` and the kernel ``body``;
:data:`CANDIDATES`).
Every timing is GPU time per call under CUDA-graph replay, as the FULL decode graph
runs the call, on the real DeepSeek-V4 ``cos_sin_cache`` and seeded bf16 ``o``
(:mod:`.harness`); before a tile is timed at a probe, its bytes are checked equal to
vLLM's there (output, the whole scale buffer with its pad rows), and a difference stops
the run.

The table: for each local head count (64 and 8 first, the targets' shapes, then 16, 32
and 128; 8 heads per output group) and each box of T in :data:`BOXES` (1; 2-16; 17-64;
65-128; 129-256; 257-511; 512; 513-2048; 2049-8192), with head_dim 512, one FP32 scale per
128 lanes (sm90's layout) and quantize on. A box's probes (:func:`box_probes`) are its
smallest and largest T, its smallest T that is not a multiple of 4 (the scale buffer's
pad rows), and seeded random T, at least :data:`MIN_PROBES` calls in all; a probe's
``variant`` picks its seeded values and positions, so the single-key box T=1 is timed at
12 different calls too. A tile is accepted only if it beats vLLM by ``--margin`` at
every probe in a screening pass and again in an independent confirmation pass
(:func:`dsv4_evals.bench.probes.choose_tile`). Of the tiles that pass, the one with the
least GPU time summed over the box's probes is kept (``--objective time``): a box's best
tile changes inside it where the programs run out (at 64 heads (2, 1, 1) is best at
T=17 and (2, 2, 1) at T=64), and ranking by the worst ratio kept the small calls' tile
for the whole box. A box no tile wins is split once along T
(``--split-depth``; a second split on the H200 kept thin boxes won by a hair that the
bench's never-slower gate then failed); a box still lost gets no entry, so those calls
keep vLLM's kernel. Each entry records ``probes`` and ``worst_speedup`` (the smallest
vLLM/tile ratio over its probes and both passes). Entries of other GPU architectures in
the shipped table are kept as they are
(:func:`dsv4_evals.bench.tables.other_arch_entries`).

A short ladder (T 1, 64, 512, 8192 with 8 and 64 heads, every candidate) is timed first
and again with the tuned table, against (empty launch + byte floor), and the issue's
targets at T = 64 and 512 are printed with it. The grid is kept small: with one body's
14 tiles a run took 42-75 s on an H200, and the two bodies' 26 tiles should take under
twice that; ``--budget-s`` (300 s) stops starting new boxes past it (those get no entry,
and are listed), so a run stays under 6 minutes.

    python -m dsv4_evals.bench.fused_inv_rope_fp8_quant.tune [--seed 0] [--write] [--json OUT]

``--write`` replaces ``dsv4_policy``'s ``tables/fused_inv_rope_fp8_quant.toml`` (after
validation). Needs vLLM's kernel: ``.upstream/fused_inv_rope_fp8_quant/`` or the vLLM
sources (see :mod:`.upstream`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from dsv4_kernels.fused_inv_rope_fp8_quant import launch
from dsv4_policy import launch_table
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy

from dsv4_evals.bench import paths, probes, tables, timing, tuning
from dsv4_evals.bench.fused_inv_rope_fp8_quant import gates
from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
from dsv4_evals.bench.fused_inv_rope_fp8_quant import upstream as fir_upstream

TABLE = paths.table(h.NAME)
DECODE_GRAPH_ENDS = (1, 512)
"""The smallest and largest T of vLLM's default CUDA-graph capture sizes on sm80/sm90;
each is carved out of :data:`BASE_BOXES` as a box of its own."""
BASE_BOXES = [(1, 16), (17, 64), (65, 128), (129, 256), (257, 512), (513, 2048),
              (2049, 8192)]
"""Boxes of T before the decode graph's ends are carved out: no one tile is best from
T=65 to 512, so each doubling range up to 512 and the prefill ranges get their own; inside
a box the time objective weighs where the best tile changes (H200, 2026-12-03: (2, 1, 1)
at T=18-48 and (2, 2, 1) at T=56-64 with 64 heads). Halving every box from 17 to 512 was
tried on the H200 (2026-12-03): it kept the same tiles at T=64 and T=512, and its 17-32
box at 64 heads, won by the margin in the tuner, fell to 0.95x at T=17-18 in the bench's
never-slower gate, so the boxes stay as they are."""


def carve(boxes: Sequence[tuple[int, int]], points: Sequence[int]) -> list[tuple[int, int]]:
    """``boxes`` with every T in ``points`` made a box of its own, the rest of its box
    kept on either side."""
    out: list[tuple[int, int]] = []
    for lo, hi in boxes:
        for p in sorted(t for t in set(points) if lo <= t <= hi):
            if lo < p:
                out.append((lo, p - 1))
            out.append((p, p))
            lo = p + 1
        if lo <= hi:
            out.append((lo, hi))
    return out


BOXES = carve(BASE_BOXES, DECODE_GRAPH_ENDS)
"""The tuned boxes of T: 1; 2-16; 17-64; 65-128; 129-256; 257-511; 512; 513-2048;
2049-8192. T=1 and T=512 are boxes of one T each because they are the two ends of the FULL
decode graph: vLLM runs a decode step at the smallest CUDA-graph capture size that holds
its batch, and its default sizes (``[1, 2, 4] + range(8, 256, 8) + range(256, 513, 16)``,
512 the default ceiling on sm80 and sm90) put one sequence at T=1 and every batch of 497
to 512 sequences at T=512. A busy server decodes at the ceiling, and there the best tile
is not the one that is best for most of 257-511 (H200, 2026-12-03, 8 heads: (2, 1, 1)
2.77 µs and (2, 2, 1) 2.92 µs at T=448, but 3.09 µs and 2.49 µs at T=512), so the sum
over a wide box's probes kept the wrong tile at the T the graph runs most."""
HEADS = (64, 8, 16, 32, 128)
"""The targets' head counts first, so a run cut short by ``--budget-s`` still has them."""
HEAD_ROWS_TILES = [
    (1, 1, 1), (1, 2, 1), (1, 4, 1), (1, 8, 1), (2, 1, 1), (2, 2, 1), (2, 4, 1), (4, 1, 1),
    (4, 2, 1), (1, 4, 2), (2, 2, 2), (1, 8, 2), (2, 4, 2), (4, 4, 4),
]
"""The head-rows body's tiles: few warps, whole heads per thread."""
BLOCK_ROWS_TILES = [
    (1, 1, 2), (2, 1, 4), (1, 2, 4), (4, 1, 4), (2, 2, 4), (4, 1, 8), (4, 2, 8), (2, 4, 8),
    (8, 1, 8), (4, 4, 8), (8, 1, 16), (4, 2, 16),
]
"""The block-rows body's tiles: enough warps that a thread holds one or two 16-byte
vectors (H200, 2026-12-04: the best at 8 and 64 heads from T=1 to 8,192 were among the
first ten; with one warp it is slower than the head-rows body everywhere). The two
16-warp tiles are one program of 32 blocks per SM at 8 heads and T≈100, where the
8-warp tiles either leave SMs idle or put two programs on some."""
CANDIDATES: list[tuple[int, int, int, str]] = [
    *((*tile, "head_rows") for tile in HEAD_ROWS_TILES),
    *((*tile, "block_rows") for tile in BLOCK_ROWS_TILES),
]
"""(tokens_per_program, heads_per_program, num_warps, body); at most 8 x warps (token,
head) pairs per program (the 128 elements per thread the policy allows)."""
MIN_PROBES = 12
"""Calls a box is timed at, at least: what ``tests/test_provenance.py`` asks of every
shipped entry."""
RANDOM_POINTS = 8
VARIANTS = 1 << 16
LADDER_TOKENS = (1, 64, 512, 8192)
LADDER_HEADS = (8, 64)
COMMAND = "python -m dsv4_evals.bench.fused_inv_rope_fp8_quant.tune --write"
HEADER = ("FusedInvRopeFP8Quant launch table. Entries are written by the tuner "
          f"({COMMAND}) from CUDA-graph replay measurements: a tile is kept only where it "
          "beat vLLM 0.33.0's fused_inv_rope_fp8_quant kernel at every probe of the "
          "entry's box, twice; a key no entry matches gets vLLM's own kernel and launch "
          "unchanged.")


# --------------------------------------------------------------------------- boxes and probes
def box_of(lo: int, hi: int, heads: int) -> dict[str, tuple[int, int]]:
    """The probe rules' box of T in ``lo..hi`` at ``heads`` local heads."""
    return {"num_tokens": (lo, hi), "num_heads": (heads, heads), "variant": (0, VARIANTS - 1)}


def padded_tail(box: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """The box's smallest T that is not a multiple of 4 (vLLM pads the scale buffer's
    T to a multiple of 4, and both kernels write those pad rows), at variant 0."""
    lo, hi = box["num_tokens"]
    odd = next((t for t in range(lo, min(hi, lo + 3) + 1) if t % 4), None)
    return [] if odd is None else [{"num_tokens": odd, "variant": 0}]


def box_probes(box: Mapping[str, tuple[int, int]], seed: int) -> list[probes.Probe]:
    """The box's ends and padded tail, then seeded random calls: ``RANDOM_POINTS`` of
    them, and at least :data:`MIN_PROBES` probes in all."""
    def found(random_points: int) -> list[probes.Probe]:
        return probes.box_probes(box, seed=seed, random_points=random_points,
                                 extremes=padded_tail, corner_fields=("num_tokens",))

    return found(max(RANDOM_POINTS, MIN_PROBES - len(found(0))))


def tune_box(box: dict[str, tuple[int, int]], measure: h.Measure, seed: int, depth: int,
             margin: float, log: list[dict], deadline: float, objective: str = "time"
             ) -> list[tuple[dict[str, tuple[int, int]], probes.Verdict]]:
    """Accepted ``(box, verdict)`` pairs covering parts of ``box``."""
    if time.perf_counter() > deadline:
        print(f"box {box}: skipped, past --budget-s (no entry)", flush=True)
        log.append({"box": {k: list(v) for k, v in box.items()}, "tile": None,
                    "skipped": "budget"})
        return []
    found = box_probes(box, seed)
    started = time.perf_counter()
    verdict = probes.choose_tile(found, CANDIDATES, h.BASELINE, measure, margin=margin,
                                 objective=objective,
                                 log=print)
    measure.forget()
    print(f"box {box['num_tokens']} heads {box['num_heads'][0]}: {verdict.tile} worst "
          f"{verdict.worst_ratio:.3f}x over {verdict.probes} probes "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    log.append({"box": {k: list(v) for k, v in box.items()}, "tile": verdict.tile,
                "worst_ratio": verdict.worst_ratio, "probes": verdict.probes,
                "ratios": verdict.ratios,
                "screened": {str(k): v for k, v in verdict.screened.items()},
                "losing_probes": [p.label() for p in verdict.losing_probes]})
    if verdict.tile is not None:
        return [(box, verdict)]
    lo, hi = box["num_tokens"]
    if depth <= 0 or hi - lo < 2:
        return []
    low, high = probes.split_box(box, "num_tokens")
    return (tune_box(low, measure, seed * 2 + 1, depth - 1, margin, log, deadline, objective)
            + tune_box(high, measure, seed * 2 + 2, depth - 1, margin, log, deadline,
                       objective))


# --------------------------------------------------------------------------- the table
def entry(arch: str, box: Mapping[str, tuple[int, int]], verdict: probes.Verdict,
          machine: Mapping[str, str]) -> policy.Entry:
    """The table entry of an accepted box: its match, tile and evidence."""
    lo, hi = box["num_tokens"]
    heads = box["num_heads"][0]
    return policy.Entry(
        f"{arch}-h{heads}-t{lo}-{hi}",
        {"arch": arch, "num_tokens": policy.Range(lo, hi), "num_heads": heads,
         "head_dim": h.HEAD_DIM, "quant_group_size": h.GROUP, "tma_aligned_scales": 0,
         "quantize": 1},
        policy.Tile(*verdict.tile),  # type: ignore[misc]
        {**machine, "probes": verdict.probes, "passes": 2,
         "worst_speedup": f"{verdict.worst_ratio:.3f}x", "command": COMMAND},
    )


def table_text(arch: str, entries: Sequence[policy.Entry],
               kept: Sequence[policy.Entry] | None = None) -> str:
    """The table to write: every other arch's shipped entries as they are (``kept``,
    default :func:`tables.other_arch_entries`), then this arch's new ones; validated, and
    every new entry carrying its evidence."""
    kept = tables.other_arch_entries(h.NAME, arch) if kept is None else kept
    for e in entries:
        problems = launch_table.provenance_problems(e)
        if problems:
            raise ValueError(f"entry {e.id}: {problems}")
    text = policy.render_table([*kept, *entries], HEADER)
    policy.loads_table(text, "<tuned>")
    return text


# --------------------------------------------------------------------------- the ladder
def ladder(measure: h.Measure, empty_us: float, bytes_per_s: float, arch: str,
           table: object | None = None) -> list[dict[str, Any]]:
    """Every candidate (or, with ``table``, the tile it resolves) at the ladder's calls."""
    rows = []
    for heads in LADDER_HEADS:
        for t in LADDER_TOKENS:
            point = {"num_tokens": t, "num_heads": heads, "variant": 0}
            base = measure(point, h.BASELINE)
            if table is None:
                tiles = {str(tile): measure(point, tile) for tile in CANDIDATES}
            else:
                tile = h.resolved_tile(h.shape_of(point), arch, table)
                tiles = {str(tile): base if tile == h.BASELINE else measure(point, tile)}
            best = min(tiles, key=tiles.__getitem__)
            moved = h.bytes_moved(t, heads)
            ideal = empty_us + h.floor_us(moved.total, bytes_per_s)
            rows.append({"tokens": t, "heads": heads, "upstream_us": base, "tiles_us": tiles,
                         "best": best, "best_us": tiles[best], "speedup": base / tiles[best],
                         "bytes": moved.total, "ideal_us": ideal,
                         "best_vs_ideal": tiles[best] / ideal,
                         "upstream_vs_ideal": base / ideal})
            print(f"T={t:5d} heads={heads:3d}: vLLM {base:8.2f} µs, "
                  f"{'best' if table is None else 'table'} {best} {tiles[best]:8.2f} µs "
                  f"({base / tiles[best]:.2f}x; {tiles[best] / ideal:.2f}x of empty launch + "
                  f"floor {ideal:.2f} µs)", flush=True)
            measure.forget()
    return rows


def targets(rows: Sequence[Mapping]) -> dict[str, dict[str, object]]:
    """The issue's speed-up targets (:data:`gates.SPEEDUP_TARGETS`) at the ladder's T in
    64..512, with the tuned table."""
    found: dict[str, dict[str, object]] = {}
    lo, hi = gates.SPEEDUP_TOKENS
    for r in rows:
        goal = gates.SPEEDUP_TARGETS.get(r["heads"])
        if goal is not None and lo <= r["tokens"] <= hi:
            found[f"T{r['tokens']}-h{r['heads']}"] = {
                "goal": goal, "speedup": r["speedup"], "tile": r["best"],
                "met": r["speedup"] >= goal}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true",
                        help=f"replace the shipped {h.NAME}.toml with the tuned table")
    parser.add_argument("--json", type=Path, default=paths.artifacts() / f"tune-{h.NAME}.json",
                        help="every measurement and the table, as JSON")
    parser.add_argument("--margin", type=float, default=1.05,
                        help="the vLLM/dsv4 ratio a tile must exceed at every probe")
    parser.add_argument("--objective", choices=probes.OBJECTIVES, default="time",
                        help="how the tiles that beat vLLM by the margin everywhere are "
                             "ranked: least summed GPU time over the box's probes (time, "
                             "the default) or largest worst ratio (worst)")
    parser.add_argument("--split-depth", type=int, default=1)
    parser.add_argument("--heads", type=int, nargs="*", default=list(HEADS),
                        help="local head counts to tune (default: 64 8 16 32 128)")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="no new box is started past this many seconds (default 300)")
    parser.add_argument("--target-us", type=float, default=200.0,
                        help="GPU time per captured graph (launches scaled to it)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or launch.interpreting():
        raise SystemExit("dsv4_evals.bench.fused_inv_rope_fp8_quant.tune needs a CUDA GPU "
                         "(and TRITON_INTERPRET unset)")
    started = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device())
    if not launch.quantize_supported(device):
        major, minor = torch.cuda.get_device_capability(device)
        raise SystemExit(f"dsv4_evals.bench.fused_inv_rope_fp8_quant.tune tunes the FP8 "
                         f"output, which Triton builds from compute capability 8.9; this "
                         f"GPU is {major}.{minor}, where vLLM runs the op unquantized and "
                         f"every key keeps vLLM's kernel")
    arch, machine = tuning.this_gpu(device)
    up = fir_upstream.load_kernel()
    pdl = launch.default_launch_pdl(device)
    keys = [launch.CompileKey(*tile, h.HEADS_PER_GROUP, h.NOPE_DIM, h.ROPE_DIM, h.GROUP,
                              False, True, pdl) for tile in CANDIDATES]
    built = launch.warmup(keys, device)
    empty = h.empty_launch_us(device)
    bandwidth = timing.copy_bandwidth_bytes_per_s(device)
    print(f"vLLM's kernel from {up.record['origin']}; {built} binaries warmed; empty launch "
          f"{empty:.2f} µs; copy bandwidth {bandwidth / 1e12:.2f} TB/s; "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    measure = h.Measure(device, up, seed=args.seed, target_us=args.target_us)
    print("ladder (GPU µs per call, CUDA-graph replay):", flush=True)
    before = ladder(measure, empty, bandwidth, arch)

    deadline = started + args.budget_s
    log: list[dict] = []
    accepted = []
    for heads in args.heads:
        for i, (lo, hi) in enumerate(BOXES):
            accepted += tune_box(box_of(lo, hi, heads), measure, args.seed * 1000 + heads * 10
                                 + i, args.split_depth, args.margin, log, deadline,
                                 args.objective)
    entries = [entry(arch, box, verdict, machine) for box, verdict in accepted]
    text = table_text(arch, entries)
    tuned = policy.loads_table(text, "<tuned>")
    print("ladder with the tuned table:", flush=True)
    after = ladder(measure, empty, bandwidth, arch, tuned)
    goals = targets(after)
    for name, goal in goals.items():
        print(f"target {name}: {goal['speedup']:.2f}x (goal {goal['goal']}x) "
              f"{'met' if goal['met'] else 'MISSED'}")
    seconds = time.perf_counter() - started
    timing.write_json(args.json, {
        "arch": arch, **machine, "seed": args.seed, "margin": args.margin,
        "objective": args.objective, "seconds": seconds,
        "measurements": measure.count, "upstream": up.record, "empty_launch_graph_us": empty,
        "copy_bandwidth_tb_s": bandwidth / 1e12, "candidates": [list(t) for t in CANDIDATES],
        "ladder": before, "ladder_with_table": after, "targets": goals, "boxes": log,
        "skipped": [b["box"] for b in log if b.get("skipped")], "table": text})
    print(text)
    if args.write:
        TABLE.write_text(text)
        print(f"wrote {TABLE} ({len(entries)} entries for {arch})")
    print(f"tuned in {seconds:.1f} s ({measure.count} timings); measurements in {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
