"""dsv4's indexer decode build against vLLM 0.33.0's own, in vLLM's real code.

Run as a child process by ``test_indexer_decode_vllm.py``: vLLM decides at import whether
its Triton is real, and on a machine without a GPU it keeps it only with
``CUDA_VISIBLE_DEVICES`` empty, so vLLM's own Triton kernels (its compressed slot
mapping, its prefill chunk metadata, its uniform-decode flattening) run in Triton's
interpreter here. Every registered target is installed by ``plugin.register()``; the
indexer decode stand-in gets a table that covers every key, the others their shipped
tables, all at the H200 arch. For each seeded step two of vLLM's builders, poisoned,
build it, one with vLLM's ``build`` and one with the stand-in; the JSON result says, per
step, whether every field of the metadata and every builder tensor are bit-identical and
whether the stand-in took the step over.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python idm_vllm_check.py OUT.json
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

import indexer_steps as steps

TABLE = """schema = 1

[[entry]]
id = "all"
match = { arch = "sm90", num_tokens = { min = 1 } }
launch = { tokens_per_program = 32, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""


def cases(gen: torch.Generator) -> list[tuple[str, bool, Any, dict[str, Any]]]:
    """``(label, taken over?, step, builder options)``."""
    found: list[tuple[str, bool, Any, dict[str, Any]]] = []
    for real, padded, context in ((1, None, 4096), (16, None, 1 << 17), (40, None, 1 << 20),
                                  (5, 8, 1 << 17), (30, 48, 2000), (1, 2, 300), (0, 6, 100)):
        found.append((f"decode-{real}of{padded or real}-ctx{context}", True,
                      steps.step(gen, real, padded=padded, context=context), {}))
    found += [
        ("decode-tokens-past-requests", True, steps.step(gen, 7, num_tokens=10), {}),
        ("decode-requests-without-tokens", True, steps.step(gen, 6, padded=9, num_tokens=7), {}),
        ("prefill", False, steps.step(gen, 2, query_lens=[20, 9], context=3000), {}),
        ("mixed", False, steps.step(gen, 4, query_lens=[1, 1, 1, 30], context=5000), {}),
        ("host-says-decode-device-says-longer", False,
         steps.step(gen, 3, query_lens=[1, 3, 1], max_query_len=1), {}),
        ("empty-step", False, steps.step(gen, 0, padded=3, num_tokens=0), {}),
        ("speculative-decoding-builder", False, steps.step(gen, 4, query_lens=[2, 2, 2, 2]),
         {"config": steps.vllm_config(speculative_tokens=1)}),
        ("speculative-decoding-builder-single-tokens", False, steps.step(gen, 4),
         {"config": steps.vllm_config(speculative_tokens=1)}),
        ("v32-ratio-one", False, steps.step(gen, 4), {"ratio": 1}),
    ]
    return found


def main(out_path: str) -> int:
    from dsv4_policy.kernels import indexer_decode as policy
    from dsv4_vllm import plugin
    from vllm.triton_utils import HAS_TRITON

    module = importlib.import_module(steps.MODULE)
    cls = module.DeepseekV32IndexerMetadataBuilder
    vllm_build = cls.__dict__["build"]
    result: dict[str, Any] = {"has_triton": bool(HAS_TRITON)}
    assert plugin.register({}) is True
    dispatch = plugin.active("indexer_decode")
    dispatch.configure(table=policy.loads_table(TABLE), arch_of=lambda device: "sm90")
    for name in ("compressed_slot_mapping",):
        plugin.active(name).configure(arch_of=lambda device: "sm90")
    result["patched"] = cls.__dict__["build"] is dispatch
    gen = torch.Generator().manual_seed(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    rows = []
    for label, hit, cam, options in cases(gen):
        off = steps.make_builder(module, **options)
        on = steps.make_builder(module, **options)
        built = {}
        for side, builder in (("off", off), ("on", on)):
            cls.build = vllm_build if side == "off" else dispatch
            hits = dispatch.hits
            try:
                built[side] = (builder.build(0, cam), dispatch.hits - hits, None)
            except Exception as exc:  # both sides must fail alike
                built[side] = (None, dispatch.hits - hits, f"{type(exc).__name__}: {exc}")
            finally:
                cls.build = dispatch
        diffs = steps.differences(built["off"][0], built["on"][0], "metadata")
        diffs += steps.differences(steps.buffers(off), steps.buffers(on), "builder")
        rows.append({"case": label, "expected_hit": hit, "hit": built["on"][1] == 1,
                     "off_hits": built["off"][1], "differences": diffs[:5],
                     "errors": [built["off"][2], built["on"][2]],
                     "decode": built["off"][0] is not None
                     and built["off"][0].decode is not None})
    result["cases"] = rows
    result["hits"], result["misses"] = dispatch.hits, dispatch.misses
    plugin.unregister()
    result["restored"] = cls.__dict__["build"] is vllm_build
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
