"""FusedInvRopeFP8Quant's bench layer on the CPU: what its GPU targets rest on.

The byte counts of the floor, the tuner's probes and the table it writes (other arches'
entries kept, every entry with its evidence), the gates as functions of plain numbers,
the per-step estimate, vLLM's kernel extracted from its sources (and refused when they
are not the expected ones), and both kernels run in Triton's interpreter through the
harness's comparison (``bench-cpu`` sets ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
from dsv4_evals.bench import probes
from dsv4_evals.bench.fused_inv_rope_fp8_quant import copy_floor, gates, report, tune, upstream
from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
from dsv4_evals.bench.registry import ReportContext
from dsv4_policy import launch_table
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy

MACHINE = {"gpu": "NVIDIA H200", "date": "2026-12-02", "versions": "torch, triton, CUDA"}


# --------------------------------------------------------------------------- bytes and floors
def test_bytes_moved_counts_what_a_call_must_read_and_write() -> None:
    one = h.bytes_moved(1, 64)
    assert one == h.Bytes(read_o=64 * 512 * 2, positions=8, cos_sin=64 * 4,
                          write_out=64 * 512, scales=4 * 64 * 4 * 4)
    assert one.total == sum(one)
    # Packed UE8M0: one byte per 128 lanes; the T pad rows (to a multiple of 4) counted.
    assert h.bytes_moved(5, 8, tma_aligned_scales=True).scales == 8 * 8 * 4
    assert h.bytes_moved(4, 8).scales == h.bytes_moved(1, 8).scales == 4 * 8 * 4 * 4
    off = h.bytes_moved(3, 8, quantize=False)
    assert off.write_out == off.read_o == 3 * 8 * 512 * 2 and off.scales == 0
    assert h.shape_bytes(h.Shape(64, 8)) == h.bytes_moved(64, 8)
    assert h.floor_us(4_200_000, 4.2e12) == pytest.approx(1.0)


# --------------------------------------------------------------------------- the tuner
def test_the_empty_launch_is_timed_in_graphs_as_large_as_small_calls(monkeypatch) -> None:
    """The floor's launch term: graphs of the small calls' size, the median reading (a
    single high reading must not raise the floor)."""
    readings = iter([0.93, 0.72, 0.71])
    sizes = []

    def fake(device: object, launches_per_graph: int = 20) -> float:
        sizes.append(launches_per_graph)
        return next(readings)

    monkeypatch.setattr(h.timing, "empty_launch_graph_us", fake)
    assert h.empty_launch_us("cuda") == 0.72
    assert sizes == [h.MAX_LAUNCHES] * h.EMPTY_READINGS == [100, 100, 100]


def test_candidates_are_tiles_the_policy_accepts() -> None:
    assert len(set(tune.CANDIDATES)) == len(tune.CANDIDATES)
    assert (1, 1, 1, "head_rows") in tune.CANDIDATES
    for tile in tune.CANDIDATES:
        assert policy.tile_problems(*tile) == [], tile
    # Both bodies are candidates, and so is each one where it is meant to win: one warp of
    # whole heads (head rows), one 16-byte vector per thread (block rows).
    assert {tile[3] for tile in tune.CANDIDATES} == set(policy.BODIES)
    assert (2, 1, 4, "block_rows") in tune.CANDIDATES
    # The bitwise sweep's check tiles take both bodies too.
    assert {tile[3] for tile in h.CHECK_TILES} == set(policy.BODIES)
    for tile in h.CHECK_TILES:
        assert policy.tile_problems(*tile) == [], tile
    # The boxes tile T = 1..8,192 without a gap or an overlap, and the FULL decode
    # graph's two ends, T=1 and the default top capture size 512, are boxes of their own.
    assert tune.BOXES[0] == (1, 1) and tune.BOXES[-1][1] == 8192
    for (_, hi), (lo, top) in zip(tune.BOXES, tune.BOXES[1:], strict=False):
        assert lo == hi + 1 and top >= lo
    assert {(t, t) for t in tune.DECODE_GRAPH_ENDS} <= set(tune.BOXES)
    assert sorted(tune.HEADS) == [8, 16, 32, 64, 128]


def test_every_candidate_and_shipped_tile_builds_offline_for_sm90_and_sm80() -> None:
    """Every tile the tuner may write and every tile the shipped table holds, built by
    Triton for the H200 (FP8 output, PDL, FP32 scales: what the tuner times) and in the
    A100's form (sm80: unquantized, no PDL), with no GPU: a tile that cannot compile
    fails here, not in the middle of a tuning run or a served step."""
    import dataclasses

    from dsv4_kernels import offline_build
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    tiles = dict.fromkeys([*tune.CANDIDATES, *((e.config.tokens_per_program,
                                                e.config.heads_per_program,
                                                e.config.num_warps, e.config.body)
                                              for e in policy.shipped_table().entries)])
    specs = [testing.Build(*tile, capability, quantize=capability == (9, 0),
                           launch_pdl=capability == (9, 0))
             for tile in tiles for capability in ((9, 0), (8, 0))]
    results = json.loads(offline_build.run_child(
        "dsv4_kernels.fused_inv_rope_fp8_quant.testing", "builds_json",
        json.dumps([dataclasses.asdict(s) for s in specs])))
    assert len(results) == len(specs) >= 2 * len(tune.CANDIDATES)
    failed = [(r["build"], r["error"]) for r in results if not r["ok"]]
    assert not failed, failed


def test_carve_makes_each_point_a_box_and_keeps_the_rest() -> None:
    boxes = [(1, 16), (17, 64), (65, 128)]
    assert tune.carve(boxes, (1, 40, 128)) == [(1, 1), (2, 16), (17, 39), (40, 40),
                                                 (41, 64), (65, 127), (128, 128)]
    assert tune.carve(boxes, ()) == boxes
    assert tune.carve([(5, 5)], (5, 9)) == [(5, 5)]


@pytest.mark.parametrize("heads", tune.HEADS)
def test_every_box_gets_enough_distinct_probes_inside_it(heads: int) -> None:
    boxes = [tune.box_of(lo, hi, heads) for lo, hi in tune.BOXES]
    boxes += [half for box in boxes if box["num_tokens"][1] > box["num_tokens"][0]
              for half in probes.split_box(box, "num_tokens")]
    for seed, box in enumerate(boxes):
        found = tune.box_probes(box, seed)
        points = [p.point for p in found]
        assert len(points) >= tune.MIN_PROBES, box
        assert len({probes.key_of(p) for p in points}) == len(points)
        for p in points:
            assert all(box[k][0] <= v <= box[k][1] for k, v in p.items()), (box, p)
        tokens = {p["num_tokens"] for p in points}
        lo, hi = box["num_tokens"]
        assert {lo, hi} <= tokens
        if hi - lo >= 3:
            assert any(t % 4 for t in tokens), "a T with scale pad rows is probed"


def _verdict(tile: tuple = (1, 4, 1, "block_rows"), worst: float = 1.234) -> probes.Verdict:
    return probes.Verdict(tile, worst, 12)


def test_an_entry_matches_its_box_only_and_carries_its_evidence() -> None:
    new = tune.entry("sm90", tune.box_of(65, 512, 64), _verdict(), MACHINE)
    table = policy.loads_table(tune.table_text("sm90", [new], kept=[]))
    (found,) = table.entries
    assert found.id == "sm90-h64-t65-512"
    assert launch_table.provenance_problems(found) == []
    assert found.provenance["probes"] == 12 and found.provenance["worst_speedup"] == "1.234x"
    assert found.provenance["command"] == tune.COMMAND
    hit = policy.resolve(policy.Key("sm90", 100, 64), table)
    assert hit.source == "table:sm90-h64-t65-512"
    assert hit.compile_key() == (1, 4, 1, "block_rows")  # the body travels with the tile
    for key in (policy.Key("sm90", 64, 64), policy.Key("sm90", 513, 64),
                policy.Key("sm90", 100, 8), policy.Key("sm90", 100, 64, tma_aligned_scales=1),
                policy.Key("sm90", 100, 64, quantize=0), policy.Key("sm100", 100, 64)):
        assert policy.resolve(key, table) is policy.baseline(key), key


def test_a_tune_keeps_every_other_arch_entry_and_replaces_its_own(monkeypatch) -> None:
    other = tune.entry("sm100", tune.box_of(65, 512, 64), _verdict((1, 2, 1)), MACHINE)
    old = tune.entry("sm90", tune.box_of(65, 512, 64), _verdict((1, 2, 1)), MACHINE)
    monkeypatch.setattr(policy.FILES, "_shipped", policy.make_table([other, old]))
    new = tune.entry("sm90", tune.box_of(2, 64, 8), _verdict(), MACHINE)
    table = policy.loads_table(tune.table_text("sm90", [new]))
    assert [e.id for e in table.entries] == ["sm100-h64-t65-512", "sm90-h8-t2-64"]
    assert table.entries[0] == other


def test_an_entry_slower_than_vllm_somewhere_is_never_written() -> None:
    slow = tune.entry("sm90", tune.box_of(2, 64, 8), _verdict(worst=0.99), MACHINE)
    with pytest.raises(ValueError, match="worst_speedup"):
        tune.table_text("sm90", [slow], kept=[])


def test_the_targets_are_read_at_t_64_to_512_for_64_and_8_heads() -> None:
    rows = [{"tokens": t, "heads": heads, "speedup": s, "best": "(1, 4, 1)"}
            for t, heads, s in ((1, 64, 1.0), (64, 64, 1.6), (512, 8, 1.1), (8192, 64, 2.0),
                                (512, 16, 1.0))]
    found = tune.targets(rows)
    assert set(found) == {"T64-h64", "T512-h8"}
    assert found["T64-h64"]["met"] and not found["T512-h8"]["met"]


# --------------------------------------------------------------------------- the gates
ROW = {"shape": "T64-h64", "tokens": 64, "heads": 64, "tile": "(1, 4, 1)", "identical": True,
       "mismatch": None, "baseline_unchanged": False, "speedup": 1.6, "table_us": 2.2,
       "ideal_us": 1.8}


@pytest.mark.parametrize(("change", "fragment"), [
    ({}, None),
    ({"speedup": 1.45}, None),
    ({"table_us": 2.4}, None),
    ({"tokens": 1, "speedup": 0.9}, "below 0.97"),
    ({"identical": False, "mismatch": "1 scale buffer element differs"}, "outputs differ"),
    ({"tile": "upstream", "baseline_unchanged": True, "speedup": 1.0, "table_us": 9.0}, None),
    ({"tile": "upstream", "baseline_unchanged": False, "speedup": 1.0}, "not vLLM's unchanged"),
])
def test_anchor_gates(change: dict, fragment: str | None) -> None:
    """The gate: equal bytes, vLLM's launch where no entry, never slower; nothing else."""
    found = gates.anchor_failures({**ROW, **change})
    if fragment is None:
        assert found == []
    else:
        assert len(found) == 1 and fragment in found[0], found


