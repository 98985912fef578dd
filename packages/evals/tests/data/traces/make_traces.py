"""Write the fixture traces for the ``buckets`` tests, with their ground truth.

Each fixture imitates a rank-0 torch profiler trace of TP8 DeepSeek-V4 decode under
FULL CUDA graphs, like the seed-004 "Trace Result": per graph launch, a stack of layers
whose kernels carry the names that trace lists (``ncclDevKernel_AllReduce_Sum_bf16_
RING_LL``, Marlin linear and Marlin MoE WNA16 kernels, FlashInfer sparse MLA decode,
NCCL all-gather for logits) plus the other DSV4 kernel families and events the reader
must ignore (CPU ops, runtime calls, memsets, flow and metadata events).

The generator labels every kernel with its bucket when it emits it, so the expected
totals come from construction, not from the reader's regexes. Durations are drawn from
a seeded RNG around the seed's per-graph proportions and rounded to the nanosecond,
as Kineto writes them.

Run ``python make_traces.py`` in this folder to rewrite the files; the tests check
that the committed files are exactly what this script produces.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Kernel families: (bucket, name). The means below follow the seed's split of an
# ~18 ms TP8 decode step: ~17.5 ms allreduce, ~2.15 ms Marlin linear, ~1.87 ms sparse
# MLA decode, ~1.02 ms Marlin MoE, ~0.73 ms logits all-gather per graph.
AR = ("TP allreduce", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
AG = ("logits all-gather", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
MARLIN_LINEAR = (
    "GEMM (dense linear)",
    "void marlin::Marlin<(vllm::ScalarTypeId)5, (vllm::ScalarTypeId)3, (vllm::ScalarTypeId)5, "
    "(vllm::ScalarTypeId)5, 256, 1, 8, 8, true, 4, 8, false>(int4 const*, int4 const*, int4*, "
    "int4*, int4 const*, int4 const*, float const*, int4 const*, int const*, int, int, int, int, "
    "int*, bool, bool, bool, int)",
)
MOE = [
    ("MoE routing/experts", "void vllm::moe::topkGatingSoftmax<8, 256, 4, 16, float>(float const*, "
     "bool const*, float*, int, int*, int*, int, int, int)"),
    ("MoE routing/experts", "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, "
     "int*, int*, int, int, int, int, unsigned long, int*)"),
    ("MoE routing/experts", "void marlin_moe_wna16::Marlin<(vllm::ScalarTypeId)5, "
     "(vllm::ScalarTypeId)3, (vllm::ScalarTypeId)5, (vllm::ScalarTypeId)5, 128, 1, 8, 4, true, "
     "4, 8, false>(int4 const*, int4 const*, int4*, int4*, int4 const*, int4 const*, float "
     "const*, int4 const*, int const*, int const*, int const*, int const*, float const*, int, "
     "int, bool, int, int, int, int, int*, bool, bool, bool, int)"),
]
CSA_INDEXER = [
    ("CSA indexer", "fused_indexer_q_rope_quant_kernel"),
    ("CSA indexer", "lightning_indexer_decode_logits_topk_kernel"),
]
SPARSE_MQA = ("CSA sparse MQA", "void flashinfer::trtllm_batch_decode_sparse_mla_dsv4_kernel"
              "<__nv_bfloat16, __nv_fp8_e4m3, 512, 64>(flashinfer::SparseMlaDecodeParams)")
HCA = [
    ("HCA", "build_c128a_topk_metadata_kernel"),
    ("HCA", "hca_dense_compressed_mqa_decode_kernel"),
]
SWA = ("SWA", "_combine_topk_swa_indices_kernel")
MHC = [("mHC", "mhc_pre_fused_kernel"), ("mHC", "mhc_post_fused_kernel")]
OTHER = [
    ("other", "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, "
     "c10::BFloat16 const*, long, c10::BFloat16 const*, float, int, int)"),
    ("other", "triton_poi_fused_add_mul_rotary_0"),
]
MEMCPY = ("other", "Memcpy DtoD (Device -> Device)")

MEAN_US = {
    "TP allreduce": 201.0,
    "logits all-gather": 730.0,
    "GEMM (dense linear)": 24.5,
    "MoE routing/experts": 6.0,
    "CSA indexer": 9.0,
    "CSA sparse MQA": 89.0,
    "HCA": 7.0,
    "SWA": 3.0,
    "mHC": 4.0,
    "other": 5.0,
}
COUNTED = ("kernel", "gpu_memcpy")  # what the shipped patterns count by default


def build(seed: int, graphs: int, layers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trace document and its ground truth: per-bucket total µs and calls."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    truth: dict[str, dict[str, float]] = {}
    t_cpu = 1_000_000.0
    t_gpu = 1_000_050.0
    corr = 1000

    def gpu(bucket: str, name: str, cat: str = "kernel") -> None:
        nonlocal t_gpu
        dur = round(max(0.5, rng.gauss(MEAN_US[bucket], MEAN_US[bucket] * 0.15)), 3)
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": round(t_gpu, 3),
             "dur": dur, "args": {"device": 0, "stream": 7, "correlation": corr,
                                  "graph node id": len(events)}}
        )
        t_gpu += dur + round(rng.uniform(0.5, 2.0), 3)
        if cat in COUNTED:
            entry = truth.setdefault(bucket, {"total_us": 0.0, "calls": 0})
            entry["total_us"] += dur
            entry["calls"] += 1

    for g in range(graphs):
        step = f"## Call CompiledFxGraph decode step {g} ##"
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1,
                       "ts": round(t_cpu, 3), "dur": 11.5, "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "user_annotation", "name": step, "pid": 1, "tid": 1,
                       "ts": round(t_cpu, 3), "dur": 40.0, "args": {}})
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1,
                       "tid": 1, "ts": round(t_cpu + 20.0, 3), "dur": 9.25,
                       "args": {"correlation": corr}})
        events.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": round(t_cpu + 20.0, 3),
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(t_gpu, 3),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
        gpu("other", "Memset (Device)", cat="gpu_memset")
        gpu(*AR)  # the vocab-parallel embedding's allreduce
        for layer in range(layers):
            gpu(*MHC[0])
            gpu(*OTHER[0])
            gpu(*MARLIN_LINEAR)
            if layer % 2 == 0:  # CSA and HCA layers interleave
                for k in CSA_INDEXER:
                    gpu(*k)
                gpu(*SPARSE_MQA)
            else:
                for k in HCA:
                    gpu(*k)
            gpu(*SWA)
            gpu(*OTHER[1])
            gpu(*MARLIN_LINEAR)
            gpu(*AR)
            gpu(*MHC[1])
            for k in MOE:
                gpu(*k)
            gpu(*MOE[2])
            gpu(*AR)
        gpu(*MARLIN_LINEAR)
        gpu(*AG)
        gpu(*MEMCPY, cat="gpu_memcpy")
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                       "pid": 1, "tid": 1, "ts": round(t_cpu + 35.0, 3), "dur": 4.0, "args": {}})
        t_cpu = max(t_cpu + 100.0, t_gpu + 10.0)
        t_gpu = t_cpu + 50.0
        corr += 1

    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA GeForce RTX 3090", "computeMajor": 8,
                              "computeMinor": 6}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "traceEvents": events,
        "traceName": "rank0_decode.json",
        "displayTimeUnit": "ms",
    }
    expected = {
        "graph_launches": graphs,
        "buckets": {
            b: {"total_us": round(v["total_us"], 3), "calls": int(v["calls"])}
            for b, v in sorted(truth.items())
        },
    }
    return doc, expected


FIXTURES = {
    # name: (seed, graphs, layers, gzip?)
    # 43 layers x 2 + 1 = 87 allreduce calls per graph, as in the seed's 19,836 / 227.
    "decode_tp8_rank0.json.gz": (4, 5, 43, True),
    "decode_small.json": (40, 3, 2, False),
}


def render(name: str) -> tuple[bytes, str]:
    """The bytes of fixture ``name`` and its expected-totals JSON text."""
    seed, graphs, layers, zipped = FIXTURES[name]
    doc, expected = build(seed, graphs, layers)
    body = json.dumps(doc, separators=(",", ":")).encode()
    if zipped:
        body = gzip.compress(body, mtime=0)
    return body, json.dumps(expected, indent=2, sort_keys=True) + "\n"


def expected_name(name: str) -> str:
    return name.split(".json")[0] + ".expected.json"


def main() -> None:
    for name in FIXTURES:
        body, expected = render(name)
        (HERE / name).write_bytes(body)
        (HERE / expected_name(name)).write_text(expected)


if __name__ == "__main__":
    main()
