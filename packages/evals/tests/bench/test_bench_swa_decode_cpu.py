"""The SWA decode bench layer on the CPU: what its GPU targets rest on.

The two sides the bench and the tuner time (vLLM's decode-path work with vLLM's rows
kernel, and dsv4's checks and launch) leave the same buffers and hand out the same views
on the anchor steps and on the tuner's probes, in Triton's interpreter (``bench-cpu``
sets ``TRITON_INTERPRET=1``), and the comparison sees every kind of wrong output; vLLM's
rows kernel is found (its own object, or the copy extracted into an ignored folder) and
both agree; the tuner's candidates, probes (twelve for the one-token box, each its own
step) and entries are what the policy accepts, with their evidence, and its rule keeps a
tile only where it wins at every probe twice; the report's CPU section finds nothing
bad. And one DeepSeek-V4 step through vLLM's own 8 builders (the step harness, as the
step benchmark's CPU check runs it) with the take-over covering every key: every decode
and padded point taken over by both SWA builders, every tensor identical.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dsv4_evals.bench import paths, probes
from dsv4_evals.bench.registry import ReportContext
from dsv4_evals.bench.swa_decode import gates, report, tune
from dsv4_evals.bench.swa_decode import harness as h
from dsv4_kernels.swa_decode import launch
from dsv4_policy import launch_table
from dsv4_policy.kernels import swa_decode as policy

CPU = torch.device("cpu")
MACHINE = {"gpu": "NVIDIA H200", "date": "2026-12-02", "versions": "torch, triton, CUDA"}


@pytest.fixture(scope="module")
def upstream_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding vLLM's rows kernel, extracted from the installed vLLM 0.33.0."""
    folder = tmp_path_factory.mktemp("upstream_swa_decode")
    h.extracted_kernel([folder])
    return folder


@pytest.fixture(scope="module")
def rows(upstream_folder: Path) -> h.RowsKernel:
    return h.rows_kernel("extracted", folders=[upstream_folder])


def test_the_anchor_steps_are_the_ones_the_gates_quote() -> None:
    labels = [s.label for s in h.anchor_shapes()]
    assert labels == [
        "decode-T1-ctx128K", "decode-T8-ctx128K", "decode-T64-ctx128K", "decode-T256-ctx128K",
        "decode-T512-ctx128K", "decode-T64-ctx4K", "decode-T64-ctx1024K",
        "padded-5of8-ctx128K", "padded-60of64-ctx128K", "padded-500of512-ctx128K",
        "padded-0of8-ctx128K", "mixed-T8+4096-ctx1024K", "mixed-T64+2048-ctx128K",
        "mixed-T256+4096-ctx128K"]
    mixed = h.make_call(h.Shape(8, 1 << 20, prefill=4096), CPU)
    assert mixed.num_tokens == 8 and mixed.slot_mapping.shape == (8 + 4096,)
    assert mixed.is_valid_token.shape[0] >= 8 + 4096
    call = h.make_call(h.Shape(5, padded=8), CPU)
    assert call.num_tokens == 8 and int((call.slot_mapping < 0).sum()) == 3
    assert int((h.make_call(h.Shape(0, padded=8), CPU).slot_mapping >= 0).sum()) == 0


def test_the_two_sides_agree_on_every_anchor_step(rows: h.RowsKernel) -> None:
    for shape in h.anchor_shapes():
        call = h.make_call(shape, CPU)
        assert h.differences(call, launch.BASELINE_TILE, rows) == [], shape.label
        assert h.resolved_tile(call, "sm80") == h.BASELINE


def test_vllms_side_writes_what_vllms_ops_write(rows: h.RowsKernel) -> None:
    call = h.call_of({"num_tokens": 40, "padding": 1}, CPU, 3)
    want, got = call.fresh(), call.fresh()
    from dsv4_kernels.swa_decode import reference

    reference.build_swa_decode(*want.args(), **want.kwargs())
    out = h.vllm_decode_path(got, rows)
    for name in h.BUFFERS:
        assert torch.equal(getattr(want, name), getattr(got, name)), name
        assert not torch.equal(getattr(call, name), getattr(got, name)), f"{name} unwritten"
    valid, indices, lens, width, replay = out
    assert valid.shape == (40,) and indices.shape == (40, 1, h.WINDOW) and lens.shape == (40,)
    assert indices.stride() == got.swa_indices.stride() and width == h.WINDOW
    assert replay is call.replay_start


