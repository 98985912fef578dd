"""The indexer decode bench layer on the CPU: what its GPU targets rest on.

The two sides the bench and the tuner time (vLLM's decode-path ops and dsv4's host pass
and launch) leave the same buffers, views and host facts on the anchor steps and on the
tuner's probes, in Triton's interpreter (``bench-cpu`` sets ``TRITON_INTERPRET=1``); the
tuner's candidates, probes and entries are what the policy accepts, with their evidence;
the report's CPU section finds nothing bad. And one DeepSeek-V4 step through vLLM's own 8
builders (the step harness, as the step benchmark's CPU check runs it) with the take-over
covering every key: every decode and padded point taken over, every tensor identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dsv4_evals.bench.indexer_decode import harness as h
from dsv4_evals.bench.indexer_decode import report, tune
from dsv4_evals.bench.registry import ReportContext
from dsv4_policy import launch_table
from dsv4_policy.kernels import indexer_decode as policy

CPU = torch.device("cpu")
MACHINE = {"gpu": "NVIDIA H200", "date": "2026-12-02", "versions": "torch, triton, CUDA"}


def test_the_two_sides_agree_on_every_anchor_step() -> None:
    for shape in h.anchor_shapes():
        call = h.make_call(shape, CPU)
        assert h.outputs_equal(call, (64, 1)), shape.label
        assert h.resolved_tile(call, "sm80") == h.BASELINE


def test_the_comparison_sees_a_wrong_element() -> None:
    call = h.make_call(h.Shape(8), CPU)
    want, got = call.fresh(), call.fresh()
    h.vllm_decode_path(want)
    h.dsv4_decode_path(got, (16, 1))
    assert torch.equal(want.expanded_seq_lens, got.expanded_seq_lens)
    got.expanded_seq_lens[3] += 1
    assert not torch.equal(want.expanded_seq_lens, got.expanded_seq_lens)


def test_candidates_are_tiles_the_policy_accepts() -> None:
    assert len(set(tune.CANDIDATES)) == len(tune.CANDIDATES)
    for tile in tune.CANDIDATES:
        assert policy.tile_problems(*tile) == [], tile
    assert tune.TOKEN_BOXES[0] == (1, 1) and tune.TOKEN_BOXES[-1][1] == h.BUFFER


@pytest.mark.parametrize("tokens", tune.TOKEN_BOXES)
def test_every_box_gets_its_probes_inside_it_and_both_sides_agree_there(tokens) -> None:
    box = {"num_tokens": tokens, "num_reqs": tokens}
    points = tune.box_points(box, 5, 8)
    assert len(points) >= tune.MIN_PROBES
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)
    for p in points:
        assert all(lo <= p[k] <= hi for k, (lo, hi) in box.items()), p
        assert set(p) == set(box) | ({"variant"} if tokens == (1, 1) else set()), p
    assert points == tune.box_points(box, 5, 8)
    for p in points[:3]:
        call = h.call_of(p, CPU, 7)
        assert (call.num_reqs, call.num_tokens) == (p["num_reqs"], p["num_tokens"])
        assert h.outputs_equal(call, (128, 2)), p


def test_the_one_token_box_is_timed_at_its_probes_each_a_step_of_its_own() -> None:
    box = {"num_tokens": (1, 1), "num_reqs": (1, 1)}
    points = tune.box_points(box, 3, 8)
    assert len(points) == tune.MIN_PROBES
    assert len({p["variant"] for p in points}) == tune.MIN_PROBES
    assert all(0 <= p["variant"] < tune.VARIANTS for p in points)
    assert tune.box_points(box, 4, 8) != points
    measure = tune.Measure(CPU)
    calls = [measure.call(p) for p in points]
    assert len(measure.calls) == tune.MIN_PROBES
    assert measure.call(points[0]) is calls[0]
    assert all((c.num_reqs, c.num_tokens) == (1, 1) for c in calls)  # type: ignore[attr-defined]
    contexts = {int(c.seq_lens[0]) for c in calls}  # type: ignore[attr-defined]
    assert len(contexts) == tune.MIN_PROBES
    for c in calls[:2]:
        assert h.outputs_equal(c, (16, 1))  # type: ignore[arg-type]


def test_tuned_entries_carry_their_evidence_and_render() -> None:
    entries = [tune.entry("sm90", {"num_tokens": (2, 64), "num_reqs": (2, 64)}, (64, 1),
                          1.7, 12, MACHINE, "cmd"),
               tune.entry("sm90", {"num_tokens": (65, 512), "num_reqs": (65, 512)}, (512, 4),
                          1.2, 12, MACHINE, "cmd")]
    for e in entries:
        assert launch_table.provenance_problems(e) == []
    table = policy.loads_table(policy.render_table(entries, tune.HEADER))
    hit = policy.resolve(policy.Key("sm90", 4, 1, 64, 64), table)
    assert (hit.compile_key(), hit.source) == ((64, 1), "table:sm90-t2-64")
    assert policy.resolve(policy.Key("sm90", 128, 0, 64, 64), table).source == "baseline"
    assert policy.resolve(policy.Key("sm90", 4, 0, 100, 64), table).source == "baseline"


def test_the_worse_clock_decides_a_ratio() -> None:
    assert tune.ratio((10.0, 4.0), (5.0, 2.0)) == 2.0
    assert tune.ratio((10.0, 4.0), (2.0, 5.0)) == 0.8


def test_the_report_cpu_section_finds_nothing_bad(tmp_path: Path) -> None:
    section = report.cpu_section(ReportContext(tmp_path, tmp_path))
    assert section.bad == ()
    assert "Indexer decode metadata" in section.markdown
    assert all(r["identical"] for r in section.data["interpreter"])  # type: ignore[index]


def test_a_step_through_vllms_builders_with_the_take_over_on(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    script = Path(__file__).with_name("indexer_decode_step_check.py")
    seed = str(int(torch.randint(0, 1 << 30, (1,))))
    proc = subprocess.run([sys.executable, str(script), str(out), seed], env=env,
                          capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{script.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    data = json.loads(out.read_text())
    for row in data["points"]:
        assert row["differences"] == [], (seed, row)
        assert row["hits"] == int(row["kind"] in ("decode", "padded")), row
    assert data["hits"] >= 5
