"""FusedInvRopeFP8Quant's tuner end to end, on a synthetic GPU.

The tuner's parts (boxes, probes, entries, the table text) have their own tests in
``test_bench_fused_inv_rope_fp8_quant_cpu.py``. These run :func:`tune.main` itself, with
everything that needs a GPU replaced by a small model of one: a timing function of the
call and the tile (:func:`synthetic_us`), and fixed answers for the empty launch, the copy
bandwidth and the GPU's identity. So a defect in how the tuner strings its parts
together (the ladder, the boxes and their splits, the budget, the written table, the
JSON) fails here, on the CPU runner, and not half-way through a run on a GPU.

The model gives each body a region it wins (the block-rows body small calls, the
head-rows body large ones), and one box no tile wins (16 heads at T=129-192), so the
tests can say which body each entry must name and where the table must stay silent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dsv4_evals.bench import probes
from dsv4_evals.bench.fused_inv_rope_fp8_quant import harness as h
from dsv4_evals.bench.fused_inv_rope_fp8_quant import tune
from dsv4_policy import launch_table
from dsv4_policy.kernels import fused_inv_rope_fp8_quant as policy

MACHINE = {"gpu": "Synthetic GPU", "date": "2026-12-05",
           "versions": "torch x, triton y, CUDA z"}
SMS = 132
LOST = (16, 129, 192)
"""(heads, first T, last T) where every tile is as slow as vLLM's kernel."""


def synthetic_us(point: Mapping[str, int], tile: Any) -> float:
    """GPU µs of one call in the model: a launch, a cost per (token, head) pair, and a
    dependent chain per wave of programs that grows with the pairs a program holds.
    vLLM's kernel pays a high cost per pair; the block-rows body launches cheaper and the
    head-rows body moves pairs cheaper, so small calls go to the one and large calls to
    the other. ``variant`` moves a time by under 1%, as run-to-run noise would."""
    t, heads = point["num_tokens"], point["num_heads"]
    pairs = t * heads
    jitter = 1.0 + 0.001 * (point.get("variant", 0) % 7)
    base = (0.9 + 0.004 * pairs) * jitter
    if tile == h.BASELINE:
        return base
    if heads == LOST[0] and LOST[1] <= t <= LOST[2]:
        return base
    tpp, hpp, warps, body = tile
    programs = math.ceil(t / tpp) * math.ceil(heads / hpp)
    waves = math.ceil(programs / (SMS * 4))
    launch_us, per_pair = (0.7, 0.0012) if body == "block_rows" else (0.8, 0.0009)
    chain = 0.02 * waves * tpp * hpp / warps
    return (launch_us + per_pair * pairs + chain) * jitter


