"""Tile sweep (``nox -s tune``): measure candidate tiles per shape bucket on this GPU and
write the winners into the policy's C128A launch table.

A bucket is (phase, active width, token range). For each bucket the sweep times every
candidate tile on a representative batch (CUDA-graph replay medians: GPU time, as a
captured model step sees it), then confirms the winner against the baseline launch in
a second, longer measurement. An entry is written only when the winner beats the
baseline by ``--margin`` in both measurements **and** leaves bit-identical buffers
(written and untouched regions). Buckets with no such winner get no entry, so those
keys keep the upstream launch. Entries for other GPUs in the table are kept as they are;
this GPU's entries are replaced. Adjacent token buckets with the same winner merge.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from dsv4_policy import c128a as policy

TABLE = Path(policy.__file__).resolve().parent / "tables" / "c128a.toml"
WIDTHS = (128, 256, 512, 1024, 2048, 4096, 8192)
TOKEN_BUCKETS = ((1, 8), (9, 128), (129, 1024), (1025, 8192), (8193, 1 << 20))
REPRESENTATIVE_TOKENS = (3, 32, 362, 2896, 32768)
MIXED_DECODE = 64
# (tokens_per_program, cols_per_program, num_warps, split_width)
CANDIDATES = (
    (1, 1024, 4, False),
    (1, 1024, 4, True),
    (1, 512, 4, True),
    (1, 256, 2, True),
    (1, 2048, 8, True),
    (2, 512, 4, True),
    (2, 1024, 8, True),
    (4, 256, 4, True),
    (4, 512, 4, True),
    (4, 1024, 8, True),
    (8, 128, 4, True),
    (8, 256, 4, True),
    (8, 512, 8, True),
    (16, 128, 4, True),
    (16, 256, 8, True),
    (32, 128, 8, True),
    (4, 256, 4, False),
    (8, 256, 4, False),
    (16, 128, 4, False),
)


@dataclass(frozen=True)
class Bucket:
    phase: str
    width: int
    tokens: tuple[int, int]
    representative: int

    def shape(self) -> harness.Shape:
        context = self.width * harness.COMPRESS_RATIO
        n = self.representative
        decode, prefill = {
            "decode": (n, 0),
            "prefill": (0, n),
            "mixed": (MIXED_DECODE, n),
        }[self.phase]
        return harness.Shape(f"{self.phase}-w{self.width}-T{n}", decode, prefill, context,
                             num_reqs=min(64, max(decode, 1)))

    def seq_len_range(self) -> tuple[int, int]:
        """Every max_seq_len whose upstream width is this bucket's width (before the
        capacity clamp)."""
        r = harness.COMPRESS_RATIO
        low = 0 if self.width == 128 else (self.width // 2 + 1) * r
        return low, (self.width + 1) * r - 1

    def match(self, arch: str) -> dict:
        lo, hi = self.tokens
        tokens = {
            "decode": {"num_decode_tokens": (lo, hi), "num_prefill_tokens": (0, 0)},
            "prefill": {"num_decode_tokens": (0, 0), "num_prefill_tokens": (lo, hi)},
            "mixed": {"num_decode_tokens": (1, 1 << 20), "num_prefill_tokens": (lo, hi)},
        }[self.phase]
        return {"arch": [arch], "compress_ratio": [harness.COMPRESS_RATIO],
                "max_seq_len": policy.Range(*self.seq_len_range()),
                **{name: policy.Range(lo, hi) for name, (lo, hi) in tokens.items()}}


def buckets() -> list[Bucket]:
    return [Bucket(phase, w, tb, rep)
            for phase in ("decode", "prefill", "mixed")
            for w in WIDTHS
            for tb, rep in zip(TOKEN_BUCKETS, REPRESENTATIVE_TOKENS, strict=True)]


def spec_for(tile: tuple, width: int, label: str = "candidate") -> harness.LaunchSpec:
    return harness.LaunchSpec(label, width, *tile, source=label)


def sweep_bucket(bucket: Bucket, device: torch.device, arch: str) -> dict:
    shape = bucket.shape()
    width = policy.active_width(shape.key(arch))
    inputs = harness.make_inputs(shape, device)
    times = {tile: harness.graph_us(harness.runner(inputs, spec_for(tile, width)),
                                    launches_per_graph=10, reps=10)
             for tile in CANDIDATES}
    baseline_tile = CANDIDATES[0]
    best = min(times, key=times.__getitem__)
    # Confirm with a longer, independent measurement of just the two contenders.
    confirm_base = harness.graph_us(harness.runner(inputs, spec_for(baseline_tile, width)),
                                    launches_per_graph=20, reps=30)
    confirm_best = harness.graph_us(harness.runner(inputs, spec_for(best, width)),
                                    launches_per_graph=20, reps=30)
    identical = harness.outputs_equal(shape, device, spec_for(baseline_tile, width),
                                      spec_for(best, width))
    return {"bucket": bucket, "shape": shape.name, "width": width, "best": best,
            "sweep_speedup": times[baseline_tile] / times[best],
            "confirm_speedup": confirm_base / confirm_best,
            "baseline_us": confirm_base, "best_us": confirm_best, "identical": identical,
            "times": {str(k): v for k, v in times.items()}}


def choose(results: list[dict], margin: float) -> list[dict]:
    """Buckets whose winner is a real, verified improvement."""
    return [r for r in results
            if r["best"] != CANDIDATES[0] and r["identical"]
            and r["sweep_speedup"] >= margin and r["confirm_speedup"] >= margin]


def merge(winners: list[dict]) -> list[dict]:
    """Join adjacent token buckets of one (phase, width) that chose the same tile."""
    merged: list[dict] = []
    for r in sorted(winners, key=lambda r: (r["bucket"].phase, r["bucket"].width,
                                            r["bucket"].tokens)):
        prev = merged[-1] if merged else None
        b = r["bucket"]
        if (prev and prev["bucket"].phase == b.phase and prev["bucket"].width == b.width
                and prev["best"] == r["best"] and prev["tokens"][1] + 1 == b.tokens[0]):
            prev["tokens"] = (prev["tokens"][0], b.tokens[1])
            prev["evidence"].append(r)
        else:
            merged.append({**r, "tokens": b.tokens, "evidence": [r]})
    return merged


def to_entries(merged: list[dict], arch: str, gpu: str, versions: str) -> list:
    entries = []
    today = time.strftime("%Y-%m-%d", time.gmtime())
    for m in merged:
        b = m["bucket"]
        match = b.match(arch)
        key = "num_decode_tokens" if b.phase == "decode" else "num_prefill_tokens"
        match[key] = policy.Range(*m["tokens"])
        tpp, cpp, warps, split = m["best"]
        speedups = ", ".join(f"{e['shape']} {e['confirm_speedup']:.2f}x" for e in m["evidence"])
        entries.append(policy.Entry(
            id=f"{arch}-{b.phase}-w{b.width}-t{m['tokens'][0]}-{m['tokens'][1]}",
            match=match,
            config=policy.Tile(tpp, cpp, warps, split),
            provenance={"gpu": gpu, "date": today, "versions": versions,
                        "speedup_vs_baseline": speedups,
                        "command": "nox -s tune"},
        ))
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, default=1.05,
                        help="minimum speed-up over the baseline launch for an entry")
    parser.add_argument("--table", type=Path, default=TABLE, help="table file to update")
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("--phases", default="decode,prefill,mixed")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA device visible; the tuning sweep measures on a GPU",
              file=sys.stderr)
        return 2
    device = torch.device("cuda")
    info = harness.gpu_info(device)
    arch, gpu = str(info["arch"]), str(info["gpu"])
    versions = f"torch {info['torch']}, triton {info['triton']}, CUDA {info['cuda']}"
    chosen_phases = set(args.phases.split(","))
    todo = [b for b in buckets() if b.phase in chosen_phases]
    results = []
    t0 = time.perf_counter()
    for i, bucket in enumerate(todo, 1):
        r = sweep_bucket(bucket, device, arch)
        results.append(r)
        print(f"[{i:3d}/{len(todo)}] {r['shape']:<24} best {r['best']} "
              f"{r['confirm_speedup']:.2f}x ({r['baseline_us']:.2f} -> {r['best_us']:.2f} µs)"
              f"{'' if r['identical'] else '  OUTPUTS DIFFER'}", flush=True)
        torch.cuda.empty_cache()
    winners = merge(choose(results, args.margin))
    old_text = args.table.read_text() if args.table.exists() else ""
    old = policy.load_table(args.table) if old_text else None
    kept = [e for e in (old.entries if old else []) if arch not in e.match.get("arch", {arch})]
    entries = kept + to_entries(winners, arch, gpu, versions)
    header = ("C128A launch table. Entries are written by `nox -s tune` from measurements; "
              "a key no entry matches gets the upstream launch unchanged.")
    new_text = policy.render_table(entries, header)
    diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                        str(args.table), str(args.table) + " (new)"))
    print(diff or "table unchanged")
    print(f"{len(results)} buckets in {time.perf_counter() - t0:.0f} s; "
          f"{len(winners)} entries for {arch}")
    if any(not r["identical"] for r in results):
        print("error: a candidate tile changed the outputs; table not written", file=sys.stderr)
        return 1
    if not args.dry_run:
        policy.loads_table(new_text, source=str(args.table))  # validate before writing
        args.table.write_text(new_text)
        print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