@pytest.mark.parametrize(("change", "fragment"), [
    ({}, None),
    ({"speedup": 1.45}, "below the 1.5x target"),
    ({"heads": 8, "speedup": 1.25}, None),
    ({"heads": 8, "speedup": 1.15}, "below the 1.2x target"),
    ({"heads": 16, "speedup": 1.05}, None),
    ({"tokens": 1024, "speedup": 1.05}, None),
    ({"tokens": 16, "speedup": 1.0, "table_us": 9.0}, None),
    ({"table_us": 2.4}, "above 1.3x"),
    ({"tile": "upstream", "baseline_unchanged": True, "speedup": 1.0, "table_us": 9.0}, None),
])
def test_speed_targets_are_reported(change: dict, fragment: str | None) -> None:
    found = gates.target_misses({**ROW, **change})
    if fragment is None:
        assert found == []
    else:
        assert len(found) == 1 and fragment in found[0], found


def test_a_floor_miss_names_the_copy_floor_when_measured() -> None:
    (line,) = gates.target_misses({**ROW, "table_us": 2.4, "copy_floor_us": 2.0})
    assert "above 1.3x" in line and "copy floor of these bytes is 2.00 µs" in line
    assert "1.11x the same" in line and "the table 1.20x of it" in line
    assert gates.target_misses({**ROW, "copy_floor_us": 2.0}) == []


