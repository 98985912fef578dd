"""dsv4's compressed slot mapping against vLLM 0.33.0's own function, in vLLM's real code.

Run as a child process by ``test_compressed_slot_mapping_vllm.py``: vLLM decides at
import whether its Triton is real, and on a machine without a GPU it keeps it only with
``CUDA_VISIBLE_DEVICES`` empty, so vLLM's own ``get_compressed_slot_mapping`` (its fill,
then its kernel) runs in Triton's interpreter here. Writes one JSON result: for every
seeded case, whether dsv4's one launch (directly, at several tiles, and through the
plugin's stand-in as every rebound vLLM module calls it) left the same value in every
row of a poisoned buffer and returned the same tensor as vLLM's function; and vLLM's
sparse-MLA builders' metadata with the plugin off and on.

    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 VLLM_TARGET_DEVICE=cpu python csm_vllm_check.py OUT.json
"""

from __future__ import annotations

import importlib
import json
import sys
from types import SimpleNamespace
from typing import Any

import torch

TILES = [(1024, 4), (16, 1), (128, 4)]
TABLE = """schema = 1

[[entry]]
id = "small"
match = { arch = "sm90", num_tokens = { min = 0, max = 40 } }
launch = { tokens_per_program = 16, num_warps = 1 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }

[[entry]]
id = "large"
match = { arch = "sm90", num_tokens = { min = 41, max = 2147483647 } }
launch = { tokens_per_program = 128, num_warps = 4 }
provenance = { gpu = "test", date = "2026-12-02", probes = 12, worst_speedup = "1.000x" }
"""


def cases() -> list[Any]:
    from dsv4_kernels.compressed_slot_mapping.testing import make_step, random_step

    found = [
        make_step(1, decode_contexts=[4, 100, 3000, 77], compress_ratio=4, block_size=64),
        make_step(2, prefill_queries=[(0, 300), (64, 257)], compress_ratio=128, block_size=2),
        make_step(3, decode_contexts=[128, 129, 9000], prefill_queries=[(300, 200)],
                  compress_ratio=4, block_size=64, pad_requests=3, pad_fraction=0.2),
        make_step(4, decode_contexts=[9], prefill_queries=[(0, 30), (0, 11)], replay=True,
                  int32_slots=True, compress_ratio=4, block_size=16),
        make_step(5, decode_contexts=[500, 77], prefill_queries=[(40, 90)], dcp_world_size=2,
                  cp_interleave=8, block_size=8),
        make_step(6, decode_contexts=[5, 6], prefill_queries=[(3, 50)], with_out=False),
        make_step(7, decode_contexts=[1000] * 20, extra_rows=500, int32_slots=True),
    ]
    found += [random_step(seed, max_tokens=300) for seed in range(6)]
    return found


def same(a: Any, b: Any) -> bool:
    if (a.out is None) != (b.out is None):
        return False
    return a.out is None or bool(torch.equal(a.out, b.out))


def compare_functions(original: Any, modules: dict[str, Any]) -> list[dict[str, Any]]:
    from dsv4_kernels.compressed_slot_mapping import launch
    from dsv4_kernels.compressed_slot_mapping.testing import POISON

    rows = []
    for call in cases():
        want, want_result = call.run(original)
        row: dict[str, Any] = {"label": call.label, "poison_left": bool(
            want.out is not None and (want.out == POISON).any()),
            "rows_past": 0 if want.out is None else int(want.out.shape[0] - call.num_tokens)}
        for tpp, warps in TILES:
            got, result = call.run(launch.get_compressed_slot_mapping, tokens_per_program=tpp,
                                   num_warps=warps)
            row[f"tile_{tpp}x{warps}"] = same(got, want) and bool(torch.equal(result,
                                                                             want_result))
        for name, module in modules.items():
            got, result = call.run(module.get_compressed_slot_mapping)
            row[name] = same(got, want) and bool(torch.equal(result, want_result)) and (
                result.dtype == want_result.dtype and result.shape == want_result.shape)
        rows.append(row)
    return rows


def kernel_object_calls(cu: Any) -> list[bool]:
    from dsv4_kernels.compressed_slot_mapping import launch
    from dsv4_kernels.compressed_slot_mapping.testing import POISON, random_step

    found = []
    for seed in range(3):
        call = random_step(70 + seed, max_tokens=200)
        want = torch.full_like(call.out, POISON)
        cu._COMPRESSED_SLOT_MAPPING_KERNEL(*call.kernel_args(want))
        got = torch.full_like(call.out, POISON)
        launch.compressed_slot_mapping_kernel(*call.kernel_args(got), tokens_per_program=64,
                                              num_warps=2)
        found.append(bool(torch.equal(got, want)) and bool((want == POISON).any()))
    return found