def _corrupted(kind: str):
    original = h.dsv4_decode_path

    def run(call, tile, replay_start=None):
        out = list(original(call, tile, replay_start))
        t, s = call.num_tokens, call.slot_mapping.shape[0]
        if kind == "valid":
            call.is_valid_token[s - 1] ^= True
        elif kind == "valid-past-S":
            call.is_valid_token[s] ^= True
        elif kind == "lens-tail":
            call.swa_lens[-1] = 7
        elif kind == "index":
            call.swa_indices[t - 1, 0, h.WINDOW - 1] += 1
        elif kind == "row-past-T":
            call.swa_indices[t, 0, 0] = -1
        elif kind == "view-copy":
            out[1] = out[1].clone()
        elif kind == "view-length":
            out[0] = call.is_valid_token[: s + 1]
        elif kind == "width":
            out[3] = 64
        elif kind == "replay":
            out[4] = out[4].clone()
        return tuple(out)

    return run


@pytest.mark.parametrize(("kind", "found"), [
    ("valid", "is_valid_token"), ("valid-past-S", "is_valid_token"), ("lens-tail", "swa_lens"),
    ("index", "swa_indices"), ("row-past-T", "swa_indices"), ("view-copy", "returned[1]"),
    ("view-length", "returned[0]"), ("width", "returned[3]"), ("replay", "returned[4]"),
])
def test_the_comparison_sees_every_kind_of_wrong_output(rows, monkeypatch, kind, found) -> None:
    call = h.call_of({"num_tokens": 12, "padding": 1}, CPU, 5)
    assert h.outputs_equal(call, (4, 64, 1), rows)
    monkeypatch.setattr(h, "dsv4_decode_path", _corrupted(kind))
    diffs = h.differences(call, (4, 64, 1), rows)
    assert any(d.startswith(found) for d in diffs), diffs
    assert not h.outputs_equal(call, (4, 64, 1), rows)


def test_steps_for_a_point_hold_its_tokens_and_padding() -> None:
    for t in (1, 4, 9, 300):
        for kind in h.PADDING_KINDS:
            call = h.call_of({"num_tokens": t, "padding": kind}, CPU, 11 * t + kind)
            pads = h.padding_tokens(t, kind)
            assert call.num_tokens == t and call.slot_mapping.shape == (t,)
            assert int((call.slot_mapping < 0).sum()) == pads, (t, kind)
            assert int(call.seq_lens[: t - pads].sum()) <= h.KV_TOKENS
    a, b = (h.call_of({"num_tokens": 9}, CPU, 4) for _ in range(2))
    assert torch.equal(a.seq_lens, b.seq_lens) and torch.equal(a.swa_indices, b.swa_indices)
    replays = [bool(h.call_of({"num_tokens": 4}, CPU, s).replay_start.any()) for s in range(40)]
    assert 0 < sum(replays) < 40
    with pytest.raises(ValueError, match="padding"):
        h.padding_tokens(4, 3)
    plain = h.call_of({"num_tokens": 9, "padding": 1}, CPU, 6)
    mixed = h.call_of({"num_tokens": 9, "padding": 1, "mixed": 1}, CPU, 6)
    assert mixed.num_tokens == 9 and mixed.slot_mapping.shape[0] > 9
    assert torch.equal(mixed.slot_mapping[:9], plain.slot_mapping)
    assert torch.equal(mixed.seq_lens, plain.seq_lens)


def test_vllms_rows_kernel_copy_is_found_in_order_and_extracted_when_missing(
        tmp_path: Path, upstream_folder: Path, monkeypatch) -> None:
    assert h.upstream_folders() == (paths.upstream("swa_decode"), paths.upstream("swa"))
    assert paths.upstream("swa_decode").parent == paths.repo_root() / ".upstream"
    empty, fresh = tmp_path / "empty", tmp_path / "fresh"
    _, folder = h.extracted_kernel([empty, upstream_folder])
    assert folder == upstream_folder and not empty.exists()
    _, folder = h.extracted_kernel([fresh, upstream_folder])
    assert folder == upstream_folder
    _, folder = h.extracted_kernel([fresh])
    assert folder == fresh and (fresh / h.UPSTREAM_FILE).is_file()
    assert "_compute_swa_indices_and_lens_kernel" in (fresh / h.UPSTREAM_FILE).read_text()
    found = h.rows_kernel("extracted", folders=[fresh])
    assert found.origin.startswith("extracted") and str(fresh) in found.origin
    monkeypatch.setattr(h.vllm_files, "installed_vllm_file", lambda *a, **k: None)
    with pytest.raises(FileNotFoundError, match="no installed vLLM"):
        h.extracted_kernel([tmp_path / "none"], download=False)
    with pytest.raises(ValueError, match="prefer"):
        h.rows_kernel("other")