def test_the_floor_table_shows_the_copy_floor_only_where_measured() -> None:
    row = {**ROW, "bytes_total": 6_400_000, "floor_us": 1.5, "upstream_us": 5.0,
           "upstream_vs_ideal": 2.5, "table_vs_ideal": 1.2}
    plain = report.floor_markdown([row])
    assert "copy floor" not in plain and "| T64-h64 |" in plain
    both = report.floor_markdown([{**row, "copy_floor_us": 2.0}, {**row, "shape": "T1-h8"}])
    assert "| copy floor µs | table / copy |" in both
    assert "| 2.00 | 1.10x | yes |" in both and "| – | – | yes |" in both


def test_key_and_equality_gates() -> None:
    key = {"entry": "sm90-h8-t2-64", "key": {"num_tokens": 5}, "ratio": 1.01,
           "readings": [1.01], "identical": True}
    assert gates.failures([ROW], [key], {"calls": 520, "mismatches": []}) == []
    slow = gates.key_failures({**key, "ratio": 0.96, "readings": [0.95, 0.96, 0.97]})
    assert len(slow) == 1 and "below 0.97" in slow[0] and "0.950" in slow[0]
    assert "outputs differ" in gates.key_failures({**key, "identical": False})[0]
    assert gates.equality_failures(None) == []
    assert "fewer than 500" in gates.equality_failures({"calls": 499, "mismatches": []})[0]
    assert gates.equality_failures({"calls": 520, "mismatches": ["T3-h8 differs"]}) == [
        "bitwise sweep: T3-h8 differs"]