def sparse_mla_builder(module: Any, ratio: int) -> Any:
    spec = SimpleNamespace(tokens_per_state=ratio, block_size=256, num_states=256 // ratio)
    config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=65536, hf_config=SimpleNamespace(
            index_topk=512)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=96),
        speculative_config=None,
        parallel_config=SimpleNamespace(decode_context_parallel_size=1,
                                        prefill_context_parallel_size=1),
    )
    return module.DeepseekV4SparseMLAMetadataBuilder(spec, ["layers.2.attn"], config,
                                                      torch.device("cpu"))


def common_metadata(seed: int, ratio: int) -> SimpleNamespace:
    """A CommonAttentionMetadata look-alike with what the builder's build() reads."""
    g = torch.Generator().manual_seed(seed)
    query_lens = [1] * (3 + seed % 4) + [17 + seed, 40][: 1 + seed % 2]
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    starts = torch.tensor([0, *query_lens]).cumsum(0).to(torch.int32)
    seq = torch.tensor([q + int(torch.randint(0, 5000, (1,), generator=g)) for q in query_lens],
                       dtype=torch.int32)
    positions = torch.cat([torch.arange(int(s) - q, int(s)) for s, q in zip(seq, query_lens,
                                                                             strict=True)])
    table = torch.randint(-3, 1 << 20, (num_reqs, 256), generator=g, dtype=torch.int32)
    slots = torch.randint(0, 1 << 30, (num_tokens,), generator=g)
    slots[torch.rand(num_tokens, generator=g) < 0.2] = -1
    req = torch.repeat_interleave(torch.arange(num_reqs, dtype=torch.int32),
                                  torch.tensor(query_lens))

    def token_to_req_indices(buffer: torch.Tensor) -> torch.Tensor:
        buffer[:num_tokens] = req
        return buffer[:num_tokens]

    return SimpleNamespace(
        num_reqs=num_reqs, num_actual_tokens=num_tokens, max_query_len=max(query_lens),
        max_seq_len=int(seq.max()), query_start_loc=starts, query_start_loc_cpu=starts,
        seq_lens=seq, block_table_tensor=table, slot_mapping=slots, positions=positions,
        token_to_req_indices=token_to_req_indices)


def builders_on_and_off(plugin: Any, dispatch: Any) -> list[dict[str, Any]]:
    from dsv4_kernels.compressed_slot_mapping.testing import POISON

    rows = []
    # V4's C4A builder compresses by 4; V4.1's compressed caches by 2.
    for module_name, ratio in (("vllm.models.deepseek_v4.sparse_mla", 4),
                               ("vllm.models.deepseek_v41.sparse_mla", 2)):
        module = importlib.import_module(module_name)
        for seed in range(3):
            sides = {}
            for side in ("off", "on"):
                if side == "off":
                    plugin.unregister()
                else:
                    plugin.register({})
                    plugin.active("compressed_slot_mapping").configure(
                        table=dispatch.table, arch_of=lambda device: "sm90")
                builder = sparse_mla_builder(module, ratio)
                builder.compressed_slot_mapping_buffer.fill_(POISON)
                hits = plugin.active("compressed_slot_mapping")
                before = hits.hits if hits is not None else 0
                meta = builder.build(0, common_metadata(seed, ratio))
                sides[side] = (meta.slot_mapping.clone(),
                               builder.compressed_slot_mapping_buffer.clone(),
                               (hits.hits - before) if hits is not None else 0)
            rows.append({"module": module_name, "seed": seed,
                         "slot_mapping": bool(torch.equal(sides["off"][0], sides["on"][0])),
                         "buffer": bool(torch.equal(sides["off"][1], sides["on"][1])),
                         "hits_off": sides["off"][2], "hits_on": sides["on"][2]})
    return rows


def main(out_path: str) -> int:
    from dsv4_policy.kernels import compressed_slot_mapping as policy
    from dsv4_vllm import plugin
    from dsv4_vllm.kernels import compressed_slot_mapping as target_module
    from vllm.triton_utils import HAS_TRITON

    target = target_module.TARGET
    cu = importlib.import_module(target.aliases[0])
    original = cu.get_compressed_slot_mapping
    result: dict[str, Any] = {"has_triton": bool(HAS_TRITON)}
    result["upstream"] = compare_functions(original, {})
    result["kernel_object"] = kernel_object_calls(cu)
    assert plugin.register({}) is True
    dispatch = plugin.active("compressed_slot_mapping")
    dispatch.configure(table=policy.loads_table(TABLE), arch_of=lambda device: "sm90")
    modules = {name: importlib.import_module(name) for name in target.holders}
    result["rebound"] = {name: m.get_compressed_slot_mapping is dispatch
                         for name, m in modules.items()}
    result["stand_in"] = compare_functions(original, modules)
    result["hits"], result["misses"] = dispatch.hits, dispatch.misses
    result["builders"] = builders_on_and_off(plugin, dispatch)
    plugin.unregister()
    result["restored"] = {name: m.get_compressed_slot_mapping is original
                          for name, m in modules.items()}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