def test_candidates_are_tiles_the_policy_and_the_kernel_accept() -> None:
    assert len(set(tune.CANDIDATES)) == len(tune.CANDIDATES)
    assert tuple(policy.BASELINE_TILE.__dict__.values()) == launch.BASELINE_TILE
    for tile in tune.CANDIDATES:
        assert policy.tile_problems(*tile) == [], tile
        launch.warmup([tile], CPU)
    boxes = tune.TOKEN_BOXES
    assert boxes[0] == (1, 1) and boxes[-1][1] == h.BUFFER
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(boxes))


@pytest.mark.parametrize("tokens", tune.TOKEN_BOXES)
def test_every_box_gets_its_probes_inside_it_and_both_sides_agree_there(
        tokens, rows: h.RowsKernel) -> None:
    box = {"num_tokens": tokens, "padding": tune.PADDING}
    points = tune.box_points(box, 5, 8)
    assert len(points) >= tune.MIN_PROBES
    assert len({p["seed"] for p in points}) == len(points)
    for p in points:
        assert tokens[0] <= p["num_tokens"] <= tokens[1] and p["padding"] in h.PADDING_KINDS
    assert {p["padding"] for p in points} == set(h.PADDING_KINDS)
    for p in sorted(points, key=lambda p: p["num_tokens"])[:2]:
        call = h.call_of(p, CPU, p["seed"])
        assert call.num_tokens == p["num_tokens"]
        assert h.differences(call, (16, 128, 4), rows) == [], p


def test_the_one_token_box_is_probed_twelve_times_with_different_seeds() -> None:
    points = tune.box_points({"num_tokens": (1, 1), "padding": tune.PADDING}, 3, 8)
    assert len(points) == tune.MIN_PROBES == 12
    assert {p["num_tokens"] for p in points} == {1}
    assert len({p["seed"] for p in points}) == 12
    measure = tune.Measure(CPU, None)  # type: ignore[arg-type]
    steps = [measure.call(p) for p in points]
    assert len(measure.calls) == 12
    real = [c for c in steps if int(c.slot_mapping[0]) >= 0]
    assert len(real) >= 4 and len({int(c.seq_lens[0]) for c in real}) == len(real)


class FakeMeasure:
    """``(host µs, GPU µs)`` per (probe, tile, pass) from a table; counts passes."""

    def __init__(self, times) -> None:
        self.times = times
        self.seen: dict[tuple, int] = {}

    def __call__(self, point, tile):
        key = (point["seed"], tile)
        n = self.seen[key] = self.seen.get(key, 0) + 1
        return self.times(point["seed"], tile, n)


def _points(n: int) -> list[dict[str, int]]:
    return [{"num_tokens": 1, "padding": 0, "seed": i} for i in range(n)]


def test_a_tile_is_kept_only_where_it_wins_both_clocks_at_every_probe_twice() -> None:
    good, bad_host, bad_second = (8, 128, 4), (1, 128, 1), (2, 128, 1)

    def times(seed, tile, n):
        if tile == h.BASELINE:
            return (10.0, 4.0)
        if tile == good:
            return (5.0, 2.0)
        if tile == bad_host:
            return (11.0 if seed == 7 else 2.0, 1.0)  # the fastest, but loses one probe
        if tile == bad_second:  # the best first pass, lost in the confirmation pass
            confirming = n == (3 if seed < 2 else 2)
            return (4.0, 5.0 if confirming else 1.0)
        return (20.0, 8.0)

    measure = FakeMeasure(times)
    tile, worst, screened = tune.choose(_points(12), measure, 1.02)
    assert tile == good and worst == pytest.approx(2.0)
    assert screened["1x128x1"] < 1.0 and screened["2x128x1"] == pytest.approx(2.5)
    assert measure.seen[(0, bad_second)] == 3

    def lose_everywhere(seed, tile, n):
        return (10.0, 4.0) if tile == h.BASELINE else (9.0, 4.1)

    assert tune.choose(_points(12), FakeMeasure(lose_everywhere), 1.02)[0] is None