# --------------------------------------------------------------------------- boxes and report
def test_random_keys_drawn_inside_an_entry_hit_it() -> None:
    new = tune.entry("sm90", tune.box_of(2, 64, 8), _verdict(), MACHINE)
    table = policy.make_table([new])
    (entry,) = h.entries_for("sm90", table)
    box = h.entry_box(entry)
    assert box == {"num_tokens": (2, 64), "num_heads": (8, 8), "tma_aligned_scales": (0, 0),
                   "quantize": (1, 1)}
    assert [p["num_tokens"] for p in h.entry_ends(box)] == [2, 64]
    for _, point in probes.keys_in_boxes([box], 50, seed=7):
        assert h.resolved(h.shape_of(point), "sm90", table).source == f"table:{entry.id}"
    assert h.entries_for("sm100", table) == []
    open_ended = policy.Entry("x", {"arch": "sm90", "num_tokens": policy.Range(513)},
                              policy.Tile(1, 2, 1), {})
    assert h.entry_box(open_ended)["num_tokens"] == (513, h.MAX_TOKENS)
    assert h.entry_box(open_ended)["num_heads"] == (1, 128)


def test_a_miss_is_vllms_launch_unchanged_on_the_shipped_table() -> None:
    assert h.baseline_unchanged(h.Shape(64, 64), "sm80")
    assert h.resolved_tile(h.Shape(64, 64), "sm80") == h.BASELINE


def test_the_per_step_estimate_is_43_calls_at_decode_t_1_64_512() -> None:
    rows = [{"tokens": t, "heads": heads, "tile": "upstream", "source": "baseline",
             "upstream_us": 2.0, "table_us": 1.5} for heads in (64, 8) for t in (1, 2, 64, 512)]
    steps = report.per_step(rows)
    assert [(r["tokens"], r["heads"]) for r in steps] == [(1, 64), (64, 64), (512, 64),
                                                          (1, 8), (64, 8), (512, 8)]
    assert steps[0]["upstream_step_us"] == pytest.approx(86.0)
    assert steps[0]["saved_step_us"] == pytest.approx(21.5)
    text = report.per_step_markdown(steps, "NVIDIA H200")
    assert "x43 attention layers" in text and "| 512 | 8 |" in text


# --------------------------------------------------------------------------- vLLM's kernel
def _installed_module() -> str:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations, "bench-cpu installs vLLM"
    root = Path(next(iter(spec.submodule_search_locations))).parent
    return (root / upstream.MODULE).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sources_zip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vllm") / "vllm-sources.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(upstream.MODULE, _installed_module())
    return path