class SyntheticMeasure:
    """:class:`harness.Measure`'s interface over :func:`synthetic_us`; a tile listed in
    ``differs`` stops the run as a byte difference from vLLM's kernel does."""

    differs: tuple = ()

    def __init__(self, device: Any, up: Any, seed: int = 0, target_us: float = 200.0
                 ) -> None:
        self.count = 0

    def __call__(self, point: Mapping[str, int], tile: Any) -> float:
        if tile in self.differs:
            raise SystemExit(f"tile {tile}: outputs differ from vLLM's: synthetic")
        self.count += 1
        return synthetic_us(point, tile)

    def forget(self) -> None:
        pass


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    """The tuner's GPU-facing calls answered by the model; the shipped table holds one
    sm100 entry (which a tune for sm90 must keep as it is), and the table the tuner
    writes is a file under ``tmp_path``."""
    warmed: list = []
    measures: list[SyntheticMeasure] = []

    def measure(*args: Any, **kwargs: Any) -> SyntheticMeasure:
        measures.append(SyntheticMeasure(*args, **kwargs))
        return measures[-1]

    def warmup(keys: list, device: Any) -> int:
        warmed.extend(keys)
        return len(keys)

    monkeypatch.setattr(tune.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(tune.launch, "interpreting", lambda: False)
    monkeypatch.setattr(tune.launch, "quantize_supported", lambda device: True)
    monkeypatch.setattr(tune.launch, "default_launch_pdl", lambda device: True)
    monkeypatch.setattr(tune.launch, "warmup", warmup)
    monkeypatch.setattr(tune.tuning, "this_gpu", lambda device: ("sm90", dict(MACHINE)))
    monkeypatch.setattr(tune.fir_upstream, "load_kernel",
                        lambda: SimpleNamespace(record={"origin": "synthetic"}))
    monkeypatch.setattr(tune.h, "empty_launch_us", lambda device: 0.73)
    monkeypatch.setattr(tune.timing, "copy_bandwidth_bytes_per_s", lambda device: 4.2e12)
    monkeypatch.setattr(tune.h, "Measure", measure)
    table = tmp_path / "fused_inv_rope_fp8_quant.toml"
    table.write_text("untouched\n")
    monkeypatch.setattr(tune, "TABLE", table)
    other = tune.entry("sm100", tune.box_of(65, 512, 64), _verdict((1, 2, 1, "head_rows")),
                       MACHINE)
    monkeypatch.setattr(policy.FILES, "_shipped", policy.make_table([other]))
    return SimpleNamespace(table=table, json=tmp_path / "tune.json", warmed=warmed,
                           measures=measures, other=other)


def _verdict(tile: tuple, worst: float = 1.2) -> probes.Verdict:
    return probes.Verdict(tile, worst, 12)


def _run(gpu: SimpleNamespace, *extra: str) -> dict:
    assert tune.main(["--write", "--json", str(gpu.json), *extra]) == 0
    return json.loads(gpu.json.read_text())


def test_a_tune_writes_a_valid_table_of_both_bodies_from_its_measurements(
        gpu: SimpleNamespace) -> None:
    found = _run(gpu, "--heads", "64", "8", "16")
    text = gpu.table.read_text()
    assert text == found["table"]
    table = policy.loads_table(text, "<written>")
    assert table.entries[0] == gpu.other, "the other GPU's entry is kept as it was"
    mine = h.entries_for("sm90", table)
    assert len(mine) == len(table.entries) - 1 and all(e.id.startswith("sm90-") for e in mine)
    bodies = set()
    for e in mine:
        assert launch_table.provenance_problems(e) == [], e.id
        assert float(e.provenance["worst_speedup"].rstrip("x")) > 1.05, e.id
        assert e.provenance["gpu"] == MACHINE["gpu"]
        box = h.entry_box(e)
        tile = policy.resolve(policy.Key("sm90", box["num_tokens"][0], box["num_heads"][0]),
                              table).compile_key()
        assert (*tile,) in [tuple(c) for c in tune.CANDIDATES], e.id
        bodies.add(tile[3])
    assert bodies == {"head_rows", "block_rows"}
    # The model's winners: the block-rows body at one token, the head-rows body at 8,192.
    for heads in (64, 8):
        small = policy.resolve(policy.Key("sm90", 1, heads), table).compile_key()
        large = policy.resolve(policy.Key("sm90", 8192, heads), table).compile_key()
        assert small[3] == "block_rows" and large[3] == "head_rows", (heads, small, large)


def test_a_box_no_tile_wins_is_split_once_and_the_lost_half_keeps_vllms_kernel(
        gpu: SimpleNamespace) -> None:
    found = _run(gpu, "--heads", "16")
    table = policy.loads_table(gpu.table.read_text(), "<written>")
    boxes = [(b["box"]["num_tokens"], b["tile"]) for b in found["boxes"]]
    assert ([129, 256], None) in boxes, "the whole box is lost first"
    assert ([129, 192], None) in boxes and any(
        box == [193, 256] and tile is not None for box, tile in boxes), boxes
    for t in (129, 150, 192):
        assert h.resolved_tile(h.Shape(t, 16), "sm90", table) == h.BASELINE, t
    for t in (193, 256, 100, 257):
        assert h.resolved_tile(h.Shape(t, 16), "sm90", table) != h.BASELINE, t
    assert found["skipped"] == []


def test_every_candidate_is_warmed_as_the_deployment_runs_it(gpu: SimpleNamespace) -> None:
    _run(gpu, "--heads", "8")
    assert {tuple(k[:4]) for k in gpu.warmed} == {tuple(c) for c in tune.CANDIDATES}
    for key in gpu.warmed:
        assert key.quantize and key.launch_pdl and not key.tma_aligned_scales
        assert (key.heads_per_group, key.nope_dim, key.rope_dim, key.quant_group_size) == (
            h.HEADS_PER_GROUP, h.NOPE_DIM, h.ROPE_DIM, h.GROUP)


def test_the_ladders_and_targets_are_reported(gpu: SimpleNamespace) -> None:
    found = _run(gpu, "--heads", "64", "8")
    before, after = found["ladder"], found["ladder_with_table"]
    calls = [(t, heads) for heads in tune.LADDER_HEADS for t in tune.LADDER_TOKENS]
    assert [(r["tokens"], r["heads"]) for r in before] == calls
    assert [(r["tokens"], r["heads"]) for r in after] == calls
    for row in before:
        assert len(row["tiles_us"]) == len(tune.CANDIDATES)
        assert row["best_us"] == min(row["tiles_us"].values())
        point = {"num_tokens": row["tokens"], "num_heads": row["heads"], "variant": 0}
        assert row["upstream_us"] == synthetic_us(point, h.BASELINE)
        assert row["ideal_us"] == pytest.approx(
            0.73 + h.floor_us(h.bytes_moved(row["tokens"], row["heads"]).total, 4.2e12))
    table = policy.loads_table(found["table"], "<written>")
    for row in after:
        (tile,) = row["tiles_us"]
        assert tile == str(h.resolved_tile(h.Shape(row["tokens"], row["heads"]), "sm90",
                                           table))
    assert set(found["targets"]) == {"T64-h64", "T512-h64", "T64-h8", "T512-h8"}
    for goal in found["targets"].values():
        assert goal["met"] == (goal["speedup"] >= goal["goal"])
    assert found["measurements"] == gpu.measures[0].count > 0
    assert found["candidates"] == [list(c) for c in tune.CANDIDATES]


def test_past_the_budget_no_box_is_started_and_none_gets_an_entry(
        gpu: SimpleNamespace) -> None:
    found = _run(gpu, "--heads", "64", "8", "--budget-s", "0")
    assert len(found["skipped"]) == 2 * len(tune.BOXES)
    table = policy.loads_table(gpu.table.read_text(), "<written>")
    assert list(table.entries) == [gpu.other]
    for goal in found["targets"].values():
        assert goal["speedup"] == 1.0 and not goal["met"]


def test_a_tile_that_writes_other_bytes_stops_the_run_and_writes_nothing(
        gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SyntheticMeasure, "differs", (tune.CANDIDATES[-1],))
    with pytest.raises(SystemExit, match="outputs differ from vLLM's"):
        tune.main(["--write", "--json", str(gpu.json), "--heads", "8"])
    assert gpu.table.read_text() == "untouched\n"
    assert not gpu.json.exists()


def test_a_gpu_without_fp8_output_is_refused_before_anything_runs(
        gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune.launch, "quantize_supported", lambda device: False)
    monkeypatch.setattr(tune.torch.cuda, "get_device_capability", lambda device: (8, 0))
    with pytest.raises(SystemExit, match=r"compute capability 8\.9; this GPU is 8\.0"):
        tune.main(["--write", "--json", str(gpu.json)])
    assert gpu.table.read_text() == "untouched\n" and not gpu.measures and not gpu.warmed
