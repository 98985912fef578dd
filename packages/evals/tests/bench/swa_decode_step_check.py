"""vLLM's own SWA rows kernel object and one DeepSeek-V4 step with the SWA decode take-over.

Run as a child process by ``test_bench_swa_decode_cpu.py`` (vLLM keeps its real Triton on
a machine without a GPU only with ``CUDA_VISIBLE_DEVICES`` empty). Two parts, one JSON
result:

- ``rows``: the bench's vLLM side with vLLM's own launch object
  (``_COMPUTE_SWA_INDICES_AND_LENS_KERNEL``, through vLLM's launcher) leaves the same
  buffers as with the copy extracted into ``FOLDER``, and dsv4's side the same buffers
  and views as vLLM's, on seeded steps (padded, padding only, replaying);
- ``points``: the step harness builds the tiny deployment's 8 builders plugin off and
  on, as the step benchmark's CPU check does, with the SWA decode table covering every
  key (the shipped one has no entry before the GPU tuner ran), and compares every tensor
  of every ladder point bit for bit, counting the take-over's hits.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python swa_decode_step_check.py OUT.json SEED FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

TABLE = """schema = 1

[[entry]]
id = "all"
match = { arch = "sm90", index_width = 128, num_tokens = { min = 1 } }
launch = { tokens_per_program = 4, cols_per_program = 64, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""
POINTS = [{"num_tokens": 5, "padding": 1}, {"num_tokens": 70, "padding": 0},
          {"num_tokens": 8, "padding": 2}, {"num_tokens": 1, "padding": 0}]


def rows_part(seed: int, folder: Path) -> dict[str, object]:
    from dsv4_evals.bench.swa_decode import harness as h
    from dsv4_kernels.swa_decode.testing import make_step

    cpu = torch.device("cpu")
    own = h.rows_kernel("vllm")
    copy = h.rows_kernel("extracted", folders=[folder])
    calls = [h.call_of(p, cpu, seed + i) for i, p in enumerate(POINTS)]
    calls.append(make_step(seed, [3, 200, 4096, 129], pad_tokens=3, device=cpu, replay=True))
    steps = []
    for call in calls:
        a, b = call.fresh(), call.fresh()
        h.vllm_decode_path(a, own)
        h.vllm_decode_path(b, copy)
        steps.append({"step": call.label,
                      "vllm_vs_extracted": [n for n in h.BUFFERS
                                            if not torch.equal(getattr(a, n), getattr(b, n))],
                      "written": [n for n in h.BUFFERS
                                  if not torch.equal(getattr(a, n), getattr(call, n))],
                      "vllm_vs_dsv4": h.differences(call, (4, 64, 1), own)})
    return {"origin": own.origin, "extracted": copy.origin, "steps": steps}


def main(out: str, seed: int, folder: str) -> int:
    from dsv4_evals.bench.step import harness as sh
    from dsv4_policy.kernels import swa_decode as policy

    result: dict[str, object] = {"rows": rows_part(seed, Path(folder))}
    sides = sh.make_sides(sh.TINY, torch.device("cpu"), arch_of=lambda device: "sm90")
    dispatch = sides.switch.dispatches["swa_decode"]
    dispatch.configure(table=policy.loads_table(TABLE))
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadataBuilder

    builders = sum(isinstance(b, DeepseekSparseSWAMetadataBuilder)
                   for _, b in sides.on.labelled())
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for point in sh.tiny_ladder():
        before = dispatch.hits
        diffs, info = sh.compare_point(sides, point, gen)
        rows.append({"point": point.name, "kind": point.kind, "differences": diffs[:5],
                     "hits": dispatch.hits - before, "tensors": info["tensors"]})
    sides.switch.close()
    result.update(points=rows, swa_builders=builders, hits=dispatch.hits,
                  misses=dispatch.misses)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