@pytest.fixture(scope="module")
def extracted(sources_zip: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("upstream")
    upstream.extract(zip_path=sources_zip, out=out)
    return out


def test_the_extraction_is_vllms_kernel_with_its_launch_facts(extracted: Path,
                                                               sources_zip: Path) -> None:
    record = upstream.current(extracted)
    assert record is not None
    assert record["origin"] == f"zip {sources_zip.name}" and record["vllm"] == "0.33.0"
    assert record["launch"] == upstream.EXPECTED
    assert record["module_sha256"] == hashlib.sha256(
        _installed_module().encode("utf-8")).hexdigest()
    text = (extracted / upstream.FILE).read_text()
    assert "@triton.jit" in text and "def kernel(" in text and "staticmethod" not in text


def test_a_changed_extraction_is_not_current(extracted: Path, tmp_path: Path) -> None:
    for name in (upstream.FILE, upstream.RECORD):
        (tmp_path / name).write_bytes((extracted / name).read_bytes())
    assert upstream.current(tmp_path) is not None
    with open(tmp_path / upstream.FILE, "a") as handle:
        handle.write("\n# edited\n")
    assert upstream.current(tmp_path) is None


def test_a_source_with_other_launch_facts_is_refused() -> None:
    text = _installed_module().replace("eps=1e-10", "eps=1e-12")
    with pytest.raises(upstream.UpstreamError, match="launch facts"):
        upstream.extract_source(text)
    with pytest.raises(upstream.UpstreamError, match=r"no FusedInvRopeFP8QuantKernel\.kernel"):
        upstream.extract_source("class FusedInvRopeFP8QuantKernel:\n    pass\n")


def test_a_wheel_the_lock_does_not_list_is_refused(sources_zip: Path, monkeypatch) -> None:
    monkeypatch.setattr(upstream, "locked_wheel_hashes", lambda lock: {"0" * 64})
    with pytest.raises(upstream.UpstreamError, match=r"uv\.lock lists"):
        upstream.read_vllm_module(upstream.MODULE, wheel=sources_zip)


def test_the_bundle_is_checked_before_it_is_read(sources_zip: Path, tmp_path: Path,
                                                 monkeypatch) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "vllm-0.33.0-sources.zip").write_bytes(sources_zip.read_bytes())
    digest = hashlib.sha256(sources_zip.read_bytes()).hexdigest()
    manifest = {"vllm": "0.33.0", "wheel_sha256": "a" * 64,
                "sources": {"file": "vllm-0.33.0-sources.zip", "sha256": digest}}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("DSV4_VLLM_SOURCES", str(bundle))
    monkeypatch.setattr(upstream, "locked_wheel_hashes", lambda lock: {"a" * 64})
    text, record = upstream.read_vllm_module(upstream.MODULE)
    assert record["origin"] == "sources bundle vllm-0.33.0-sources.zip"
    assert text == _installed_module()
    monkeypatch.setattr(upstream, "locked_wheel_hashes", lambda lock: {"b" * 64})
    with pytest.raises(upstream.UpstreamError, match="does not list"):
        upstream.read_vllm_module(upstream.MODULE)
    monkeypatch.setattr(upstream, "locked_wheel_hashes", lambda lock: {"a" * 64})
    (bundle / "manifest.json").write_text(json.dumps(
        {**manifest, "sources": {**manifest["sources"], "sha256": "c" * 64}}))
    with pytest.raises(upstream.UpstreamError, match="damaged"):
        upstream.read_vllm_module(upstream.MODULE)
    (bundle / "manifest.json").unlink()
    monkeypatch.setattr(upstream, "_installed", lambda member: None)
    with pytest.raises(upstream.UpstreamError, match=r"no vLLM 0\.33\.0 sources"):
        upstream.read_vllm_module(upstream.MODULE)


# --------------------------------------------------------------------------- the interpreter
@pytest.fixture(scope="module")
def vllm_kernel(extracted: Path) -> upstream.Upstream:
    from dsv4_kernels.fused_inv_rope_fp8_quant import launch

    if not launch.interpreting():
        raise RuntimeError("run these tests with TRITON_INTERPRET=1 (Triton's interpreter), "
                           "as bench-cpu does")
    return upstream.load_kernel(extracted)


@pytest.mark.parametrize(("shape", "tile"), [
    (h.Shape(1, 8), (1, 1, 1, "head_rows")),
    (h.Shape(3, 8, tma_aligned_scales=True), (1, 4, 1, "head_rows")),
    (h.Shape(5, 16), (2, 2, 2, "head_rows")),
    (h.Shape(2, 8, quantize=False), (1, 8, 2, "head_rows")),
    (h.Shape(6, 8, rope_kind="swa"), (4, 4, 4, "head_rows")),
    (h.Shape(1, 8), (1, 1, 2, "block_rows")),
    (h.Shape(3, 8, tma_aligned_scales=True), (2, 1, 4, "block_rows")),
    (h.Shape(5, 16), (4, 2, 8, "block_rows")),
    (h.Shape(2, 8, quantize=False), (4, 1, 8, "block_rows")),
    (h.Shape(6, 8, rope_kind="swa"), (2, 2, 4, "block_rows")),
])
def test_both_kernels_write_the_same_bytes_in_the_interpreter(vllm_kernel, shape, tile) -> None:
    call = h.make_call(shape, "cpu", seed=3)
    assert h.mismatch(call, tile, vllm_kernel) is None
    assert h.outputs_equal(call, tile, vllm_kernel)


