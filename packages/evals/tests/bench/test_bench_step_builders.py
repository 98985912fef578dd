"""vLLM 0.33.0's own DeepSeek-V4 metadata builders, a whole step, plugin off and on (CPU).

The harness (:mod:`dsv4_evals.bench.step.harness`) makes vLLM's KV-cache groups and builders
for the DeepSeek-V4-Flash layout at tiny sizes and runs vLLM's ``build_attn_metadata``
over a ladder of decode, prefill, mixed and CUDA-graph-padded steps. vLLM's kernels and
dsv4's run in Triton's interpreter, so the check runs in a child process: vLLM decides at
import whether its Triton is real, and it keeps it on a machine without a GPU only with
``CUDA_VISIBLE_DEVICES`` empty, which this test sets for the child alone. The plugin's
dispatchers are told the arch is ``sm90`` so the shipped tables hit and dsv4's kernels
run. Nothing is timed: the builders run, and every tensor they return is identical with
the plugin on and off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

EXPECTED_BUILDERS = {
    "g0:DeepseekSparseSWAFlashMLA:head512": "DeepseekSparseSWAFlashMLAMetadataBuilder",
    "g1:DeepseekSparseSWAFlashMLA:head512": "DeepseekSparseSWAFlashMLAMetadataBuilder",
    "g2:DeepseekV4FlashMLA:ratio4": "DeepseekV4FlashMLAMetadataBuilder",
    "g2:DeepseekV32Indexer:ratio4": "DeepseekV32IndexerMetadataBuilder",
    "g2:DeepseekV4FlashMLA:ratio128": "DeepseekV4FlashMLAMetadataBuilder",
    "g3:Compressor:head2048": "CompressorMetadataBuilder",
    "g3:Compressor:head512": "CompressorMetadataBuilder",
    "g4:Compressor:head1024": "CompressorMetadataBuilder",
}


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run ``python -m dsv4_evals.bench.step.bench --cpu-check`` in a child process; its
    JSON result."""
    out = tmp_path_factory.mktemp("step") / "cpu-check.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "dsv4_evals.bench.step.bench", "--cpu-check", "--cpu-profile",
         "--json", str(out), "--seed", str(torch.randint(0, 1 << 30, (1,)).item())],
        env=env, capture_output=True, text=True, timeout=1500)
    if not out.exists():
        pytest.fail(f"dsv4_evals.bench.step.bench --cpu-check wrote no result (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}", pytrace=False)
    data = json.loads(out.read_text())
    data["_exit"] = proc.returncode
    data["_output"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    return data


def test_every_builder_of_every_kv_cache_group_runs(cpu_check: dict[str, Any]) -> None:
    groups = cpu_check["groups"]
    assert [g["layers"] for g in groups] == [22, 21, 62, 42, 20]
    made = {b["label"]: b["class"].rsplit(".", 1)[1] for g in groups for b in g["builders"]}
    assert made == EXPECTED_BUILDERS
    assert sum(b["layers"] for g in groups for b in g["builders"]) == 167
    points = cpu_check["points"]
    assert len(points) == 9 and {p["kind"] for p in points} == {
        "decode", "prefill", "mixed", "padded"}
    for p in points:
        assert "error" not in p, f"{p['point']}: {p.get('error')}\n{p.get('traceback')}"
        assert p["builders"] == list(EXPECTED_BUILDERS), p["point"]
        assert all(n > 0 for n in p["tensors_compared"].values()), p
        profile = p["profile"]["off"]["builders"]
        assert set(EXPECTED_BUILDERS) <= set(profile), p["point"]
        assert all(profile[b]["aten_ops"] > 0 for b in EXPECTED_BUILDERS), p["point"]


def test_outputs_are_bit_identical_with_the_plugin_on_and_off(cpu_check: dict[str, Any]) -> None:
    assert cpu_check["_exit"] == 0, cpu_check["_output"]
    assert cpu_check["failures"] == []
    for p in cpu_check["points"]:
        assert p["identical"], (p["point"], p["differences"])
    hits = {k: sum(p["plugin"][k] for p in cpu_check["points"])
            for k in cpu_check["points"][0]["plugin"]}
    # The plugin really ran dsv4's kernels: one C128A call per step, three compressed slot
    # mappings, and both SWA builders on the one step the SWA table covers (T >= 129).
    assert hits["c128a_hits"] >= 6 and hits["compressed_slot_mapping_hits"] >= 18, hits
    assert hits["swa_hits"] >= 2, hits
    assert cpu_check["arch_override"] == "sm90"
    assert "get_mla_metadata" in cpu_check["shims"]


def test_the_comparison_sees_one_flipped_element(cpu_check: dict[str, Any]) -> None:
    control = cpu_check["negative_control"]
    assert control["clean_differences"] == []
    assert control["detected"] and len(control["checks"]) == 2, control
    assert all(c["reported"] for c in control["checks"])


def test_the_steps_are_real_data(cpu_check: dict[str, Any]) -> None:
    for p in cpu_check["points"]:
        inputs = p["inputs"]
        assert all(f > 0 for f in inputs["block_table_nonzero"]), p["point"]
        assert inputs["valid_slots"] == p["real_tokens"], p["point"]
        if p["real_tokens"] > 1:
            assert inputs["distinct_positions"] > 1, p["point"]
        if p["padded_reqs"]:
            assert p["num_reqs"] == p["padded_reqs"] > p["decode_reqs"] == p["real_tokens"]
            assert inputs["seq_lens"][0] == 0  # padding requests have no context


@dataclasses.dataclass
class _Meta:
    indices: torch.Tensor
    lens: torch.Tensor
    width: int
    chunks: list[Any]


def _meta(gen: torch.Generator) -> _Meta:
    base = torch.randint(-1, 1 << 20, (6, 256), generator=gen, dtype=torch.int32)
    return _Meta(base[:, :128], torch.randint(0, 99, (6,), generator=gen, dtype=torch.int32),
                 128, [torch.rand(3, generator=gen), {"k": 1}])


def test_differences_sees_values_strides_and_structure() -> None:
    from dsv4_evals.bench.step import harness as h

    gen = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, (1,))))
    a = _meta(gen)

    def row_strided(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty((6, 256), dtype=t.dtype)
        out[:, :128] = t
        return out[:, :128]

    b = dataclasses.replace(a, indices=row_strided(a.indices), lens=a.lens.clone(),
                            chunks=[a.chunks[0].clone(), dict(a.chunks[1])])
    assert h.differences(a, b) == []
    b.indices[3, 7] += 1
    assert len(h.differences(a, b, "m")) == 1 and "indices" in h.differences(a, b, "m")[0]
    b.indices[3, 7] -= 1
    assert h.differences(a, b) == []
    b.indices = b.indices.contiguous()  # same values, another row stride
    assert "stride" in h.differences(a, b)[0]
    b.indices = row_strided(a.indices)
    b.chunks[0][1] = -0.0 if a.chunks[0][1] == 0.0 else a.chunks[0][1] * 2
    assert "chunks" in h.differences(a, b)[0]
    b.chunks[0] = a.chunks[0].clone()
    b.chunks[1]["k"] = 2
    assert "chunks" in h.differences(a, b)[0]
    b.chunks[1]["k"] = 1
    b.width = 256
    assert h.differences(a, b) == [".width: 128 vs 256"]
