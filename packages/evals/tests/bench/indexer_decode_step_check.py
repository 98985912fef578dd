"""One DeepSeek-V4 step through vLLM's own builders with the indexer decode take-over on.

Run as a child process by ``test_bench_indexer_decode_cpu.py`` (vLLM keeps its real
Triton on a machine without a GPU only with ``CUDA_VISIBLE_DEVICES`` empty): the step
harness builds the tiny deployment's 8 builders plugin off and on, as the step
benchmark's CPU check does, but with the indexer decode table covering every key (the
shipped one has no entry before the GPU tuner ran), and compares every tensor of every
ladder point bit for bit. Writes one JSON result.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python indexer_decode_step_check.py OUT.json SEED
"""

from __future__ import annotations

import json
import sys

import torch

TABLE = """schema = 1

[[entry]]
id = "all"
match = { arch = "sm90", compress_ratio = 4, num_tokens = { min = 1 } }
launch = { tokens_per_program = 64, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""


def main(out: str, seed: int) -> int:
    from dsv4_evals.bench.step import harness as h
    from dsv4_policy.kernels import indexer_decode as policy

    sides = h.make_sides(h.TINY, torch.device("cpu"), arch_of=lambda device: "sm90")
    dispatch = sides.switch.dispatches["indexer_decode"]
    dispatch.configure(table=policy.loads_table(TABLE))
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for point in h.tiny_ladder():
        before = dispatch.hits
        diffs, info = h.compare_point(sides, point, gen)
        rows.append({"point": point.name, "kind": point.kind, "differences": diffs[:5],
                     "hits": dispatch.hits - before, "tensors": info["tensors"]})
    sides.switch.close()
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"points": rows, "hits": dispatch.hits, "misses": dispatch.misses}, handle,
                  indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2])))
