"""dsv4's SWA decode build against vLLM 0.33.0's own, in vLLM's real code.

Run as a child process by ``test_swa_decode_vllm.py``: vLLM decides at import whether its
Triton is real, and on a machine without a GPU it keeps it only with
``CUDA_VISIBLE_DEVICES`` empty, so vLLM's own Triton kernels (its token-to-request map,
its SWA rows kernel, its prefill metadata kernel) run in Triton's interpreter here. Every
registered target is installed by ``plugin.register()``; the SWA decode stand-in gets a
table that covers every key at the H200 arch, the others keep the CPU's (none), so vLLM's
own kernels serve the plugin-off side. vLLM's compiled FlashMLA is absent, so
``get_mla_metadata`` hands out FlashMLA's empty plan holder (``swa_steps.plan_holders``).
For each seeded step two of vLLM's builders, poisoned alike, build it, one with vLLM's
``build`` and vLLM's rows kernel object and one with the plugin; the JSON result says,
per step, whether every field of the metadata and every builder tensor are bit-identical
and whether the stand-in took the step over.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python swd_vllm_check.py OUT.json SEED
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

import swa_steps as steps

TABLE = """schema = 1

[[entry]]
id = "few"
match = { arch = "sm90", num_tokens = { min = 1, max = 16 } }
launch = { tokens_per_program = 4, cols_per_program = 128, num_warps = 2 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "many"
match = { arch = "sm90", num_tokens = { min = 17 } }
launch = { tokens_per_program = 16, cols_per_program = 32, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""

Case = tuple[str, int, Any, dict[str, Any], Callable[[Any], tuple[Any, ...]] | None]
"""``(label, stand-in hits expected, step, builder options, build arguments from the
step's copy)``; the step is a ``CommonAttentionMetadata``, or ``("groups", cam, second)``
for a whole step of both SWA groups through vLLM's ``build_attn_metadata``."""


def cases(gen: torch.Generator) -> list[Case]:
    found: list[Case] = []
    for real, padded, context in ((1, None, 4096), (16, None, 1 << 17), (40, None, 1 << 20),
                                  (5, 8, 1 << 17), (30, 48, 2000), (1, 2, 300), (0, 6, 100),
                                  (3, None, 5)):
        found.append((f"decode-{real}of{padded or real}-ctx{context}", 1,
                      steps.step(gen, real, padded=padded, context=context), {}, None))
    replayed = steps.step(gen, 12, padded=16, context=400)
    replay = steps.replay_start(gen, replayed)
    mixed_replayed = steps.step(gen, 5, query_lens=[1, 1, 1, 1, 60], context=700)
    mixed_replay = steps.replay_start(gen, mixed_replayed)
    found += [
        ("decode-tokens-past-requests", 1, steps.step(gen, 7, num_tokens=10), {}, None),
        ("decode-requests-without-tokens", 1, steps.step(gen, 6, padded=9, num_tokens=7), {},
         None),
        ("decode-replay-start", 1, replayed, {}, lambda cam: (0, cam, False, replay)),
        ("mixed-replay-start", 1, mixed_replayed, {},
         lambda cam: (0, cam, False, mixed_replay)),
        ("decode-flashmla-subclass", 1, steps.step(gen, 20, padded=24), {"cls": "flashmla"},
         None),
        ("decode-window-64", 1, steps.step(gen, 9, context=500),
         {"window": 64, "config": steps.vllm_config(window=64)}, None),
    ]
    whole = steps.step(gen, 13, padded=16, context=1 << 17)
    found.append(("step-both-swa-groups", 2, ("groups", whole, steps.second_group(gen, whole)),
                  {}, None))
    whole = steps.step(gen, 6, query_lens=[1, 1, 1, 1, 33, 17], context=2000)
    found.append(("mixed-step-both-swa-groups", 2,
                  ("groups", whole, steps.second_group(gen, whole)), {}, None))
    found += [
        ("prefill", 0, steps.step(gen, 2, query_lens=[20, 9], context=3000), {}, None),
        ("mixed", 1, steps.step(gen, 4, query_lens=[1, 1, 1, 30], context=5000), {}, None),
        ("mixed-many-decodes-two-prefills", 1,
         steps.step(gen, 22, query_lens=[1] * 20 + [40, 7], context=3000), {"cls": "flashmla"},
         None),
        ("mixed-padding-tokens-past-the-prefill", 1,
         steps.step(gen, 3, query_lens=[1, 1, 25], num_tokens=30), {}, None),
        ("mixed-prefill-first", 0, steps.step(gen, 3, query_lens=[12, 1, 1], context=900), {},
         None),
        ("mixed-speculative-decoding-builder", 0,
         steps.step(gen, 3, query_lens=[1, 1, 9], context=900),
         {"config": steps.vllm_config(speculative_tokens=1)}, None),
        ("empty-step", 0, steps.step(gen, 0, padded=3, num_tokens=0), {}, None),
        ("speculative-decoding-builder", 0, steps.step(gen, 4, query_lens=[2, 2, 2, 2]),
         {"config": steps.vllm_config(speculative_tokens=1)}, None),
        ("speculative-decoding-builder-single-tokens", 0, steps.step(gen, 4),
         {"config": steps.vllm_config(speculative_tokens=1)}, None),
        ("dspark-builder-causal-step", 0, steps.step(gen, 4),
         {"config": steps.vllm_config(speculative_tokens=2, dspark=True)}, None),
        ("non-causal-step", 0, steps.step(gen, 4, causal=False), {}, None),
        ("other-subclass", 0, steps.step(gen, 4),
         {"cls": type("Sub", (steps.builder_class(),), {})}, None),
    ]
    return found


def main(out_path: str, seed: int) -> int:
    from dsv4_policy.kernels import swa_decode as policy
    from dsv4_vllm import plugin
    from vllm.triton_utils import HAS_TRITON

    module = importlib.import_module(steps.MODULE)
    cls = module.DeepseekSparseSWAMetadataBuilder
    vllm_build = cls.__dict__["build"]
    vllm_rows = module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    result: dict[str, Any] = {"has_triton": bool(HAS_TRITON)}
    assert plugin.register({}) is True
    dispatch = plugin.active("swa_decode")
    dispatch.configure(table=policy.loads_table(TABLE), arch_of=lambda device: "sm90")
    plugin_rows = module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL
    result["patched"] = cls.__dict__["build"] is dispatch and plugin_rows is not vllm_rows

    def switch(side: str) -> None:
        cls.build = vllm_build if side == "off" else dispatch
        module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL = (vllm_rows if side == "off"
                                                       else plugin_rows)

    gen = torch.Generator().manual_seed(seed)
    rows = []
    with steps.plan_holders(module) as plans:
        for label, hits, cam, options, arguments in cases(gen):
            built: dict[str, Any] = {}
            holders: dict[str, Any] = {}
            for side in ("off", "on"):
                if isinstance(cam, tuple):
                    target: Any = steps.swa_groups(seed=seed)
                else:
                    target = steps.make_builder(**options, seed=seed)
                before = dispatch.hits
                made = len(plans)
                switch(side)
                try:
                    if isinstance(cam, tuple):
                        out = steps.build_step(target, copy.copy(cam[1]), cam[2])
                    else:
                        mine = copy.copy(cam)
                        out = target.build(*(arguments(mine) if arguments else (0, mine)))
                    built[side] = (out, dispatch.hits - before, None)
                except Exception as exc:  # both sides must fail alike
                    built[side] = (None, dispatch.hits - before, f"{type(exc).__name__}: {exc}")
                finally:
                    switch("on")
                holders[side] = (target, len(plans) - made)
            diffs = steps.differences(built["off"][0], built["on"][0], "metadata")
            pairs = (zip(holders["off"][0].builders(), holders["on"][0].builders(), strict=True)
                     if isinstance(cam, tuple) else [(holders["off"][0], holders["on"][0])])
            for a, b in pairs:
                diffs += steps.differences(steps.buffers(a), steps.buffers(b), "builder")
            if holders["off"][1] != holders["on"][1]:
                diffs.append(f"plan holders: {holders['off'][1]} vs {holders['on'][1]}")
            first = built["off"][0]
            if isinstance(cam, tuple) and first is not None:
                first = first[holders["off"][0].layers()[0]]
            rows.append({"case": label, "expected_hits": hits, "hits": built["on"][1],
                         "off_hits": built["off"][1], "differences": diffs[:5],
                         "errors": [built["off"][2], built["on"][2]],
                         "decode": first is not None and first.num_decode_tokens > 0})
    result["cases"] = rows
    result["hits"], result["misses"] = dispatch.hits, dispatch.misses
    plugin.unregister()
    result["restored"] = (cls.__dict__["build"] is vllm_build
                          and module._COMPUTE_SWA_INDICES_AND_LENS_KERNEL is vllm_rows)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