@pytest.mark.parametrize(("tokens", "heads", "tile"), [(3, 8, (1, 1)), (5, 16, (4, 2)),
                                                    (2, 8, (8, 4))])
def test_the_copy_floor_writes_every_row_once(vllm_kernel, tokens, heads, tile) -> None:
    """The copy floor's launch moves the bytes it is priced for: every FP8 lane of every
    row and one FP32 per 128 lanes, over buffers poisoned first (rows past the last
    program's live ones are masked, so a tile larger than the rows writes nothing extra)."""
    import torch
    from dsv4_kernels.fused_inv_rope_fp8_quant import testing

    o = testing.attention_output(tokens, heads, seed=11)
    run = copy_floor.CopyLaunch(o, tile, h.GROUP, launch_pdl=False)
    run.out.view(torch.uint8).fill_(0x7F)
    run.scales.fill_(float("nan"))
    run()
    rows = o.reshape(tokens * heads, -1)
    written = run.out.view(torch.uint8)
    assert not (written == 0x7F).any(), "a lane kept its poison (0x7F is NaN in e4m3)"
    assert torch.equal(run.scales, rows[:, ::h.GROUP].float())
    # Every tile writes the same bytes (the interpreter's FP8 cast is not the GPU's, so
    # the lanes are compared across tiles rather than with torch's cast).
    one = copy_floor.CopyLaunch(o, (1, 1), h.GROUP, launch_pdl=False)
    one()
    assert torch.equal(written, one.out.view(torch.uint8))


def test_the_copy_floor_refuses_what_it_cannot_price() -> None:
    import torch

    o = torch.ones((4, 8, 512), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="contiguous bf16"):
        copy_floor.CopyLaunch(o.transpose(0, 1), (1, 1), h.GROUP, launch_pdl=False)
    with pytest.raises(ValueError, match="contiguous bf16"):
        copy_floor.CopyLaunch(o.float(), (1, 1), h.GROUP, launch_pdl=False)
    with pytest.raises(ValueError, match="not a multiple of the quantisation group 96"):
        copy_floor.CopyLaunch(o, (1, 1), 96, launch_pdl=False)


def test_a_differing_byte_is_caught(vllm_kernel) -> None:
    class Off(upstream.Upstream):
        def fused_inv_rope_fp8_quant(self, *args, **kwargs):
            out, scales = super().fused_inv_rope_fp8_quant(*args, **kwargs)
            scales[0, 0, 0] = 2.0 * scales[0, 0, 0] + 1.0
            return out, scales

    off = Off(vllm_kernel.kernel, vllm_kernel.launch, vllm_kernel.record)
    found = h.mismatch(h.make_call(h.Shape(3, 8), "cpu"), (1, 2, 1, "head_rows"), off)
    assert found is not None and "scale buffer" in found and "(function)" in found


def test_the_report_checks_the_kernel_without_a_gpu(vllm_kernel, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(upstream, "load_kernel", lambda out=None: vllm_kernel)
    steps = [{"tokens": 64, "heads": 64, "source": "baseline", "upstream_us": 4.0,
              "table_us": 4.0, "upstream_step_us": 172.0, "table_step_us": 172.0,
              "saved_step_us": 0.0}]
    (tmp_path / "bench-fused_inv_rope_fp8_quant.json").write_text(json.dumps(
        {"machine": {"gpu": "NVIDIA H200"}, "per_step": steps}))
    section = report.cpu_section(ReportContext(out=tmp_path, artifacts=tmp_path))
    assert section.bad == ()
    assert all(r["reference"] and r["vllm"] for r in section.data["interpreter"])
    assert "Per decode step on NVIDIA H200" in section.markdown
    assert {r["call"] for r in section.data["launches"]} >= {"T1-h64", "T512-h8"}