def test_tuned_entries_carry_their_evidence_and_render() -> None:
    entries = [tune.entry("sm90", {"num_tokens": (2, 64), "padding": tune.PADDING}, (8, 128, 4),
                          1.7, 12, MACHINE, "cmd"),
               tune.entry("sm90", {"num_tokens": (65, 512), "padding": tune.PADDING},
                          (32, 128, 8), 1.2, 12, MACHINE, "cmd")]
    for e in entries:
        assert launch_table.provenance_problems(e) == []
    table = policy.loads_table(policy.render_table(entries, tune.HEADER))
    hit = policy.resolve(policy.Key("sm90", 128, 64), table)
    assert (hit.compile_key(), hit.source) == ((8, 128, 4), "table:sm90-w128-t2-64")
    assert policy.resolve(policy.Key("sm90", 128, 65), table).compile_key() == (32, 128, 8)
    assert policy.resolve(policy.Key("sm90", 64, 64), table).source == "baseline"
    assert policy.resolve(policy.Key("sm90", 128, 1), table).source == "baseline"
    assert policy.resolve(policy.Key("sm80", 128, 64), table).source == "baseline"


def test_the_worse_clock_decides_a_ratio() -> None:
    assert tune.ratio((10.0, 4.0), (5.0, 2.0)) == 2.0
    assert tune.ratio((10.0, 4.0), (2.0, 5.0)) == 0.8


def test_the_gates_time_every_padding_kind_and_mixed_steps_inside_every_entry() -> None:
    from dsv4_evals.bench.swa_decode import test_bench_swa_decode as bench

    entry = tune.entry("sm90", {"num_tokens": (2, 64)}, (8, 128, 4), 1.7, 12, MACHINE, "cmd")
    box = bench._box(entry)
    assert box == {"num_tokens": (2, 64), "padding": tune.PADDING, "mixed": (0, 1)}
    keys = [p for _, p in probes.keys_in_boxes([box], 60, 1)]
    assert {p["padding"] for p in keys} == set(h.PADDING_KINDS)
    assert {p["mixed"] for p in keys} == {0, 1}
    assert gates.MIN_RATIO <= 1.0 and gates.EQUALITY_STEPS >= 100


def test_the_report_cpu_section_finds_nothing_bad(tmp_path: Path, upstream_folder: Path,
                                                  monkeypatch) -> None:
    monkeypatch.setattr(h, "upstream_folders", lambda: (upstream_folder,))
    section = report.cpu_section(ReportContext(tmp_path, tmp_path))
    assert section.bad == ()
    assert "SWA decode metadata" in section.markdown
    assert str(section.data["rows_kernel"]).startswith("extracted")  # type: ignore[index]
    assert all(r["identical"] for r in section.data["interpreter"])  # type: ignore[index]
    assert len(section.data["interpreter"]) == len(report.POINTS) * len(report.TILES)  # type: ignore[index]


def test_vllms_own_rows_kernel_and_a_step_through_vllms_builders(tmp_path: Path,
                                                                 upstream_folder: Path) -> None:
    out = tmp_path / "step.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
           "VLLM_TARGET_DEVICE": "cpu"}
    script = Path(__file__).with_name("swa_decode_step_check.py")
    seed = str(int(torch.randint(0, 1 << 30, (1,))))
    proc = subprocess.run([sys.executable, str(script), str(out), seed, str(upstream_folder)],
                          env=env, capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{script.name} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    data = json.loads(out.read_text())
    found = data["rows"]
    assert found["origin"].startswith("vllm 0.33.0 ") and found["extracted"].startswith("extr")
    for step in found["steps"]:
        assert step["vllm_vs_extracted"] == [] and step["vllm_vs_dsv4"] == [], (seed, step)
        assert {"swa_indices", "swa_lens"} <= set(step["written"]), (seed, step)
    assert data["swa_builders"] == 2
    for row in data["points"]:
        assert row["differences"] == [], (seed, row)
        # Decode-only and mixed steps are taken over (a mixed step's decode half); prefill
        # steps stay vLLM's.
        covered = row["kind"] in ("decode", "padded", "mixed")
        assert row["hits"] == (data["swa_builders"] if covered else 0), row
    assert {"mixed", "prefill"} <= {row["kind"] for row in data["points"]}
    assert data["hits"] >= 10
